//! What the crash workers acknowledged, and the checks of a reopened store against it.

use std::collections::{BTreeMap, BTreeSet};

use outbox_core::{Millis, RecordId};

use super::worker::WORKER_BATCH;
use super::{number, Run};
use crate::harness::{ensure, ensure_eq, Failure};

/// What the workers acknowledged, from their ledger lines.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Acknowledged enqueues: id to key.
    pub(super) enqueued: BTreeMap<u64, String>,
    /// Records acknowledged as delivered.
    delivered: BTreeSet<u64>,
    /// Records acknowledged as parked.
    parked: BTreeSet<u64>,
    /// Times the sink answered success, per record.
    sink_ok: BTreeMap<u64, usize>,
    /// Times the sink answered 503, per record: an upper bound of its attempts.
    sink_503: BTreeMap<u64, u32>,
    /// Acknowledged retries that spent an attempt, per record: a lower bound of its attempts.
    spent: BTreeMap<u64, u32>,
    /// The latest acknowledged deadline, per record.
    deadline: BTreeMap<u64, Millis>,
    /// Times a record's successful delivery went unacknowledged in a worker that was then
    /// killed: the redeliveries a kill excuses. The runner writes a round's outcomes together,
    /// so one kill can lose the outcomes of a whole round.
    lost: BTreeMap<u64, usize>,
    /// Deliveries that carried a key other than the one the record was enqueued with.
    wrong_keys: Vec<String>,
}

