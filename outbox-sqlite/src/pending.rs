//! [`PendingEnqueue`]: records enqueued inside the caller's transaction, announced to the
//! runner once that transaction commits.

use outbox_core::{Enqueued, Outbox, Result, Uncommitted};
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
pub struct PendingEnqueue(Uncommitted);

/// The ids, which replaced an earlier write, and the groups: see [`Uncommitted`].
impl std::ops::Deref for PendingEnqueue {
    type Target = Uncommitted;
    fn deref(&self) -> &Uncommitted {
        &self.0
    }
}

impl PendingEnqueue {
    pub(crate) fn new(enqueued: Enqueued, groups: Vec<Option<String>>) -> Self {
        PendingEnqueue(Uncommitted::new(enqueued, groups))
    }

    /// Commits `tx`, the transaction the records were enqueued in, then announces them
    /// through `outbox` ([`Outbox::committed`]): their events go out and the runner wakes.
    /// Returns what was enqueued.
    ///
    /// A failed commit returns its error and announces nothing (rusqlite rolls the
    /// transaction back as it drops it).
    pub fn commit(self, tx: Transaction<'_>, outbox: &Outbox) -> Result<Enqueued> {
        tx.commit().map_err(db)?;
        Ok(self.0.announce(outbox))
    }
}
