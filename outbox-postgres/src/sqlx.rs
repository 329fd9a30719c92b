//! The in-transaction enqueue on sqlx (feature `sqlx`): [`PgStore::enqueue_sqlx`] runs the one
//! enqueue (`enqueue::enqueue`: the same statements, locks, coalescing and checks as every
//! other path) on a `sqlx::PgConnection` inside your transaction, and
//! [`PendingEnqueue::commit`](crate::PendingEnqueue::commit) commits a
//! `sqlx::Transaction<'_, Postgres>` and then wakes the runner.
//!
//! SeaORM runs on sqlx: its `DatabaseTransaction` is not a sqlx transaction, so begin the
//! transaction on sqlx's connection (`sqlx::PgPool::begin`, from the pool SeaORM was built on
//! with `SqlxPostgresConnector::from_sqlx_postgres_pool`), write through it, and commit it with
//! the pending enqueue; see the crate's README.

use ::sqlx::postgres::{PgArguments, PgConnection, PgRow, Postgres};
use ::sqlx::query::Query;
use ::sqlx::{AssertSqlSafe, Connection as _, Row as _};
use outbox_core::{Error, Millis, NewRecord, Result};

use crate::codec::RawRecord;
use crate::enqueue::{self, Answer, Execute, Param, Shape, Stmt};
use crate::error::by_sqlstate;
use crate::pending::{Commit, PendingEnqueue};
use crate::store::PgStore;

impl PgStore {
    /// Enqueues inside your sqlx transaction, so a business write and its outbox records
    /// commit or roll back together. Pass the transaction itself (`&mut tx`) or a
    /// `&mut PgConnection` that is inside one; then commit with the returned
    /// [`PendingEnqueue`]'s [`commit(tx, &outbox)`](PendingEnqueue::commit), which commits
    /// and then sends the records' `Enqueued` events and wakes this process's runner (no
    /// `Outbox::notify`). A transaction rolled back, dropped or failing to commit announces
    /// nothing.
    ///
    /// Everything [`PgStore::enqueue_in`] says holds: the same statements, the group and
    /// coalescing locks held until your commit, coalescing decided in your transaction, and
    /// the `NOTIFY` that wakes the runners of other processes when it commits.
    ///
    /// # Errors
    /// A bad batch (group or coalescing key, idempotency key, payload size) is refused with
    /// the core's typed error before any statement is sent, so your transaction can still
    /// commit or roll back. An enqueue past the store's size cap ([`Error::QueueFull`], see
    /// [`PgConfig::with_cap`](crate::PgConfig::with_cap)) is refused before any of its records
    /// is written, with the same effect. [`Error::InvalidConfig`] for a connection that is
    /// not inside a transaction (each statement would commit on its own). Server errors as
    /// every other call maps them; after one, PostgreSQL only lets the transaction roll back.
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use outbox_core::NewRecord;
    ///
    /// let mut tx = pool.begin().await?;
    /// sqlx::query("UPDATE orders SET state = 'paid' WHERE id = 7").execute(&mut *tx).await?;
    /// let record = NewRecord::new(b"{\"paid\":7}".to_vec()).in_group("order-7");
    /// let pending = store.enqueue_sqlx(&mut tx, vec![record], outbox.now()).await?;
    /// // Commits, then sends `Enqueued` and wakes the runner: no `notify()`.
    /// pending.commit(tx, &outbox).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_sqlx(
        &self,
        conn: &mut PgConnection,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        if !conn.is_in_transaction() {
            return Err(Error::InvalidConfig(
                "enqueue_sqlx needs a connection inside a transaction: begin one first".into(),
            ));
        }
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let enqueued = enqueue::enqueue(&self.core.target(), &mut Sqlx(conn), records, now).await?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }
}

impl Commit for ::sqlx::Transaction<'_, Postgres> {
    async fn commit(self) -> Result<()> {
        ::sqlx::Transaction::commit(self).await.map_err(error)
    }
}

/// Runs the enqueue's statements on a sqlx connection, one after the other (sqlx caches each
/// prepared statement on the connection).
struct Sqlx<'c>(&'c mut PgConnection);

fn bind<'q>(
    query: Query<'q, Postgres, PgArguments>,
    param: &Param<'_>,
) -> Query<'q, Postgres, PgArguments> {
    match param {
        Param::Int(v) => query.bind(*v),
        Param::Text(v) => query.bind(*v),
        Param::Ints(v) => query.bind(v.as_slice()),
        Param::OptInts(v) => query.bind(v.as_slice()),
        Param::Texts(v) => query.bind(v.as_slice()),
        Param::OptTexts(v) => query.bind(v.as_slice()),
        Param::Blobs(v) => query.bind(v.as_slice()),
        Param::Bools(v) => query.bind(v.as_slice()),
    }
}

fn raw(row: &PgRow) -> std::result::Result<RawRecord, ::sqlx::Error> {
    Ok(RawRecord {
        id: row.try_get(0)?,
        grp: row.try_get(1)?,
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
        history: row.try_get(17)?,
        trace: row.try_get(18)?,
    })
}

fn answer(shape: Shape, rows: &[PgRow]) -> std::result::Result<Answer, ::sqlx::Error> {
    Ok(match shape {
        Shape::Done => Answer::Done,
        Shape::Ids => Answer::Ids(
            rows.iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?,
        ),
        Shape::Groups => Answer::Groups(
            rows.iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?,
        ),
        Shape::Tails => Answer::Tails(
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, ::sqlx::Error>>()?,
        ),
        Shape::Records => Answer::Records(rows.iter().map(raw).collect::<Result<_, _>>()?),
        Shape::Usage => Answer::Usage(
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, ::sqlx::Error>>()?,
        ),
    })
}

impl Execute for Sqlx<'_> {
    async fn run(&mut self, batch: Vec<Stmt<'_>>) -> Result<Vec<Answer>> {
        let mut answers = Vec::with_capacity(batch.len());
        for stmt in &batch {
            // The texts are the store's own statements, with only the schema name (checked
            // to be a plain identifier) spliced in; every value is a bound parameter.
            let query = stmt
                .params
                .iter()
                .fold(::sqlx::query(AssertSqlSafe(stmt.sql)), bind);
            answers.push(if stmt.shape == Shape::Done {
                query.execute(&mut *self.0).await.map_err(error)?;
                Answer::Done
            } else {
                let rows = query.fetch_all(&mut *self.0).await.map_err(error)?;
                answer(stmt.shape, &rows).map_err(error)?
            });
        }
        Ok(answers)
    }
}

/// Maps a sqlx error as tokio-postgres's are mapped: by SQLSTATE for the server's errors,
/// [`Error::Unavailable`] for a connection or pool that failed, [`Error::Backend`] else.
pub(crate) fn error(err: ::sqlx::Error) -> Error {
    let detail = err.to_string();
    match &err {
        ::sqlx::Error::Database(db) => match db.code().map(|code| code.into_owned()) {
            Some(code) => by_sqlstate(
                &code,
                format!("{} (SQLSTATE {code})", db.message()),
                Box::new(err),
            ),
            None => Error::Backend {
                detail,
                source: Some(Box::new(err)),
            },
        },
        ::sqlx::Error::Io(_)
        | ::sqlx::Error::PoolTimedOut
        | ::sqlx::Error::PoolClosed
        | ::sqlx::Error::WorkerCrashed => Error::Unavailable {
            detail,
            source: Some(Box::new(err)),
        },
        _ => Error::Backend {
            detail,
            source: Some(Box::new(err)),
        },
    }
}
