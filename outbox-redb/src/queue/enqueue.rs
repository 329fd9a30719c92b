//! The write that adds records: a batch enqueued as new pending records, or as replacements
//! of the waiting records they coalesce with, held to the size cap.

use super::*;

impl Tables<'_> {
    /// Enqueues a batch as pending records due at `now`, or as replacements of the waiting
    /// records they coalesce with (see [`Tables::coalesce`]). The caller has validated it
    /// ([`NewRecord::validate_all`]); payloads are encoded from the borrowed batch, not copied
    /// into records first. A record without a coalescing key costs no lookup.
    ///
    /// Under a `cap`, the batch is written, its net addition measured (records and payload
    /// bytes held after it, less those held before) and put to [`Cap::admit`]; a refusal
    /// undoes every write of the batch ([`Undo`]) and returns [`Error::QueueFull`], leaving the
    /// transaction as it found it, still usable. Without a cap nothing is measured or kept.
    pub(crate) fn enqueue(
        &mut self,
        records: &[NewRecord],
        now: Millis,
        cap: Cap,
    ) -> Result<Enqueued> {
        let mut undo = if cap.is_none() {
            None
        } else {
            Some(Undo::start(self)?)
        };
        let mut last_id = self.meta(META_LAST_ID)?.unwrap_or(0);
        let mut enqueued = Enqueued::fresh(Vec::with_capacity(records.len()));
        for (position, new) in records.iter().enumerate() {
            if let Some(key) = new.replaces.as_deref() {
                if let Some(id) = self.coalesce(key, new, now, undo.as_mut())? {
                    enqueued.ids.push(id);
                    enqueued.superseded.push(position);
                    continue;
                }
            }
            last_id = last_id.checked_add(1).ok_or_else(ids_exhausted)?;
            let id = RecordId(last_id);
            if let Some(group) = &new.group {
                self.join_group(group, id)?;
            }
            if let Some(key) = new.replaces.as_deref() {
                self.join_coalescing(key, id)?;
            }
            // The record without its caller's fields: what the indexes need (its deadline is
            // its not-before time when that is later than `now`).
            let shell = Record {
                not_before: new.not_before,
                next_attempt_at: Some(now.max(new.not_before.unwrap_or(0))),
                ..Record::fresh(id, new.group.clone(), Vec::new(), String::new(), now)
            };
            self.put_bytes(id, &codec::encode_new(&shell, new))?;
            self.bytes.add(new.payload.len());
            self.index(&shell)?;
            if let Some(undo) = undo.as_mut() {
                undo.inserted(id);
            }
            enqueued.ids.push(id);
        }
        if let Some(undo) = undo {
            undo.admit(self, cap)?;
        }
        if enqueued.superseded.len() < records.len() {
            self.set_meta(META_LAST_ID, last_id)?;
        }
        // The counter is written once per batch, not once per replacement.
        if !enqueued.superseded.is_empty() {
            let total = self.meta(META_SUPERSEDED)?.unwrap_or(0);
            let merged = enqueued.superseded.len() as u64;
            self.set_meta(META_SUPERSEDED, total.saturating_add(merged))?;
        }
        self.settle_bytes()?;
        Ok(enqueued)
    }

    /// Rewrites the latest record with coalescing key `key` with `new` when
    /// [`Record::replaceable_by`] allows it, returning its id; `None` when `new` must be
    /// inserted instead. The lookup is a seek in the `coalescing` index, and one in `groups`
    /// for a grouped record. The record's state stays; its deadline moves only for the new
    /// write's not-before time ([`Record::supersede`]), and its index entries move with it.
    /// With an `undo` log (under a cap), the record as it was goes into it.
    fn coalesce(
        &mut self,
        key: &str,
        new: &NewRecord,
        now: Millis,
        undo: Option<&mut Undo>,
    ) -> Result<Option<RecordId>> {
        let Some(latest) = self.latest_by_key(key)? else {
            return Ok(None);
        };
        // A latest write that cannot be read is not merged into: the new one is inserted.
        let Some(mut record) = load_readable(&self.records, latest.0)? else {
            return Ok(None);
        };
        let last_of_group = match record.group.as_deref() {
            None => true,
            Some(group) => self.group_tail(group)? == Some(record.id),
        };
        if !record.replaceable_by(new, last_of_group) {
            return Ok(None);
        }
        // The batch is borrowed (a write may run again), so the replacement is a copy.
        self.unindex(&record)?;
        self.bytes.remove(record.payload.len());
        self.bytes.add(new.payload.len());
        if let Some(undo) = undo {
            undo.replaced(record.clone());
        }
        record.supersede(new.clone(), now);
        self.put(&record)?;
        self.index(&record)?;
        Ok(Some(record.id))
    }
}
