//! The in-transaction enqueue on diesel: [`PgStore::enqueue_diesel`] (feature `diesel`) inside
//! `diesel::Connection::transaction` on a `PgConnection`, and
//! [`PgStore::enqueue_diesel_async`] (feature `diesel-async`) inside a transaction of
//! diesel-async's `AsyncPgConnection`. Both run the one enqueue (`enqueue::enqueue`): the
//! statements go through `sql_query` with every value bound, one after the other, and the rows
//! come back as the same [`RawRecord`] every driver reads.
//!
//! diesel commits when the `transaction` closure returns, so the closure returns the
//! [`PendingEnqueue`] and [`PendingEnqueue::committed`] announces it once `transaction` has
//! returned it.

use diesel::pg::Pg;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{Array, BigInt, Binary, Bool, Nullable, SmallInt, Text};
use diesel::QueryableByName;
use outbox_core::{Error, Millis, NewRecord, Result};

use crate::codec::RawRecord;
#[cfg(feature = "diesel")]
use crate::enqueue::now as at_once;
use crate::enqueue::{self, Answer, Execute, Param, Shape, Stmt};
use crate::pending::PendingEnqueue;
use crate::store::PgStore;

#[cfg(feature = "diesel")]
impl PgStore {
    /// Enqueues inside a diesel transaction on `conn` (call it in the closure of
    /// `Connection::transaction`), so a business write and its outbox records commit or roll
    /// back together, with every guarantee of [`PgStore::enqueue_in`]: the same statements,
    /// the group and coalescing locks held until the commit, coalescing decided in the
    /// transaction, and the `NOTIFY` that wakes the runners of other processes. Return the
    /// [`PendingEnqueue`] from the closure and call [`PendingEnqueue::committed`] on it once
    /// `transaction` has returned: that sends the records' events and wakes this process's
    /// runner (no `Outbox::notify`). A closure that fails, or a commit that fails, returns no
    /// pending enqueue, so nothing is announced.
    ///
    /// diesel's closure error must come from diesel's own errors; a boxed error takes both
    /// (no `From` between the two crates' errors can be written here).
    ///
    /// # Errors
    /// A bad batch is refused with the core's typed error before any statement is sent, so the
    /// closure may go on and commit its business write, or return the error to roll back. An
    /// enqueue past the store's size cap ([`Error::QueueFull`], see
    /// [`PgConfig::with_cap`](crate::PgConfig::with_cap)) is refused before any of its records is
    /// written, with the same effect. [`Error::InvalidConfig`] when `conn` is not inside a
    /// transaction.
    ///
    /// ```no_run
    /// # fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox, conn: &mut diesel::PgConnection) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use diesel::{Connection, RunQueryDsl};
    /// use outbox_core::NewRecord;
    ///
    /// let pending = conn.transaction(|conn| {
    ///     diesel::sql_query("UPDATE orders SET state = 'paid' WHERE id = 7").execute(conn)?;
    ///     let record = NewRecord::new(b"{\"paid\":7}".to_vec()).in_group("order-7");
    ///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
    ///         store.enqueue_diesel(conn, vec![record], outbox.now())?,
    ///     )
    /// })?;
    /// // Committed: send `Enqueued` and wake the runner.
    /// pending.committed(&outbox);
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue_diesel(
        &self,
        conn: &mut diesel::PgConnection,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        use diesel::connection::{Connection, TransactionManager};
        let depth =
            <diesel::PgConnection as Connection>::TransactionManager::transaction_manager_status_mut(
                conn,
            )
            .transaction_depth()
            .map_err(error)?;
        in_transaction(depth.is_some())?;
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let target = self.core.target();
        let enqueued = at_once(enqueue::enqueue(&target, &mut Sync(conn), records, now))?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }
}

#[cfg(feature = "diesel-async")]
impl PgStore {
    /// [`PgStore::enqueue_diesel`] on diesel-async's `AsyncPgConnection`, inside its
    /// `transaction` (an async closure): return the [`PendingEnqueue`] from it and call
    /// [`PendingEnqueue::committed`] once `transaction` has returned.
    ///
    /// # Errors
    /// As [`PgStore::enqueue_diesel`].
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox, conn: &mut diesel_async::AsyncPgConnection) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use diesel_async::{AsyncConnection, RunQueryDsl};
    /// use outbox_core::NewRecord;
    ///
    /// let now = outbox.now();
    /// let pending = conn
    ///     .transaction(async |conn| {
    ///         diesel::sql_query("UPDATE orders SET state = 'paid' WHERE id = 7").execute(conn).await?;
    ///         let record = NewRecord::new(b"{\"paid\":7}".to_vec()).in_group("order-7");
    ///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
    ///             store.enqueue_diesel_async(conn, vec![record], now).await?,
    ///         )
    ///     })
    ///     .await?;
    /// pending.committed(&outbox);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_diesel_async(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        use diesel_async::TransactionManager;
        let depth = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::TransactionManager::transaction_manager_status_mut(conn)
            .transaction_depth()
            .map_err(error)?;
        in_transaction(depth.is_some())?;
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let enqueued =
            enqueue::enqueue(&self.core.target(), &mut Async(conn), records, now).await?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }
}

fn in_transaction(inside: bool) -> Result<()> {
    if inside {
        Ok(())
    } else {
        Err(Error::InvalidConfig(
            "the diesel enqueue needs a connection inside a transaction: call it in the \
             closure of `transaction`"
                .into(),
        ))
    }
}

