//! The queue operations on redb tables, mirroring `outbox-memory` step by step.
//!
//! Write operations run on a [`Tables`] opened in one `WriteTransaction`, and keep the `due`,
//! `groups` and `leases` indexes in step with the records inside that same transaction. Read
//! operations run on a [`ReadTables`] opened in one `ReadTransaction` (a consistent snapshot).

use outbox_core::{
    Applied, Change, Claim, Error, Guard, Lease, ListQuery, Millis, NewRecord, Record, RecordId,
    Result, State, Stats, Tombstone, Transition,
};
use redb::{
    ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction,
};

use crate::codec;
use crate::error::from_redb;
use crate::schema::{DUE, GROUPS, LEASES, META, META_DELIVERED, META_LAST_ID, RECORDS, TOMBSTONES};

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

/// Every table of the outbox, opened for writing in one transaction.
pub(crate) struct Tables<'t> {
    records: Table<'t, u64, &'static [u8]>,
    due: Table<'t, (u64, u64), ()>,
    groups: Table<'t, (&'static str, u64), ()>,
    leases: Table<'t, (u64, u64), ()>,
    tombstones: Table<'t, u64, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
}

impl<'t> Tables<'t> {
    /// Opens (creating when missing) every table in `txn`.
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self> {
        Ok(Tables {
            records: txn.open_table(RECORDS).engine()?,
            due: txn.open_table(DUE).engine()?,
            groups: txn.open_table(GROUPS).engine()?,
            leases: txn.open_table(LEASES).engine()?,
            tombstones: txn.open_table(TOMBSTONES).engine()?,
            meta: txn.open_table(META).engine()?,
        })
    }

