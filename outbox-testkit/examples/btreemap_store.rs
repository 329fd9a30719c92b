//! A backend author's first store: `Store` on a plain `Mutex<BTreeMap>`, proven by the whole
//! conformance suite with one line (see the last lines of this file).
//!
//! ```text
//! cargo test -p outbox-testkit --example btreemap_store   # the suite, one test per scenario
//! cargo run -p outbox-testkit --example btreemap_store    # the store-level scenarios, printed
//! ```
//!
//! Everything lives in memory behind one lock; the contract is kept with the core's shared
//! rules (`NewRecord::validate_all`, `Guard::admits`, `Stats::add`) and two small indexes: the
//! deadlines of pending and retrying records (so a claim never reads records that are not yet
//! due) and the members of each group (so a claim knows a group's head).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use outbox_core::{
    async_trait, Applied, Change, Claim, Enqueued, Guard, Halt, Lease, ListQuery, Millis,
    NewRecord, Record, RecordId, Result, Round, State, Stats, Store, Tombstone, Transition,
    DEFAULT_MAX_PAYLOAD,
};
use outbox_testkit::{Backend, Capabilities};

/// The store: one lock around the tables.
#[derive(Debug, Default)]
pub struct BTreeMapStore {
    tables: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    last_id: u64,
    records: BTreeMap<RecordId, Record>,
    /// `(next_attempt_at, id)` of every pending or retrying record.
    deadlines: BTreeSet<(Millis, RecordId)>,
    /// The members of each group that hold its order (every state but rejected).
    groups: BTreeMap<String, BTreeSet<RecordId>>,
    tombstones: BTreeMap<RecordId, Tombstone>,
    delivered: u64,
    superseded: u64,
    halt: Option<Halt>,
}

impl BTreeMapStore {
    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Tables {
    /// The waiting record `new` replaces, by the core's rule: the latest record with its
    /// coalescing key, if [`Record::replaceable_by`] allows. (A scan keeps the example short; a
    /// real store indexes the key.)
    fn replaceable(&self, new: &NewRecord) -> Option<RecordId> {
        let key = new.replaces.as_ref()?;
        let latest = self
            .records
            .values()
            .rev()
            .find(|r| r.replaces.as_ref() == Some(key))?;
        let last_of_group = latest
            .group
            .as_ref()
            .is_none_or(|g| self.groups.get(g).and_then(|m| m.last()) == Some(&latest.id));
        latest
            .replaceable_by(new, last_of_group)
            .then_some(latest.id)
    }

    /// Puts a record in (or back in) the tables and its indexes.
    fn put(&mut self, record: Record) {
        let id = record.id;
        self.take(id);
        if let (true, Some(at)) = (record.state.is_due_kind(), record.next_attempt_at) {
            self.deadlines.insert((at, id));
        }
        if let (Some(group), true) = (&record.group, record.state.holds_group()) {
            self.groups.entry(group.clone()).or_default().insert(id);
        }
        self.records.insert(id, record);
    }

    /// Takes a record out of the tables and its indexes.
    fn take(&mut self, id: RecordId) -> Option<Record> {
        let record = self.records.remove(&id)?;
        if let Some(at) = record.next_attempt_at {
            self.deadlines.remove(&(at, id));
        }
        if let Some(group) = &record.group {
            if let Some(members) = self.groups.get_mut(group) {
                members.remove(&id);
                if members.is_empty() {
                    self.groups.remove(group);
                }
            }
        }
        Some(record)
    }

    fn is_head(&self, record: &Record) -> bool {
        record.group.as_ref().is_none_or(|group| {
            self.groups
                .get(group)
                .and_then(|members| members.first())
                .is_some_and(|head| *head == record.id)
        })
    }

    /// Claimable records in `(deadline, id)` order, due at `now` or not.
    fn heads(&self) -> impl Iterator<Item = (Millis, RecordId)> + '_ {
        self.deadlines
            .iter()
            .copied()
            .filter(|(_, id)| self.records.get(id).is_some_and(|r| self.is_head(r)))
    }

