//! The queue operations on redb tables, mirroring `outbox-memory` step by step.
//!
//! Write operations run on a [`Tables`] opened in one `WriteTransaction`, and keep the `due`,
//! `queued`, `groups`, `coalescing` and `leases` indexes in step with the records inside that same
//! transaction. Read operations run on a [`ReadTables`] opened in one `ReadTransaction` (a
//! consistent snapshot).

use std::collections::HashMap;

use outbox_core::{
    Applied, Cap, Change, Claim, Enqueued, Error, ErrorCount, Guard, Halt, Lease, ListQuery,
    Millis, NewRecord, Record, RecordId, Result, State, Stats, Tombstone, Transition,
};
use redb::{
    ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction,
};

use crate::codec;
use crate::error::from_redb;

mod enqueue;
mod read;
mod unreadable;
mod usage;

use crate::schema::{
    ASIDE, COALESCING, DUE, GROUPS, LEASES, META, META_DELIVERED, META_LAST_ID, META_PAYLOAD_BYTES,
    META_SUPERSEDED, QUEUED, RECORDS, RUNNER, RUNNER_HALT, TOMBSTONES,
};
pub(crate) use read::ReadTables;
use usage::{Bytes, Undo};

/// `Result<T, redb error>` → `Result<T, outbox error>`.
trait Engine<T> {
    fn engine(self) -> Result<T>;
}

impl<T, E: Into<redb::Error>> Engine<T> for std::result::Result<T, E> {
    fn engine(self) -> Result<T> {
        self.map_err(from_redb)
    }
}

