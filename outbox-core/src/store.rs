//! The `Store` trait: what a storage backend must do. The backend persists; the core decides.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::Clock;
use crate::error::Result;
pub use crate::halt::Halt;
use crate::link::LinkState;
use crate::machine::Transition;
use crate::record::{Lease, Millis, NewRecord, Record, RecordId, Tombstone};
use crate::state::State;
use crate::unreadable::Unreadable;

/// The payload limit a backend applies unless configured otherwise: 1 MiB, large enough for
/// any API write and small enough that a runner's batch stays bounded in memory.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// A request to claim due records.
///
/// ```
/// use outbox_core::{Claim, Lease};
/// let claim = Claim { now: 1_000, limit: 32, lease: Lease { token: 5, until: 31_000 } };
/// assert_eq!(claim.limit, 32);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Records whose deadline is at or before `now` are due.
    pub now: Millis,
    /// At most this many records.
    pub limit: usize,
    /// The lease to put the claimed records under.
    pub lease: Lease,
}

/// A page request for [`Store::list`].
///
/// ```
/// use outbox_core::{ListQuery, State};
/// let q = ListQuery::new(50).state(State::NeedsAttention).group("doc-1");
/// assert_eq!(q.limit, 50);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only records in this state.
    pub state: Option<State>,
    /// Only records of this group.
    pub group: Option<String>,
    /// Only records with an id above this one (the last id of the previous page).
    pub after: Option<RecordId>,
    /// At most this many records.
    pub limit: usize,
}

impl ListQuery {
    /// Every record, `limit` at a time, in id order.
    pub fn new(limit: usize) -> Self {
        ListQuery {
            limit,
            ..ListQuery::default()
        }
    }

    /// Only records in `state`.
    pub fn state(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }

    /// Only records of `group`.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The page after the record `id`.
    pub fn after(mut self, id: RecordId) -> Self {
        self.after = Some(id);
        self
    }

    /// True when `record` belongs on a page of this query (ignoring `limit`).
    pub fn matches(&self, record: &Record) -> bool {
        self.state.is_none_or(|s| record.state == s)
            && self
                .group
                .as_deref()
                .is_none_or(|g| record.group.as_deref() == Some(g))
            && self.after.is_none_or(|after| record.id > after)
    }
}

/// The shape of the queue at one moment.
///
/// ```
/// use outbox_core::Stats;
/// let stats = Stats { pending: 2, oldest_created_at: Some(1_000), ..Stats::default() };
/// assert_eq!(stats.undelivered(), 2);
/// assert_eq!(stats.oldest_age(4_000), Some(std::time::Duration::from_secs(3)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Never attempted.
    pub pending: u64,
    /// Failed, scheduled again.
    pub retrying: u64,
    /// Claimed under a lease.
    pub in_flight: u64,
    /// Waiting for a person.
    pub needs_attention: u64,
    /// Refused by the server, kept until pruned.
    pub rejected: u64,
    /// Tombstones not yet pruned.
    pub discarded: u64,
    /// Delivered since the store was created (a persisted counter).
    pub delivered: u64,
    /// Writes merged into an earlier waiting write of the same coalescing key since the store
    /// was created (a persisted counter; see [`NewRecord::replacing`]).
    pub superseded: u64,
    /// Records waiting behind a needs-attention record of their group.
    pub held: u64,
    /// Pending records enqueued for a later time ([`NewRecord::not_before`]) and not attempted
    /// since, whether or not that time has come (a claim given back unattempted, at a shutdown
    /// or a halt, counts again): a part of `pending` (see [`Record::is_scheduled`]).
    pub scheduled: u64,
    /// Payload bytes of every record the store holds (rejected ones included; a row set
    /// aside as unreadable is not counted): with the record counts, what a size cap counts
    /// (see [`Stats::usage`]).
    pub payload_bytes: u64,
    /// Enqueue time of the oldest record still owed a delivery (pending, retrying, in flight
    /// or needs-attention).
    pub oldest_created_at: Option<Millis>,
    /// The earliest deadline of a record that can be claimed (heads of groups only).
    pub next_due: Option<Millis>,
    /// The persisted halt, while a refused credential (or a rejection storm) holds the
    /// runner until `resume()`.
    pub halt: Option<Halt>,
    /// The link as this process's runner sees it; `None` when read from the store alone
    /// (the link is not persisted).
    pub link: Option<LinkState>,
}

