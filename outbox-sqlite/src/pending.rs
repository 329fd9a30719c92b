//! [`PendingEnqueue`]: records enqueued inside the caller's transaction, announced to the
//! runner once that transaction commits.

use outbox_core::{Enqueued, Outbox, RecordId, Result};
use rusqlite::Transaction;

use crate::error::db;

/// Records enqueued inside a transaction of yours by
/// [`SqliteStore::enqueue_pending`](crate::SqliteStore::enqueue_pending), waiting for that
/// transaction to commit.
///
/// [`PendingEnqueue::commit`] commits the transaction and then announces the records to the
/// outbox: one `Enqueued` event per record (`Superseded` for one that replaced an earlier
/// waiting write) and a wake-up of the runner, which delivers them at once. If the commit
/// fails, or the transaction is rolled back or dropped instead, nothing is announced.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "commit the transaction with `PendingEnqueue::commit`, or no event is sent and the runner is not woken"]
pub struct PendingEnqueue {
    enqueued: Enqueued,
    groups: Vec<Option<String>>,
}

impl PendingEnqueue {
    pub(crate) fn new(enqueued: Enqueued, groups: Vec<Option<String>>) -> Self {
        PendingEnqueue { enqueued, groups }
    }

    /// The ids the records will have once committed, in the batch's order (to store beside
    /// your business row, say).
    pub fn ids(&self) -> &[RecordId] {
        &self.enqueued.ids
    }

    /// The ids, and which records replaced an earlier waiting write.
    pub fn enqueued(&self) -> &Enqueued {
        &self.enqueued
    }

    /// The group of each record, in the batch's order.
    pub fn groups(&self) -> &[Option<String>] {
        &self.groups
    }

    /// Commits `tx`, the transaction the records were enqueued in, then announces them
    /// through `outbox` ([`Outbox::committed`]): their events go out and the runner wakes.
    /// Returns what was enqueued.
    ///
    /// A failed commit returns its error and announces nothing (rusqlite rolls the
    /// transaction back as it drops it).
    pub fn commit(self, tx: Transaction<'_>, outbox: &Outbox) -> Result<Enqueued> {
        tx.commit().map_err(db)?;
        outbox.committed(&self.enqueued, &self.groups);
        Ok(self.enqueued)
    }
}
