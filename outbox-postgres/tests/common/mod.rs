//! What every test of this crate shares: finding the server, a fresh schema per test, and the
//! conformance backend.
//!
//! Environment:
//! - `OUTBOX_PG_URL`: the server (default `postgres://postgres@127.0.0.1:5432/test`).
//! - `OUTBOX_PG_REQUIRED=1`: a missing server fails the tests instead of skipping them (CI).
#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{Cap, Error, RecordId, Result, Store};
use outbox_postgres::{PgConfig, PgStore};
use outbox_testkit::{Backend, Capabilities};

/// The variable naming the server.
pub const URL_ENV: &str = "OUTBOX_PG_URL";
/// The variable that turns a missing server into a failure.
pub const REQUIRED_ENV: &str = "OUTBOX_PG_REQUIRED";
/// The server the project's machines and CI run.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// How long a lease of [`claim`] lasts.
pub const LEASE_MS: u64 = 30_000;

/// A claim of up to `limit` records due at `now` under the lease `token`, for [`LEASE_MS`].
pub fn claim(now: u64, limit: usize, token: u64) -> outbox_core::Claim {
    outbox_core::Claim {
        now,
        limit,
        lease: outbox_core::Lease {
            token,
            until: now + LEASE_MS,
        },
    }
}

/// The server URL from the environment, or the default.
pub fn url() -> String {
    std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Runs `future` on a fresh runtime in its own thread: usable from sync code and from inside
/// another runtime (a `Drop`, a sync test).
pub fn block_on_side<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for test set-up");
        runtime.block_on(future)
    });
    match thread.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// True when a server answers at [`url`]. Without one, says so loudly and returns false,
/// unless `OUTBOX_PG_REQUIRED=1`, which makes it panic so CI never passes by skipping.
pub fn server_ready() -> bool {
    static READY: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let result = READY.get_or_init(|| {
        let url = url();
        block_on_side(async move {
            let config: tokio_postgres::Config =
                url.parse().map_err(|e| format!("bad {URL_ENV}: {e}"))?;
            let connect = config.connect(tokio_postgres::NoTls);
            match tokio::time::timeout(Duration::from_secs(5), connect).await {
                Ok(Ok((client, connection))) => {
                    let driver = tokio::spawn(connection);
                    sweep_stale_schemas(&client).await;
                    drop(client);
                    let _ = driver.await;
                    Ok(())
                }
                Ok(Err(err)) => Err(format!("{url}: {err}")),
                Err(_) => Err(format!("{url}: no answer within 5 s")),
            }
        })
    });
    match result {
        Ok(()) => true,
        Err(why) => {
            if std::env::var(REQUIRED_ENV).is_ok_and(|v| v == "1") {
                panic!("{REQUIRED_ENV}=1 but no PostgreSQL server answers: {why}");
            }
            // Straight to the process's stderr: the test harness captures `eprintln!`, and a
            // skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: no PostgreSQL server answers ({why}).\n*** Set {URL_ENV} to a \
                 server, or {REQUIRED_ENV}=1 to make this a failure. ***\n"
            );
            false
        }
    }
}

/// Test schemas are named `outbox_test_<unix seconds>_<random>`, so a later run can tell the
/// ones a killed test process left behind.
const TEST_PREFIX: &str = "outbox_test_";

/// A schema name no other test uses.
pub fn fresh_schema() -> String {
    let secs = outbox_core::clock::system_now() / 1000;
    format!("{TEST_PREFIX}{secs}_{:08x}", fastrand::u32(..))
}

/// Drops test schemas more than an hour old: what test processes killed mid-run left.
async fn sweep_stale_schemas(client: &tokio_postgres::Client) {
    let cutoff = outbox_core::clock::system_now() / 1000 - 3_600;
    let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'outbox\\_test\\_%'",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        let secs = name
            .strip_prefix(TEST_PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<u64>().ok());
        if secs.is_some_and(|secs| secs < cutoff) {
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                .await;
        }
    }
}

/// The store settings tests use for `schema`: a small pool, so many tests fit in the server's
/// connection limit at once.
pub fn config(schema: &str) -> PgConfig {
    PgConfig::new(url(), schema).with_pool_size(4)
}

/// Drops `schemas` and everything in them.
pub fn drop_schemas(schemas: Vec<String>) {
    if schemas.is_empty() {
        return;
    }
    let url = url();
    block_on_side(async move {
        let Ok((client, connection)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
        else {
            return;
        };
        tokio::spawn(connection);
        // A test that failed may have left a session holding locks; do not hang on it.
        let _ = client.batch_execute("SET lock_timeout = '5s'").await;
        for schema in schemas {
            if let Err(err) = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await
            {
                eprintln!("could not drop test schema {schema}: {err}");
            }
        }
    });
}

/// One client on the test server, its connection driven in the background.
pub async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("the test server accepts a connection");
    tokio::spawn(connection);
    client
}