impl Stats {
    /// Counts one record into the per-state counts, the scheduled count and the oldest
    /// undelivered age: the one
    /// rule every store that counts record by record uses. `held`, `next_due`, `delivered`
    /// and `discarded` are the store's to fill.
    ///
    /// ```
    /// use outbox_core::{Record, RecordId, Stats};
    /// let mut stats = Stats::default();
    /// stats.add(&Record::fresh(RecordId(1), None, vec![], "k".into(), 700));
    /// assert_eq!((stats.pending, stats.oldest_created_at), (1, Some(700)));
    /// ```
    pub fn add(&mut self, record: &Record) {
        if record.is_scheduled() {
            self.scheduled += 1;
        }
        self.payload_bytes += record.payload.len() as u64;
        match record.state {
            State::Pending => self.pending += 1,
            State::Retrying => self.retrying += 1,
            State::InFlight => self.in_flight += 1,
            State::NeedsAttention => self.needs_attention += 1,
            State::Rejected => self.rejected += 1,
        }
        if record.state.holds_group() {
            self.oldest_created_at = Some(
                self.oldest_created_at
                    .map_or(record.created_at, |t| t.min(record.created_at)),
            );
        }
    }

    /// What the store holds, as a size cap counts it ([`Cap`](crate::Cap)): every record,
    /// rejected ones included (they occupy the storage until pruned), and their payload bytes.
    ///
    /// ```
    /// use outbox_core::{Stats, Usage};
    /// let stats = Stats { pending: 2, rejected: 1, discarded: 5, payload_bytes: 30, ..Stats::default() };
    /// assert_eq!(stats.usage(), Usage { records: 3, bytes: 30 });
    /// ```
    pub fn usage(&self) -> crate::Usage {
        crate::Usage {
            records: self.undelivered() + self.rejected,
            bytes: self.payload_bytes,
        }
    }

    /// Records still owed a delivery: pending, retrying, in flight and needs-attention.
    pub fn undelivered(&self) -> u64 {
        self.pending + self.retrying + self.in_flight + self.needs_attention
    }

    /// Age of the oldest record still owed a delivery.
    pub fn oldest_age(&self, now: Millis) -> Option<Duration> {
        self.oldest_created_at
            .map(|t| Duration::from_millis(now.saturating_sub(t)))
    }

    /// The count for one row state.
    pub fn count(&self, state: State) -> u64 {
        match state {
            State::Pending => self.pending,
            State::Retrying => self.retrying,
            State::InFlight => self.in_flight,
            State::NeedsAttention => self.needs_attention,
            State::Rejected => self.rejected,
        }
    }
}

/// One `last_error` text and how many records have it (see [`Store::common_errors`]).
///
/// ```
/// use outbox_core::{ErrorCount, Record, RecordId, State};
/// let mut records = Vec::new();
/// for (id, error) in [(1, "HTTP 503"), (2, "HTTP 422"), (3, "HTTP 503")] {
///     let mut r = Record::fresh(RecordId(id), None, vec![], "k".into(), 0);
///     (r.state, r.last_error) = (State::Retrying, Some(error.into()));
///     records.push(r);
/// }
/// let common = ErrorCount::tally(&records, 5);
/// assert_eq!(common[0], ErrorCount { error: "HTTP 503".into(), count: 2 });
/// assert_eq!(common.len(), 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorCount {
    /// The text.
    pub error: String,
    /// How many records have it.
    pub count: u64,
}

