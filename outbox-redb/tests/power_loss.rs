//! Power loss through redb's pluggable storage: cut the power while enqueues and attempts are
//! being committed, drop or garble every unsynced write, restart, and find every acknowledged
//! write, with redb's one-sync commit (the default) and with its two-phase commit. The same
//! run on a store that acknowledges before syncing finds the loss, so the test can fail.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::disk::Disk;
use common::{failed, lease};
use outbox_core::{Change, Claim, Guard, NewRecord, RecordId, State, Store, Transition};
use outbox_redb::{Durability, RedbConfig, RedbStore};

/// What the store acknowledged before the cut.
#[derive(Default)]
struct Acked {
    enqueued: Vec<RecordId>,
    /// Attempts whose `apply` returned, by record: the lowest count the record may show.
    attempts: HashMap<RecordId, u32>,
}

struct Run {
    store: RedbStore,
    acked: Mutex<Acked>,
}

impl Run {
    fn acked(&self) -> std::sync::MutexGuard<'_, Acked> {
        self.acked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn producer(run: Arc<Run>, who: u8) {
    for i in 0..200u32 {
        let record = NewRecord::new(vec![who; 64 + (i as usize % 300)]);
        match run.store.enqueue(vec![record], 1_000).await {
            Ok(ids) => run.acked().enqueued.extend(ids),
            Err(_) => return,
        }
    }
}

/// Claims and reports one failed attempt per claimed record, as a runner would.
async fn attempter(run: Arc<Run>) {
    for round in 0..400u64 {
        let now = 1_000 + round;
        let claim = Claim {
            now,
            limit: 4,
            lease: lease(round, now + 30_000),
        };
        let Ok(claimed) = run.store.claim(claim).await else {
            return;
        };
        let transitions = claimed
            .iter()
            .map(|r| Transition {
                id: r.id,
                guard: Guard::Lease(round),
                change: Change::Update(failed(r, now, now)),
            })
            .collect();
        match run.store.apply(transitions).await {
            Ok(applied) => {
                let mut acked = run.acked();
                for r in claimed.iter().filter(|r| !applied.skipped.contains(&r.id)) {
                    acked.attempts.insert(r.id, r.attempts + 1);
                }
            }
            Err(_) => return,
        }
    }
}

/// What one cut found.
struct Cut {
    /// Acknowledged writes missing after the restart.
    lost: Vec<String>,
    /// Unsynced changes the cut met.
    torn: usize,
}

/// Runs producers and an attempter until the power is cut at a seeded random write, sync or
/// resize of the disk (so mostly in the middle of a commit), restarts on what the disk kept,
/// and lists what was acknowledged and is not there.
async fn cut_and_restart(seed: u64, config: &RedbConfig) -> Cut {
    let disk = Disk::default();
    let store = RedbStore::create_with_backend(disk.clone(), config.clone())
        .await
        .unwrap();
    disk.cut_at_op(fastrand::Rng::with_seed(seed).u64(20..1_500), seed);
    let run = Arc::new(Run {
        store,
        acked: Mutex::default(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for who in 0..3 {
        tasks.spawn(producer(Arc::clone(&run), who));
    }
    tasks.spawn(attempter(Arc::clone(&run)));
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    // A store that never reached the disk before the countdown ran out loses its power now.
    disk.cut_power(&mut fastrand::Rng::with_seed(seed));
    let image = disk.image_after_cut().expect("the power is cut");
    let torn = disk.torn();
    let run = Arc::into_inner(run).expect("every task is done");
    let acked = run.acked.into_inner().unwrap_or_else(|e| e.into_inner());
    drop(run.store);

    let store = RedbStore::open_with_backend(Disk::from_image(image), config.clone())
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: reopen after the cut failed: {e}"));
    let mut lost = Vec::new();
    for id in &acked.enqueued {
        if store.get(*id).await.unwrap().is_none() {
            lost.push(format!("seed {seed}: acknowledged {id} was lost"));
        }
    }
    for (id, attempts) in &acked.attempts {
        let shown = store.get(*id).await.unwrap().map_or(0, |r| r.attempts);
        if shown < *attempts {
            lost.push(format!(
                "seed {seed}: {id} shows {shown} attempts, {attempts} were acknowledged"
            ));
        }
    }
    // Whatever was in flight at the cut is recoverable at once, and ids go on increasing.
    let stats = store.stats().await.unwrap();
    let expired = store.expired(0, usize::MAX).await.unwrap();
    assert_eq!(expired.len() as u64, stats.in_flight, "seed {seed}");
    assert!(expired.iter().all(|r| r.state == State::InFlight));
    let max_acked = acked.enqueued.iter().max().copied().unwrap_or(RecordId(0));
    let next = store
        .enqueue(vec![NewRecord::new(b"after".to_vec())], 0)
        .await
        .unwrap();
    if next[0] <= max_acked {
        lost.push(format!("seed {seed}: id {} reused", next[0]));
    }
    Cut { lost, torn }
}

/// Cuts the power once per seed with `config`; asserts nothing acknowledged was lost and that
/// most cuts met a commit on its way to the disk (a cut between commits would test nothing).
async fn survives(seeds: std::ops::Range<u64>, config: &RedbConfig) {
    let mut torn = 0;
    for seed in seeds.clone() {
        let cut = cut_and_restart(seed, config).await;
        assert!(cut.lost.is_empty(), "{config:?}: {:#?}", cut.lost);
        torn += usize::from(cut.torn > 0);
    }
    assert!(
        torn * 2 >= seeds.count(),
        "only {torn} cuts met unsynced writes"
    );
}

/// The default: redb's one-sync commit, whose torn commits redb detects by their checksums;
/// the open after the cut walks the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_power_cut() {
    survives(0..24, &RedbConfig::default()).await;
}

/// Two-phase commit, the option that does not rest on checksums, keeps the same promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_power_cut_with_two_phase_commit() {
    survives(100..124, &RedbConfig::default().with_two_phase_commit(true)).await;
}

/// With quick repair the open after the cut reads the saved allocator state instead of
/// walking the file, and finds the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_power_cut_with_quick_repair() {
    survives(200..224, &RedbConfig::default().with_quick_repair(true)).await;
}

/// The test can fail: a store that answers before its commits reach the disk
/// (`Durability::None`) loses acknowledged writes in these same cuts, and the test sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cut_finds_writes_acknowledged_before_their_sync() {
    let config = RedbConfig {
        durability: Durability::None,
        ..RedbConfig::default()
    };
    let mut lost = 0;
    for seed in 0..8 {
        lost += usize::from(!cut_and_restart(seed, &config).await.lost.is_empty());
    }
    assert_eq!(lost, 8, "every cut finds a lost write");
}

/// A full disk refuses the write with `StorageFull`, and every write acknowledged before it is
/// still there when the store is opened again.
#[tokio::test]
async fn a_full_disk_refuses_the_write_and_loses_nothing() {
    let disk = Disk::with_capacity(4 * 1024 * 1024);
    let store = RedbStore::create_with_backend(disk.clone(), RedbConfig::default())
        .await
        .unwrap();
    let mut acked = Vec::new();
    let err = loop {
        let batch = (0..4).map(|_| NewRecord::new(vec![7; 60_000])).collect();
        match store.enqueue(batch, 0).await {
            Ok(ids) => acked.extend(ids),
            Err(err) => break err,
        }
        assert!(acked.len() < 1_000, "the disk never filled");
    };
    assert!(
        matches!(err, outbox_core::Error::StorageFull { .. }),
        "{err:?}"
    );
    assert!(!acked.is_empty());
    drop(store);

    let store = RedbStore::open_with_backend(disk, RedbConfig::default())
        .await
        .unwrap();
    for id in &acked {
        assert!(store.get(*id).await.unwrap().is_some(), "{id} was lost");
    }
}