    fn claim(&mut self, claim: Claim) -> Vec<Record> {
        let due: Vec<RecordId> = self
            .heads()
            .take_while(|(at, _)| *at <= claim.now)
            .take(claim.limit)
            .map(|(_, id)| id)
            .collect();
        let mut claimed = Vec::with_capacity(due.len());
        for id in due {
            if let Some(mut record) = self.take(id) {
                record.state = State::InFlight;
                record.lease = Some(claim.lease);
                claimed.push(record.clone());
                self.put(record);
            }
        }
        claimed
    }

    fn apply(&mut self, transitions: Vec<Transition>) -> Applied {
        let mut applied = Applied::default();
        for Transition { id, guard, change } in transitions {
            let Some(record) = self.records.get(&id).filter(|r| guard.admits(r)) else {
                applied.skipped.push(id);
                continue;
            };
            match change {
                Change::Delivered => {
                    self.take(id);
                    self.delivered += 1;
                }
                Change::Discard {
                    reason,
                    at,
                    attempts,
                } => {
                    let record = record.clone();
                    self.take(id);
                    let tombstone = Tombstone::of(record, reason, at, attempts);
                    self.tombstones.insert(id, tombstone);
                }
                Change::Requeue { at } => {
                    // Back in its own place, unless its group has a record in flight: two of
                    // a group must never be in flight.
                    let busy = record.group.as_ref().is_some_and(|g| {
                        self.groups.get(g).is_some_and(|members| {
                            members.iter().any(|m| {
                                self.records
                                    .get(m)
                                    .is_some_and(|r| r.state == State::InFlight)
                            })
                        })
                    });
                    if !outbox_core::machine::admits_requeue(record, busy) {
                        applied.skipped.push(id);
                        continue;
                    }
                    let mut back = record.clone();
                    back.requeue(at);
                    self.put(back);
                }
                Change::Update(progress) => {
                    if !outbox_core::machine::admits_update(record, &progress) {
                        applied.skipped.push(id);
                        continue;
                    }
                    let mut record = record.clone();
                    record.set_progress(progress);
                    self.put(record);
                }
            }
        }
        applied
    }
}