impl ErrorCount {
    /// The states whose records' errors are counted: the failed ones (retrying,
    /// needs-attention, rejected).
    pub const STATES: [State; 3] = [State::Retrying, State::NeedsAttention, State::Rejected];

    /// Counts the `last_error` of every record in [`ErrorCount::STATES`] and keeps the
    /// `limit` most frequent, most frequent first, ties in text order: the one rule every
    /// store that counts record by record uses.
    pub fn tally<'a>(records: impl IntoIterator<Item = &'a Record>, limit: usize) -> Vec<Self> {
        let mut counts: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for record in records {
            if let (true, Some(error)) = (
                ErrorCount::STATES.contains(&record.state),
                record.last_error.as_deref(),
            ) {
                *counts.entry(error).or_default() += 1;
            }
        }
        let mut common: Vec<ErrorCount> = counts
            .into_iter()
            .map(|(error, count)| ErrorCount {
                error: error.to_owned(),
                count,
            })
            .collect();
        ErrorCount::rank(&mut common, limit);
        common
    }

    /// Sorts most frequent first, ties in text order (byte order), and keeps `limit`.
    pub fn rank(common: &mut Vec<ErrorCount>, limit: usize) {
        common.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.error.cmp(&b.error)));
        common.truncate(limit);
    }
}

/// What [`Store::enqueue`] did: the id each record landed in, and which of them replaced an
/// earlier waiting write (see [`NewRecord::replacing`]). It reads as the slice of ids.
///
/// ```
/// use outbox_core::{Enqueued, RecordId};
/// let enqueued = Enqueued { ids: vec![RecordId(4), RecordId(4)], superseded: vec![1] };
/// assert_eq!(enqueued[0], RecordId(4));
/// assert!(enqueued.replaced(1) && !enqueued.replaced(0));
/// assert_eq!(Vec::from(enqueued), vec![RecordId(4), RecordId(4)]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Enqueued {
    /// One id per enqueued record, in order: a fresh id, or the id of the earlier write the
    /// record replaced.
    pub ids: Vec<RecordId>,
    /// Positions (in `ids`) of the records that replaced an earlier write, ascending.
    pub superseded: Vec<usize>,
}

impl Enqueued {
    /// Fresh records only, nothing replaced.
    pub fn fresh(ids: Vec<RecordId>) -> Self {
        Enqueued {
            ids,
            superseded: Vec::new(),
        }
    }

    /// Whether the record at position `index` replaced an earlier write.
    pub fn replaced(&self, index: usize) -> bool {
        self.superseded.binary_search(&index).is_ok()
    }
}

impl std::ops::Deref for Enqueued {
    type Target = [RecordId];
    fn deref(&self) -> &[RecordId] {
        &self.ids
    }
}

impl From<Enqueued> for Vec<RecordId> {
    fn from(enqueued: Enqueued) -> Self {
        enqueued.ids
    }
}

impl IntoIterator for Enqueued {
    type Item = RecordId;
    type IntoIter = std::vec::IntoIter<RecordId>;
    fn into_iter(self) -> Self::IntoIter {
        self.ids.into_iter()
    }
}

impl<'a> IntoIterator for &'a Enqueued {
    type Item = &'a RecordId;
    type IntoIter = std::slice::Iter<'a, RecordId>;
    fn into_iter(self) -> Self::IntoIter {
        self.ids.iter()
    }
}

impl PartialEq<Vec<RecordId>> for Enqueued {
    fn eq(&self, other: &Vec<RecordId>) -> bool {
        &self.ids == other
    }
}

/// What [`Store::apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Transitions whose guard did not hold (or whose record is gone); nothing was written for
    /// them.
    pub skipped: Vec<RecordId>,
}

/// What [`Store::round`] did: the outcomes applied, then the records claimed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// What applying the outcomes did.
    pub applied: Applied,
    /// The records claimed after the outcomes were applied (empty without a claim).
    pub claimed: Vec<Record>,
}

