//! The in-transaction enqueue on sqlx (feature `sqlx`): [`SqliteStore::enqueue_sqlx`] runs the
//! one enqueue (`enqueue::caller`: the same checks, statements and coalescing as every other
//! path) on a `sqlx::SqliteConnection` inside your transaction on the outbox's file, and
//! [`PendingEnqueue::commit_sqlx`] commits that transaction and then wakes the runner.

use ::sqlx::query::Query;
use ::sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnection, SqliteRow};
use ::sqlx::{AssertSqlSafe, Connection as _, Row as _};
use outbox_core::{Enqueued, Error, History, Millis, NewRecord, Outbox, Result, TraceContext};

use crate::enqueue::{self, Answer, Execute, Param, Shape, Stmt};
use crate::ops::RawRecord;
use crate::pending::PendingEnqueue;
use crate::store::SqliteStore;

impl SqliteStore {
    /// Enqueues inside your sqlx transaction on the outbox's file, so a business write and
    /// its outbox records commit or roll back together; coalescing
    /// ([`NewRecord::replacing`]) is decided inside it too. Pass the transaction (`&mut tx`)
    /// or a `&mut SqliteConnection` inside one, then commit with the returned
    /// [`PendingEnqueue`]'s [`commit_sqlx(tx, &outbox)`](PendingEnqueue::commit_sqlx), which
    /// commits and then sends the records' `Enqueued` events and wakes the runner (no
    /// `Outbox::notify`). A transaction rolled back, dropped or failing to commit announces
    /// nothing.
    ///
    /// Begin it with `begin_with("BEGIN IMMEDIATE")`, for the reason
    /// [`SqliteStore::enqueue_in`] gives: in WAL mode a deferred transaction that read before
    /// the store committed cannot then write. sqlx's connections wait 5 s on a busy file by
    /// default.
    ///
    /// # Errors
    /// A bad batch is refused with the core's typed error before anything is written, so your
    /// transaction can still commit or roll back. [`Error::NotAnOutbox`] for a database the
    /// store never created, [`Error::SchemaTooNew`] for one of a newer schema,
    /// [`Error::InvalidConfig`] for one not yet migrated or a connection outside a
    /// transaction. Under a size cap ([`SqliteConfig::with_cap`](crate::SqliteConfig::with_cap))
    /// an enqueue that would pass it is [`Error::QueueFull`]: nothing of it is written, and
    /// your transaction can still commit its own writes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use sqlx::Connection;
    /// use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("app.db");
    /// let store = Arc::new(SqliteStore::create(&path, SqliteConfig::default()).await?);
    /// let outbox = Outbox::builder(store.clone(), sink_fn(|_: Record| async { Outcome::Delivered })).start().await?;
    ///
    /// let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    /// sqlx::query("CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT)").execute(&mut conn).await?;
    /// let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    /// sqlx::query("INSERT INTO docs (title) VALUES ('draft')").execute(&mut *tx).await?;
    /// let record = NewRecord::new(b"create doc".to_vec()).in_group("doc-1");
    /// let pending = store.enqueue_sqlx(&mut tx, vec![record], outbox.now()).await?;
    /// // Commits, then sends `Enqueued` and wakes the runner: no `notify()`.
    /// pending.commit_sqlx(tx, &outbox).await?;
    ///
    /// outbox.flush(Duration::from_secs(10)).await?;
    /// assert_eq!(outbox.stats().await?.delivered, 1);
    /// outbox.shutdown(Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_sqlx(
        &self,
        conn: &mut SqliteConnection,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        if !conn.is_in_transaction() {
            return Err(Error::InvalidConfig(
                "enqueue_sqlx needs a connection inside a transaction: begin one first".into(),
            ));
        }
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let config = self.config();
        let (max_payload, cap) = (config.max_payload, config.cap);
        let enqueued = enqueue::caller(&mut Sqlx(conn), records, now, max_payload, cap).await?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }
}

impl PendingEnqueue {
    /// Commits `tx`, the sqlx transaction the records were enqueued in by
    /// [`SqliteStore::enqueue_sqlx`], then announces them through `outbox`: their events go
    /// out and the runner wakes. Returns what was enqueued. A failed commit returns its error
    /// and announces nothing.
    ///
    /// # Errors
    /// The commit's, mapped as every SQLite error is ([`Error::Unavailable`] for a busy file,
    /// [`Error::StorageFull`], [`Error::ReadOnly`], ...).
    ///
    /// See [`SqliteStore::enqueue_sqlx`] for an example.
    pub async fn commit_sqlx(
        self,
        tx: ::sqlx::Transaction<'_, Sqlite>,
        outbox: &Outbox,
    ) -> Result<Enqueued> {
        tx.commit().await.map_err(error)?;
        Ok(self.committed(outbox))
    }
}

