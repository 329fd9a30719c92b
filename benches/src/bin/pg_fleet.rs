//! What a PostgreSQL drain costs the server, beside its rate: write-ahead log bytes per drained
//! record (the server's WAL position before and after) for the outbox with 1, 2 and 4 runners and
//! for the bare `SKIP LOCKED` loops with as many connections (claim then delete; one `DELETE …
//! RETURNING`), and whether a round's cost stays flat over a long drain (the first rounds against
//! the last), beside the bare claim's over as long a drain.
//!
//! ```sh
//! cargo run --release -p outbox-benches --bin pg-fleet -- [N]   # N records per drain, default 20,000
//! ```
//!
//! With `pg_walinspect` (PostgreSQL 15 and later; the tool creates it, which takes a superuser)
//! the one-runner and one-connection drains also print their WAL by record type.
//!
//! The WAL position moves for the whole server: run it on a server nothing else writes to, or read
//! the figures as upper bounds.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_benches::bare::BarePg;
use outbox_benches::pg::{self, PgServer};
use outbox_benches::workload::fill;
use outbox_core::clock::system_now;
use outbox_core::{
    sink_fn, Change, Claim, Guard, Lease, Outbox, Outcome, Record, Result, Transition,
};

const PATIENCE: Duration = Duration::from_secs(3_600);

/// `runners` runners with the default configuration drain `n` due records from one schema.
async fn outbox_drain(server: &PgServer, runners: usize, n: usize) -> Result<()> {
    let schema = server.schema();
    let stores = pg::stores(&schema, runners).await?;
    fill(&stores[0], n, system_now()).await?;
    let wal = pg::wal_bytes(server.url()).await?;
    let started = Instant::now();
    let mut outboxes = Vec::new();
    for store in &stores {
        let sink = sink_fn(|_: Record| async { Outcome::Delivered });
        outboxes.push(Outbox::builder(Arc::clone(store), sink).start().await?);
    }
    while stores[0].stats().await?.undelivered() > 0 {
        for outbox in &outboxes {
            outbox.flush(PATIENCE).await?;
        }
    }
    let elapsed = started.elapsed();
    let wal_end = pg::wal_bytes(server.url()).await?;
    for outbox in outboxes {
        outbox.shutdown(PATIENCE).await?;
    }
    println!(
        "outbox, {runners} runner(s): {:>8.0} records/s, {:>5} WAL bytes per record",
        n as f64 / elapsed.as_secs_f64(),
        (wal_end - wal) / n as i64
    );
    if runners == 1 {
        print_kinds(server, wal, wal_end, n).await;
    }
    drop(stores);
    schema.drop().await
}

/// The bare loops with `workers` connections drain `n` due records, 100 per claim: first the
/// claim-then-delete loop (two transactions per 100, as the report's bare rows), then the
/// one-statement `DELETE … RETURNING` loop (one transaction per 100, nothing to release).
async fn bare_drain(server: &PgServer, workers: usize, n: usize) -> Result<()> {
    for deleting in [false, true] {
        let bare = BarePg::create(server.schema(), workers).await?;
        let now = system_now();
        let mut left = n;
        while left > 0 {
            let batch = left.min(10_000);
            bare.insert_batch(batch, now).await?;
            left -= batch;
        }
        let wal = pg::wal_bytes(server.url()).await?;
        let started = Instant::now();
        let removed = if deleting {
            bare.drain_deleting(100, now).await?
        } else {
            bare.drain(100, now).await?
        };
        let elapsed = started.elapsed();
        let wal_end = pg::wal_bytes(server.url()).await?;
        println!(
            "bare {}, {workers} connection(s): {:>8.0} records/s, {:>5} WAL bytes per record",
            if deleting { "delete" } else { "claim+delete" },
            removed as f64 / elapsed.as_secs_f64(),
            (wal_end - wal) / removed.max(1) as i64
        );
        if workers == 1 {
            print_kinds(server, wal, wal_end, n).await;
        }
        bare.schema().drop().await?;
    }
    Ok(())
}

/// The WAL between two positions by record type, per drained record (the types of at least 5
/// bytes a record), when the server can say.
async fn print_kinds(server: &PgServer, from: i64, to: i64, n: usize) {
    match pg::wal_kinds(server.url(), from, to, n as u64).await {
        Some(kinds) => {
            let kinds: Vec<String> = kinds
                .iter()
                .filter(|(_, bytes)| *bytes >= 5.0)
                .map(|(kind, bytes)| format!("{kind} {bytes:.0}"))
                .collect();
            println!("    WAL bytes per record by type: {}", kinds.join(", "));
        }
        None => println!("    (no pg_walinspect: no breakdown by type)"),
    }
}

/// The median of the first 50 timings against the median of the last 50 before the final,
/// empty one: (first, last) in milliseconds.
fn first_last(took: &[Duration]) -> (f64, f64) {
    let median = |rounds: &[Duration]| {
        let mut rounds = rounds.to_vec();
        rounds.sort();
        rounds[rounds.len() / 2].as_secs_f64() * 1e3
    };
    let k = 50.min(took.len() / 2).max(1);
    let end = took.len().saturating_sub(1).max(k);
    (median(&took[..k]), median(&took[end - k..end]))
}

/// One store drained round by round (each round reports the last claim delivered and claims
/// 32 more), timing every round: the median of the first 50 rounds against the last 50.
async fn round_cost(server: &PgServer, n: usize) -> Result<()> {
    let schema = server.schema();
    let stores = pg::stores(&schema, 1).await?;
    let store = &stores[0];
    fill(store, n, system_now()).await?;
    let mut took = Vec::new();
    let mut held: Vec<Transition> = Vec::new();
    for token in 1u64.. {
        let now = system_now();
        let claim = Claim {
            now,
            limit: 32,
            lease: Lease {
                token,
                until: now + 60_000,
            },
        };
        let started = Instant::now();
        let round = store.round(std::mem::take(&mut held), Some(claim)).await?;
        took.push(started.elapsed());
        if round.claimed.is_empty() {
            break;
        }
        held = round
            .claimed
            .iter()
            .map(|r| Transition {
                id: r.id,
                guard: Guard::Lease(token),
                change: Change::Delivered,
            })
            .collect();
    }
    let (first, last) = first_last(&took);
    println!(
        "a round of 32 over a {n}-record drain: first {first:.2} ms, last {last:.2} ms \
         ({:.2}x)",
        last / first
    );
    drop(stores);
    schema.drop().await?;

    let bare = BarePg::create(server.schema(), 1).await?;
    let now = system_now();
    for _ in 0..n.div_ceil(10_000) {
        bare.insert_batch(10_000, now).await?;
    }
    let (first, last) = first_last(&bare.claim_times(32, now).await?);
    println!(
        "the bare claim of 32 over a {}-record drain: first {first:.2} ms, last {last:.2} ms \
         ({:.2}x)",
        n.div_ceil(10_000) * 10_000,
        last / first
    );
    bare.schema().drop().await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let Some(server) = PgServer::find().await? else {
        return Ok(());
    };
    println!("PostgreSQL drain, {n} records, {}", server.durability());
    for runners in pg::RUNNERS {
        outbox_drain(&server, runners, n).await?;
        bare_drain(&server, runners, n).await?;
    }
    round_cost(&server, n.max(100_000)).await
}
