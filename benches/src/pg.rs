//! PostgreSQL: the server the `postgres` rows run against, a schema of their own for each run,
//! and the end-to-end drain with several runners sharing one outbox.
//!
//! The server is `OUTBOX_PG_URL` (default [`DEFAULT_URL`]). Where none answers, the postgres
//! rows are skipped with a printed line, unless `OUTBOX_PG_REQUIRED=1`, which makes that an
//! error. Every run works in a schema with a random name, dropped at its end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{sink_fn, Error, Outbox, Outcome, Record, Result, RunnerConfig, Store};
use outbox_postgres::{PgConfig, PgStore};
use tokio_postgres::{Client, NoTls};

use crate::error::engine;
use crate::subject::StoreKind;
use crate::workload::{fill, Drained};

/// The server used when `OUTBOX_PG_URL` is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The runner counts of the drain rows on a queue that several runners share (PostgreSQL, and
/// a SQLite file in `measure`).
pub const RUNNERS: [usize; 3] = [1, 2, 4];

/// Longest wait for the server to answer before the rows are skipped.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the drain may take before it counts as failed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3_600);

/// How many times the drain re-checks the queue before it gives up.
const MAX_CHECKS: u32 = 100_000;

/// The row name of the outbox drain with `runners` runners (`postgres-2-runners`).
///
/// ```
/// assert_eq!(outbox_benches::pg::row_name(1), "postgres-1-runner");
/// assert_eq!(outbox_benches::pg::row_name(4), "postgres-4-runners");
/// ```
pub fn row_name(runners: usize) -> String {
    let plural = if runners == 1 { "" } else { "s" };
    format!("{}-{runners}-runner{plural}", StoreKind::Postgres)
}

/// The row name of the bare drain compared with [`row_name`]`(workers)`: the report pairs a
/// row with `bare-` and its name.
///
/// ```
/// assert_eq!(outbox_benches::pg::bare_row_name(2), "bare-postgres-2-runners");
/// ```
pub fn bare_row_name(workers: usize) -> String {
    format!("bare-{}", row_name(workers))
}

/// A PostgreSQL server that answered.
#[derive(Clone, Debug)]
pub struct PgServer {
    url: String,
    synchronous_commit: String,
}

