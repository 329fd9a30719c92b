//! The in-transaction enqueue on diesel (feature `diesel`): [`SqliteStore::enqueue_diesel`]
//! inside `diesel::Connection::transaction` (or `immediate_transaction`) on a
//! `SqliteConnection` to the outbox's file. It runs the one enqueue (`enqueue::caller`): each
//! statement through `sql_query` with every value bound, the rows read into the same
//! [`RawRecord`] every driver reads.

use diesel::connection::{Connection, TransactionManager};
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Binary, Bool, Nullable, Text};
use diesel::sqlite::{Sqlite, SqliteConnection};
use diesel::{QueryableByName, RunQueryDsl};
use outbox_core::{Error, History, Millis, NewRecord, Result, TraceContext};

use crate::enqueue::{self, Answer, Execute, Param, Shape, Stmt};
use crate::ops::RawRecord;
use crate::pending::PendingEnqueue;
use crate::store::SqliteStore;

impl SqliteStore {
    /// Enqueues inside a diesel transaction on `conn`, a connection to the outbox's file
    /// (call it in the closure of `transaction`, better `immediate_transaction`, for the
    /// reason [`SqliteStore::enqueue_in`] gives), so a business write and its outbox records
    /// commit or roll back together, coalescing decided inside it. Return the
    /// [`PendingEnqueue`] from the closure and call [`PendingEnqueue::committed`] once
    /// `transaction` has returned it: that sends the records' events and wakes the runner (no
    /// `Outbox::notify`). A closure or commit that fails returns no pending enqueue, so
    /// nothing is announced. Give the connection a busy timeout (`PRAGMA busy_timeout`):
    /// diesel sets none, and the store's writer holds the write lock for moments.
    ///
    /// diesel's closure error must come from diesel's own errors; a boxed error takes both.
    ///
    /// # Errors
    /// As [`SqliteStore::enqueue_sqlx`]: a bad batch, or one past a size cap
    /// ([`Error::QueueFull`]), is refused with the core's typed error and nothing of it is
    /// written, and the closure may go on to commit its business write.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use diesel::{Connection, RunQueryDsl, SqliteConnection};
    /// use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("app.db");
    /// let store = Arc::new(SqliteStore::create(&path, SqliteConfig::default()).await?);
    /// let outbox = Outbox::builder(store.clone(), sink_fn(|_: Record| async { Outcome::Delivered })).start().await?;
    ///
    /// let mut conn = SqliteConnection::establish(&path.display().to_string())?;
    /// diesel::sql_query("PRAGMA busy_timeout = 5000").execute(&mut conn)?;
    /// diesel::sql_query("CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT)").execute(&mut conn)?;
    /// let now = outbox.now();
    /// let pending = conn.immediate_transaction(|conn| {
    ///     diesel::sql_query("INSERT INTO docs (title) VALUES ('draft')").execute(conn)?;
    ///     let record = NewRecord::new(b"create doc".to_vec()).in_group("doc-1");
    ///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(store.enqueue_diesel(conn, vec![record], now)?)
    /// })?;
    /// // Committed: send `Enqueued` and wake the runner.
    /// pending.committed(&outbox);
    ///
    /// outbox.flush(Duration::from_secs(10)).await?;
    /// assert_eq!(outbox.stats().await?.delivered, 1);
    /// outbox.shutdown(Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue_diesel(
        &self,
        conn: &mut SqliteConnection,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        let depth =
            <SqliteConnection as Connection>::TransactionManager::transaction_manager_status_mut(
                conn,
            )
            .transaction_depth()
            .map_err(error)?;
        if depth.is_none() {
            return Err(Error::InvalidConfig(
                "the diesel enqueue needs a connection inside a transaction: call it in the \
                 closure of `transaction`"
                    .into(),
            ));
        }
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let config = self.config();
        let enqueued = enqueue::at_once(enqueue::caller(
            &mut Diesel(conn),
            records,
            now,
            config.max_payload,
            config.cap,
        ))?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }
}