/// Storage for an outbox.
///
/// # Contract
/// Every backend must behave as `outbox-memory`, the reference model; `outbox-testkit` checks it.
///
/// - **Ids** are assigned by the store, strictly increasing in enqueue order, never reused.
/// - **Durability**: a method returns only after its writes are durable at the store's
///   configured level; each call is atomic (all of it or none).
/// - **Due**: a record is *claimable* when its state is pending or retrying, its
///   `next_attempt_at` is at or before `now`, and, if it has a group, it is the group's *head*:
///   the lowest id of the group among records in any state but rejected. So a group has at most
///   one record in flight, its records go in id order, and a needs-attention head holds back its
///   own group only.
/// - **Claim** takes up to `limit` claimable records in `(next_attempt_at, id)` order, sets them
///   in flight under the lease and returns them (with `state` and `lease` updated). No record is
///   claimed twice while its lease holds, across every handle and process the store allows.
///   The cost must not grow with the number of records that are not yet due.
/// - **Not before**: a record enqueued with [`NewRecord::not_before`] keeps that time
///   ([`Record::not_before`]) and its `next_attempt_at` is `max(now, not_before)`: the same
///   deadline index the claim reads, so records held for later are part of the not-yet-due
///   backlog whose size a claim never pays for. Replacing a waiting record sets both as
///   [`Record::supersede`] does. [`Stats::scheduled`] counts the pending records whose
///   deadline is still their not-before time ([`Record::is_scheduled`]).
/// - **Apply** writes a batch of transitions atomically, each only where its
///   [`Guard`](crate::Guard) holds; the rest are reported in [`Applied::skipped`].
///   [`Change::Delivered`](crate::Change::Delivered) removes the record and adds one to the
///   delivered counter; [`Change::Discard`](crate::Change::Discard) removes it and keeps a
///   [`Tombstone`].
/// - **Round**: [`Store::round`] applies a round's outcomes and then claims, in one atomic
///   transaction and one durable commit: a crash leaves both or neither. A drain makes one
///   commit per round.
/// - **Coalescing**: an enqueued record with a coalescing key
///   ([`NewRecord::replacing`]) looks at the latest record (highest id) with that key; when
///   [`Record::replaceable_by`] allows it, that record is rewritten with
///   [`Record::supersede`] (at the enqueue's `now`) in the same transaction instead of a new one being inserted, its id
///   is returned in the record's place and counted in [`Enqueued::superseded`] and in the
///   persisted [`Stats::superseded`]. Records of one batch coalesce with each other too.
///   [`NewRecord::expecting`] and the coalescing key are persisted with the record.
/// - **Requeue**: [`Change::Requeue`](crate::Change::Requeue) applies only to a rejected
///   record whose group has no record in flight; the record keeps its id and takes its place
///   in its group again.
/// - **Validation**: every record of an enqueue passes
///   [`NewRecord::validate`](crate::NewRecord::validate) with the store's payload limit before
///   anything is written: a payload too large ([`Error::PayloadTooLarge`]), a bad group key
///   ([`Error::InvalidGroup`]) or an idempotency key a server cannot receive
///   ([`Error::InvalidIdempotencyKey`]) refuses the whole batch. Guards are checked with
///   [`Guard::admits`](crate::Guard::admits).
/// - **Unreadable rows**: a row the backend cannot decode (a text that is not UTF-8, an
///   unknown state, a truncated value) never fails a call that reads many rows. A claim sets
///   it aside (it leaves the due index, so [`Store::next_due`] no longer reports it, and no
///   lease expires on it) and claims the others as if it were not there, but for the later
///   records of its own group: a grouped row keeps its place, the head of its group in
///   flight, and holds them back until it is discarded, so no write of a group overtakes an
///   earlier one. Stats, list and the lease recovery pass it by; [`Store::unreadable`] lists
///   it with the reason and [`Store::discard_unreadable`] removes it, which lets its group's
///   next record go.
/// - **Common errors**: [`Store::common_errors`] counts as [`ErrorCount::tally`] does, over
///   every failed record.
/// - **Halt**: [`Store::set_halt`] persists the runner's halt (or clears it) so a restart stays
///   halted; [`Stats::halt`] reports it; [`Store::clear_halt_if`] clears it only as it was
///   seen, in one step.
/// - **Time**: a store shared by hosts whose clocks may disagree names the one clock its
///   leases and deadlines are judged by ([`Store::shared_clock`]); the runner then uses it.
///
/// [`Error::PayloadTooLarge`]: crate::Error::PayloadTooLarge
/// [`Error::InvalidGroup`]: crate::Error::InvalidGroup
/// [`Error::InvalidIdempotencyKey`]: crate::Error::InvalidIdempotencyKey
///
/// The trait is object safe: `Arc<dyn Store>` works.
#[async_trait]
pub trait Store: Debug + Send + Sync {
    /// Durably enqueues a batch, all or nothing, as pending records due at `now` or at their
    /// not-before time when that is later (or as replacements of earlier waiting writes), see
    /// the contract; returns their ids in order.
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued>;

