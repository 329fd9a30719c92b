//! [`PgStore`]: the [`Store`] on PostgreSQL. The operations themselves are in `ops`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Hook, HookError, ManagerConfig, Pool, RecyclingMethod, Runtime};
use outbox_core::{
    Applied, Claim, Clock, Enqueued, Error, ErrorCount, Halt, Lease, ListQuery, Millis, NewRecord,
    Notifier, Record, RecordId, Result, Round, Stats, Store, SystemClock, Tombstone, Transition,
    Unreadable,
};

use crate::clock::ServerClock;
use crate::codec;
use crate::config::PgConfig;
use crate::engine::Engine;
use crate::error::{pg, pool as pool_error};
use crate::exec::Exec;
use crate::leased;
use crate::listen::{RunnerWakeups, Wakeups};
use crate::ops::Core;
use crate::pending::PendingEnqueue;
use crate::schema::{self, coalesce_seed, group_seed};
use crate::sql::Sql;
use crate::tls;
use crate::unreadable;

/// An outbox in one PostgreSQL schema, shared by every handle, process and host that opens it.
///
/// Cloning is cheap: clones share the connection pool.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_core::{NewRecord, Store};
/// use outbox_postgres::{PgConfig, PgStore};
///
/// let store = PgStore::connect(PgConfig::new("postgres://postgres@127.0.0.1/test", "orders_outbox")).await?;
/// store.enqueue(vec![NewRecord::new(b"{}".to_vec()).in_group("order-7")], 1_000).await?;
/// assert_eq!(store.stats().await?.pending, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PgStore {
    pub(crate) core: Arc<Core>,
    engine: Arc<Engine>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.core.config.schema)
            .field("pool", &self.core.pool.status())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects, creates the schema if it is missing and migrates it to
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION) under an advisory lock.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad setting; [`Error::Unavailable`] when no server
    /// answers in time; [`Error::SchemaTooNew`] for a schema written by a newer build and
    /// [`Error::NotAnOutbox`] for a schema holding other tables (both left untouched).
    pub async fn connect(config: PgConfig) -> Result<Self> {
        Self::connect_with_clock(config, Arc::new(SystemClock)).await
    }

    /// As [`PgStore::connect`], with `host` as this host's clock: the clock
    /// [`PgStore::clock`] measures against the server's. [`PgStore::connect`] uses the
    /// system clock.
    ///
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn connect_with_clock(config: PgConfig, host: Arc<dyn Clock>) -> Result<Self> {
        config.validate()?;
        let engine = Engine::new()?;
        let core = engine.run(open(config, host)).await?;
        Ok(PgStore {
            core: Arc::new(core),
            engine: Arc::new(engine),
        })
    }

    /// The database server's clock as this host sees it: the one time every host of the
    /// fleet shares, and the clock a runner on this store uses for its leases, its expiry
    /// checks and its deadlines with no wiring (the store names it as its
    /// [`Store::shared_clock`]). Use it for the `now` of anything you compute against the
    /// records' times. See [`ServerClock`].
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore) {
    /// use outbox_core::Clock;
    /// let server_now = store.clock().now();
    /// # }
    /// ```
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.core.clock) as Arc<dyn Clock>
    }

    /// The same clock, typed, for reading the measured offset.
    pub fn server_clock(&self) -> Arc<ServerClock> {
        Arc::clone(&self.core.clock)
    }

    /// Runs `op` on the store's runtime.
    async fn run<T, F, Fut>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Core>) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.engine.run(op(Arc::clone(&self.core))).await
    }

    /// The settings this store was opened with.
    pub fn config(&self) -> &PgConfig {
        &self.core.config
    }

    /// The `LISTEN`/`NOTIFY` channel every enqueue signals on: the schema name.
    pub fn channel(&self) -> &str {
        &self.core.config.schema
    }

    /// Starts listening for enqueues made by any process on this outbox; see [`Wakeups`].
    ///
    /// # Errors
    /// As [`PgStore::connect`] when the first connection fails; later losses are retried in
    /// the background.
    pub async fn listen(&self) -> Result<Wakeups> {
        let config = self.core.config.clone();
        // The listening task lives on the store's runtime, like its pool.
        self.engine
            .run(async move { Wakeups::start(&config).await })
            .await
    }

    /// Wakes a runner whenever any process or host enqueues on this outbox, with no code of
    /// yours in between: a task on the store's runtime listens on the outbox's channel and
    /// calls `notifier` for every notification, reconnecting (with backoff) after a lost
    /// connection and waking the runner once then for what it may have missed. Keep the
    /// runner's safety poll as the fallback for a notification lost with its connection.
    /// Dropping the returned handle stops the task.
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox) -> outbox_core::Result<()> {
    /// let _wakeups = store.wake_on_enqueue(outbox.notifier()).await?;
    /// // ... the runner now hears every enqueue of the fleet while `_wakeups` lives.
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`PgStore::connect`] when the first connection fails; later losses are retried in
    /// the background.
    pub async fn wake_on_enqueue(&self, notifier: Notifier) -> Result<RunnerWakeups> {
        let config = self.core.config.clone();
        self.engine
            .run(async move { RunnerWakeups::start(&config, notifier).await })
            .await
    }

    /// Enqueues inside the caller's own transaction, so a business write and its outbox
    /// records commit or roll back together: the path to use with a running
    /// [`Outbox`](outbox_core::Outbox). Commit with the returned [`PendingEnqueue`]'s
    /// [`commit(tx, &outbox)`](PendingEnqueue::commit): once the transaction is committed, the
    /// records' `Enqueued` events (`Superseded` for a replacement) go out and this process's
    /// runner wakes and delivers them, with no call to `Outbox::notify`. A transaction rolled
    /// back, dropped or failing to commit announces nothing.
    ///
    /// Everything [`PgStore::enqueue_in`] says holds here: the ids, coalescing in your
    /// transaction, the locks held until the commit, and the `NOTIFY` that wakes the
    /// runners of other processes listening on the outbox.
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox, client: &mut tokio_postgres::Client) -> outbox_core::Result<()> {
    /// use outbox_core::NewRecord;
    ///
    /// let tx = client.transaction().await.map_err(outbox_core::Error::backend)?;
    /// tx.execute("UPDATE orders SET state = 'paid' WHERE id = 7", &[]).await.map_err(outbox_core::Error::backend)?;
    /// let record = NewRecord::new(b"{\"paid\":7}".to_vec()).in_group("order-7");
    /// let pending = store.enqueue_pending(&tx, vec![record], outbox.now()).await?;
    /// // Commits, then sends `Enqueued` and wakes the runner: no `notify()`.
    /// pending.commit(tx, &outbox).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_pending(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let enqueued = self.enqueue_in(tx, records, now).await?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }

    /// Enqueues inside the caller's own transaction, so a business write and its outbox
    /// records commit or roll back together. Returns the ids they will have once committed
    /// ([`Enqueued`]): a fresh id, or, for a record that replaced an earlier waiting write of
    /// its coalescing key ([`NewRecord::replacing`]), that write's id, its position listed in
    /// [`Enqueued::superseded`]. The replacement is made in this transaction too, and rolls
    /// back with it.
    ///
    /// Every runner listening on the outbox ([`PgStore::wake_on_enqueue`]) is woken when the
    /// transaction commits, but no event is sent: with a running
    /// [`Outbox`](outbox_core::Outbox), use [`PgStore::enqueue_pending`] instead, whose commit
    /// also announces the records and wakes this process's runner. Until the commit
    /// the transaction holds a lock on each group it enqueued into (which keeps every group in
    /// id order across concurrent writers) and on each coalescing key (so enqueues of one key
    /// are decided one after the other), and on a store with a size cap
    /// ([`PgConfig::with_cap`](crate::PgConfig::with_cap)) the outbox's turn, which every
    /// capped enqueue waits for; commit promptly. A capped enqueue that would pass the cap is
    /// refused with [`Error::QueueFull`] before writing
    /// anything: the transaction stays usable and your own writes can still commit.
    /// Coalescing is exact at PostgreSQL's default isolation, READ COMMITTED, where each
    /// statement sees what the previous holder of a lock committed; a REPEATABLE READ or
    /// SERIALIZABLE transaction sees its own snapshot, and may then queue a write beside one
    /// it could have replaced, or fail with a serialization error that the caller retries.
    ///
    /// ```no_run
    /// # async fn demo(store: outbox_postgres::PgStore, client: &mut tokio_postgres::Client) -> outbox_core::Result<()> {
    /// use outbox_core::NewRecord;
    ///
    /// let tx = client.transaction().await.map_err(outbox_core::Error::backend)?;
    /// tx.execute("UPDATE orders SET state = 'paid' WHERE id = 7", &[]).await.map_err(outbox_core::Error::backend)?;
    /// store.enqueue_in(&tx, vec![NewRecord::new(b"{\"paid\":7}".to_vec()).in_group("order-7")], 1_000).await?;
    /// tx.commit().await.map_err(outbox_core::Error::backend)?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_in(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        self.core.insert(&Exec::Caller(tx), records, now).await
    }
}

