//! Times 1,000 claims on a queue where nothing is due yet (what an idle runner does), at the
//! default durability. Run it under `strace -f -c -e trace=fdatasync,fsync` to count the syncs
//! they cost (none since a claim that changes nothing is no longer committed).
//!
//! ```text
//! cargo run --release -p outbox-redb --example redb_idle_claims [DIR]
//! ```

use std::io::Write;
use std::time::Instant;

use outbox_core::{Claim, Lease, NewRecord, Store};
use outbox_redb::{RedbConfig, RedbStore};

const CLAIMS: u32 = 1_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let temp = tempfile::tempdir_in(dir).expect("temporary directory");
    let store = RedbStore::create(temp.path().join("idle.redb"), RedbConfig::default())
        .await
        .expect("create");
    let later: Vec<NewRecord> = (0..100)
        .map(|i| NewRecord::new(format!("{{\"n\":{i}}}").into_bytes()))
        .collect();
    store.enqueue(later, 1_000_000).await.expect("enqueue");
    let lease = Lease {
        token: 1,
        until: 30_000,
    };
    let start = Instant::now();
    for _ in 0..CLAIMS {
        let claimed = store
            .claim(Claim {
                now: 1_000,
                limit: 32,
                lease,
            })
            .await
            .expect("claim");
        assert!(claimed.is_empty(), "nothing is due at 1_000");
    }
    let per_claim = start.elapsed().as_secs_f64() * 1e6 / f64::from(CLAIMS);
    writeln!(
        std::io::stdout().lock(),
        "{CLAIMS} idle claims: {per_claim:.1} µs each"
    )
    .ok();
}
