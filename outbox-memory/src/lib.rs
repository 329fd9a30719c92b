//! An in-memory [`Store`] for `outbox`: the reference model every other backend is compared
//! with, and a store for tests and for queues that need not survive the process.
//!
//! Nothing is persisted: a dropped `MemoryStore` forgets its records. Its due query is a range
//! scan of an index ordered by `(deadline, id)`, so its cost does not grow with the backlog of
//! records that are not yet due.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox_core::Result<()> {
//! use outbox_core::{Claim, Lease, NewRecord, Store};
//! use outbox_memory::MemoryStore;
//!
//! let store = MemoryStore::new();
//! let ids = store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
//! let claimed = store.claim(Claim { now: 1_000, limit: 10, lease: Lease { token: 1, until: 31_000 } }).await?;
//! assert_eq!(claimed[0].id, ids[0]);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use outbox_core::{
    Applied, Cap, Change, Claim, Enqueued, ErrorCount, Guard, Halt, Lease, ListQuery, Millis,
    NewRecord, Record, RecordId, Result, Round, State, Stats, Store, Tombstone, Transition, Usage,
    DEFAULT_MAX_PAYLOAD,
};

/// The in-memory store. Cheap to create; all state sits behind one mutex.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_payload: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store with the default payload limit ([`DEFAULT_MAX_PAYLOAD`]).
    pub fn new() -> Self {
        MemoryStore {
            inner: Mutex::new(Inner::default()),
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }

    /// Sets the largest payload `enqueue` accepts.
    ///
    /// ```
    /// use outbox_memory::MemoryStore;
    /// let store = MemoryStore::new().with_max_payload(4);
    /// assert_eq!(store.max_payload(), 4);
    /// ```
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_payload = max_payload;
        self
    }

    /// Holds every later enqueue to `cap` (see [`Cap`]): one that would pass it is refused
    /// with [`Error::QueueFull`](outbox_core::Error::QueueFull) and changes nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{Cap, Error, NewRecord, Store};
    /// use outbox_memory::MemoryStore;
    ///
    /// let store = MemoryStore::new().with_cap(Cap::none().with_max_records(1));
    /// store.enqueue(vec![NewRecord::new(b"a".to_vec())], 0).await?;
    /// let refused = store.enqueue(vec![NewRecord::new(b"b".to_vec())], 0).await;
    /// assert!(matches!(refused, Err(Error::QueueFull { .. })));
    /// assert_eq!(store.stats().await?.pending, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_cap(self, cap: Cap) -> Self {
        self.set_cap(cap);
        self
    }

    /// Sets the size cap of a store already in use (see [`MemoryStore::with_cap`]); what it
    /// holds stays, later enqueues are held to the new cap.
    pub fn set_cap(&self, cap: Cap) {
        self.lock().cap = cap;
    }

    /// The largest payload `enqueue` accepts.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied change behind: every
        // method validates before it mutates, so the data is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Clone, Debug, Default)]
struct Inner {
    /// The size cap enqueues are held to.
    cap: Cap,
    last_id: u64,
    records: BTreeMap<RecordId, Record>,
    /// Claimable-kind records (pending or retrying heads) by `(next_attempt_at, id)`.
    due: BTreeSet<(Millis, RecordId)>,
    /// In-flight records by `(lease.until, id)`.
    leases: BTreeSet<(Millis, RecordId)>,
    /// Every pending or retrying record (head or not) by `(next_attempt_at, id)`: the part
    /// after a time is what `stepped_back` reads, never the due backlog.
    scheduled: BTreeSet<(Millis, RecordId)>,
    /// Members of each group that hold its order (every state but rejected), by id.
    groups: HashMap<String, BTreeSet<RecordId>>,
    /// Records of each coalescing key, by id.
    coalescing: HashMap<String, BTreeSet<RecordId>>,
    tombstones: BTreeMap<RecordId, Tombstone>,
    delivered: u64,
    superseded: u64,
    halt: Option<Halt>,
}

impl Inner {
    /// What the store holds, as a size cap counts it.
    fn usage(&self) -> Usage {
        Usage {
            records: self.records.len() as u64,
            bytes: self.records.values().map(|r| r.payload.len() as u64).sum(),
        }
    }

    fn is_head(&self, record: &Record) -> bool {
        match &record.group {
            None => true,
            Some(group) => self
                .groups
                .get(group)
                .and_then(|members| members.first())
                .is_some_and(|head| *head == record.id),
        }
    }

    /// Drops the record's index entries, as its current fields put them there.
    fn unindex(&mut self, id: RecordId) {
        if let Some(record) = self.records.get(&id) {
            if let Some(at) = record.next_attempt_at {
                self.due.remove(&(at, id));
                self.scheduled.remove(&(at, id));
            }
            if let Some(lease) = record.lease {
                self.leases.remove(&(lease.until, id));
            }
        }
    }