    /// Claims due records under a lease (see the contract).
    async fn claim(&self, claim: Claim) -> Result<Vec<Record>>;

    /// Moves the lease of in-flight records still held under `lease.token` to `lease.until`
    /// (a long delivery renews its lease). Others are left alone.
    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()>;

    /// Applies transitions atomically, each where its guard holds.
    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied>;

    /// One round of a drain in one transaction and one durable commit: applies `outcomes`
    /// (as [`Store::apply`]), then claims (as [`Store::claim`]) when `claim` is given.
    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round>;

    /// In-flight records whose lease expired at or before `now`, earliest expiry first.
    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>>;

    /// Pending or retrying records scheduled from a time after `now`: their deadline lies
    /// after `now` and their `last_attempt_at` lies after `now` or is unset (never reported);
    /// a never-reported record whose deadline is its not-before time is not one of them (an
    /// absolute time: [`Record::needs_rebase`] is the rule). They were scheduled before the
    /// wall clock stepped back, and the runner re-bases them. Lowest id first. Called at start-up and after a detected step; may scan the records
    /// whose deadline lies after `now`, but not the due backlog.
    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>>;

    /// One record by id.
    async fn get(&self, id: RecordId) -> Result<Option<Record>>;

    /// A page of records in id order.
    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>>;

    /// A page of tombstones in id order, after `after`.
    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>>;

    /// Counts and ages (see [`Stats`]).
    async fn stats(&self) -> Result<Stats>;

    /// The clock this store's records are judged by, when it is not each runner's own.
    ///
    /// Runners on several hosts compare each other's times: a lease one wrote is judged
    /// expired by another. A store shared by hosts whose clocks may disagree (PostgreSQL: the
    /// database server's clock) names here the one time they all share, and
    /// [`Outbox::builder`](crate::Outbox::builder) runs on it with no wiring; a different clock
    /// given to the builder is then refused. `None`, the default, leaves the choice to the
    /// runner ([`OutboxBuilder::clock`](crate::OutboxBuilder::clock), or the system clock):
    /// right for a store only one host opens.
    ///
    /// ```
    /// use outbox_core::Store;
    /// let store = outbox_memory::MemoryStore::new();
    /// assert!(store.shared_clock().is_none());
    /// ```
    fn shared_clock(&self) -> Option<Arc<dyn Clock>> {
        None
    }

    /// The earliest deadline of a claimable-kind record (a group head in pending or retrying),
    /// due or not.
    async fn next_due(&self) -> Result<Option<Millis>>;

    /// The persisted halt, if any (see [`Store::set_halt`]).
    async fn halt(&self) -> Result<Option<Halt>>;

    /// Persists the runner's halt, or clears it with `None`.
    async fn set_halt(&self, halt: Option<Halt>) -> Result<()>;

