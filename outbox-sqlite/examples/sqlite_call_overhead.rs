//! Measures what one store call costs beyond its SQL: 10,000 `get` calls against the same
//! query run directly on a connection, and the thread hops the store makes around it.
//!
//! ```text
//! cargo run --release -p outbox-sqlite --example sqlite_call_overhead [DIR]
//! ```
#![allow(clippy::print_stdout)] // A measuring tool: its output is the point.

use std::time::Instant;

use outbox_core::{NewRecord, RecordId, Result, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};

const CALLS: u32 = 10_000;

fn per_call(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let temp = tempfile::tempdir_in(&dir).map_err(outbox_core::Error::backend)?;
    let path = temp.path().join("calls.db");
    let store = SqliteStore::create(&path, SqliteConfig::default()).await?;
    let ids = store
        .enqueue(vec![NewRecord::new(vec![7; 256])], 1_000)
        .await?;
    let id: RecordId = ids[0];

    let start = Instant::now();
    for _ in 0..CALLS {
        store.get(id).await?;
    }
    let store_get = per_call(start);

    let conn = rusqlite::Connection::open(&path).map_err(outbox_core::Error::backend)?;
    let start = Instant::now();
    for _ in 0..CALLS {
        let mut stmt = conn
            .prepare_cached("SELECT * FROM records WHERE id = ?1")
            .map_err(outbox_core::Error::backend)?;
        let mut rows = stmt
            .query([id.0 as i64])
            .map_err(outbox_core::Error::backend)?;
        while rows.next().map_err(outbox_core::Error::backend)?.is_some() {}
    }
    let bare_get = per_call(start);

    let start = Instant::now();
    for _ in 0..CALLS {
        tokio::task::spawn_blocking(|| ())
            .await
            .map_err(outbox_core::Error::backend)?;
    }
    let hop = per_call(start);

    println!("store.get: {store_get:.1} µs per call");
    println!("the same SELECT on a connection: {bare_get:.1} µs per call");
    println!("an empty spawn_blocking round trip: {hop:.1} µs");
    store.close().await;
    Ok(())
}