/// One statement as diesel sends it: its text, every parameter bound with its SQL type.
fn query<'a>(stmt: &'a Stmt<'a>) -> BoxedSqlQuery<'a, Pg, SqlQuery> {
    stmt.params.iter().fold(
        diesel::sql_query(stmt.sql).into_boxed::<Pg>(),
        |query, param| match param {
            Param::Int(v) => query.bind::<BigInt, _>(*v),
            Param::Text(v) => query.bind::<Text, _>(*v),
            Param::Ints(v) => query.bind::<Array<BigInt>, _>(v.as_slice()),
            Param::OptInts(v) => query.bind::<Array<Nullable<BigInt>>, _>(v.as_slice()),
            Param::Texts(v) => query.bind::<Array<Text>, _>(v.as_slice()),
            Param::OptTexts(v) => query.bind::<Array<Nullable<Text>>, _>(v.as_slice()),
            Param::Blobs(v) => query.bind::<Array<Binary>, _>(v.as_slice()),
            Param::Bools(v) => query.bind::<Array<Bool>, _>(v.as_slice()),
        },
    )
}

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct GroupRow {
    #[diesel(sql_type = Text)]
    grp: String,
}

#[derive(QueryableByName)]
struct TailRow {
    #[diesel(sql_type = Text)]
    grp: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    id: Option<i64>,
}

/// What a size cap counts (`cap`).
#[derive(QueryableByName)]
struct UsageRow {
    #[diesel(sql_type = BigInt)]
    records: i64,
    #[diesel(sql_type = BigInt)]
    bytes: i64,
}

/// The record columns by name ([`RECORD_COLUMNS`](crate::codec::RECORD_COLUMNS)).
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
    #[diesel(sql_type = SmallInt)]
    state: i16,
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
    #[diesel(sql_type = Nullable<Text>)]
    trace: Option<String>,
}

impl From<RecordRow> for RawRecord {
    fn from(r: RecordRow) -> Self {
        RawRecord {
            id: r.id,
            grp: r.grp,
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
            history: r.history,
            trace: r.trace,
        }
    }
}

/// Generates the loop that runs a batch on one connection type, with `$wait` after each
/// diesel call (`.await` for diesel-async, nothing for diesel).
macro_rules! run_batch {
    ($conn:expr, $batch:expr, $($wait:tt)*) => {{
        let mut answers = Vec::with_capacity($batch.len());
        for stmt in &$batch {
            let q = query(stmt);
            answers.push(match stmt.shape {
                Shape::Done => {
                    q.execute($conn)$($wait)*.map_err(error)?;
                    Answer::Done
                }
                Shape::Ids => Answer::Ids(
                    q.load::<IdRow>($conn)$($wait)*.map_err(error)?.into_iter().map(|r| r.id).collect(),
                ),
                Shape::Groups => Answer::Groups(
                    q.load::<GroupRow>($conn)$($wait)*.map_err(error)?.into_iter().map(|r| r.grp).collect(),
                ),
                Shape::Tails => Answer::Tails(
                    q.load::<TailRow>($conn)$($wait)*
                        .map_err(error)?
                        .into_iter()
                        .map(|r| (r.grp, r.id))
                        .collect(),
                ),
                Shape::Records => Answer::Records(
                    q.load::<RecordRow>($conn)$($wait)*.map_err(error)?.into_iter().map(RawRecord::from).collect(),
                ),
                Shape::Usage => Answer::Usage(
                    q.load::<UsageRow>($conn)$($wait)*
                        .map_err(error)?
                        .into_iter()
                        .map(|r| (r.records, r.bytes))
                        .collect(),
                ),
            });
        }
        Ok(answers)
    }};
}

/// diesel's blocking `PgConnection`: every step completes before `run` returns.
#[cfg(feature = "diesel")]
struct Sync<'c>(&'c mut diesel::PgConnection);

#[cfg(feature = "diesel")]
impl Execute for Sync<'_> {
    async fn run(&mut self, batch: Vec<Stmt<'_>>) -> Result<Vec<Answer>> {
        use diesel::RunQueryDsl;
        run_batch!(&mut *self.0, batch,)
    }
}

/// diesel-async's `AsyncPgConnection`.
#[cfg(feature = "diesel-async")]
struct Async<'c>(&'c mut diesel_async::AsyncPgConnection);

#[cfg(feature = "diesel-async")]
impl Execute for Async<'_> {
    async fn run(&mut self, batch: Vec<Stmt<'_>>) -> Result<Vec<Answer>> {
        use diesel_async::RunQueryDsl;
        run_batch!(&mut *self.0, batch, .await)
    }
}

/// Maps a diesel error: a serialization failure or a closed connection may pass on a later
/// try ([`Error::Unavailable`]), a read-only transaction is [`Error::ReadOnly`], the rest
/// [`Error::Backend`] with the server's message, detail and hint. (diesel keeps no SQLSTATE.)
pub(crate) fn error(err: DieselError) -> Error {
    let detail = match &err {
        DieselError::DatabaseError(_, info) => {
            let mut text = info.message().to_owned();
            if let Some(detail) = info.details() {
                text.push_str("; detail: ");
                text.push_str(detail);
            }
            if let Some(hint) = info.hint() {
                text.push_str("; hint: ");
                text.push_str(hint);
            }
            text
        }
        other => other.to_string(),
    };
    match &err {
        DieselError::DatabaseError(
            DatabaseErrorKind::SerializationFailure | DatabaseErrorKind::ClosedConnection,
            _,
        ) => Error::Unavailable {
            detail,
            source: Some(Box::new(err)),
        },
        DieselError::DatabaseError(DatabaseErrorKind::ReadOnlyTransaction, _) => Error::ReadOnly {
            source: Some(Box::new(err)),
        },
        _ => Error::Backend {
            detail,
            source: Some(Box::new(err)),
        },
    }
}
