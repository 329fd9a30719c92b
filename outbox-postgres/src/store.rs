//! [`PgStore`]: the [`Store`] on PostgreSQL.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use outbox_core::{
    Applied, Claim, Error, Lease, ListQuery, Millis, NewRecord, Record, RecordId, Result, State,
    Stats, Store, Tombstone, Transition,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

use crate::apply::{Current, Plan, Statements};
use crate::codec::{self, millis, state, token};
use crate::config::PgConfig;
use crate::engine::Engine;
use crate::error::{corrupt, pg, pool as pool_error};
use crate::listen::Wakeups;
use crate::schema::{self, group_seed};
use crate::sql::{Exec, Sql};

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
    core: Arc<Core>,
    engine: Arc<Engine>,
}

/// What every operation needs: the pool, the statements and the settings.
struct Core {
    pool: Pool,
    sql: Sql,
    config: PgConfig,
    /// Seeds the group lock keys of this schema (see `schema::group_seed`).
    group_seed: i64,
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
        config.validate()?;
        let engine = Engine::new()?;
        let core = engine.run(Core::connect(config)).await?;
        Ok(PgStore {
            core: Arc::new(core),
            engine: Arc::new(engine),
        })
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

    /// Enqueues inside the caller's own transaction, so a business write and its outbox
    /// records commit or roll back together. Returns the ids they will have once committed.
    ///
    /// Every runner listening on the outbox is woken when the transaction commits. Until then
    /// the transaction holds a lock on each group it enqueued into, which keeps every group in
    /// id order across concurrent writers; commit promptly.
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
    ) -> Result<Vec<RecordId>> {
        self.core.check_payloads(&records)?;
        self.core.insert(tx, records, now).await
    }
}