/// The conformance backend: each `create` makes a fresh schema, dropped with the backend.
#[derive(Debug, Default)]
pub struct PgBackend {
    schemas: Mutex<Vec<String>>,
}

impl PgBackend {
    /// A backend with no schemas yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remembers `schema` for the clean-up.
    pub fn adopt(&self, schema: &str) {
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(schema.to_owned());
    }
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap_or_else(|e| e.into_inner()));
        drop_schemas(schemas);
    }
}

#[async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            shared: true,
            unreadable_rows: true,
            size_cap: true,
        }
    }

    async fn create(&self) -> Result<String> {
        let schema = fresh_schema();
        self.adopt(&schema);
        PgStore::connect(config(&schema)).await?;
        Ok(schema)
    }

    /// The scenarios drive their runners on tokio's paused clock or a manual one, all on this
    /// host: the store is opened to let them (the server's clock, which keeps running, is the
    /// default and has tests of its own).
    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            PgStore::connect(config(location).with_runner_clock()).await?,
        ))
    }

    /// As `open`, with the store's size cap set.
    async fn open_capped(&self, location: &str, cap: Cap) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            PgStore::connect(config(location).with_runner_clock().with_cap(cap)).await?,
        ))
    }

    /// A negative attempt count, as a hand edit or an older writer could leave it: every
    /// text column is valid UTF-8 in PostgreSQL, so the damage is to a value's range.
    async fn plant_unreadable(&self, location: &str, id: RecordId) -> Result<String> {
        let client = admin().await;
        let changed = client
            .execute(
                &format!("UPDATE \"{location}\".records SET attempts = -1 WHERE id = $1"),
                &[&i64::try_from(id.0).map_err(Error::backend)?],
            )
            .await
            .map_err(Error::backend)?;
        assert_eq!(changed, 1, "record {id} to plant on");
        Ok("attempts out of range: -1".into())
    }
}

/// A fresh schema, dropped when this guard goes.
pub struct Scratch {
    pub schema: String,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            schema: fresh_schema(),
        }
    }

    pub async fn store(&self) -> PgStore {
        PgStore::connect(config(&self.schema))
            .await
            .expect("the test store opens")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop_schemas(vec![self.schema.clone()]);
    }
}

/// A session listening on `channels`; yields the channel name of every notification.
pub async fn listen(
    channels: &[String],
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    use futures::StreamExt;
    let (client, mut connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("the test server accepts a connection");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                if tx.send(n.channel().to_owned()).is_err() {
                    return;
                }
            }
        }
    });
    let sql: String = channels
        .iter()
        .map(|c| format!("LISTEN \"{c}\";"))
        .collect();
    client
        .batch_execute(&sql)
        .await
        .expect("LISTEN is accepted");
    (client, rx)
}

/// Why the conformance suite cannot run here, for the testkit's `skip_when`: `None` when a
/// server answers; otherwise the reason, after [`server_ready`] said it loudly (with
/// `OUTBOX_PG_REQUIRED=1`, [`server_ready`] fails the test instead). Nothing runs on a stand-in
/// store under the PostgreSQL name.
pub fn skip_reason() -> Option<String> {
    if server_ready() {
        None
    } else {
        Some(format!("no PostgreSQL server answers at {}", url()))
    }
}

/// The records' pages filled to the end again, as builds before the fill setting left them.
pub fn full_pages(s: &str) -> String {
    format!("ALTER TABLE \"{s}\".records RESET (fillfactor);")
}

/// The records' `fillfactor` as the catalog has it (`None`: the default, full pages).
pub async fn records_fillfactor(client: &tokio_postgres::Client, s: &str) -> Option<String> {
    let options: Option<Vec<String>> = client
        .query_one(
            "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'records'",
            &[&s],
        )
        .await
        .expect("the records table exists")
        .get(0);
    options?
        .into_iter()
        .find_map(|o| o.strip_prefix("fillfactor=").map(str::to_owned))
}

/// The lease rows' id lists stored as their type's default has them (compressed once long),
/// as builds before the storage setting left them.
pub fn compressed_lease_ids(s: &str) -> String {
    format!("ALTER TABLE \"{s}\".leases ALTER COLUMN ids SET STORAGE EXTENDED;")
}

/// How the catalog stores the lease rows' id lists: `x` (the default: compressed once long),
/// `e` (out of line, uncompressed), `m` or `p`.
pub async fn lease_ids_storage(client: &tokio_postgres::Client, s: &str) -> String {
    client
        .query_one(
            "SELECT a.attstorage::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'leases' AND a.attname = 'ids'",
            &[&s],
        )
        .await
        .expect("the lease rows' ids column exists")
        .get(0)
}

