//! One producer, one record per enqueue, against the bare engine doing one INSERT per
//! transaction at the same durability (WAL, `synchronous = FULL`), in alternating rounds so
//! both see the same disk and the same neighbours.
//!
//! ```text
//! cargo run --release -p outbox-sqlite --example sqlite_enqueue_vs_bare [ROUNDS] [DIR] [full|off]
//! ```
//!
//! With `off` (no sync on either side) what is left is the store's own cost per call.
#![allow(clippy::print_stdout)] // A measuring tool: its output is the point.

use std::time::Instant;

use outbox_core::{Error, NewRecord, Result, Store};
use outbox_sqlite::{Durability, SqliteConfig, SqliteStore};
use rusqlite::{params, Connection};

const PER_ROUND: u32 = 400;
const PAYLOAD: [u8; 256] = [7; 256];

fn bare(path: &std::path::Path, synchronous: &str) -> Result<Connection> {
    let conn = Connection::open(path).map_err(Error::backend)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(Error::backend)?;
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(Error::backend)?;
    conn.execute_batch(
        "CREATE TABLE q (id INTEGER PRIMARY KEY, due INTEGER NOT NULL, payload BLOB NOT NULL,
             lease INTEGER);
         CREATE INDEX q_due ON q(due, id) WHERE lease IS NULL;",
    )
    .map_err(Error::backend)?;
    Ok(conn)
}

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    let dir = args.next().unwrap_or_else(|| ".".into());
    let durability = match args.next().as_deref() {
        Some("off") => Durability::Off,
        _ => Durability::Full,
    };
    let temp = tempfile::tempdir_in(&dir).map_err(Error::backend)?;
    let config = SqliteConfig::default().durability(durability);
    let store = SqliteStore::create(temp.path().join("store.db"), config).await?;
    let synchronous = if durability == Durability::Off {
        "OFF"
    } else {
        "FULL"
    };
    let mut conn = bare(&temp.path().join("bare.db"), synchronous)?;

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            let record = NewRecord::new(PAYLOAD.to_vec());
            store.enqueue(vec![record], 1_000).await?;
        }
        ours.push(micros(start));
        let bare_round;
        (conn, bare_round) = tokio::task::spawn_blocking(move || -> Result<(Connection, f64)> {
            let start = Instant::now();
            for _ in 0..PER_ROUND {
                let tx = conn.transaction().map_err(Error::backend)?;
                tx.prepare_cached("INSERT INTO q (due, payload) VALUES (?1, ?2)")
                    .and_then(|mut stmt| stmt.execute(params![1_000, &PAYLOAD[..]]))
                    .map_err(Error::backend)?;
                tx.commit().map_err(Error::backend)?;
            }
            Ok((conn, micros(start)))
        })
        .await
        .map_err(Error::backend)??;
        theirs.push(bare_round);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, theirs) = (median(&mut ours), median(&mut theirs));
    println!(
        "{durability:?}: median of {rounds} rounds of {PER_ROUND}: store {ours:.0} µs per enqueue, bare \
         {theirs:.0} µs per insert, store/bare rate {:.2}x",
        theirs / ours
    );
    store.close().await;
    Ok(())
}
