//! The verbs a person uses on the queue through the handle: retry, requeue, discard, prune,
//! resume. Each reads the record, asks the machine for its transition, commits it guarded,
//! and wakes the runner.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Outbox;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::machine;
use crate::outcome::duration_ms;
use crate::record::RecordId;
use crate::state::State;
use crate::store::{Halt, ListQuery};

impl Outbox {
    /// Retries one record now with a fresh budget (a person's intent outweighs the ceiling).
    pub async fn retry(&self, id: RecordId) -> Result<()> {
        let record = self.record(id).await?;
        let step = match record.state {
            State::InFlight => return Err(Error::RecordInFlight(id)),
            State::Rejected => return Err(Error::RecordRejected(id)),
            _ => machine::retry_now(&record, self.shared.now()),
        };
        self.commit_manual(id, step).await
    }

    /// Retries every needs-attention record now with a fresh budget; returns how many.
    pub async fn retry_all(&self) -> Result<u64> {
        let mut count = 0u64;
        let mut after = None;
        loop {
            let mut query = ListQuery::new(256).state(State::NeedsAttention);
            query.after = after;
            let page = self.shared.store.list(&query).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            let now = self.shared.now();
            let steps = page
                .iter()
                .filter_map(|r| machine::retry_now(r, now))
                .collect();
            count += self.shared.commit(steps).await?.len() as u64;
        }
        self.notify();
        Ok(count)
    }

    /// Removes a record from delivery; a tombstone stays (listable until pruned) and a
    /// `Discarded` event says so.
    pub async fn discard(&self, id: RecordId, reason: &str) -> Result<()> {
        let record = self.record(id).await?;
        if record.state == State::InFlight {
            return Err(Error::RecordInFlight(id));
        }
        let step = machine::discard(&record, reason, self.shared.now());
        self.commit_manual(id, step).await
    }

    /// Removes rejected records and tombstones older than `older_than`: a rejected record
    /// whose last delivery reported longer ago than that, a tombstone of a record discarded
    /// longer ago. Returns how many went.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use outbox_core::{sink_fn, Outbox, Outcome, Record};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?;
    /// // Keep a week of rejections and tombstones for people to look at.
    /// let removed = outbox.prune(Duration::from_secs(7 * 86_400)).await?;
    /// assert_eq!(removed, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prune(&self, older_than: Duration) -> Result<u64> {
        let cut = self.shared.now().saturating_sub(duration_ms(older_than));
        self.shared.store.prune(cut).await
    }

    /// Resumes a runner halted by a refused credential or a rejection storm: the runner
    /// clears the persisted halt, then goes on, and a `Resumed` event says so;
    /// [`Outbox::is_halted`] turns false once the store has cleared it. The halted runners of
    /// other processes sharing the store resume too, when they read the cleared halt: at
    /// their next wake-up (on PostgreSQL the clearing wakes them through `NOTIFY`) or safety
    /// poll.
    ///
    /// A halted runner clears only the halt it holds, in one step
    /// ([`Store::clear_halt_if`](crate::store::Store::clear_halt_if)): if the store holds a
    /// newer one (another process's refusal, persisted after this runner's halt and not read
    /// here yet), that halt is not lifted; the runner keeps to it, stays halted and says so
    /// with [`Event::StillHalted`] (and a `warn` line). Resume again to lift it. Resumes made
    /// while a clearing waits (a store that does not answer) are that clearing's. A runner
    /// that is not halted clears whatever halt the store holds, so one call lifts a halt any
    /// runner of the store holds: call it for a person's decision, not on every start. To
    /// lift the halt a person was shown and no other, use [`Outbox::resume_if`].
    pub fn resume(&self) {
        self.shared.resume.store(true, Ordering::SeqCst);
        self.notify();
    }

    /// Lifts the persisted halt a person was shown (read from [`Outbox::stats`], say), only if
    /// it is still the one the store holds: the compare-and-set of a manual resume, for an
    /// application that shows the fleet's halt whichever runner holds it. Returns true when it
    /// was lifted: the halted runners read that and resume, each with its `Resumed` event (this
    /// process's at the wake-up this call gives it, those of other processes at their next
    /// wake-up or safety poll, on PostgreSQL through `NOTIFY`). False when the store holds
    /// another halt (a newer refusal: show that one) or none (lifted already): nothing is
    /// changed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, Halt, Outbox, Outcome, Record, Store};
    ///
    /// let store = Arc::new(outbox_memory::MemoryStore::new());
    /// let halt = Halt { reason: "HTTP 401".into(), since: 1_000 };
    /// store.set_halt(Some(halt)).await?; // another process's refusal
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(store, sink).start().await?;
    ///
    /// let shown = outbox.stats().await?.halt.expect("halted");
    /// assert!(outbox.resume_if(&shown).await?);
    /// assert_eq!(outbox.stats().await?.halt, None);
    /// assert!(!outbox.resume_if(&shown).await?, "lifted already");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resume_if(&self, seen: &Halt) -> Result<bool> {
        let held = self.shared.store.clear_halt_if(seen).await?;
        // Halted here, the runner reads the store at this wake-up and resumes if it is clear.
        self.notify();
        Ok(held.as_ref() == Some(seen))
    }

    /// Re-admits one rejected record with a fresh budget, in its own place: it goes before
    /// the later records of its group that are still queued, as it would have without the
    /// rejection. A `Requeued` event and a log line say so. Refused with
    /// [`Error::NotRejected`] for a record that is not rejected (use [`Outbox::retry`] for a
    /// needs-attention one) and with [`Error::RecordInFlight`] while a record of its group is
    /// being delivered.
    pub async fn requeue(&self, id: RecordId) -> Result<()> {
        let record = self.record(id).await?;
        let transition =
            machine::requeue(&record, self.shared.now()).ok_or(Error::NotRejected(id))?;
        let applied = self.shared.store.apply(vec![transition]).await?;
        if !applied.skipped.is_empty() {
            return Err(Error::RecordInFlight(id));
        }
        self.shared.emit(Event::Requeued { id });
        self.notify();
        Ok(())
    }

    /// Re-admits every rejected record that `query` matches (its state is taken as rejected),
    /// each in its own place; returns how many. After a rejection storm halted the runner,
    /// fix the cause, call this, then [`Outbox::resume`]. Records of a group with a record in
    /// flight are left rejected (call it again once that delivery reported).
    pub async fn requeue_rejected(&self, query: ListQuery) -> Result<u64> {
        let mut query = query.state(State::Rejected);
        if query.limit == 0 {
            query.limit = 256;
        }
        let mut count = 0u64;
        loop {
            let page = self.shared.store.list(&query).await?;
            let Some(last) = page.last() else { break };
            query.after = Some(last.id);
            let now = self.shared.now();
            let transitions: Vec<_> = page
                .iter()
                .filter_map(|r| machine::requeue(r, now))
                .collect();
            let ids: Vec<RecordId> = transitions.iter().map(|t| t.id).collect();
            let applied = self.shared.store.apply(transitions).await?;
            for id in ids.into_iter().filter(|id| !applied.skipped.contains(id)) {
                count += 1;
                self.shared.emit(Event::Requeued { id });
            }
        }
        self.notify();
        Ok(count)
    }

    async fn commit_manual(&self, id: RecordId, step: Option<machine::Step>) -> Result<()> {
        let step = step.ok_or(Error::RecordInFlight(id))?;
        if self.shared.commit(vec![step]).await?.is_empty() {
            // Claimed between our read and our write.
            return Err(Error::RecordInFlight(id));
        }
        self.notify();
        Ok(())
    }
}