fn load(records: &impl ReadableTable<u64, &'static [u8]>, id: u64) -> Result<Option<Record>> {
    match records.get(id).engine()? {
        Some(bytes) => codec::decode_record(id, bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// The record `id`, where one that does not decode reads as absent: for the paths that read
/// many records, which pass such a record by (see [`unreadable`]).
fn load_readable(
    records: &impl ReadableTable<u64, &'static [u8]>,
    id: u64,
) -> Result<Option<Record>> {
    match records.get(id).engine()? {
        Some(bytes) => Ok(codec::decode_record(id, bytes.value()).ok()),
        None => Ok(None),
    }
}

fn load_halt(runner: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<Option<Halt>> {
    match runner.get(RUNNER_HALT).engine()? {
        Some(bytes) => codec::decode_halt(bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// What one transition did.
enum Done {
    /// Its guard did not hold, or its record is gone: nothing was written.
    Skipped,
    /// Applied.
    Applied,
    /// A delivery, applied: the counter is the caller's to raise.
    Delivered,
}

/// Every table of the outbox, opened for writing in one transaction.
pub(crate) struct Tables<'t> {
    records: Table<'t, u64, &'static [u8]>,
    due: Table<'t, (u64, u64), ()>,
    queued: Table<'t, (u64, u64), ()>,
    groups: Table<'t, (&'static str, u64), ()>,
    coalescing: Table<'t, (&'static str, u64), ()>,
    leases: Table<'t, (u64, u64), ()>,
    /// Records a claim set aside as unreadable, which a size cap no longer counts (see
    /// [`unreadable`]).
    aside: Table<'t, u64, ()>,
    tombstones: Table<'t, u64, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
    runner: Table<'t, &'static str, &'static [u8]>,
    /// Set by the first write: a transaction that wrote nothing need not be committed.
    changed: bool,
    /// Counters of `meta` this transaction set, not yet in the table: [`Tables::close`] writes
    /// each once, so the writes of one group commit move a counter once, not once each.
    counters: Vec<(&'static str, u64)>,
    /// Payload bytes the running operation added and removed, for the `payload_bytes`
    /// counter, which the operation moves once at its end ([`Tables::settle_bytes`]).
    bytes: Bytes,
}

impl<'t> Tables<'t> {
    /// Runs `write` on every table of `txn` (each created when missing), then writes the
    /// counters it set ([`Tables::set_meta`]), whatever `write` returned: `txn` then holds
    /// what `write` did, counters included, and is the caller's to commit or abort. Returns
    /// `write`'s result and whether anything was written: every write of a record, a
    /// tombstone, a counter or the halt goes through a method that says so; index entries only
    /// ever change along with one of those.
    ///
    /// This is the only way to write through [`Tables`], so no write path can leave a counter
    /// unwritten (a lost `last_id` would hand out ids again).
    pub(crate) fn with<T>(
        txn: &'t WriteTransaction,
        write: impl FnOnce(&mut Tables<'t>) -> Result<T>,
    ) -> Result<(T, bool)> {
        let mut tables = Tables::open(txn)?;
        let result = write(&mut tables);
        let changed = tables.close()?;
        Ok((result?, changed))
    }

    /// Opens (creating when missing) every table in `txn`.
    fn open(txn: &'t WriteTransaction) -> Result<Self> {
        Ok(Tables {
            records: txn.open_table(RECORDS).engine()?,
            due: txn.open_table(DUE).engine()?,
            queued: txn.open_table(QUEUED).engine()?,
            groups: txn.open_table(GROUPS).engine()?,
            coalescing: txn.open_table(COALESCING).engine()?,
            leases: txn.open_table(LEASES).engine()?,
            aside: txn.open_table(ASIDE).engine()?,
            tombstones: txn.open_table(TOMBSTONES).engine()?,
            meta: txn.open_table(META).engine()?,
            runner: txn.open_table(RUNNER).engine()?,
            changed: false,
            counters: Vec::new(),
            bytes: Bytes::default(),
        })
    }

    /// Writes the counters set through these tables and returns whether anything was written
    /// ([`Tables::with`]).
    fn close(mut self) -> Result<bool> {
        for (name, value) in std::mem::take(&mut self.counters) {
            self.meta.insert(name, value).engine()?;
        }
        Ok(self.changed)
    }

    /// The counter `name`: as this transaction last set it, else as the table holds it.
    pub(crate) fn meta(&self, name: &'static str) -> Result<Option<u64>> {
        if let Some(&(_, value)) = self.counters.iter().find(|(n, _)| *n == name) {
            return Ok(Some(value));
        }
        Ok(self.meta.get(name).engine()?.map(|v| v.value()))
    }

    /// Sets the counter `name`, written to the table when the tables close.
    pub(crate) fn set_meta(&mut self, name: &'static str, value: u64) -> Result<()> {
        self.changed = true;
        match self.counters.iter_mut().find(|(n, _)| *n == name) {
            Some(counter) => counter.1 = value,
            None => self.counters.push((name, value)),
        }
        Ok(())
    }

    pub(crate) fn get(&self, id: RecordId) -> Result<Option<Record>> {
        load(&self.records, id.0)
    }

    pub(crate) fn put(&mut self, record: &Record) -> Result<()> {
        self.put_bytes(record.id, &codec::encode_record(record))
    }

    fn put_bytes(&mut self, id: RecordId, bytes: &[u8]) -> Result<()> {
        self.changed = true;
        self.records.insert(id.0, bytes).engine()?;
        Ok(())
    }

    /// Every record in id order (migration only).
    pub(crate) fn all_records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            out.push(codec::decode_record(id.value(), bytes.value())?);
        }
        Ok(out)
    }

    pub(crate) fn join_group(&mut self, group: &str, id: RecordId) -> Result<()> {
        self.groups.insert((group, id.0), ()).engine()?;
        Ok(())
    }

    /// Adds the record to the records of its coalescing key.
    pub(crate) fn join_coalescing(&mut self, key: &str, id: RecordId) -> Result<()> {
        self.coalescing.insert((key, id.0), ()).engine()?;
        Ok(())
    }

    /// The latest record (highest id) with coalescing key `key`, in any state: one seek to the
    /// end of the key's range.
    fn latest_by_key(&self, key: &str) -> Result<Option<RecordId>> {
        end_of(&self.coalescing, key, true)
    }

    /// The last member of `group` (highest id) among those holding its order.
    fn group_tail(&self, group: &str) -> Result<Option<RecordId>> {
        end_of(&self.groups, group, true)
    }

    fn group_head(&self, group: &str) -> Result<Option<RecordId>> {
        end_of(&self.groups, group, false)
    }

    fn is_head(&self, record: &Record) -> Result<bool> {
        match &record.group {
            None => Ok(true),
            Some(group) => Ok(self.group_head(group)? == Some(record.id)),
        }
    }

    /// Drops the record's index entries, as its current fields put them there.
    fn unindex(&mut self, record: &Record) -> Result<()> {
        if let (true, Some(at)) = (record.state.is_due_kind(), record.next_attempt_at) {
            // A head's deadline is in `due`, anyone else's in `queued`.
            if self.due.remove((at, record.id.0)).engine()?.is_none() {
                self.queued.remove((at, record.id.0)).engine()?;
            }
        }
        if let Some(lease) = record.lease {
            self.leases.remove((lease.until, record.id.0)).engine()?;
        }
        Ok(())
    }

    /// Adds the record's index entries from its current fields.
    pub(crate) fn index(&mut self, record: &Record) -> Result<()> {
        if let (true, Some(at)) = (record.state.is_due_kind(), record.next_attempt_at) {
            if self.is_head(record)? {
                self.due.insert((at, record.id.0), ()).engine()?;
            } else {
                self.queued.insert((at, record.id.0), ()).engine()?;
            }
        }
        if let (State::InFlight, Some(lease)) = (record.state, record.lease) {
            self.leases
                .insert((lease.until, record.id.0), ())
                .engine()?;
        }
        Ok(())
    }

    /// True when a member of `group` is in flight; a member a claim set aside as unreadable
    /// counts as one (see [`unreadable`]), any other undecodable member is passed by.
    fn group_in_flight(&self, group: &str) -> Result<bool> {
        for entry in self.groups.range((group, 0)..=(group, u64::MAX)).engine()? {
            let id = entry.engine()?.0.value().1;
            let in_flight = match load_readable(&self.records, id)? {
                Some(record) => record.state == State::InFlight,
                None => self.aside.get(id).engine()?.is_some(),
            };
            if in_flight {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Re-indexes every member of `group` except `skip` (due for its head, queued for the
    /// rest), after its head changed.
    fn reindex_group(&mut self, group: &str, skip: Option<RecordId>) -> Result<()> {
        let mut members = Vec::new();
        for entry in self.groups.range((group, 0)..=(group, u64::MAX)).engine()? {
            members.push(RecordId(entry.engine()?.0.value().1));
        }
        for id in members.into_iter().filter(|id| Some(*id) != skip) {
            // An undecodable member has no index entries to move (see [`unreadable`]).
            if let Some(member) = load_readable(&self.records, id.0)? {
                self.unindex(&member)?;
                self.index(&member)?;
            }
        }
        Ok(())
    }

    /// Takes the record out of its group's order and lets the next member become the head. A
    /// next member that does not decode stays unindexed: its group waits behind it until it
    /// is discarded, and the removal goes through (see [`unreadable`]).
    fn leave_group(&mut self, id: RecordId, group: Option<&str>) -> Result<()> {
        let Some(group) = group else { return Ok(()) };
        self.groups.remove((group, id.0)).engine()?;
        if let Some(head) = self.group_head(group)? {
            if let Some(record) = load_readable(&self.records, head.0)? {
                self.unindex(&record)?;
                self.index(&record)?;
            }
        }
        Ok(())
    }

    /// Removes `record` (as loaded from the table) with its index entries.
    fn remove(&mut self, record: &Record) -> Result<()> {
        self.changed = true;
        self.bytes.remove(record.payload.len());
        self.unindex(record)?;
        self.records.remove(record.id.0).engine()?;
        if let Some(key) = record.replaces.as_deref() {
            self.coalescing.remove((key, record.id.0)).engine()?;
        }
        self.leave_group(record.id, record.group.as_deref())
    }

    /// Claims up to `limit` claimable records in `(next_attempt_at, id)` order.
    pub(crate) fn claim(&mut self, claim: Claim) -> Result<Vec<Record>> {
        let mut ids = Vec::new();
        if claim.limit > 0 {
            for entry in self.due.range((0, 0)..=(claim.now, u64::MAX)).engine()? {
                let (key, _) = entry.engine()?;
                let (at, id) = key.value();
                ids.push((at, RecordId(id)));
                if ids.len() == claim.limit {
                    break;
                }
            }
        }
        let mut claimed = Vec::with_capacity(ids.len());
        let mut unreadable = Vec::new();
        for (at, id) in ids {
            let Some(mut record) = load_readable(&self.records, id.0)? else {
                if self.is_unreadable(id)? {
                    unreadable.push((at, id));
                }
                continue;
            };
            self.unindex(&record)?;
            record.state = State::InFlight;
            record.lease = Some(claim.lease);
            self.put(&record)?;
            self.index(&record)?;
            claimed.push(record);
        }
        self.set_aside(&unreadable)?;
        Ok(claimed)
    }

    /// Moves the lease of records still held under `lease.token`; returns how many it moved.
    pub(crate) fn renew(&mut self, ids: &[RecordId], lease: Lease) -> Result<usize> {
        let mut renewed = 0;
        for &id in ids {
            let Some(mut record) = self.get(id)? else {
                continue;
            };
            if Guard::Lease(lease.token).admits(&record) {
                self.unindex(&record)?;
                record.lease = Some(lease);
                self.put(&record)?;
                self.index(&record)?;
                renewed += 1;
            }
        }
        Ok(renewed)
    }

    /// Applies transitions where their guards hold.
    pub(crate) fn apply(&mut self, transitions: &[Transition]) -> Result<Applied> {
        let mut applied = Applied::default();
        let mut delivered = 0u64;
        for transition in transitions {
            match self.apply_one(transition)? {
                Done::Skipped => applied.skipped.push(transition.id),
                Done::Applied => {}
                Done::Delivered => delivered += 1,
            }
        }
        // The counter is written once per batch, not once per delivered record.
        if delivered > 0 {
            let total = self.meta(META_DELIVERED)?.unwrap_or(0);
            self.set_meta(META_DELIVERED, total.saturating_add(delivered))?;
        }
        self.settle_bytes()?;
        Ok(applied)
    }

    fn apply_one(&mut self, transition: &Transition) -> Result<Done> {
        let Transition { id, guard, change } = transition;
        let Some(mut record) = self.get(*id)? else {
            return Ok(Done::Skipped);
        };
        if !guard.admits(&record) {
            return Ok(Done::Skipped);
        }
        match change {
            Change::Delivered => {
                self.remove(&record)?;
                return Ok(Done::Delivered);
            }
            Change::Discard {
                reason,
                at,
                attempts,
            } => {
                self.remove(&record)?;
                let tombstone = Tombstone::of(record, reason.clone(), *at, *attempts);
                let bytes = codec::encode_tombstone(&tombstone);
                self.tombstones.insert(id.0, bytes.as_slice()).engine()?;
            }
            Change::Requeue { at } => {
                // Back in its own place: refused while its group has a record in flight,
                // which would put two of the group in flight.
                let busy = match record.group.as_deref() {
                    Some(group) if record.state == State::Rejected => {
                        self.group_in_flight(group)?
                    }
                    _ => false,
                };
                if !outbox_core::machine::admits_requeue(&record, busy) {
                    return Ok(Done::Skipped);
                }
                if let Some(group) = record.group.as_deref() {
                    self.join_group(group, *id)?;
                }
                self.changed = true;
                self.unindex(&record)?;
                record.requeue(*at);
                self.put(&record)?;
                self.index(&record)?;
                // The head it displaces waits behind it again.
                if let Some(group) = record.group.as_deref() {
                    self.reindex_group(group, Some(*id))?;
                }
            }
            Change::Update(progress) => {
                if !outbox_core::machine::admits_update(&record, progress) {
                    return Ok(Done::Skipped);
                }
                self.unindex(&record)?;
                record.set_progress(progress.clone());
                self.put(&record)?;
                self.index(&record)?;
                // A rejected record no longer holds its group's order.
                if !record.state.holds_group() {
                    self.leave_group(*id, record.group.as_deref())?;
                }
            }
        }
        Ok(Done::Applied)
    }

    /// Persists the runner's halt, or clears it.
    pub(crate) fn set_halt(&mut self, halt: Option<&Halt>) -> Result<()> {
        match halt {
            Some(halt) => {
                self.changed = true;
                let bytes = codec::encode_halt(halt);
                self.runner.insert(RUNNER_HALT, bytes.as_slice()).engine()?;
            }
            None => {
                if self.runner.remove(RUNNER_HALT).engine()?.is_some() {
                    self.changed = true;
                }
            }
        }
        Ok(())
    }

    /// Clears the halt if it is `seen`; returns the halt found.
    pub(crate) fn clear_halt_if(&mut self, seen: &Halt) -> Result<Option<Halt>> {
        let found = load_halt(&self.runner)?;
        if found.as_ref() == Some(seen) {
            self.set_halt(None)?;
        }
        Ok(found)
    }

    /// Removes rejected records and tombstones older than `older_than`.
    pub(crate) fn prune(&mut self, older_than: Millis) -> Result<u64> {
        let mut rejected = Vec::new();
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            let Ok(record) = codec::decode_record(id.value(), bytes.value()) else {
                continue;
            };
            if record.state == State::Rejected
                && record.last_attempt_at.is_some_and(|t| t < older_than)
            {
                rejected.push(record);
            }
        }
        let mut pruned = rejected.len() as u64;
        for record in &rejected {
            self.remove(record)?;
        }
        self.settle_bytes()?;
        let mut old = Vec::new();
        for entry in self.tombstones.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            let tombstone = codec::decode_tombstone(id.value(), bytes.value())?;
            if tombstone.discarded_at < older_than {
                old.push(id.value());
            }
        }
        pruned += old.len() as u64;
        for id in old {
            self.changed = true;
            self.tombstones.remove(id).engine()?;
        }
        Ok(pruned)
    }

    /// Rewrites every lease to expire at 0 (see [`crate::schema::expire_leases`]).
    pub(crate) fn expire_all_leases(&mut self) -> Result<u64> {
        let mut held = Vec::new();
        for entry in self.leases.iter().engine()? {
            let (key, _) = entry.engine()?;
            held.push(RecordId(key.value().1));
        }
        let mut expired = 0;
        for id in held {
            let Some(mut record) = load_readable(&self.records, id.0)? else {
                continue;
            };
            if let Some(lease) = record.lease {
                if lease.until != 0 {
                    self.unindex(&record)?;
                    record.lease = Some(Lease { until: 0, ..lease });
                    self.put(&record)?;
                    self.index(&record)?;
                    expired += 1;
                }
            }
        }
        Ok(expired)
    }
}

fn ids_exhausted() -> Error {
    Error::StorageFull {
        source: Some("record ids are exhausted".into()),
    }
}

/// The first (or, with `last`, the last) id filed under `name` in an index of (name, id): one
/// seek to an end of the name's range.
fn end_of(
    index: &Table<'_, (&'static str, u64), ()>,
    name: &str,
    last: bool,
) -> Result<Option<RecordId>> {
    let mut ids = index.range((name, 0)..=(name, u64::MAX)).engine()?;
    let end = if last { ids.next_back() } else { ids.next() };
    match end {
        Some(entry) => Ok(Some(RecordId(entry.engine()?.0.value().1))),
        None => Ok(None),
    }
}