impl PgServer {
    /// The server at `OUTBOX_PG_URL`, or `None` (after printing why) when it does not answer
    /// and `OUTBOX_PG_REQUIRED` is not `1`.
    pub async fn find() -> Result<Option<PgServer>> {
        let url = std::env::var("OUTBOX_PG_URL").unwrap_or_else(|_| DEFAULT_URL.into());
        let required = std::env::var("OUTBOX_PG_REQUIRED").is_ok_and(|v| v == "1");
        match Self::at(&url).await {
            Ok(server) => Ok(Some(server)),
            Err(err) if !required => {
                // On stderr, where the harness and the test runner show it.
                eprintln!("SKIPPED the postgres rows: no server at {url} ({err})");
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The server at `url`, with its `synchronous_commit` setting read.
    pub async fn at(url: &str) -> Result<PgServer> {
        let client = connect(url).await?;
        let row = client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .map_err(engine("postgres: SHOW synchronous_commit"))?;
        let synchronous_commit = row
            .try_get::<_, String>(0)
            .map_err(engine("postgres: reading synchronous_commit"))?;
        Ok(PgServer {
            url: url.to_owned(),
            synchronous_commit,
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What a commit survives on this server, as the report states it (the store and the
    /// bare rows both commit at the server's setting).
    pub fn durability(&self) -> String {
        let what = match self.synchronous_commit.as_str() {
            "off" => "WAL flushed in the background",
            "local" => "WAL flushed locally per commit",
            _ => "WAL flushed per commit",
        };
        format!("synchronous_commit={} ({what})", self.synchronous_commit)
    }

    /// A fresh schema with a random name (not created yet: the store or the bare queue
    /// creates it). Drop it with [`PgSchema::drop`].
    pub fn schema(&self) -> PgSchema {
        PgSchema {
            url: self.url.clone(),
            name: format!("outbox_bench_{:016x}", fastrand::u64(..)),
        }
    }
}

/// A connection of its own, driven by a task on the caller's runtime.
pub(crate) async fn connect(url: &str) -> Result<Client> {
    let connecting = tokio_postgres::connect(url, NoTls);
    let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| Error::Unavailable {
            detail: format!("postgres: no answer within {CONNECT_TIMEOUT:?}"),
            source: None,
        })?
        .map_err(engine("postgres: connect"))?;
    tokio::spawn(async move {
        // The connection ends when its client is dropped; an error then has no one to go to.
        let _ = connection.await;
    });
    Ok(client)
}

/// A schema of one benchmark run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgSchema {
    url: String,
    name: String,
}

impl PgSchema {
    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Store settings for the outbox in this schema.
    pub fn config(&self) -> PgConfig {
        PgConfig::new(&self.url, &self.name).with_pool_size(4)
    }

    /// Drops the schema and everything in it.
    pub async fn drop(&self) -> Result<()> {
        let client = connect(&self.url).await?;
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name))
            .await
            .map_err(engine("postgres: dropping the schema"))
    }
}

/// The server's write-ahead log position at `url`, in bytes: read before and after a
/// workload, the difference is what it wrote (and whatever else the server did meanwhile).
/// The position itself, not `pg_stat_wal`'s counters, which sessions report only every so
/// often.
///
/// ```no_run
/// # async fn demo() -> outbox_core::Result<()> {
/// let before = outbox_benches::pg::wal_bytes("postgres://postgres@127.0.0.1/test").await?;
/// # Ok(())
/// # }
/// ```
pub async fn wal_bytes(url: &str) -> Result<i64> {
    let client = connect(url).await?;
    let row = client
        .query_one(
            "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint",
            &[],
        )
        .await
        .map_err(engine("postgres: reading the WAL position"))?;
    row.try_get(0)
        .map_err(engine("postgres: reading the WAL position"))
}

/// The server's WAL between two positions (as [`wal_bytes`] gives them) by record type, largest
/// first: each type's bytes (records and full-page images) divided by `per`. `None` when the
/// server has no `pg_walinspect` (PostgreSQL 15 and later ship it; creating it takes a
/// superuser) or the WAL is gone. WAL not yet flushed at the end is left out (a few bytes: the
/// drains end on a commit, which flushes). Like the position, it counts the whole server's WAL.
pub async fn wal_kinds(url: &str, from: i64, to: i64, per: u64) -> Option<Vec<(String, f64)>> {
    let client = connect(url).await.ok()?;
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .await
        .ok()?;
    let rows = client
        .query(
            "SELECT \"resource_manager/record_type\", (record_size + fpi_size)::bigint \
             FROM pg_get_wal_stats('0/0'::pg_lsn + $1::bigint::numeric, \
                 least('0/0'::pg_lsn + $2::bigint::numeric, pg_current_wal_flush_lsn()), true) \
             WHERE count > 0 ORDER BY 2 DESC",
            &[&from, &to],
        )
        .await
        .ok()?;
    rows.iter()
        .map(|row| {
            let kind: String = row.try_get(0).ok()?;
            let bytes: i64 = row.try_get(1).ok()?;
            Some((kind, bytes as f64 / per.max(1) as f64))
        })
        .collect()
}

/// `runners` stores on one schema, each with its own pool, as runners on separate hosts would
/// have.
pub async fn stores(schema: &PgSchema, runners: usize) -> Result<Vec<Arc<dyn Store>>> {
    let mut stores: Vec<Arc<dyn Store>> = Vec::with_capacity(runners);
    for _ in 0..runners {
        stores.push(Arc::new(PgStore::connect(schema.config()).await?));
    }
    Ok(stores)
}

/// The end-to-end drain with one runner per store: enqueues `count` due records through the
/// first store (not timed), then starts a runner with the default configuration on every
/// store and times them from their start until the queue is empty.
///
/// Fails unless exactly `count` more records were delivered and nothing is left undelivered.
pub async fn drain_runners(stores: &[Arc<dyn Store>], count: usize) -> Result<Drained> {
    let first = first(stores)?;
    fill(first, count, system_now()).await?;
    drain_filled(stores, count as u64, &RunnerConfig::default()).await
}

/// Starts a runner with `config` on every store over what the shared queue already holds, and
/// times them from their start until nothing is pending or in flight.
///
/// Fails unless exactly `expected` more records were delivered and nothing is left undelivered.
pub async fn drain_filled(
    stores: &[Arc<dyn Store>],
    expected: u64,
    config: &RunnerConfig,
) -> Result<Drained> {
    let first = first(stores)?;
    let before = first.stats().await?;
    let started = Instant::now();
    let mut outboxes = Vec::with_capacity(stores.len());
    for store in stores {
        let sink = sink_fn(|_: Record| async { Outcome::Delivered });
        outboxes.push(
            Outbox::builder(Arc::clone(store), sink)
                .config(config.clone())
                .start()
                .await?,
        );
    }
    let mut checks = 0u32;
    loop {
        for outbox in &outboxes {
            outbox.flush(DRAIN_TIMEOUT).await?;
        }
        // One runner's flush says nothing of the records the others hold: the drain is over
        // when the shared queue has nothing pending or in flight.
        let stats = first.stats().await?;
        if stats.undelivered() == 0 || checks == MAX_CHECKS {
            break;
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    for outbox in outboxes {
        outbox.shutdown(Duration::from_secs(30)).await?;
    }
    let after = first.stats().await?;
    let records = after.delivered - before.delivered;
    if records != expected || after.undelivered() != 0 {
        return Err(Error::Backend {
            detail: format!(
                "the drain delivered {records} of {expected} records and left {} undelivered",
                after.undelivered()
            ),
            source: None,
        });
    }
    Ok(Drained { records, elapsed })
}

fn first(stores: &[Arc<dyn Store>]) -> Result<&Arc<dyn Store>> {
    stores.first().ok_or_else(|| Error::Backend {
        detail: "a drain needs at least one store".into(),
        source: None,
    })
}