    /// Adds the record's index entries from its current fields.
    fn index(&mut self, id: RecordId) {
        let Some(record) = self.records.get(&id) else {
            return;
        };
        if let (true, Some(at)) = (record.state.is_due_kind(), record.next_attempt_at) {
            self.scheduled.insert((at, id));
            if self.is_head(record) {
                self.due.insert((at, id));
            }
        }
        if let (State::InFlight, Some(lease)) = (record.state, record.lease) {
            self.leases.insert((lease.until, id));
        }
    }

    /// Takes the record out of its group's order and lets the next member become the head.
    fn leave_group(&mut self, id: RecordId, group: Option<&String>) {
        let Some(group) = group else { return };
        let Some(members) = self.groups.get_mut(group) else {
            return;
        };
        members.remove(&id);
        match members.first().copied() {
            Some(head) => {
                self.unindex(head);
                self.index(head);
            }
            None => {
                self.groups.remove(group);
            }
        }
    }

    fn remove(&mut self, id: RecordId) -> Option<Record> {
        self.unindex(id);
        let record = self.records.remove(&id)?;
        self.leave_group(id, record.group.as_ref());
        if let Some(key) = &record.replaces {
            if let Some(ids) = self.coalescing.get_mut(key) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.coalescing.remove(key);
                }
            }
        }
        Some(record)
    }

    fn insert(&mut self, record: Record) {
        let id = record.id;
        if let Some(group) = &record.group {
            self.groups.entry(group.clone()).or_default().insert(id);
        }
        if let Some(key) = &record.replaces {
            self.coalescing.entry(key.clone()).or_default().insert(id);
        }
        self.records.insert(id, record);
        self.index(id);
    }

    /// Enqueues one record, or rewrites the waiting record it replaces; true for the latter.
    fn enqueue(&mut self, new: NewRecord, now: Millis) -> (RecordId, bool) {
        let target =
            new.replaces
                .as_ref()
                .and_then(|key| self.coalescing.get(key))
                .and_then(|ids| ids.last())
                .and_then(|id| self.records.get(id))
                .filter(|latest| {
                    let last_of_group = latest.group.as_ref().is_none_or(|g| {
                        self.groups.get(g).and_then(|m| m.last()) == Some(&latest.id)
                    });
                    latest.replaceable_by(&new, last_of_group)
                })
                .map(|latest| latest.id);
        if let Some(id) = target {
            // The new write's not-before time may move the deadline: out of the indexes and
            // back in.
            self.unindex(id);
            if let Some(record) = self.records.get_mut(&id) {
                record.supersede(new, now);
                self.superseded += 1;
                self.index(id);
                return (id, true);
            }
        }
        self.last_id += 1;
        let id = RecordId(self.last_id);
        self.insert(Record::enqueued(id, new, now));
        (id, false)
    }

    fn claim(&mut self, claim: Claim) -> Vec<Record> {
        let ids: Vec<RecordId> = self
            .due
            .iter()
            .take_while(|(at, _)| *at <= claim.now)
            .take(claim.limit)
            .map(|(_, id)| *id)
            .collect();
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            self.unindex(id);
            if let Some(record) = self.records.get_mut(&id) {
                record.state = State::InFlight;
                record.lease = Some(claim.lease);
                claimed.push(record.clone());
            }
            self.index(id);
        }
        claimed
    }

    fn apply(&mut self, transitions: Vec<Transition>) -> Applied {
        let mut applied = Applied::default();
        for transition in transitions {
            let id = transition.id;
            if !self.apply_one(transition) {
                applied.skipped.push(id);
            }
        }
        applied
    }

    fn apply_one(&mut self, transition: Transition) -> bool {
        let Transition { id, guard, change } = transition;
        match self.records.get(&id) {
            Some(record) if guard.admits(record) => {}
            _ => return false,
        }
        match change {
            Change::Delivered => {
                self.remove(id);
                self.delivered += 1;
            }
            Change::Discard {
                reason,
                at,
                attempts,
            } => {
                if let Some(record) = self.remove(id) {
                    let tombstone = Tombstone::of(record, reason, at, attempts);
                    self.tombstones.insert(id, tombstone);
                }
            }
            Change::Requeue { at } => {
                let Some(record) = self.records.get(&id) else {
                    return false;
                };
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
                    return false;
                }
                let group = record.group.clone();
                self.unindex(id);
                if let Some(record) = self.records.get_mut(&id) {
                    record.requeue(at);
                }
                // Back in its group's order: it may be the head again, and the head it
                // displaces leaves the due index.
                if let Some(group) = group {
                    let members = self.groups.entry(group).or_default();
                    members.insert(id);
                    let members: Vec<RecordId> = members.iter().copied().collect();
                    for member in members {
                        self.unindex(member);
                        self.index(member);
                    }
                } else {
                    self.index(id);
                }
            }
            Change::Update(progress) => {
                if !self
                    .records
                    .get(&id)
                    .is_some_and(|r| outbox_core::machine::admits_update(r, &progress))
                {
                    return false;
                }
                self.unindex(id);
                let Some(record) = self.records.get_mut(&id) else {
                    return false;
                };
                record.set_progress(progress);
                let group = (!record.state.holds_group())
                    .then(|| record.group.clone())
                    .flatten();
                self.index(id);
                // A rejected record no longer holds its group's order.
                self.leave_group(id, group.as_ref());
            }
        }
        true
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        NewRecord::validate_all(&records, self.max_payload)?;
        let mut inner = self.lock();
        let cap = inner.cap;
        // Under a cap the batch is written on the state as it was, then measured, and undone
        // when it would pass the cap: the reference store keeps the rule's plain shape.
        let before = (!cap.is_none()).then(|| (inner.clone(), inner.usage()));
        let mut enqueued = Enqueued::fresh(Vec::with_capacity(records.len()));
        for (index, new) in records.into_iter().enumerate() {
            let (id, replaced) = inner.enqueue(new, now);
            enqueued.ids.push(id);
            if replaced {
                enqueued.superseded.push(index);
            }
        }
        if let Some((saved, used)) = before {
            let after = inner.usage();
            let records = after.records.saturating_sub(used.records);
            let bytes = after.bytes.saturating_sub(used.bytes);
            if let Err(full) = cap.admit(used, records, bytes) {
                *inner = saved;
                return Err(full);
            }
        }
        Ok(enqueued)
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        Ok(self.lock().claim(claim))
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let mut inner = self.lock();
        for &id in ids {
            let holds = inner
                .records
                .get(&id)
                .is_some_and(|r| Guard::Lease(lease.token).admits(r));
            if holds {
                inner.unindex(id);
                if let Some(record) = inner.records.get_mut(&id) {
                    record.lease = Some(lease);
                }
                inner.index(id);
            }
        }
        Ok(())
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        Ok(self.lock().apply(transitions))
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        let mut inner = self.lock();
        let applied = inner.apply(outcomes);
        let claimed = claim.map(|c| inner.claim(c)).unwrap_or_default();
        Ok(Round { applied, claimed })
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let inner = self.lock();
        Ok(inner
            .leases
            .iter()
            .take_while(|(until, _)| *until <= now)
            .take(limit)
            .filter_map(|(_, id)| inner.records.get(id).cloned())
            .collect())
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let inner = self.lock();
        // The records whose deadline lies after `now` (an index range), lowest id first.
        let mut found: Vec<&Record> = inner
            .scheduled
            .range((now.saturating_add(1), RecordId(0))..)
            .filter_map(|(_, id)| inner.records.get(id))
            .filter(|r| r.needs_rebase(now))
            .collect();
        found.sort_unstable_by_key(|r| r.id);
        Ok(found.into_iter().take(limit).cloned().collect())
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        Ok(self.lock().records.get(&id).cloned())
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let inner = self.lock();
        let start = query.after.map_or(0, |id| id.0.saturating_add(1));
        Ok(inner
            .records
            .range(RecordId(start)..)
            .map(|(_, r)| r)
            .filter(|r| query.matches(r))
            .take(query.limit)
            .cloned()
            .collect())
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        let inner = self.lock();
        let start = after.map_or(0, |id| id.0.saturating_add(1));
        Ok(inner
            .tombstones
            .range(RecordId(start)..)
            .take(limit)
            .map(|(_, t)| t.clone())
            .collect())
    }

    async fn stats(&self) -> Result<Stats> {
        let inner = self.lock();
        let mut stats = Stats {
            discarded: inner.tombstones.len() as u64,
            delivered: inner.delivered,
            superseded: inner.superseded,
            next_due: inner.due.first().map(|(at, _)| *at),
            halt: inner.halt.clone(),
            ..Stats::default()
        };
        for record in inner.records.values() {
            stats.add(record);
        }
        for members in inner.groups.values() {
            let head = members.first().and_then(|id| inner.records.get(id));
            if head.is_some_and(|h| h.state == State::NeedsAttention) {
                stats.held += members.len() as u64 - 1;
            }
        }
        Ok(stats)
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        Ok(self.lock().due.first().map(|(at, _)| *at))
    }

    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        Ok(ErrorCount::tally(self.lock().records.values(), limit))
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        Ok(self.lock().halt.clone())
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.lock().halt = halt;
        Ok(())
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        Ok(Halt::clear_if_seen(&mut self.lock().halt, seen))
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        let mut inner = self.lock();
        let rejected: Vec<RecordId> = inner
            .records
            .values()
            .filter(|r| {
                r.state == State::Rejected && r.last_attempt_at.is_some_and(|t| t < older_than)
            })
            .map(|r| r.id)
            .collect();
        let mut pruned = rejected.len() as u64;
        for id in rejected {
            inner.remove(id);
        }
        let before = inner.tombstones.len();
        inner.tombstones.retain(|_, t| t.discarded_at >= older_than);
        pruned += (before - inner.tombstones.len()) as u64;
        Ok(pruned)
    }
}
