//! [`PendingEnqueue`]: records enqueued inside the caller's transaction, announced to the
//! runner once that transaction commits.

use outbox_core::{Enqueued, Outbox, Result, Uncommitted};
use tokio_postgres::Transaction;

use crate::error::pg;

/// Records enqueued inside a transaction of yours by
/// [`PgStore::enqueue_pending`](crate::PgStore::enqueue_pending), waiting for that
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
    /// through `outbox` ([`Outbox::committed`]): their events go out and its runner wakes.
    /// Returns what was enqueued. (The commit also sends the outbox's `NOTIFY`, for the
    /// runners of other processes that listen.)
    ///
    /// A failed commit returns its error and announces nothing. A connection lost during the
    /// commit leaves it unknown whether the transaction committed: nothing is announced then
    /// either, and the runner finds the records, if they are there, at its next poll or
    /// wake-up.
    pub async fn commit(self, tx: Transaction<'_>, outbox: &Outbox) -> Result<Enqueued> {
        tx.commit().await.map_err(pg)?;
        Ok(self.0.announce(outbox))
    }
}