    pub(crate) fn meta(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.meta.get(name).engine()?.map(|v| v.value()))
    }

    pub(crate) fn set_meta(&mut self, name: &str, value: u64) -> Result<()> {
        self.meta.insert(name, value).engine()?;
        Ok(())
    }

    pub(crate) fn get(&self, id: RecordId) -> Result<Option<Record>> {
        load(&self.records, id.0)
    }

    pub(crate) fn put(&mut self, record: &Record) -> Result<()> {
        let bytes = codec::encode_record(record);
        self.records
            .insert(record.id.0, bytes.as_slice())
            .engine()?;
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

    fn group_head(&self, group: &str) -> Result<Option<RecordId>> {
        let mut members = self.groups.range((group, 0)..=(group, u64::MAX)).engine()?;
        match members.next() {
            Some(entry) => Ok(Some(RecordId(entry.engine()?.0.value().1))),
            None => Ok(None),
        }
    }

    fn is_head(&self, record: &Record) -> Result<bool> {
        match &record.group {
            None => Ok(true),
            Some(group) => Ok(self.group_head(group)? == Some(record.id)),
        }
    }

    /// Drops the record's index entries, as its current fields put them there.
    fn unindex(&mut self, record: &Record) -> Result<()> {
        if let Some(at) = record.next_attempt_at {
            self.due.remove((at, record.id.0)).engine()?;
        }
        if let Some(lease) = record.lease {
            self.leases.remove((lease.until, record.id.0)).engine()?;
        }
        Ok(())
    }

    /// Adds the record's index entries from its current fields.
    pub(crate) fn index(&mut self, record: &Record) -> Result<()> {
        if record.state.is_due_kind() && self.is_head(record)? {
            if let Some(at) = record.next_attempt_at {
                self.due.insert((at, record.id.0), ()).engine()?;
            }
        }
        if let (State::InFlight, Some(lease)) = (record.state, record.lease) {
            self.leases
                .insert((lease.until, record.id.0), ())
                .engine()?;
        }
        Ok(())
    }

    /// Takes the record out of its group's order and lets the next member become the head.
    fn leave_group(&mut self, id: RecordId, group: Option<&str>) -> Result<()> {
        let Some(group) = group else { return Ok(()) };
        self.groups.remove((group, id.0)).engine()?;
        if let Some(head) = self.group_head(group)? {
            if let Some(record) = self.get(head)? {
                self.unindex(&record)?;
                self.index(&record)?;
            }
        }
        Ok(())
    }

    fn remove(&mut self, id: RecordId) -> Result<Option<Record>> {
        let Some(record) = self.get(id)? else {
            return Ok(None);
        };
        self.unindex(&record)?;
        self.records.remove(id.0).engine()?;
        self.leave_group(id, record.group.as_deref())?;
        Ok(Some(record))
    }

    fn guard_holds(record: &Record, guard: Guard) -> bool {
        match guard {
            Guard::Lease(token) => {
                record.state == State::InFlight && record.lease.is_some_and(|l| l.token == token)
            }
            Guard::Idle => record.state != State::InFlight,
        }
    }

    /// Enqueues a batch as pending records due at `now`.
    pub(crate) fn enqueue(
        &mut self,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Vec<RecordId>> {
        let mut last_id = self.meta(META_LAST_ID)?.unwrap_or(0);
        let mut ids = Vec::with_capacity(records.len());
        for new in records {
            last_id = last_id.checked_add(1).ok_or_else(|| Error::StorageFull {
                source: Some("record ids are exhausted".into()),
            })?;
            let id = RecordId(last_id);
            if let Some(group) = &new.group {
                self.join_group(group, id)?;
            }
            let record = Record::fresh(id, new.group, new.payload, new.key, now);
            self.put(&record)?;
            self.index(&record)?;
            ids.push(id);
        }
        self.set_meta(META_LAST_ID, last_id)?;
        Ok(ids)
    }

    /// Claims up to `limit` claimable records in `(next_attempt_at, id)` order.
    pub(crate) fn claim(&mut self, claim: Claim) -> Result<Vec<Record>> {
        let mut ids = Vec::new();
        if claim.limit > 0 {
            for entry in self.due.range((0, 0)..=(claim.now, u64::MAX)).engine()? {
                let (key, _) = entry.engine()?;
                ids.push(RecordId(key.value().1));
                if ids.len() == claim.limit {
                    break;
                }
            }
        }
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(mut record) = self.get(id)? else {
                continue;
            };
            self.unindex(&record)?;
            record.state = State::InFlight;
            record.lease = Some(claim.lease);
            self.put(&record)?;
            self.index(&record)?;
            claimed.push(record);
        }
        Ok(claimed)
    }

    /// Moves the lease of records still held under `lease.token`; returns how many it moved.
    pub(crate) fn renew(&mut self, ids: &[RecordId], lease: Lease) -> Result<usize> {
        let mut renewed = 0;
        for &id in ids {
            let Some(mut record) = self.get(id)? else {
                continue;
            };
            if Self::guard_holds(&record, Guard::Lease(lease.token)) {
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
    pub(crate) fn apply(&mut self, transitions: Vec<Transition>) -> Result<Applied> {
        let mut applied = Applied::default();
        for transition in transitions {
            let id = transition.id;
            if !self.apply_one(transition)? {
                applied.skipped.push(id);
            }
        }
        Ok(applied)
    }

    fn apply_one(&mut self, transition: Transition) -> Result<bool> {
        let Transition { id, guard, change } = transition;
        let Some(mut record) = self.get(id)? else {
            return Ok(false);
        };
        if !Self::guard_holds(&record, guard) {
            return Ok(false);
        }
        match change {
            Change::Delivered => {
                self.remove(id)?;
                let delivered = self.meta(META_DELIVERED)?.unwrap_or(0);
                self.set_meta(META_DELIVERED, delivered.saturating_add(1))?;
            }
            Change::Discard {
                reason,
                at,
                attempts,
            } => {
                if let Some(record) = self.remove(id)? {
                    let tombstone = Tombstone {
                        id,
                        group: record.group,
                        key: record.key,
                        reason,
                        discarded_at: at,
                        attempts,
                    };
                    let bytes = codec::encode_tombstone(&tombstone);
                    self.tombstones.insert(id.0, bytes.as_slice()).engine()?;
                }
            }
            Change::Update(progress) => {
                self.unindex(&record)?;
                record.set_progress(progress);
                self.put(&record)?;
                self.index(&record)?;
                // A rejected record no longer holds its group's order.
                if !record.state.holds_group() {
                    self.leave_group(id, record.group.as_deref())?;
                }
            }
        }
        Ok(true)
    }

    /// Removes rejected records and tombstones older than `older_than`.
    pub(crate) fn prune(&mut self, older_than: Millis) -> Result<u64> {
        let mut rejected = Vec::new();
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            let record = codec::decode_record(id.value(), bytes.value())?;
            if record.state == State::Rejected
                && record.last_attempt_at.is_some_and(|t| t < older_than)
            {
                rejected.push(record.id);
            }
        }
        let mut pruned = rejected.len() as u64;
        for id in rejected {
            self.remove(id)?;
        }
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
            let Some(mut record) = self.get(id)? else {
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

/// Every table of the outbox, opened for reading in one snapshot.
pub(crate) struct ReadTables {
    records: ReadOnlyTable<u64, &'static [u8]>,
    due: ReadOnlyTable<(u64, u64), ()>,
    groups: ReadOnlyTable<(&'static str, u64), ()>,
    leases: ReadOnlyTable<(u64, u64), ()>,
    tombstones: ReadOnlyTable<u64, &'static [u8]>,
    meta: ReadOnlyTable<&'static str, u64>,
}

impl ReadTables {
    pub(crate) fn open(txn: &ReadTransaction) -> Result<Self> {
        Ok(ReadTables {
            records: txn.open_table(RECORDS).engine()?,
            due: txn.open_table(DUE).engine()?,
            groups: txn.open_table(GROUPS).engine()?,
            leases: txn.open_table(LEASES).engine()?,
            tombstones: txn.open_table(TOMBSTONES).engine()?,
            meta: txn.open_table(META).engine()?,
        })
    }

    pub(crate) fn get(&self, id: RecordId) -> Result<Option<Record>> {
        load(&self.records, id.0)
    }

    pub(crate) fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for entry in self.leases.range((0, 0)..=(now, u64::MAX)).engine()? {
            let (key, _) = entry.engine()?;
            if let Some(record) = self.get(RecordId(key.value().1))? {
                out.push(record);
            }
            if out.len() == limit {
                break;
            }
        }
        Ok(out)
    }

    pub(crate) fn scheduled_after(&self, at: Millis, limit: usize) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            let record = codec::decode_record(id.value(), bytes.value())?;
            if record.state.is_due_kind() && record.next_attempt_at.is_some_and(|t| t > at) {
                out.push(record);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        if query.limit == 0 {
            return Ok(out);
        }
        let start = query.after.map_or(0, |id| id.0.saturating_add(1));
        for entry in self.records.range(start..).engine()? {
            let (id, bytes) = entry.engine()?;
            let record = codec::decode_record(id.value(), bytes.value())?;
            if query.matches(&record) {
                out.push(record);
                if out.len() == query.limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn tombstones(
        &self,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<Tombstone>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let start = after.map_or(0, |id| id.0.saturating_add(1));
        for entry in self.tombstones.range(start..).engine()? {
            let (id, bytes) = entry.engine()?;
            out.push(codec::decode_tombstone(id.value(), bytes.value())?);
            if out.len() == limit {
                break;
            }
        }
        Ok(out)
    }

    /// Whether a claim at `now` would find anything (the due index holds only claimable heads).
    pub(crate) fn any_due(&self, now: Millis) -> Result<bool> {
        Ok(self
            .due
            .first()
            .engine()?
            .is_some_and(|(key, _)| key.value().0 <= now))
    }

    pub(crate) fn next_due(&self) -> Result<Option<Millis>> {
        Ok(self.due.first().engine()?.map(|(key, _)| key.value().0))
    }

    pub(crate) fn stats(&self) -> Result<Stats> {
        let mut stats = Stats {
            discarded: self.tombstones.len().engine()?,
            delivered: self
                .meta
                .get(META_DELIVERED)
                .engine()?
                .map_or(0, |v| v.value()),
            next_due: self.next_due()?,
            ..Stats::default()
        };
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            let record = codec::decode_record(id.value(), bytes.value())?;
            match record.state {
                State::Pending => stats.pending += 1,
                State::Retrying => stats.retrying += 1,
                State::InFlight => stats.in_flight += 1,
                State::NeedsAttention => stats.needs_attention += 1,
                State::Rejected => stats.rejected += 1,
            }
            if record.state.holds_group() {
                stats.oldest_created_at = Some(
                    stats
                        .oldest_created_at
                        .map_or(record.created_at, |t| t.min(record.created_at)),
                );
            }
        }
        // Members of a group are stored in (group, id) order, so a group's head comes first.
        let mut current: Option<(String, bool)> = None;
        for entry in self.groups.iter().engine()? {
            let (key, _) = entry.engine()?;
            let (group, id) = key.value();
            match &current {
                Some((g, parked)) if g == group => {
                    if *parked {
                        stats.held += 1;
                    }
                }
                _ => {
                    let parked = self
                        .get(RecordId(id))?
                        .is_some_and(|head| head.state == State::NeedsAttention);
                    current = Some((group.to_owned(), parked));
                }
            }
        }
        Ok(stats)
    }
}
