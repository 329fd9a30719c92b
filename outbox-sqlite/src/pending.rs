//! [`PendingEnqueue`]: records enqueued inside the caller's transaction, announced to the
//! runner once that transaction commits.

use outbox_core::{Enqueued, Outbox, Result, Uncommitted};
use rusqlite::Transaction;

use crate::error::db;

/// Records enqueued inside a transaction of yours by
/// [`SqliteStore::enqueue_pending`](crate::SqliteStore::enqueue_pending) (rusqlite), or with
/// the driver features by `SqliteStore::enqueue_sqlx` or `SqliteStore::enqueue_diesel`,
/// waiting for that transaction to commit.
///
/// [`PendingEnqueue::commit`] commits the transaction and then announces the records to the
/// outbox: one `Enqueued` event per record (`Superseded` for one that replaced an earlier
/// waiting write) and a wake-up of the runner, which delivers them at once. If the commit
/// fails, or the transaction is rolled back or dropped instead, nothing is announced. A sqlx
/// transaction commits with `PendingEnqueue::commit_sqlx`; where the commit is not yours to
/// call (diesel's `transaction` closure), [`PendingEnqueue::committed`] announces once it has.
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

    /// Announces the records through `outbox` once their transaction has committed, for a
    /// commit that was not made with [`PendingEnqueue::commit`]: diesel's
    /// `Connection::transaction` commits as its closure returns, so return the pending
    /// enqueue from the closure and call this on what `transaction` returned. Returns what
    /// was enqueued. Called before the commit, the runner would wake to find nothing yet.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("app.db");
    /// let store = Arc::new(SqliteStore::create(&path, SqliteConfig::default()).await?);
    /// let outbox = Outbox::builder(store.clone(), sink_fn(|_: Record| async { Outcome::Delivered })).start().await?;
    /// let mut conn = rusqlite::Connection::open(&path).unwrap();
    /// let tx = conn.transaction().unwrap();
    /// let pending = store.enqueue_pending(&tx, vec![NewRecord::new(b"{}".to_vec())], outbox.now())?;
    /// tx.commit().unwrap();
    /// let enqueued = pending.committed(&outbox);
    /// assert_eq!(enqueued.ids.len(), 1);
    /// # outbox.shutdown(std::time::Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn committed(self, outbox: &Outbox) -> Enqueued {
        self.0.announce(outbox)
    }
}
