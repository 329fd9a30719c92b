//! Rounds of 64 concurrent producers that each enqueue one record and wait until it is
//! durable (the benchmarks' group-commit case): time per round and commits per round.
//!
//! ```text
//! cargo run --release -p outbox-sqlite --example sqlite_burst [ROUNDS] [DIR]
//! ```
#![allow(clippy::print_stdout)] // A measuring tool: its output is the point.

use std::sync::Arc;
use std::time::Instant;

use outbox_core::{Error, NewRecord, Result, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};

const PRODUCERS: usize = 64;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: u32 = args.next().and_then(|r| r.parse().ok()).unwrap_or(100);
    let dir = args.next().unwrap_or_else(|| ".".into());
    let temp = tempfile::tempdir_in(&dir).map_err(Error::backend)?;
    let store =
        Arc::new(SqliteStore::create(temp.path().join("burst.db"), SqliteConfig::default()).await?);
    let before = store.write_transactions();
    let start = Instant::now();
    for _ in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for p in 0..PRODUCERS {
            let store = Arc::clone(&store);
            tasks.spawn(async move {
                let record = NewRecord::new(vec![p as u8; 256]);
                store.enqueue(vec![record], 1_000).await
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(Error::backend)??;
        }
    }
    let per_round = start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    let commits = (store.write_transactions() - before) as f64 / f64::from(rounds);
    println!(
        "{rounds} rounds of {PRODUCERS} enqueues: {per_round:.0} µs per round \
         ({:.0} enqueues/s), {commits:.1} commits per round",
        PRODUCERS as f64 * 1e6 / per_round
    );
    Ok(())
}