/// Why a new session's set-up failed when it did not answer in time (`error::pool` maps it).
pub(crate) const SET_UP_TIMED_OUT: &str = "a new session's set-up did not answer in time";

/// `future`, or `None` when it takes longer than `limit` (no limit: `None` as a limit).
async fn set_up_within<T>(limit: Option<Duration>, future: impl Future<Output = T>) -> Option<T> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, future).await.ok(),
        None => Some(future.await),
    }
}

/// Opens the pool, migrates the schema and measures the server's clock.
async fn open(config: PgConfig, host: Arc<dyn Clock>) -> Result<Core> {
    let manager = tls::manager(
        config.pg_config()?,
        &config.tls,
        ManagerConfig {
            // A connection the server closed is noticed without a query; one that broke
            // silently fails its next statement, the caller retries and the pool then
            // drops it. (Not `Clean`: its `DISCARD ALL` would undo the session set-up of
            // `codec::TEXT_AS_STORED` below.)
            recycling_method: RecyclingMethod::Fast,
        },
    )?;
    let set_up_timeout = config.connect_timeout;
    let pool = Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(config.connect_timeout)
        .create_timeout(config.connect_timeout)
        .recycle_timeout(config.connect_timeout)
        .post_create(Hook::async_fn(move |client, _| {
            Box::pin(async move {
                // Bounded as the connection itself is: deadpool's own timeouts end with it.
                let set_up = client.batch_execute(codec::TEXT_AS_STORED);
                match set_up_within(set_up_timeout, set_up).await {
                    Some(result) => result.map_err(HookError::Backend),
                    None => Err(HookError::message(SET_UP_TIMED_OUT)),
                }
            })
        }))
        .build()
        .map_err(|err| Error::InvalidConfig(format!("connection pool: {err}")))?;
    let mut client = pool.get().await.map_err(pool_error)?;
    schema::migrate(&mut client, &config.schema).await?;
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::integer", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(pg)?;
    drop(client);
    let core = Core {
        sql: Sql::new(&config.schema),
        group_seed: group_seed(&config.schema),
        coalesce_seed: coalesce_seed(&config.schema),
        pool,
        config,
        clock: Arc::new(ServerClock::new(host)),
        generic_plans: leased::generic_plans(version),
    };
    core.measure_clock().await?;
    Ok(core)
}