    /// Clears the persisted halt only if it is still `seen`: a person's resume, made on the
    /// halt they were shown, never lifts a halt written since. Returns the halt that was
    /// persisted when the call ran: `seen` when this call cleared it, `None` when there was
    /// none, any other halt when that one was left in place.
    ///
    /// Required, with no default: a read followed by a clearing would lose a halt written
    /// between the two. A store does it in one step no other write can come between (one write
    /// transaction, a row lock, or [`Halt::clear_if_seen`] on a value under its lock).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{Halt, Store};
    /// let store = outbox_memory::MemoryStore::new();
    /// let shown = Halt { reason: "HTTP 401".into(), since: 1_000 };
    /// let newer = Halt { reason: "HTTP 403".into(), since: 2_000 };
    /// store.set_halt(Some(newer.clone())).await?;
    /// assert_eq!(store.clear_halt_if(&shown).await?, Some(newer.clone()), "left in place");
    /// assert_eq!(store.clear_halt_if(&newer).await?, Some(newer), "cleared");
    /// assert_eq!(store.halt().await?, None);
    /// # Ok(())
    /// # }
    /// ```
    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>>;

    /// Removes rejected records whose last attempt, and tombstones whose discard, is before
    /// `older_than`; returns how many went.
    async fn prune(&self, older_than: Millis) -> Result<u64>;

    /// Rows the store holds but cannot decode, lowest id first, at most `limit` (see the
    /// contract). May read every row: an operator's call, not the runner's hot path. The
    /// default reports none, right for a store that holds decoded values (memory).
    async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        let _ = limit;
        Ok(Vec::new())
    }

    /// Removes the unreadable row `id`, leaving a [`Tombstone`] with what could be read
    /// (its reason from [`Unreadable::tombstone_reason`]); returns whether a row went. A row
    /// that decodes is left alone (`false`): a readable record is discarded with
    /// [`Change::Discard`](crate::Change::Discard). The default has nothing to remove.
    async fn discard_unreadable(&self, id: RecordId, now: Millis) -> Result<bool> {
        let _ = (id, now);
        Ok(false)
    }

    /// The row `id`, with why it cannot be read, if the store holds it and cannot decode it;
    /// `None` when it decodes or is not there. What an inspector asks of an id [`Store::get`]
    /// did not find: a damaged row, or no row at all?
    ///
    /// The default looks through every unreadable row ([`Store::unreadable`]); a backend
    /// that reads one row by its key overrides it with that read.
    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        let rows = self.unreadable(usize::MAX).await?;
        Ok(rows.into_iter().find(|row| row.id == id))
    }

    /// The `limit` most common `last_error` texts of the failed records (retrying,
    /// needs-attention, rejected), with how many records have each: most frequent first,
    /// ties in byte order of the text (as [`ErrorCount::rank`] sorts).
    ///
    /// The default pages through [`Store::list`] for each failed state and tallies with
    /// [`ErrorCount::tally`]: correct on any store, but it reads every failed record,
    /// payload included. A backend with a query engine overrides it with one grouped query
    /// that reads no payload, so a dashboard that asks every second stays cheap.
    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        const PAGE: usize = 500;
        let mut counts: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for state in ErrorCount::STATES {
            let mut query = ListQuery::new(PAGE).state(state);
            loop {
                let page = self.list(&query).await?;
                for error in page.iter().filter_map(|r| r.last_error.as_ref()) {
                    *counts.entry(error.clone()).or_default() += 1;
                }
                match page.last() {
                    Some(last) if page.len() == PAGE => query.after = Some(last.id),
                    _ => break,
                }
            }
        }
        let mut common: Vec<ErrorCount> = counts
            .into_iter()
            .map(|(error, count)| ErrorCount { error, count })
            .collect();
        ErrorCount::rank(&mut common, limit);
        Ok(common)
    }
}

/// `Arc<dyn Store>` must keep compiling.
#[allow(dead_code)]
fn _object_safe(_: &dyn Store) {}
