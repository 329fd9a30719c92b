//! The read side of the queue: every operation that runs on one `ReadTransaction` (a
//! consistent snapshot) and changes nothing.

use super::*;

/// Every table of the outbox, opened for reading in one snapshot.
pub(crate) struct ReadTables {
    pub(super) records: ReadOnlyTable<u64, &'static [u8]>,
    pub(super) due: ReadOnlyTable<(u64, u64), ()>,
    pub(super) queued: ReadOnlyTable<(u64, u64), ()>,
    pub(super) groups: ReadOnlyTable<(&'static str, u64), ()>,
    pub(super) leases: ReadOnlyTable<(u64, u64), ()>,
    pub(super) tombstones: ReadOnlyTable<u64, &'static [u8]>,
    pub(super) meta: ReadOnlyTable<&'static str, u64>,
    pub(super) runner: ReadOnlyTable<&'static str, &'static [u8]>,
}

impl ReadTables {
    pub(crate) fn open(txn: &ReadTransaction) -> Result<Self> {
        Ok(ReadTables {
            records: txn.open_table(RECORDS).engine()?,
            due: txn.open_table(DUE).engine()?,
            queued: txn.open_table(QUEUED).engine()?,
            groups: txn.open_table(GROUPS).engine()?,
            leases: txn.open_table(LEASES).engine()?,
            tombstones: txn.open_table(TOMBSTONES).engine()?,
            meta: txn.open_table(META).engine()?,
            runner: txn.open_table(RUNNER).engine()?,
        })
    }

    /// One record by id; one that does not decode reads as absent (see [`unreadable`]).
    pub(crate) fn get(&self, id: RecordId) -> Result<Option<Record>> {
        load_readable(&self.records, id.0)
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

    /// Pending or retrying records whose deadline lies after `now` and whose last attempt
    /// lies after `now` or never happened, lowest id first. Only the `due` and `queued`
    /// entries after `now` are read, never the due backlog.
    pub(crate) fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        let Some(after) = now.checked_add(1) else {
            return Ok(out);
        };
        if limit == 0 {
            return Ok(out);
        }
        let mut ids = Vec::new();
        for index in [&self.due, &self.queued] {
            for entry in index.range((after, 0)..).engine()? {
                ids.push(entry.engine()?.0.value().1);
            }
        }
        ids.sort_unstable();
        for id in ids {
            let Some(record) = self.get(RecordId(id))? else {
                continue;
            };
            if record.needs_rebase(now) {
                out.push(record);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn halt(&self) -> Result<Option<Halt>> {
        load_halt(&self.runner)
    }

    pub(crate) fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        if query.limit == 0 {
            return Ok(out);
        }
        let start = query.after.map_or(0, |id| id.0.saturating_add(1));
        for entry in self.records.range(start..).engine()? {
            let (id, bytes) = entry.engine()?;
            // A record that does not decode is listed by `unreadable`, not here.
            let Ok(record) = codec::decode_record(id.value(), bytes.value()) else {
                continue;
            };
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
            superseded: self
                .meta
                .get(META_SUPERSEDED)
                .engine()?
                .map_or(0, |v| v.value()),
            next_due: self.next_due()?,
            halt: self.halt()?,
            ..Stats::default()
        };
        let mut every_record_read = true;
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            // A record that does not decode is not counted (see `unreadable`).
            match codec::decode_record(id.value(), bytes.value()) {
                Ok(record) => stats.add(&record),
                Err(_) => every_record_read = false,
            }
        }
        // The bytes come from the counter, as the cap reads them. While a record does not
        // decode and no claim has set it aside, the counter may still hold the payload it was
        // written with, which the records counted here leave out: the bytes of the records
        // read are reported instead (once it is set aside, the counter holds just those). A
        // file opened read-only before a writable open gave it the counter is counted the
        // same way.
        let counter = self
            .meta
            .get(META_PAYLOAD_BYTES)
            .engine()?
            .map(|v| v.value());
        if let (Some(counted), true) = (counter, every_record_read) {
            stats.payload_bytes = counted;
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

    /// The most common errors of the failed records (see `Store::common_errors`): one pass
    /// over the records in one read transaction, as `stats` makes, tallied as it goes. A
    /// record that does not decode is passed by, as `stats` passes it (see [`unreadable`]).
    pub(crate) fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        let mut counts: HashMap<String, u64> = HashMap::new();
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            let Ok(record) = codec::decode_record(id.value(), bytes.value()) else {
                continue;
            };
            if let (true, Some(error)) = (
                ErrorCount::STATES.contains(&record.state),
                record.last_error,
            ) {
                *counts.entry(error).or_default() += 1;
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
