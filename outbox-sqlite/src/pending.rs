//! Enqueue inside the caller's rusqlite transaction ([`SqliteStore::enqueue_in`],
//! [`SqliteStore::enqueue_pending`]) and [`PendingEnqueue`]: records enqueued inside the
//! caller's transaction, announced to the runner once that transaction commits.

use outbox_core::{Enqueued, Millis, NewRecord, Outbox, Result, Uncommitted};
use rusqlite::Transaction;

use crate::enqueue::{self, Rusqlite};
use crate::error::db;
use crate::SqliteStore;

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

/// Enqueue inside the caller's rusqlite transaction.
impl SqliteStore {
    /// Enqueues records inside the caller's own transaction, so a business write and its
    /// outbox records commit (or roll back) together: the path to use with a running
    /// [`Outbox`]. Commit with the returned [`PendingEnqueue`]'s
    /// [`commit(tx, &outbox)`](PendingEnqueue::commit): once the transaction is committed, the
    /// records' `Enqueued` events (`Superseded` for a replacement) go out and the runner
    /// wakes and delivers them, with no call to `Outbox::notify`. A transaction rolled back,
    /// dropped or failing to commit announces nothing.
    ///
    /// Everything [`SqliteStore::enqueue_in`] says holds here: checks, coalescing in your
    /// transaction, durability, and the advice on busy timeouts and immediate transactions.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("app.db");
    /// let store = Arc::new(SqliteStore::create(&path, SqliteConfig::default()).await?);
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(store.clone(), sink).start().await?;
    ///
    /// let mut conn = rusqlite::Connection::open(&path).unwrap();
    /// conn.busy_timeout(Duration::from_secs(5)).unwrap();
    /// conn.execute_batch("CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT)").unwrap();
    /// let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap();
    /// tx.execute("INSERT INTO docs (title) VALUES ('draft')", []).unwrap();
    /// let record = NewRecord::new(b"create doc".to_vec()).in_group("doc-1");
    /// let pending = store.enqueue_pending(&tx, vec![record], outbox.now())?;
    /// // Commits, then sends `Enqueued` and wakes the runner: no `notify()`.
    /// pending.commit(tx, &outbox)?;
    ///
    /// outbox.flush(Duration::from_secs(10)).await?;
    /// assert_eq!(outbox.stats().await?.delivered, 1);
    /// outbox.shutdown(Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue_pending(
        &self,
        tx: &Transaction<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let enqueued = self.enqueue_in(tx, records, now)?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }

    /// Enqueues records inside the caller's own transaction, so a business write and its
    /// outbox records commit (or roll back) together. Returns their ids, and which of them
    /// replaced an earlier waiting write: a record with a coalescing key
    /// ([`NewRecord::replacing`]) coalesces here as in
    /// [`Store::enqueue`](outbox_core::Store::enqueue), inside the caller's transaction, so the
    /// replacement commits or rolls back with it too.
    ///
    /// Under a size cap ([`SqliteConfig::with_cap`](crate::SqliteConfig::with_cap)) an enqueue
    /// that would pass it fails with [`Error::QueueFull`](outbox_core::Error::QueueFull) and
    /// writes nothing: the caller's transaction stays usable, and its own writes can commit.
    ///
    /// This is a blocking call on the caller's connection, like the rest of its transaction.
    /// The records become visible, and due, when the caller commits. Nothing tells the
    /// runner: with a running [`Outbox`], use
    /// [`SqliteStore::enqueue_pending`] instead, whose commit announces the records and wakes
    /// the runner. After this call, wake it yourself
    /// with [`Outbox::notify`](outbox_core::Outbox::notify) (no `Enqueued` event is sent) or
    /// announce the records with [`Outbox::committed`](outbox_core::Outbox::committed).
    ///
    /// The records are as durable as the caller's connection makes its commits: SQLite's
    /// default, and [`Durability::Full`](crate::Durability::Full), is `synchronous = FULL`. Give
    /// that connection a busy timeout, since the store's own writes hold the write lock for
    /// moments, and prefer an immediate transaction
    /// (`TransactionBehavior::Immediate`): in WAL mode a deferred transaction that read before
    /// the store committed cannot then write, and fails with `SQLITE_BUSY`. A record with a
    /// coalescing key reads the latest record of its key before it writes, so in a deferred
    /// transaction that has written nothing yet it is such a read.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{NewRecord, Store};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("app.db");
    /// let store = SqliteStore::create(&path, SqliteConfig::default()).await?;
    ///
    /// let mut conn = rusqlite::Connection::open(&path).unwrap();
    /// conn.execute_batch("CREATE TABLE IF NOT EXISTS docs (id INTEGER PRIMARY KEY, title TEXT)").unwrap();
    /// let tx = conn.transaction().unwrap();
    /// tx.execute("INSERT INTO docs (title) VALUES ('draft')", []).unwrap();
    /// let ids = store.enqueue_in(&tx, vec![NewRecord::new(b"create doc".to_vec())], 1_000)?;
    /// tx.commit().unwrap();
    ///
    /// assert!(store.get(ids[0]).await?.is_some());
    ///
    /// // Two edits of one title in one transaction: the second replaces the first.
    /// let tx = conn.transaction().unwrap();
    /// let edit = |title: &[u8]| NewRecord::new(title.to_vec()).in_group("doc-1").replacing("doc-1/title");
    /// let edits = store.enqueue_in(&tx, vec![edit(b"Plans"), edit(b"Plans v2")], 2_000)?;
    /// tx.commit().unwrap();
    /// assert_eq!(edits[1], edits[0]);
    /// assert_eq!(edits.superseded, vec![1]);
    /// assert_eq!(store.get(edits[0]).await?.unwrap().payload, b"Plans v2");
    ///
    /// // A reminder held until a later time keeps it inside the transaction too.
    /// let tx = conn.transaction().unwrap();
    /// let reminder = NewRecord::new(b"remind".to_vec()).not_before(3_600_000);
    /// let held = store.enqueue_in(&tx, vec![reminder], 3_000)?;
    /// tx.commit().unwrap();
    /// let record = store.get(held[0]).await?.unwrap();
    /// assert_eq!((record.next_attempt_at, record.not_before), (Some(3_600_000), Some(3_600_000)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue_in(
        &self,
        tx: &Transaction<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        let config = self.config();
        enqueue::at_once(enqueue::caller(
            &mut Rusqlite(tx),
            records,
            now,
            config.max_payload,
            config.cap,
        ))
    }
}
