//! End-to-end drain rate with 1, 2 and 4 runners on one PostgreSQL outbox.
//!
//! Each runner has its own store (its own pool), as runners on separate hosts would. The
//! records are enqueued first (a third of them in 50 groups), then the runners start and the
//! clock runs until the sink has seen every record.
//!
//! ```text
//! cargo run --release -p outbox-postgres --example drain_rate
//! OUTBOX_PG_URL=postgres://user@host/db RECORDS=5000 cargo run --release -p outbox-postgres --example drain_rate
//! ```
#![allow(clippy::print_stdout)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record, RunnerConfig, Store};
use outbox_postgres::{PgConfig, PgStore};
use tokio::sync::Notify;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> outbox_core::Result<()> {
    let url = std::env::var("OUTBOX_PG_URL").unwrap_or_else(|_| DEFAULT_URL.into());
    let records: usize = std::env::var("RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4_000);
    println!("| runners | records | enqueue (records/s) | drain (records/s) |");
    println!("|---:|---:|---:|---:|");
    for runners in [1, 2, 4] {
        let schema = format!("outbox_bench_{:08x}", fastrand::u32(..));
        let config = PgConfig::new(&url, &schema).with_pool_size(4);
        let store = PgStore::connect(config.clone()).await?;
        let batch: Vec<NewRecord> = (0..records)
            .map(|i| {
                let record = NewRecord::new(format!("{{\"n\":{i}}}").into_bytes());
                if i % 3 == 0 {
                    record.in_group(format!("entity-{}", i % 50))
                } else {
                    record
                }
            })
            .collect();
        let started = Instant::now();
        for chunk in batch.chunks(100) {
            store
                .enqueue(chunk.to_vec(), outbox_core::clock::system_now())
                .await?;
        }
        let enqueue = started.elapsed();

        let seen = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(Notify::new());
        let started = Instant::now();
        let mut outboxes = Vec::new();
        for _ in 0..runners {
            let (seen, done) = (Arc::clone(&seen), Arc::clone(&done));
            let sink = sink_fn(move |_record: Record| {
                let (seen, done) = (Arc::clone(&seen), Arc::clone(&done));
                async move {
                    if seen.fetch_add(1, Ordering::SeqCst) + 1 == records {
                        done.notify_one();
                    }
                    Outcome::Delivered
                }
            });
            let store: Arc<dyn Store> = Arc::new(PgStore::connect(config.clone()).await?);
            let outbox = Outbox::builder(store, sink)
                .config(RunnerConfig {
                    batch: 32,
                    concurrency: 4,
                    safety_poll: Some(Duration::from_millis(200)),
                    ..RunnerConfig::default()
                })
                .start()
                .await?;
            outboxes.push(outbox);
        }
        done.notified().await;
        let drain = started.elapsed();
        for outbox in outboxes {
            outbox.shutdown(Duration::from_secs(30)).await?;
        }
        println!(
            "| {runners} | {records} | {:.0} | {:.0} |",
            records as f64 / enqueue.as_secs_f64(),
            records as f64 / drain.as_secs_f64()
        );
        drop_schema(&url, &schema).await;
    }
    Ok(())
}

async fn drop_schema(url: &str, schema: &str) {
    if let Ok((client, connection)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        tokio::spawn(connection);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await;
    }
}
