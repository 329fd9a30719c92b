//! Measures the enqueue rate with 1 producer and with 64 concurrent producers, each enqueue
//! waiting until its record is durable at the chosen level (default: `Durability::Full`).
//!
//! ```text
//! cargo run --release -p outbox-sqlite --example sqlite_enqueue_rate [full|normal|off] [DIR]
//! ```
//!
//! DIR (default: the current directory) should be on the disk you care about: a tmpfs makes
//! every sync free and the figures meaningless.
#![allow(clippy::print_stdout)] // A measuring tool: its output is the point.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{NewRecord, Result, Store};
use outbox_sqlite::{Durability, SqliteConfig, SqliteStore};

const PAYLOAD: usize = 256;

async fn run(store: Arc<SqliteStore>, producers: usize, per_producer: usize) -> Result<Duration> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|p| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per_producer {
                    let record = NewRecord::new(vec![(p + i) as u8; PAYLOAD]);
                    store.enqueue(vec![record], 1_000).await?;
                }
                Ok::<_, outbox_core::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(outbox_core::Error::backend)??;
    }
    Ok(start.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let durability = match args.next().as_deref() {
        None | Some("full") => Durability::Full,
        Some("normal") => Durability::Normal,
        Some("off") => Durability::Off,
        Some(other) => {
            return Err(outbox_core::Error::InvalidConfig(format!(
                "unknown durability {other:?}: full, normal or off"
            )))
        }
    };
    let dir = args.next().unwrap_or_else(|| ".".into());
    let temp = tempfile::tempdir_in(&dir).map_err(outbox_core::Error::backend)?;
    let config = SqliteConfig::default().durability(durability);
    let store = Arc::new(SqliteStore::create(temp.path().join("rate.db"), config).await?);

    println!(
        "durability {durability:?} (synchronous = {}), WAL, payload {PAYLOAD} bytes, \
         one record per enqueue, {} CPU cores, directory {dir}",
        durability.synchronous(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    for (producers, per_producer) in [(1, 5_000), (64, 500)] {
        let total = producers * per_producer;
        let before = store.write_transactions();
        let elapsed = run(store.clone(), producers, per_producer).await?;
        let transactions = store.write_transactions() - before;
        println!(
            "{producers:>3} producer(s): {total:>6} enqueues in {:>7.1} ms = {:>8.0} enqueues/s, \
             {transactions} transactions ({:.1} enqueues each)",
            elapsed.as_secs_f64() * 1e3,
            total as f64 / elapsed.as_secs_f64(),
            total as f64 / transactions.max(1) as f64,
        );
    }
    Ok(())
}