/// What version 7 changed, undone: the statements that bring a current schema back to
/// version 6 as that build left it. Records in flight are in state 2 again (and not
/// claimable, with no check against a token in state 2), the lease index is back, the lease
/// rows are gone, and the records' trigger
/// function reads a row's state as version 6 did: the server rewrites the current function
/// with version 6's predicates, and fails the statement should any of version 7's be left.
pub fn down_to_6(s: &str) -> String {
    format!(
        "ALTER TABLE \"{s}\".records DROP CONSTRAINT records_set_aside_unleased; \
         UPDATE \"{s}\".records SET state = 2, claimable = false \
         WHERE lease_token IS NOT NULL AND state < 3; \
         DROP TABLE \"{s}\".leases; \
         CREATE INDEX records_leases ON \"{s}\".records (lease_until, id) WHERE state = 2; \
         DO $$ DECLARE def text; BEGIN \
           def := pg_get_functiondef('\"{s}\".tally_records'::regproc); \
           def := replace(def, '(state IN (3, 4) OR (state = 1 AND lease_token IS NULL)) \
             AND last_error IS NOT NULL', 'state IN (1, 3, 4) AND last_error IS NOT NULL'); \
           def := replace(def, 'state, lease_token, last_error', 'state, lease_until, last_error'); \
           def := replace(def, 'state = 0 AND lease_token IS NULL', 'state = 0'); \
           def := replace(def, 'state = 1 AND lease_token IS NULL', 'state = 1'); \
           def := replace(def, 'lease_token IS NOT NULL AND state < 3', \
             'state = 2 AND lease_until IS NOT NULL'); \
           def := replace(def, 'state <> 2 OR lease_token IS NOT NULL', \
             'state <> 2 OR lease_until IS NOT NULL'); \
           def := replace(def, 'state, lease_token, absorbed', 'state, lease_until, absorbed'); \
           IF def LIKE '%lease_token%' THEN \
             RAISE EXCEPTION 'a predicate of version 7 is left: %', def; \
           END IF; \
           EXECUTE def; \
         END $$;"
    )
}

/// What versions 6 and 7 added, dropped again: the statements that bring a current schema
/// back to version 5 as that build left it, with no history and no trace context on any
/// record, no payload bytes counted and no turn for capped enqueues (the records' trigger
/// function as version 4 wrote it), and full pages.
pub fn down_to_5(s: &str) -> String {
    format!(
        "{} {} {} ALTER TABLE \"{s}\".records DROP COLUMN history; \
         ALTER TABLE \"{s}\".records DROP COLUMN trace; \
         ALTER TABLE \"{s}\".tallies DROP COLUMN payload_bytes; \
         DROP TABLE \"{s}\".cap_turn;",
        down_to_6(s),
        full_pages(s),
        TALLY_RECORDS_V4.replace("{s}", &format!("\"{s}\""))
    )
}