#[async_trait]
impl Store for PgStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        self.run(move |core| core.enqueue(records, now)).await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        self.run(move |core| core.claim(claim)).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let ids = ids.to_vec();
        self.run(move |core| core.renew(ids, lease)).await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        let round = self.run(move |core| core.round(transitions, None)).await?;
        Ok(round.applied)
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        self.run(move |core| core.round(outcomes, claim)).await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |core| core.expired(now, limit)).await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |core| core.stepped_back(now, limit)).await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.run(move |core| core.get(id)).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let query = query.clone();
        self.run(move |core| core.list(query)).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.run(move |core| core.tombstones(after, limit)).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.run(|core| core.stats()).await
    }

    /// The server's clock ([`PgStore::clock`]), unless the store was opened with
    /// [`PgConfig::with_runner_clock`].
    fn shared_clock(&self) -> Option<Arc<dyn Clock>> {
        (!self.core.config.runner_clock).then(|| self.clock())
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.run(|core| core.next_due()).await
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        self.run(|core| core.halt()).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.run(move |core| core.set_halt(halt)).await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        let seen = seen.clone();
        self.run(move |core| core.clear_halt_if(seen)).await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.run(move |core| core.prune(older_than)).await
    }

    async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        self.run(move |core| async move { unreadable::list(&core, limit).await })
            .await
    }

    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        self.run(move |core| async move { unreadable::one(&core, id).await })
            .await
    }

    async fn discard_unreadable(&self, id: RecordId, now: Millis) -> Result<bool> {
        self.run(move |core| async move { unreadable::discard(&core, id, now).await })
            .await
    }

    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        self.run(move |core| core.common_errors(limit)).await
    }
}
