//! What the store holds, as a size cap ([`Cap`]) counts it, read without a scan: the length of
//! the `records` table less the length of the `aside` table (redb keeps both in the tables'
//! headers), and the `payload_bytes` counter in `meta`, which every write that adds, replaces
//! or removes a payload moves in its own transaction. A record a claim set aside as unreadable
//! is in both tables and its bytes have left the counter, so the cap no longer counts it, as
//! `stats` does not (see [`unreadable`](super::unreadable)).
//!
//! An enqueue under a cap writes its batch, measures what it added and asks [`Cap::admit`];
//! when refused, [`Undo`] takes every write of the batch back in reverse order, so the
//! transaction (the store's group commit, or the caller's own) is left as it was found.

use outbox_core::Usage;

use super::*;

/// Payload bytes one operation added and removed, not yet in the `payload_bytes` counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Bytes {
    /// Bytes of payloads written.
    pub(super) added: u64,
    /// Bytes of payloads removed or replaced.
    pub(super) removed: u64,
}

impl Bytes {
    /// Counts a payload of `len` bytes written.
    pub(super) fn add(&mut self, len: usize) {
        self.added = self.added.saturating_add(len as u64);
    }

    /// Counts a payload of `len` bytes removed or replaced.
    pub(super) fn remove(&mut self, len: usize) {
        self.removed = self.removed.saturating_add(len as u64);
    }
}

/// One write of an enqueue, as [`Undo::revert`] takes it back.
enum Step {
    /// A record inserted under this id.
    Inserted(RecordId),
    /// A waiting record replaced by a coalescing write: the record as it was.
    Replaced(Box<Record>),
}

/// The usage before an enqueue under a cap and the writes it made, to measure the batch and
/// to take it back when the cap refuses it.
pub(super) struct Undo {
    before: Usage,
    changed: bool,
    steps: Vec<Step>,
}

impl Tables<'_> {
    /// Moves the `payload_bytes` counter by what the running operation added and removed: one
    /// read and one write of `meta` per operation, none when the two match.
    pub(super) fn settle_bytes(&mut self) -> Result<()> {
        let Bytes { added, removed } = std::mem::take(&mut self.bytes);
        if added == removed {
            return Ok(());
        }
        let total = self.meta(META_PAYLOAD_BYTES)?.unwrap_or(0);
        self.set_meta(
            META_PAYLOAD_BYTES,
            total.saturating_add(added).saturating_sub(removed),
        )
    }

    /// The records a cap counts: every record in `records` but those set aside in `aside`.
    fn held(&self) -> Result<u64> {
        let aside = self.aside.len().engine()?;
        Ok(self.records.len().engine()?.saturating_sub(aside))
    }

    /// What the store holds now, as a cap counts it: [`Tables::held`] and the
    /// `payload_bytes` counter.
    fn usage(&self) -> Result<Usage> {
        Ok(Usage {
            records: self.held()?,
            bytes: self.meta(META_PAYLOAD_BYTES)?.unwrap_or(0),
        })
    }

    /// Sets the `payload_bytes` counter from the records that decode (a record that does not
    /// has no payload to count): for a file that lacks the counter, and after an unreadable
    /// record is set aside or discarded, whose bytes were counted when it was written. Reads
    /// every record.
    pub(crate) fn count_payload_bytes(&mut self) -> Result<()> {
        let mut total = 0u64;
        for entry in self.records.iter().engine()? {
            let (id, bytes) = entry.engine()?;
            if let Ok(record) = codec::decode_record(id.value(), bytes.value()) {
                total = total.saturating_add(record.payload.len() as u64);
            }
        }
        self.bytes = Bytes::default();
        self.set_meta(META_PAYLOAD_BYTES, total)
    }
}

impl Undo {
    /// Starts an enqueue under a cap: settles any bytes still pending, then reads the usage.
    pub(super) fn start(tables: &mut Tables<'_>) -> Result<Undo> {
        tables.settle_bytes()?;
        Ok(Undo {
            before: tables.usage()?,
            changed: tables.changed,
            steps: Vec::new(),
        })
    }

    /// Notes a record inserted as `id`.
    pub(super) fn inserted(&mut self, id: RecordId) {
        self.steps.push(Step::Inserted(id));
    }

    /// Notes a waiting record about to be replaced, as it is before the replacement.
    pub(super) fn replaced(&mut self, record: Record) {
        self.steps.push(Step::Replaced(Box::new(record)));
    }

    /// Asks `cap` whether the batch written since [`Undo::start`] may stay: its net addition
    /// is the usage after it less the usage before (0 when it shrank), both counted alike
    /// (records set aside left out). A refusal takes the batch back and returns the cap's
    /// [`Error::QueueFull`].
    pub(super) fn admit(self, tables: &mut Tables<'_>, cap: Cap) -> Result<()> {
        let before = self.before;
        let records = tables.held()?.saturating_sub(before.records);
        let bytes = before
            .bytes
            .saturating_add(tables.bytes.added)
            .saturating_sub(tables.bytes.removed)
            .saturating_sub(before.bytes);
        match cap.admit(before, records, bytes) {
            Ok(()) => Ok(()),
            Err(full) => {
                self.revert(tables)?;
                Err(full)
            }
        }
    }

    /// Takes back every write of the batch, latest first: an inserted record leaves with its
    /// index entries (its group's head, which it never was unless the group was empty, is
    /// re-indexed as it was), a replaced one is written back as it was. The transaction is
    /// then as [`Undo::start`] found it, down to whether it had changed anything.
    fn revert(self, tables: &mut Tables<'_>) -> Result<()> {
        for step in self.steps.into_iter().rev() {
            match step {
                Step::Inserted(id) => {
                    if let Some(record) = tables.get(id)? {
                        tables.remove(&record)?;
                    }
                }
                Step::Replaced(old) => {
                    if let Some(current) = tables.get(old.id)? {
                        tables.unindex(&current)?;
                    }
                    tables.put(&old)?;
                    tables.index(&old)?;
                }
            }
        }
        tables.bytes = Bytes::default();
        tables.changed = self.changed;
        Ok(())
    }
}