/// The records' trigger function of versions 4 and 5 (`{s}`: the quoted schema): counts per
/// state, absorbed writes and failed records, no payload bytes.
const TALLY_RECORDS_V4: &str = r#"
CREATE OR REPLACE FUNCTION {s}.tally_records() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    me integer := pg_backend_pid() % 64;
    d record;
    zeroed text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT count(*) FILTER (WHERE state = 0) AS pending,
            count(*) FILTER (WHERE state = 1) AS retrying,
            count(*) FILTER (WHERE state = 2 AND lease_until IS NOT NULL) AS in_flight,
            count(*) FILTER (WHERE state = 3) AS attention,
            count(*) FILTER (WHERE state = 4) AS rejected,
            coalesce(sum(absorbed), 0) AS absorbed,
            count(*) FILTER (WHERE state IN (1, 3, 4) AND last_error IS NOT NULL) AS failed
        INTO d FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT -count(*) FILTER (WHERE state = 0) AS pending,
            -count(*) FILTER (WHERE state = 1) AS retrying,
            -count(*) FILTER (WHERE state = 2 AND lease_until IS NOT NULL) AS in_flight,
            -count(*) FILTER (WHERE state = 3) AS attention,
            -count(*) FILTER (WHERE state = 4) AS rejected,
            -coalesce(sum(absorbed), 0) AS absorbed,
            count(*) FILTER (WHERE state IN (1, 3, 4) AND last_error IS NOT NULL) AS failed
        INTO d FROM old_rows;
    ELSE
        SELECT coalesce(sum(sign) FILTER (WHERE state = 0), 0) AS pending,
            coalesce(sum(sign) FILTER (WHERE state = 1), 0) AS retrying,
            coalesce(sum(sign) FILTER (WHERE state = 2 AND lease_until IS NOT NULL), 0)
                AS in_flight,
            coalesce(sum(sign) FILTER (WHERE state = 3), 0) AS attention,
            coalesce(sum(sign) FILTER (WHERE state = 4), 0) AS rejected,
            coalesce(sum(sign * absorbed), 0) AS absorbed,
            count(*) FILTER (WHERE state IN (1, 3, 4) AND last_error IS NOT NULL) AS failed
        INTO d FROM (SELECT 1 AS sign, state, lease_until, absorbed, last_error FROM new_rows
            UNION ALL SELECT -1, state, lease_until, absorbed, last_error FROM old_rows) AS x;
    END IF;
    IF d.pending = 0 AND d.retrying = 0 AND d.in_flight = 0 AND d.attention = 0
        AND d.rejected = 0 AND d.absorbed = 0 AND d.failed = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO {s}.tallies AS t (shard, pending, retrying, in_flight, attention, rejected,
        absorbed)
    VALUES (me, d.pending, d.retrying, d.in_flight, d.attention, d.rejected, d.absorbed)
    ON CONFLICT (shard) DO UPDATE SET pending = t.pending + excluded.pending,
        retrying = t.retrying + excluded.retrying, in_flight = t.in_flight + excluded.in_flight,
        attention = t.attention + excluded.attention, rejected = t.rejected + excluded.rejected,
        absorbed = t.absorbed + excluded.absorbed;
    IF d.failed = 0 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, count(*) FROM new_rows
            WHERE state IN (1, 3, 4) AND last_error IS NOT NULL
            GROUP BY last_error ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    ELSIF TG_OP = 'DELETE' THEN
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, -count(*) FROM old_rows
            WHERE state IN (1, 3, 4) AND last_error IS NOT NULL
            GROUP BY last_error ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    ELSE
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, sum(sign) FROM
                (SELECT 1 AS sign, state, last_error FROM new_rows
                 UNION ALL SELECT -1, state, last_error FROM old_rows) AS x
            WHERE state IN (1, 3, 4) AND last_error IS NOT NULL
            GROUP BY last_error HAVING sum(sign) <> 0 ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    END IF;
    IF zeroed IS NOT NULL THEN
        DELETE FROM {s}.error_tallies WHERE shard = me AND digest = ANY(zeroed) AND n = 0;
    END IF;
    RETURN NULL;
END
$fn$;
"#;

/// The payload bytes of the records a size cap counts (every record but those set aside as
/// unreadable), summed from the rows: what `Stats::payload_bytes` must equal.
pub async fn payload_bytes_recounted(client: &tokio_postgres::Client, s: &str) -> u64 {
    let bytes: i64 = client
        .query_one(
            &format!(
                "SELECT coalesce(sum(octet_length(payload)), 0)::bigint FROM \"{s}\".records \
                 WHERE state <> 2 OR lease_token IS NOT NULL"
            ),
            &[],
        )
        .await
        .expect("the payload bytes are summed")
        .get(0);
    u64::try_from(bytes).expect("a sum of lengths is not negative")
}

/// What versions 5 to 7 added, dropped again: the statements that bring a current schema
/// back to version 4 as that build left it, with no not-before time on any record.
pub fn down_to_4(s: &str) -> String {
    format!(
        "{} DROP INDEX \"{s}\".records_scheduled; \
         ALTER TABLE \"{s}\".records DROP COLUMN not_before;",
        down_to_5(s)
    )
}

/// What versions 4 to 7 added, dropped again: the statements that bring a current schema
/// back to version 3 as that build left it, its counters in `meta` alone.
pub fn down_to_3(s: &str) -> String {
    format!(
        "{} UPDATE \"{s}\".meta SET \
           delivered = delivered + (SELECT coalesce(sum(delivered), 0) FROM \"{s}\".tallies), \
           superseded = superseded + (SELECT coalesce(sum(superseded), 0) FROM \"{s}\".tallies); \
         DROP TRIGGER tally_inserted ON \"{s}\".records; \
         DROP TRIGGER tally_updated ON \"{s}\".records; \
         DROP TRIGGER tally_deleted ON \"{s}\".records; \
         DROP TRIGGER tally_buried ON \"{s}\".tombstones; \
         DROP TRIGGER tally_unburied ON \"{s}\".tombstones; \
         DROP FUNCTION \"{s}\".tally_records(); DROP FUNCTION \"{s}\".tally_tombstones(); \
         DROP TABLE \"{s}\".tallies; DROP TABLE \"{s}\".error_tallies; \
         DROP INDEX \"{s}\".records_attention; DROP INDEX \"{s}\".records_age;",
        down_to_4(s)
    )
}

/// The test server's URL as key-value text, so a `user=` can be appended.
pub fn key_value(url: &str) -> String {
    let config: tokio_postgres::Config = url.parse().expect("a valid test URL");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("test");
    format!("host={host} port={port} dbname={db}")
}