#[async_trait]
impl Store for BTreeMapStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        NewRecord::validate_all(&records, DEFAULT_MAX_PAYLOAD)?;
        let mut tables = self.lock();
        let mut enqueued = Enqueued::fresh(Vec::with_capacity(records.len()));
        for (index, new) in records.into_iter().enumerate() {
            if let Some(id) = tables.replaceable(&new) {
                // The new write's not-before time may move the deadline: out and back in.
                if let Some(mut record) = tables.take(id) {
                    record.supersede(new, now);
                    tables.put(record);
                }
                tables.superseded += 1;
                enqueued.ids.push(id);
                enqueued.superseded.push(index);
                continue;
            }
            tables.last_id += 1;
            let id = RecordId(tables.last_id);
            tables.put(Record::enqueued(id, new, now));
            enqueued.ids.push(id);
        }
        Ok(enqueued)
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        Ok(self.lock().claim(claim))
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let mut tables = self.lock();
        for id in ids {
            let held = tables
                .records
                .get(id)
                .filter(|r| Guard::Lease(lease.token).admits(r))
                .cloned();
            if let Some(mut record) = held {
                record.lease = Some(lease);
                tables.put(record);
            }
        }
        Ok(())
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        Ok(self.lock().apply(transitions))
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        // One lock for both halves: the round is atomic.
        let mut tables = self.lock();
        let applied = tables.apply(outcomes);
        let claimed = claim.map(|c| tables.claim(c)).unwrap_or_default();
        Ok(Round { applied, claimed })
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let tables = self.lock();
        let mut expired: Vec<&Record> = tables
            .records
            .values()
            .filter(|r| r.state == State::InFlight && r.lease.is_some_and(|l| l.until <= now))
            .collect();
        expired.sort_by_key(|r| (r.lease.map(|l| l.until), r.id));
        Ok(expired.into_iter().take(limit).cloned().collect())
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let tables = self.lock();
        // Candidates all have a deadline after `now`: the deadline index skips the due backlog.
        let mut found: Vec<&Record> = tables
            .deadlines
            .range((now.saturating_add(1), RecordId(0))..)
            .filter_map(|(_, id)| tables.records.get(id))
            .filter(|r| r.needs_rebase(now))
            .collect();
        found.sort_by_key(|r| r.id);
        Ok(found.into_iter().take(limit).cloned().collect())
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        Ok(self.lock().records.get(&id).cloned())
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let tables = self.lock();
        let start = query.after.map_or(0, |id| id.0.saturating_add(1));
        Ok(tables
            .records
            .range(RecordId(start)..)
            .map(|(_, r)| r)
            .filter(|r| query.matches(r))
            .take(query.limit)
            .cloned()
            .collect())
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        let tables = self.lock();
        let start = after.map_or(0, |id| id.0.saturating_add(1));
        Ok(tables
            .tombstones
            .range(RecordId(start)..)
            .take(limit)
            .map(|(_, t)| t.clone())
            .collect())
    }

    async fn stats(&self) -> Result<Stats> {
        let tables = self.lock();
        let mut stats = Stats {
            discarded: tables.tombstones.len() as u64,
            delivered: tables.delivered,
            superseded: tables.superseded,
            next_due: tables.heads().next().map(|(at, _)| at),
            halt: tables.halt.clone(),
            ..Stats::default()
        };
        for record in tables.records.values() {
            stats.add(record);
        }
        for members in tables.groups.values() {
            let head = members.first().and_then(|id| tables.records.get(id));
            if head.is_some_and(|h| h.state == State::NeedsAttention) {
                stats.held += members.len() as u64 - 1;
            }
        }
        Ok(stats)
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        Ok(self.lock().heads().next().map(|(at, _)| at))
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        Ok(self.lock().halt.clone())
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.lock().halt = halt;
        Ok(())
    }

    // Compared and cleared under one lock: a read, then a clearing, would lose a halt written
    // between the two.
    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        Ok(Halt::clear_if_seen(&mut self.lock().halt, seen))
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        let mut tables = self.lock();
        let old: Vec<RecordId> = tables
            .records
            .values()
            .filter(|r| {
                r.state == State::Rejected && r.last_attempt_at.is_some_and(|t| t < older_than)
            })
            .map(|r| r.id)
            .collect();
        for id in &old {
            tables.take(*id);
        }
        let before = tables.tombstones.len();
        tables
            .tombstones
            .retain(|_, t| t.discarded_at >= older_than);
        Ok((old.len() + before - tables.tombstones.len()) as u64)
    }
}

/// The store as the suite sees it: a location names a store this value holds (nothing is
/// persistent, so the restart and crash scenarios are reported as skipped).
#[derive(Debug, Default)]
pub struct BTreeMapBackend {
    stores: Mutex<BTreeMap<String, Arc<BTreeMapStore>>>,
}

#[async_trait]
impl Backend for BTreeMapBackend {
    fn name(&self) -> &'static str {
        "btreemap"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    async fn create(&self) -> Result<String> {
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        let location = format!("btreemap-{}", stores.len());
        stores.insert(location.clone(), Arc::default());
        Ok(location)
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        let stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        match stores.get(location) {
            Some(store) => Ok(store.clone()),
            None => Err(outbox_core::Error::NotFound {
                path: location.to_owned(),
            }),
        }
    }
}

// The one line: every scenario of the suite as a test of this example.
outbox_testkit::conformance!(BTreeMapBackend::default());

/// `cargo run --example btreemap_store`: the store-level scenarios one by one, each on a
/// runtime of its own (the runner scenarios pause its clock), printed.
fn main() {
    let mut failed = 0;
    for scenario in outbox_testkit::scenarios::SCENARIOS {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let backend = BTreeMapBackend::default();
        let run = outbox_testkit::scenarios::run_by_name(scenario.name, &backend);
        let verdict = match runtime.block_on(run) {
            None => "a crash scenario: `cargo test --example btreemap_store` runs it".to_owned(),
            Some(Ok(verdict)) => verdict.to_string(),
            Some(Err(failure)) => {
                failed += 1;
                format!("FAILED: {failure}")
            }
        };
        eprintln!("{:<36} {verdict}", scenario.name);
    }
    if failed > 0 {
        std::process::exit(1);
    }
}
