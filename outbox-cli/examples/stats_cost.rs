//! What one `watch` tick (the `stats` view: the store's counts and its common errors) costs
//! on a large queue. Not a test: a measurement, whose figures the crate's README quotes.
//!
//! ```sh
//! cargo run --release -p outbox-cli --example stats_cost -- sqlite 1000000
//! cargo run --release -p outbox-cli --example stats_cost -- sqlite 1000000 flat
//! cargo run --release -p outbox-cli --example stats_cost -- redb 1000000 flat
//! cargo run --release -p outbox-cli --example stats_cost -- postgres 1000000   # OUTBOX_PG_URL
//! ```
//!
//! The queue: `N` records of 200-byte payloads, of which 10% retrying (five distinct
//! errors), 1% needs-attention and 1% rejected, the rest pending. Each needs-attention record
//! heads a group of its own with five pending records behind it, so 5% of the queue is held
//! and stats count them; with `flat` as a third argument no record is grouped. Each figure is the median
//! and the slowest of 15 ticks, after one tick to warm the caches, on the store the command
//! opens (SQLite read-only; PostgreSQL through a pool of two). For comparison, the way
//! `stats` counted errors before (reading up to 10,000 whole records per failed state) is
//! timed too.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{
    Change, Guard, ListQuery, NewRecord, Progress, RecordId, State, Store, Transition,
};

const TICKS: usize = 15;
const BATCH: usize = 10_000;
const ERRORS: [&str; 5] = [
    "HTTP 503 Service Unavailable",
    "HTTP 502 Bad Gateway: upstream reset",
    "connection refused",
    "HTTP 429 Too Many Requests",
    "timed out after 30 s",
];

/// Fills `store` with `n` records in the mix above (no groups when `flat`).
async fn fill(store: &dyn Store, n: usize, flat: bool) {
    let payload = vec![b'x'; 200];
    let mut next = 0usize;
    while next < n {
        let size = BATCH.min(n - next);
        let batch = (0..size)
            .map(|i| {
                let k = next + i;
                let record = NewRecord::new(payload.clone());
                match k % 100 {
                    10 | 50..=54 if !flat => record.in_group(format!("g{}", k / 100)),
                    _ => record,
                }
            })
            .collect();
        let ids = store.enqueue(batch, 1_000).await.expect("enqueue");
        let transitions: Vec<Transition> = ids
            .iter()
            .enumerate()
            .filter_map(|(i, &id)| {
                let k = next + i;
                let state = match k % 100 {
                    0..=9 => State::Retrying,
                    10 => State::NeedsAttention,
                    11 => State::Rejected,
                    _ => return None,
                };
                Some(failed(id, state, ERRORS[k % ERRORS.len()]))
            })
            .collect();
        store.apply(transitions).await.expect("apply");
        next += size;
        if next.is_multiple_of(100_000) {
            eprintln!("  {next} records");
        }
    }
}

fn failed(id: RecordId, state: State, error: &str) -> Transition {
    Transition {
        id,
        guard: Guard::Idle,
        change: Change::Update(Progress {
            state,
            attempts: 1,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: Some(2_000),
            next_attempt_at: (state == State::Retrying).then_some(10_000_000),
            last_error: Some(error.to_owned()),
            history: Default::default(),
        }),
    }
}

/// The old way: up to 10,000 whole records of each failed state, payloads included.
async fn sampled_errors(store: &dyn Store) -> usize {
    let mut read = 0;
    for state in [State::Retrying, State::NeedsAttention, State::Rejected] {
        let mut query = ListQuery::new(500).state(state);
        let mut seen = 0;
        while seen < 10_000 {
            let page = store.list(&query).await.expect("list");
            seen += page.len();
            match page.last() {
                Some(last) if page.len() == 500 => query.after = Some(last.id),
                _ => break,
            }
        }
        read += seen;
    }
    read
}

async fn time<F, Fut, T>(what: &str, mut run: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    run().await;
    let mut took: Vec<Duration> = Vec::with_capacity(TICKS);
    for _ in 0..TICKS {
        let started = Instant::now();
        run().await;
        took.push(started.elapsed());
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what:<44} median {:>9.3} ms   slowest {:>9.3} ms",
        ms(took[TICKS / 2]),
        ms(took[TICKS - 1])
    );
}

async fn measure(store: Arc<dyn Store>, label: &str) {
    println!("{label}");
    let stats = store.stats().await.expect("stats");
    println!(
        "  pending {}, retrying {}, needs attention {}, rejected {}, held {}",
        stats.pending, stats.retrying, stats.needs_attention, stats.rejected, stats.held
    );
    let s = Arc::clone(&store);
    time("watch tick (view::stats)", || {
        let s = Arc::clone(&s);
        async move { outbox_cli::view::stats(&*s, 5_000).await.expect("stats") }
    })
    .await;
    let s = Arc::clone(&store);
    time("  Store::stats (the store's counts)", || {
        let s = Arc::clone(&s);
        async move { s.stats().await.expect("stats") }
    })
    .await;
    let s = Arc::clone(&store);
    time("  Store::common_errors (one grouped query)", || {
        let s = Arc::clone(&s);
        async move { s.common_errors(5).await.expect("errors") }
    })
    .await;
    let s = Arc::clone(&store);
    time("  before: errors from 30,000 whole records", || {
        let s = Arc::clone(&s);
        async move { sampled_errors(&*s).await }
    })
    .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "sqlite".into());
    let n: usize = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("a record count"));
    let flat = args.next().as_deref() == Some("flat");
    match backend.as_str() {
        "sqlite" => {
            use outbox_sqlite::{SqliteConfig, SqliteStore};
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("big.db");
            eprintln!("filling {} with {n} records", path.display());
            let store = SqliteStore::create(&path, SqliteConfig::default())
                .await
                .expect("create");
            fill(&store, n, flat).await;
            store.close().await;
            let reader = SqliteStore::open(&path, SqliteConfig::default().read_only(true))
                .await
                .expect("open read-only");
            measure(Arc::new(reader), &format!("SQLite, {n} records")).await;
        }
        "redb" => {
            use outbox_redb::{RedbConfig, RedbStore};
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("big.redb");
            eprintln!("filling {} with {n} records", path.display());
            let store = RedbStore::create(&path, RedbConfig::default())
                .await
                .expect("create");
            fill(&store, n, flat).await;
            store.close().await;
            // The command opens a redb file read-only, as here.
            let reader = RedbStore::open_read_only(&path, RedbConfig::default())
                .await
                .expect("open read-only");
            measure(Arc::new(reader), &format!("redb, {n} records")).await;
        }
        "postgres" => {
            use outbox_postgres::{PgConfig, PgStore};
            let url = std::env::var("OUTBOX_PG_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
            let schema = format!("outbox_stats_cost_{}", std::process::id());
            eprintln!("filling schema {schema} with {n} records");
            let store = PgStore::connect(PgConfig::new(&url, &schema))
                .await
                .expect("connect");
            fill(&store, n, flat).await;
            let inspector = PgStore::connect(PgConfig::new(&url, &schema).with_pool_size(2))
                .await
                .expect("connect");
            measure(Arc::new(inspector), &format!("PostgreSQL, {n} records")).await;
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            client
                .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await
                .expect("drop the schema");
        }
        other => panic!("unknown backend {other:?}: sqlite, redb or postgres"),
    }
}