/// Runs the enqueue's statements on a sqlx connection (which caches each prepared statement).
struct Sqlx<'c>(&'c mut SqliteConnection);

fn bind<'q>(
    query: Query<'q, Sqlite, SqliteArguments>,
    param: &Param<'_>,
) -> Query<'q, Sqlite, SqliteArguments> {
    match param {
        Param::Int(v) => query.bind(*v),
        Param::OptInt(v) => query.bind(*v),
        Param::Text(v) => query.bind(v.to_string()),
        Param::OptText(v) => query.bind(v.map(str::to_owned)),
        Param::Blob(v) => query.bind(v.to_vec()),
        Param::Bool(v) => query.bind(*v),
    }
}

fn raw(row: &SqliteRow) -> std::result::Result<RawRecord, ::sqlx::Error> {
    Ok(RawRecord {
        id: row.try_get(0)?,
        group: row.try_get(1)?,
        payload: row.try_get(2)?,
        key: row.try_get(3)?,
        created_at: row.try_get(4)?,
        state: row.try_get(5)?,
        attempts: row.try_get(6)?,
        unanswered: row.try_get(7)?,
        interrupted: row.try_get(8)?,
        last_attempt_at: row.try_get(9)?,
        next_attempt_at: row.try_get(10)?,
        last_error: row.try_get(11)?,
        lease_token: row.try_get(12)?,
        lease_until: row.try_get(13)?,
        expected_version: row.try_get(14)?,
        replaces: row.try_get(15)?,
        not_before: row.try_get(16)?,
        history: History::decode(&row.try_get::<Option<Vec<u8>>, _>(17)?.unwrap_or_default()),
        trace: row
            .try_get::<Option<String>, _>(18)
            .ok()
            .flatten()
            .as_deref()
            .and_then(TraceContext::decode),
    })
}

impl Execute for Sqlx<'_> {
    async fn run(&mut self, stmt: Stmt<'_>) -> Result<Answer> {
        // The texts are the store's own constant statements; every value is bound.
        let query = stmt
            .params
            .iter()
            .fold(::sqlx::query(AssertSqlSafe(stmt.sql)), bind);
        if stmt.shape == Shape::Done {
            query.execute(&mut *self.0).await.map_err(error)?;
            return Ok(Answer::Done);
        }
        let rows = query.fetch_all(&mut *self.0).await.map_err(error)?;
        let read = || -> std::result::Result<Answer, ::sqlx::Error> {
            Ok(match stmt.shape {
                Shape::Done => Answer::Done,
                Shape::Ints => Answer::Ints(
                    rows.iter()
                        .map(|r| r.try_get(0))
                        .collect::<Result<_, _>>()?,
                ),
                Shape::Records => Answer::Records(rows.iter().map(raw).collect::<Result<_, _>>()?),
            })
        };
        read().map_err(error)
    }
}

/// Maps a sqlx error as rusqlite's are mapped, by SQLite's primary result code.
fn error(err: ::sqlx::Error) -> Error {
    let code = match &err {
        ::sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i32>().ok()),
        ::sqlx::Error::PoolTimedOut | ::sqlx::Error::WorkerCrashed => {
            return Error::unavailable(err)
        }
        _ => None,
    };
    // SQLITE_BUSY 5, LOCKED 6, READONLY 8, CORRUPT 11, FULL 13, NOTADB 26.
    match code.map(|c| c & 0xff) {
        Some(5 | 6) => Error::unavailable(err),
        Some(8) => Error::ReadOnly {
            source: Some(Box::new(err)),
        },
        Some(13) => Error::StorageFull {
            source: Some(Box::new(err)),
        },
        Some(11) => Error::Corrupted {
            detail: err.to_string(),
            source: Some(Box::new(err)),
        },
        Some(26) => Error::NotAnOutbox {
            detail: "the file is not an SQLite database".into(),
            source: Some(Box::new(err)),
        },
        _ => Error::backend(err),
    }
}
