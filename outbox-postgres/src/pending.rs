//! [`PendingEnqueue`]: records enqueued inside the caller's transaction, announced to the
//! runner once that transaction commits.

use std::future::Future;

use outbox_core::{Enqueued, Outbox, Result, Uncommitted};

use crate::error::pg;

/// Records enqueued inside a transaction of yours by
/// [`PgStore::enqueue_pending`](crate::PgStore::enqueue_pending) (tokio-postgres), or with the
/// driver features by `PgStore::enqueue_sqlx`, `PgStore::enqueue_diesel` or
/// `PgStore::enqueue_diesel_async`, waiting for that transaction to commit.
///
/// [`PendingEnqueue::commit`] commits the transaction and then announces the records to the
/// outbox: one `Enqueued` event per record (`Superseded` for one that replaced an earlier
/// waiting write) and a wake-up of the runner, which delivers them at once. If the commit
/// fails, or the transaction is rolled back or dropped instead, nothing is announced. Where
/// the commit is not yours to call (diesel's `transaction` closure commits when it returns),
/// [`PendingEnqueue::committed`] announces once it has.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "commit the transaction with `PendingEnqueue::commit` (or call `committed` after it), or no event is sent and the runner is not woken"]
pub struct PendingEnqueue(Uncommitted);

/// The ids, which replaced an earlier write, and the groups: see [`Uncommitted`].
impl std::ops::Deref for PendingEnqueue {
    type Target = Uncommitted;
    fn deref(&self) -> &Uncommitted {
        &self.0
    }
}

/// A transaction that [`PendingEnqueue::commit`] commits: tokio-postgres's
/// `Transaction`, and with the feature `sqlx` sqlx's `Transaction<'_, Postgres>`.
///
/// ```no_run
/// # async fn demo(tx: tokio_postgres::Transaction<'_>) -> outbox_core::Result<()> {
/// use outbox_postgres::Commit;
/// Commit::commit(tx).await?;
/// # Ok(())
/// # }
/// ```
pub trait Commit: Send {
    /// Commits the transaction; a failure is the driver's error, mapped as every other.
    fn commit(self) -> impl Future<Output = Result<()>> + Send;
}

impl Commit for tokio_postgres::Transaction<'_> {
    async fn commit(self) -> Result<()> {
        tokio_postgres::Transaction::commit(self).await.map_err(pg)
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
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox, client: &mut tokio_postgres::Client) -> outbox_core::Result<()> {
    /// let tx = client.transaction().await.map_err(outbox_core::Error::backend)?;
    /// let pending = store.enqueue_pending(&tx, vec![outbox_core::NewRecord::new(b"{}".to_vec())], outbox.now()).await?;
    /// pending.commit(tx, &outbox).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn commit<T: Commit>(self, tx: T, outbox: &Outbox) -> Result<Enqueued> {
        tx.commit().await?;
        Ok(self.0.announce(outbox))
    }

    /// Announces the records through `outbox` once their transaction has committed, for a
    /// commit that was not made with [`PendingEnqueue::commit`]: diesel's
    /// `Connection::transaction` commits as its closure returns, so return the pending
    /// enqueue from the closure and call this on what `transaction` returned. Returns what
    /// was enqueued. Called before the commit, the runner would wake to find nothing yet.
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox, client: &mut tokio_postgres::Client) -> outbox_core::Result<()> {
    /// let tx = client.transaction().await.map_err(outbox_core::Error::backend)?;
    /// let pending = store.enqueue_pending(&tx, vec![outbox_core::NewRecord::new(b"{}".to_vec())], outbox.now()).await?;
    /// tx.commit().await.map_err(outbox_core::Error::backend)?;
    /// pending.committed(&outbox);
    /// # Ok(())
    /// # }
    /// ```
    pub fn committed(self, outbox: &Outbox) -> Enqueued {
        self.0.announce(outbox)
    }
}