impl Ledger {
    pub(super) fn read(&mut self, run: &Run) {
        let mut unacknowledged = BTreeSet::new();
        for line in &run.lines {
            match (
                line.first().map(String::as_str),
                number(line, 1),
                line.get(2),
            ) {
                (Some("sink"), Some(id), Some(ok)) if ok == "ok" => {
                    unacknowledged.insert(id);
                }
                (Some("delivered"), Some(id), _) => {
                    unacknowledged.remove(&id);
                }
                _ => {}
            }
        }
        if run.killed {
            for id in unacknowledged {
                *self.lost.entry(id).or_default() += 1;
            }
        }
        for line in &run.lines {
            let word = |i: usize| line.get(i).map(String::as_str);
            let Some(id) = number(line, 1) else { continue };
            match (word(0), word(2)) {
                (Some("enqueued"), key) => {
                    self.enqueued.insert(id, key.unwrap_or_default().to_owned());
                }
                (Some("delivered"), _) => {
                    self.delivered.insert(id);
                }
                (Some("parked"), _) => {
                    self.parked.insert(id);
                }
                (Some("sink"), Some("ok")) => {
                    *self.sink_ok.entry(id).or_default() += 1;
                    self.check_key(id, word(3));
                }
                (Some("sink"), Some("503")) => {
                    *self.sink_503.entry(id).or_default() += 1;
                    self.check_key(id, word(3));
                }
                (Some("scheduled"), Some(at)) => {
                    if let Ok(at) = at.parse::<Millis>() {
                        let latest = self.deadline.entry(id).or_default();
                        *latest = (*latest).max(at);
                    }
                    if word(3) == Some("true") {
                        *self.spent.entry(id).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
    }

    /// Notes a delivery whose key is not the one its record was enqueued with (a redelivery
    /// must carry the same key, or the server cannot drop the duplicate).
    fn check_key(&mut self, id: u64, key: Option<&str>) {
        if let (Some(enqueued), Some(key)) = (self.enqueued.get(&id), key) {
            if enqueued != key {
                self.wrong_keys.push(format!(
                    "record {id} delivered with key {key}, enqueued with {enqueued}"
                ));
            }
        }
    }

    /// The figures of a soak so far: acknowledged enqueues, acknowledged deliveries, extra
    /// deliveries at the sink, and acknowledged enqueues that are neither queued nor were
    /// ever delivered (lost).
    pub(super) async fn tally(
        &self,
        store: &dyn outbox_core::Store,
    ) -> Result<(usize, usize, usize, usize), Failure> {
        let mut lost = 0;
        for &id in self.enqueued.keys() {
            if store.get(RecordId(id)).await?.is_none() && !self.sink_ok.contains_key(&id) {
                lost += 1;
            }
        }
        let duplicates = self.sink_ok.values().map(|n| n - 1).sum();
        Ok((self.enqueued.len(), self.delivered.len(), duplicates, lost))
    }

    /// Checks the store against every acknowledged fact.
    pub(super) async fn check(&self, store: &dyn outbox_core::Store) -> Result<(), Failure> {
        ensure(self.wrong_keys.is_empty(), || self.wrong_keys.join("\n"))?;
        for (&id, key) in &self.enqueued {
            match store.get(RecordId(id)).await? {
                Some(record) => ensure_eq(&record.key, key, format!("record {id}'s key"))?,
                None => {
                    ensure(self.sink_ok.contains_key(&id), || {
                        format!("acknowledged enqueue {id} ({key}) is lost: not queued, never delivered")
                    })?
                }
            }
        }
        for &id in &self.delivered {
            ensure_eq(
                store.get(RecordId(id)).await?,
                None,
                format!("record {id} was acknowledged as delivered"),
            )?;
        }
        for record in crate::scenarios::all_records(store).await? {
            let id = record.id.0;
            let (low, high) = (
                self.spent.get(&id).copied().unwrap_or(0),
                self.sink_503.get(&id).copied().unwrap_or(0),
            );
            ensure(record.attempts >= low && record.attempts <= high, || {
                format!(
                    "record {id} has {} attempts; the ledger acknowledged {low} and the sink \
                     answered 503 {high} times: {record:?}",
                    record.attempts
                )
            })?;
            if let (Some(acknowledged), Some(at)) = (self.deadline.get(&id), record.next_attempt_at)
            {
                ensure(at >= *acknowledged, || {
                    format!(
                        "record {id} is due at {at}, before its acknowledged deadline {acknowledged}"
                    )
                })?;
            }
            if self.parked.contains(&id) {
                ensure(record.state == outbox_core::State::NeedsAttention, || {
                    format!("record {id} was acknowledged as parked: {record:?}")
                })?;
            }
        }
        Ok(())
    }

    /// The checks after the last worker drained the queue: only parked records remain, the
    /// delivered counter counts each delivered record once, and a record reached the sink
    /// again only after a kill lost the outcome of its earlier delivery: no more often than
    /// its successful deliveries went unacknowledged in a killed worker, and at most one
    /// round's worth of records per kill.
    pub(super) async fn check_drained(
        &self,
        store: &dyn outbox_core::Store,
        kills: usize,
    ) -> Result<(), Failure> {
        let remaining = crate::scenarios::all_records(store).await?;
        for record in &remaining {
            let poison = record.payload.starts_with(b"poison");
            ensure(
                record.state == outbox_core::State::NeedsAttention
                    && ((poison && record.attempts == 3) || record.interrupted >= 3),
                || {
                    format!(
                        "after the last worker drained, only records that spent their budget \
                         or crash-looped remain: {record:?}"
                    )
                },
            )?;
        }
        let delivered = self
            .sink_ok
            .keys()
            .filter(|id| !remaining.iter().any(|r| r.id.0 == **id))
            .count();
        ensure_eq(
            store.stats().await?.delivered,
            delivered as u64,
            "the delivered counter counts each delivered record once",
        )?;
        for (id, n) in &self.sink_ok {
            let excused = self.lost.get(id).copied().unwrap_or_default();
            ensure(n - 1 <= excused, || {
                format!(
                    "record {id} reached the sink {n} times, but only {excused} of its \
                     deliveries went unacknowledged in a killed worker"
                )
            })?;
        }
        let duplicates: usize = self.sink_ok.values().map(|n| n - 1).sum();
        ensure(duplicates <= kills * WORKER_BATCH, || {
            format!(
                "{duplicates} duplicate deliveries at the sink after {kills} kills of workers \
                 claiming {WORKER_BATCH} records a round"
            )
        })
    }
}
