//! Measures the enqueue rate of the redb store with 1 and with 64 concurrent producers, in one
//! run, at the default durability (every enqueue returns after its commit is synced).
//!
//! ```text
//! cargo run --release -p outbox-redb --example redb_enqueue_rate
//! ```

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use outbox_core::{NewRecord, Store};
use outbox_redb::{RedbConfig, RedbStore};

/// Enqueues `per_producer` single-record batches from each of `producers` concurrent tasks;
/// returns enqueues per second.
async fn rate(config: &RedbConfig, producers: usize, per_producer: usize) -> f64 {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = RedbStore::create(dir.path().join("rate.redb"), config.clone())
        .await
        .expect("create");
    let store = Arc::new(store);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..producers {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            for i in 0..per_producer {
                let payload = format!("{{\"producer\":{p},\"n\":{i},\"op\":\"rename\"}}");
                store
                    .enqueue(vec![NewRecord::new(payload.into_bytes())], 1_000)
                    .await
                    .expect("enqueue");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("producer");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = producers * per_producer;
    assert_eq!(
        store.stats().await.expect("stats").pending,
        total as u64,
        "every enqueue is in the store"
    );
    total as f64 / elapsed
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut out = std::io::stdout().lock();
    let configs = [
        (
            "default: immediate, two-phase commit, quick repair",
            RedbConfig::default(),
        ),
        (
            "immediate, one-phase commit, no quick repair",
            RedbConfig {
                two_phase_commit: false,
                quick_repair: false,
                ..RedbConfig::default()
            },
        ),
    ];
    writeln!(out, "| settings | producers | enqueues/s |").ok();
    writeln!(out, "|---|---|---|").ok();
    for (name, config) in &configs {
        for (producers, per_producer) in [(1, 400), (64, 100)] {
            let r = rate(config, producers, per_producer).await;
            writeln!(out, "| {name} | {producers} | {r:.0} |").ok();
        }
    }
}
