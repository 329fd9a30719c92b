//! Rounds of 64 concurrent producers that each enqueue one record and wait until it is
//! durable (the benchmarks' group-commit case): time per round. Run it under
//! `strace -f -c -e trace=fdatasync` for the syncs per round (two per commit by default).
//!
//! ```text
//! cargo run --release -p outbox-redb --example redb_burst [ROUNDS] [DIR]
//! ```

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use outbox_core::{Error, NewRecord, Result, Store};
use outbox_redb::{RedbConfig, RedbStore};

const PRODUCERS: usize = 64;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: u32 = args.next().and_then(|r| r.parse().ok()).unwrap_or(100);
    let dir = args.next().unwrap_or_else(|| ".".into());
    let temp = tempfile::tempdir_in(&dir).map_err(Error::backend)?;
    let store =
        Arc::new(RedbStore::create(temp.path().join("burst.redb"), RedbConfig::default()).await?);
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
    writeln!(
        std::io::stdout().lock(),
        "{rounds} rounds of {PRODUCERS} enqueues: {per_round:.0} µs per round \
         ({:.0} enqueues/s)",
        PRODUCERS as f64 * 1e6 / per_round
    )
    .map_err(Error::backend)?;
    Ok(())
}
