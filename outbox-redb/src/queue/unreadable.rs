//! Records whose bytes do not decode (a truncated value, an unknown state code, a text that
//! is not UTF-8): read as absent by every path that reads many records, so one never fails
//! the others.
//!
//! A claim that meets such a record in the `due` index *sets it aside*: its due entry goes, so
//! `next_due` stops reporting it. A grouped record keeps its place in its group's order (the
//! `groups` index, which names its group where its bytes no longer tell it): the group's
//! head, it holds back the later records of its group (and only those) until it is
//! discarded, as a record in flight does, so no write of the group overtakes it.
//! It also leaves what a size cap counts, as it has left `stats`: its id goes into the `aside`
//! table, whose length the cap takes off the length of `records`, and the `payload_bytes`
//! counter is set again from the records that decode (its payload was counted when it was
//! written and cannot be read back to subtract). That recount reads every record, once per
//! claim that sets anything aside: a rare repair, not a hot path.
//!
//! [`ReadTables::unreadable`] finds every such record by reading each one;
//! [`Tables::discard_unreadable`] removes one with every index entry that names it (its
//! `aside` entry too, so the cap's count is unchanged by discarding a record set aside),
//! keeping a tombstone with its group, and sets the `payload_bytes` counter again from the
//! records that decode.
//!
//! A record that stops decoding while no claim meets it (one behind its group's head, in
//! flight, parked or rejected) is not set aside and keeps its place in the cap until it is
//! discarded, though `stats` passes it by: the cap reads counters, never the records.

use outbox_core::{Error, Millis, RecordId, Result, Tombstone, Unreadable};
use redb::ReadableTable;

use super::{Engine, ReadTables, Tables};
use crate::codec;

/// Why the bytes of record `id` do not decode, or `None` when they do.
fn undecodable(id: u64, bytes: &[u8]) -> Option<Unreadable> {
    let err = codec::decode_record(id, bytes).err()?;
    let reason = match err {
        Error::Corrupted { detail, .. } => {
            let prefix = format!("record {}: ", RecordId(id));
            detail
                .strip_prefix(&prefix)
                .map(str::to_owned)
                .unwrap_or(detail)
        }
        other => other.to_string(),
    };
    Some(Unreadable::new(RecordId(id), reason))
}

impl Tables<'_> {
    /// Whether the record `id` is stored but does not decode.
    pub(super) fn is_unreadable(&self, id: RecordId) -> Result<bool> {
        Ok(match self.records.get(id.0).engine()? {
            Some(bytes) => undecodable(id.0, bytes.value()).is_some(),
            None => false,
        })
    }

    /// Sets aside the undecodable records `rows`, each `(due at, id)`: out of the due index
    /// (each stays its group's head), into `aside`, and out of the `payload_bytes` counter, which
    /// is set again from the records that decode (see the module documentation). Nothing is
    /// read or written when `rows` is empty.
    pub(super) fn set_aside(&mut self, rows: &[(Millis, RecordId)]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.changed = true;
        for &(at, id) in rows {
            self.due.remove((at, id.0)).engine()?;
            self.aside.insert(id.0, ()).engine()?;
        }
        self.count_payload_bytes()
    }

    /// Takes `id` out of every group it is filed under and promotes each group's next head;
    /// returns the last such group. Reads the whole group index: a rare repair, not a hot path.
    fn leave_groups_of(&mut self, id: RecordId) -> Result<Option<String>> {
        let mut groups = Vec::new();
        for entry in self.groups.iter().engine()? {
            let (key, _) = entry.engine()?;
            let (group, member) = key.value();
            if member == id.0 {
                groups.push(group.to_owned());
            }
        }
        for group in &groups {
            self.leave_group(id, Some(group))?;
        }
        Ok(groups.pop())
    }

    /// Removes the undecodable record `id` with every index entry that names it, keeping a
    /// tombstone; returns whether it went (a record that decodes is left alone).
    pub(crate) fn discard_unreadable(&mut self, id: RecordId, now: Millis) -> Result<bool> {
        let unreadable = match self.records.get(id.0).engine()? {
            Some(bytes) => undecodable(id.0, bytes.value()),
            None => None,
        };
        let Some(unreadable) = unreadable else {
            return Ok(false);
        };
        self.changed = true;
        for index in [&mut self.due, &mut self.queued, &mut self.leases] {
            let mut keys = Vec::new();
            for entry in index.iter().engine()? {
                let (key, _) = entry.engine()?;
                if key.value().1 == id.0 {
                    keys.push(key.value());
                }
            }
            for key in keys {
                index.remove(key).engine()?;
            }
        }
        let mut keys = Vec::new();
        for entry in self.coalescing.iter().engine()? {
            let (key, _) = entry.engine()?;
            let (name, member) = key.value();
            if member == id.0 {
                keys.push(name.to_owned());
            }
        }
        for name in keys {
            self.coalescing.remove((name.as_str(), id.0)).engine()?;
        }
        let group = self.leave_groups_of(id)?;
        self.aside.remove(id.0).engine()?;
        self.records.remove(id.0).engine()?;
        let tombstone = Tombstone {
            id,
            group,
            key: String::new(),
            reason: unreadable.tombstone_reason(),
            discarded_at: now,
            attempts: 0,
        };
        self.tombstones
            .insert(id.0, codec::encode_tombstone(&tombstone).as_slice())
            .engine()?;
        // Its payload was counted when it was written and cannot be read back to subtract.
        self.count_payload_bytes()?;
        Ok(true)
    }
}

impl ReadTables {
    /// Every record that does not decode, lowest id first, at most `limit`: reads each one.
    pub(crate) fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        let mut out = Vec::new();
        for entry in self.records.iter().engine()? {
            if out.len() >= limit {
                break;
            }
            let (id, bytes) = entry.engine()?;
            out.extend(undecodable(id.value(), bytes.value()));
        }
        Ok(out)
    }

    /// The record `id` if it is there and does not decode: one read by its key.
    pub(crate) fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        Ok(match self.records.get(id.0).engine()? {
            Some(bytes) => undecodable(id.0, bytes.value()),
            None => None,
        })
    }
}
