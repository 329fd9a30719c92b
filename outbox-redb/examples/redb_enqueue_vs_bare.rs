//! One producer, one record per enqueue, against bare redb inserting one row per write
//! transaction with the store's default commit settings (`Durability::Immediate`, two-phase
//! commit, quick repair), in alternating rounds so both see the same disk and neighbours.
//!
//! ```text
//! cargo run --release -p outbox-redb --example redb_enqueue_vs_bare [ROUNDS] [DIR]
//! ```

use std::io::Write;
use std::time::Instant;

use outbox_core::{Error, NewRecord, Result, Store};
use outbox_redb::{RedbConfig, RedbStore};
use redb::{Database, TableDefinition};

const PER_ROUND: u32 = 200;
const PAYLOAD: [u8; 256] = [7; 256];
const QUEUE: TableDefinition<u64, &[u8]> = TableDefinition::new("q");

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND)
}

fn bare_round(db: &Database, next: &mut u64) -> std::result::Result<f64, redb::Error> {
    let start = Instant::now();
    for _ in 0..PER_ROUND {
        let mut txn = db.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)?;
        txn.set_two_phase_commit(true);
        txn.set_quick_repair(true);
        txn.open_table(QUEUE)?.insert(*next, &PAYLOAD[..])?;
        *next += 1;
        txn.commit()?;
    }
    Ok(micros(start))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    let dir = args.next().unwrap_or_else(|| ".".into());
    let temp = tempfile::tempdir_in(&dir).map_err(Error::backend)?;
    let store = RedbStore::create(temp.path().join("store.redb"), RedbConfig::default()).await?;
    let mut db = Some(Database::create(temp.path().join("bare.redb")).map_err(Error::backend)?);
    let mut next = 0;

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            store
                .enqueue(vec![NewRecord::new(PAYLOAD.to_vec())], 1_000)
                .await?;
        }
        ours.push(micros(start));
        let bare = db.take().ok_or(Error::Stopped)?;
        let (bare, round, after) = tokio::task::spawn_blocking(move || {
            let round = bare_round(&bare, &mut next);
            (bare, round, next)
        })
        .await
        .map_err(Error::backend)?;
        next = after;
        db = Some(bare);
        theirs.push(round.map_err(Error::backend)?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, theirs) = (median(&mut ours), median(&mut theirs));
    writeln!(
        std::io::stdout().lock(),
        "median of {rounds} rounds of {PER_ROUND}: store {ours:.0} µs per enqueue, bare \
         {theirs:.0} µs per insert, store/bare rate {:.2}x",
        theirs / ours
    )
    .map_err(Error::backend)?;
    Ok(())
}