impl Core {
    async fn connect(config: PgConfig) -> Result<Core> {
        let manager = Manager::from_config(
            config.pg_config()?,
            NoTls,
            ManagerConfig {
                // A connection the server closed is noticed without a query; one that broke
                // silently fails its next statement, the caller retries and the pool then
                // drops it.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(config.connect_timeout)
            .create_timeout(config.connect_timeout)
            .recycle_timeout(config.connect_timeout)
            .build()
            .map_err(|err| Error::InvalidConfig(format!("connection pool: {err}")))?;
        let mut client = pool.get().await.map_err(pool_error)?;
        schema::migrate(&mut client, &config.schema).await?;
        drop(client);
        Ok(Core {
            sql: Sql::new(&config.schema),
            group_seed: group_seed(&config.schema),
            pool,
            config,
        })
    }

    fn check_payloads(&self, records: &[NewRecord]) -> Result<()> {
        let max = self.config.max_payload;
        match records.iter().find(|r| r.payload.len() > max) {
            Some(big) => Err(Error::PayloadTooLarge {
                size: big.payload.len(),
                max,
            }),
            None => Ok(()),
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_error)
    }

    /// The enqueue itself, in a transaction that the caller commits.
    async fn insert(
        &self,
        tx: &dyn Exec,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Vec<RecordId>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let sql = &self.sql;
        // Cached on pooled connections; prepared together (one round trip) in a caller's
        // transaction.
        let (lock, members, allocate, insert, notify) = futures::try_join!(
            tx.statement(&sql.lock_named_groups),
            tx.statement(&sql.members),
            tx.statement(&sql.allocate_ids),
            tx.statement(&sql.insert),
            tx.statement(&sql.notify),
        )
        .map_err(pg)?;
        let groups: Vec<&str> = records
            .iter()
            .filter_map(|r| r.group.as_deref())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let n = records.len() as i64;
        // Group locks come first: a group's ids are then allocated and committed in the same
        // order, so no runner can see a later record of a group before an earlier one. The
        // three statements go out together and run in order.
        let lock_params: [&(dyn ToSql + Sync); 2] = [&groups, &self.group_seed];
        let member_params: [&(dyn ToSql + Sync); 1] = [&groups];
        let allocate_params: [&(dyn ToSql + Sync); 1] = [&n];
        let (_, member_rows, id_rows) = futures::try_join!(
            tx.query_prepared(&lock, &lock_params),
            tx.query_prepared(&members, &member_params),
            tx.query_prepared(&allocate, &allocate_params),
        )
        .map_err(pg)?;
        let mut occupied: BTreeSet<String> = BTreeSet::new();
        for row in member_rows {
            occupied.insert(row.try_get(0).map_err(pg)?);
        }
        let mut ids: Vec<i64> = Vec::with_capacity(records.len());
        for row in id_rows {
            ids.push(row.try_get(0).map_err(pg)?);
        }
        ids.sort_unstable();
        if ids.len() != records.len() {
            return Err(corrupt("the id sequence returned too few values"));
        }
        // Only the first record of a group with no member left is its head.
        let mut claimable = Vec::with_capacity(records.len());
        for record in &records {
            claimable.push(match &record.group {
                None => true,
                Some(group) => occupied.insert(group.clone()),
            });
        }
        let grps: Vec<Option<&str>> = records.iter().map(|r| r.group.as_deref()).collect();
        let payloads: Vec<&[u8]> = records.iter().map(|r| r.payload.as_slice()).collect();
        let keys: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
        let at = millis(now);
        // The NOTIFY reaches listeners when the transaction commits, and only then.
        let insert_params: [&(dyn ToSql + Sync); 6] =
            [&ids, &grps, &payloads, &keys, &at, &claimable];
        let notify_params: [&(dyn ToSql + Sync); 1] = [&self.config.schema];
        futures::try_join!(
            tx.execute_prepared(&insert, &insert_params),
            tx.query_prepared(&notify, &notify_params),
        )
        .map_err(pg)?;
        ids.into_iter()
            .map(|id| {
                u64::try_from(id)
                    .map(RecordId)
                    .map_err(|_| corrupt("negative id"))
            })
            .collect()
    }

    async fn records(&self, sql: &str, params: crate::sql::Params<'_>) -> Result<Vec<Record>> {
        let client = self.client().await?;
        let rows = client.rows(sql, params).await.map_err(pg)?;
        rows.iter().map(codec::record).collect()
    }
    pub(crate) async fn enqueue(
        self: Arc<Self>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Vec<RecordId>> {
        self.check_payloads(&records)?;
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let ids = self.insert(&tx, records, now).await?;
        tx.commit().await.map_err(pg)?;
        Ok(ids)
    }

    pub(crate) async fn claim(self: Arc<Self>, claim: Claim) -> Result<Vec<Record>> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        let mut records = self
            .records(
                &self.sql.claim,
                &[
                    &millis(claim.now),
                    &limit(claim.limit),
                    &token(claim.lease.token),
                    &millis(claim.lease.until),
                ],
            )
            .await?;
        // RETURNING follows no order; the contract's is (deadline, id).
        records.sort_by_key(|r| (r.next_attempt_at, r.id));
        Ok(records)
    }

    pub(crate) async fn renew(self: Arc<Self>, ids: Vec<RecordId>, lease: Lease) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = ids.into_iter().map(codec::id).collect();
        let client = self.client().await?;
        client
            .run(
                &self.sql.renew,
                &[&ids, &token(lease.token), &millis(lease.until)],
            )
            .await
            .map_err(pg)?;
        Ok(())
    }

    pub(crate) async fn apply(self: Arc<Self>, transitions: Vec<Transition>) -> Result<Applied> {
        if transitions.is_empty() {
            return Ok(Applied::default());
        }
        let sql = &self.sql;
        let ids: Vec<i64> = transitions.iter().map(|t| codec::id(t.id)).collect();
        let mut client = self.client().await?;
        let statements = Statements {
            lock_groups: client.statement(&sql.lock_groups_of).await.map_err(pg)?,
            lock_rows: client.statement(&sql.lock_rows).await.map_err(pg)?,
            delete: client.statement(&sql.delete).await.map_err(pg)?,
            discard: client.statement(&sql.discard).await.map_err(pg)?,
            update: client.statement(&sql.update).await.map_err(pg)?,
            refresh: client.statement(&sql.refresh_group).await.map_err(pg)?,
            count: client.statement(&sql.count_delivered).await.map_err(pg)?,
        };
        let tx = client.transaction().await.map_err(pg)?;
        // The groups' locks first (a record's group never changes, so it can be read before
        // them), then the rows; sent together, run in order.
        let lock_params: [&(dyn ToSql + Sync); 2] = [&ids, &self.group_seed];
        let row_params: [&(dyn ToSql + Sync); 1] = [&ids];
        let (_, locked) = futures::try_join!(
            tx.query_prepared(&statements.lock_groups, &lock_params),
            tx.query_prepared(&statements.lock_rows, &row_params),
        )
        .map_err(pg)?;
        let mut rows = HashMap::new();
        for row in locked {
            let code: i16 = row.try_get(2).map_err(pg)?;
            let state = u8::try_from(code)
                .ok()
                .and_then(State::from_code)
                .ok_or_else(|| corrupt(format!("unknown state code {code}")))?;
            rows.insert(
                row.try_get::<_, i64>(0).map_err(pg)?,
                Current {
                    group: row.try_get(1).map_err(pg)?,
                    state,
                    token: row.try_get(3).map_err(pg)?,
                },
            );
        }
        let plan = Plan::new(&mut rows, transitions);
        plan.run(&tx, &statements).await?;
        tx.commit().await.map_err(pg)?;
        Ok(Applied {
            skipped: plan.skipped,
        })
    }

    pub(crate) async fn expired(
        self: Arc<Self>,
        now: Millis,
        limit_to: usize,
    ) -> Result<Vec<Record>> {
        self.records(&self.sql.expired, &[&millis(now), &limit(limit_to)])
            .await
    }

    pub(crate) async fn scheduled_after(
        self: Arc<Self>,
        at: Millis,
        limit_to: usize,
    ) -> Result<Vec<Record>> {
        self.records(&self.sql.scheduled_after, &[&millis(at), &limit(limit_to)])
            .await
    }

    pub(crate) async fn get(self: Arc<Self>, id: RecordId) -> Result<Option<Record>> {
        if i64::try_from(id.0).is_err() {
            return Ok(None);
        }
        let records = self.records(&self.sql.get, &[&codec::id(id)]).await?;
        Ok(records.into_iter().next())
    }

    pub(crate) async fn list(self: Arc<Self>, query: ListQuery) -> Result<Vec<Record>> {
        let after = query.after.map_or(0, codec::id);
        let state = query.state.map(state);
        self.records(
            &self.sql.list,
            &[&after, &state, &query.group, &limit(query.limit)],
        )
        .await
    }

    pub(crate) async fn tombstones(
        self: Arc<Self>,
        after: Option<RecordId>,
        limit_to: usize,
    ) -> Result<Vec<Tombstone>> {
        let after = after.map_or(0, codec::id);
        let client = self.client().await?;
        let rows = client
            .rows(&self.sql.tombstones, &[&after, &limit(limit_to)])
            .await
            .map_err(pg)?;
        rows.iter().map(codec::tombstone).collect()
    }

    pub(crate) async fn stats(self: Arc<Self>) -> Result<Stats> {
        let client = self.client().await?;
        let rows = client.rows(&self.sql.stats, &[]).await.map_err(pg)?;
        let row = rows
            .first()
            .ok_or_else(|| corrupt("the stats query returned no row"))?;
        let n = |i: usize| -> Result<u64> {
            let v: Option<i64> = row.try_get(i).map_err(pg)?;
            u64::try_from(v.unwrap_or(0)).map_err(|_| corrupt("a negative count"))
        };
        let t = |i: usize| -> Result<Option<Millis>> {
            let v: Option<i64> = row.try_get(i).map_err(pg)?;
            v.map(|v| u64::try_from(v).map_err(|_| corrupt("a negative time")))
                .transpose()
        };
        Ok(Stats {
            pending: n(0)?,
            retrying: n(1)?,
            in_flight: n(2)?,
            needs_attention: n(3)?,
            rejected: n(4)?,
            oldest_created_at: t(5)?,
            discarded: n(6)?,
            delivered: n(7)?,
            held: n(8)?,
            next_due: t(9)?,
        })
    }

    pub(crate) async fn next_due(self: Arc<Self>) -> Result<Option<Millis>> {
        let client = self.client().await?;
        let rows = client.rows(&self.sql.next_due, &[]).await.map_err(pg)?;
        match rows.first() {
            None => Ok(None),
            Some(row) => {
                let v: i64 = row.try_get(0).map_err(pg)?;
                u64::try_from(v)
                    .map(Some)
                    .map_err(|_| corrupt("a negative deadline"))
            }
        }
    }

    pub(crate) async fn prune(self: Arc<Self>, older_than: Millis) -> Result<u64> {
        let sql = &self.sql;
        let at = millis(older_than);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // Rejected records hold no place in their group, so removing them promotes no one.
        let rejected = tx.run(&sql.prune_rejected, &[&at]).await.map_err(pg)?;
        let buried = tx.run(&sql.prune_tombstones, &[&at]).await.map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        Ok(rejected + buried)
    }
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for PgStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Vec<RecordId>> {
        self.core.check_payloads(&records)?;
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
        self.run(move |core| core.apply(transitions)).await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |core| core.expired(now, limit)).await
    }

    async fn scheduled_after(&self, at: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |core| core.scheduled_after(at, limit)).await
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

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.run(|core| core.next_due()).await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.run(move |core| core.prune(older_than)).await
    }
}