/// One statement as diesel sends it: its text, every parameter bound with its SQL type.
fn query<'a>(stmt: &'a Stmt<'a>) -> BoxedSqlQuery<'a, Sqlite, SqlQuery> {
    stmt.params.iter().fold(
        diesel::sql_query(stmt.sql).into_boxed::<Sqlite>(),
        |query, param| match param {
            Param::Int(v) => query.bind::<BigInt, _>(*v),
            Param::OptInt(v) => query.bind::<Nullable<BigInt>, _>(*v),
            Param::Text(v) => query.bind::<Text, _>(*v),
            Param::OptText(v) => query.bind::<Nullable<Text>, _>(*v),
            Param::Blob(v) => query.bind::<Binary, _>(*v),
            Param::Bool(v) => query.bind::<Bool, _>(*v),
        },
    )
}

#[derive(QueryableByName)]
struct IntRow {
    #[diesel(sql_type = BigInt)]
    value: i64,
}

/// The record columns by name ([`columns!`](crate::ops::columns)).
#[derive(QueryableByName)]
struct RecordRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    grp: Option<String>,
    #[diesel(sql_type = Binary)]
    payload: Vec<u8>,
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = BigInt)]
    state: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    unanswered: i64,
    #[diesel(sql_type = BigInt)]
    interrupted: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_attempt_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    next_attempt_at: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lease_token: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lease_until: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    expected_version: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    replaces: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    not_before: Option<i64>,
    #[diesel(sql_type = Nullable<Binary>)]
    history: Option<Vec<u8>>,
    /// Read as bytes, so text that is not UTF-8 reads as no context rather than failing.
    #[diesel(sql_type = Nullable<Binary>)]
    trace: Option<Vec<u8>>,
}

impl From<RecordRow> for RawRecord {
    fn from(r: RecordRow) -> Self {
        RawRecord {
            id: r.id,
            group: r.grp,
            payload: r.payload,
            key: r.key,
            created_at: r.created_at,
            state: r.state,
            attempts: r.attempts,
            unanswered: r.unanswered,
            interrupted: r.interrupted,
            last_attempt_at: r.last_attempt_at,
            next_attempt_at: r.next_attempt_at,
            last_error: r.last_error,
            lease_token: r.lease_token,
            lease_until: r.lease_until,
            expected_version: r.expected_version,
            replaces: r.replaces,
            not_before: r.not_before,
            history: History::decode(&r.history.unwrap_or_default()),
            trace: r
                .trace
                .as_deref()
                .and_then(|bytes| std::str::from_utf8(bytes).ok())
                .and_then(TraceContext::decode),
        }
    }
}

/// diesel's blocking `SqliteConnection`: every statement completes before `run` returns.
struct Diesel<'c>(&'c mut SqliteConnection);

impl Execute for Diesel<'_> {
    async fn run(&mut self, stmt: Stmt<'_>) -> Result<Answer> {
        let q = query(&stmt);
        Ok(match stmt.shape {
            Shape::Done => {
                q.execute(self.0).map_err(error)?;
                Answer::Done
            }
            Shape::Ints => Answer::Ints(
                q.load::<IntRow>(self.0)
                    .map_err(error)?
                    .into_iter()
                    .map(|r| r.value)
                    .collect(),
            ),
            Shape::Records => Answer::Records(
                q.load::<RecordRow>(self.0)
                    .map_err(error)?
                    .into_iter()
                    .map(RawRecord::from)
                    .collect(),
            ),
        })
    }
}

/// Maps a diesel error: a busy or locked file may pass on a later try
/// ([`Error::Unavailable`]), a read-only one is [`Error::ReadOnly`], the rest
/// [`Error::Backend`]. (diesel keeps SQLite's message, not its result code.)
fn error(err: DieselError) -> Error {
    let message = match &err {
        DieselError::DatabaseError(_, info) => info.message().to_owned(),
        other => other.to_string(),
    };
    match &err {
        DieselError::DatabaseError(DatabaseErrorKind::ReadOnlyTransaction, _) => Error::ReadOnly {
            source: Some(Box::new(err)),
        },
        _ if message.contains("database is locked")
            || message.contains("database table is locked") =>
        {
            Error::unavailable(err)
        }
        _ if message.contains("attempt to write a readonly database") => Error::ReadOnly {
            source: Some(Box::new(err)),
        },
        _ if message.contains("database or disk is full") => Error::StorageFull {
            source: Some(Box::new(err)),
        },
        _ => Error::backend(err),
    }
}
