//! Power loss through redb's pluggable storage: cut the power while enqueues and attempts are
//! being committed, drop or garble every unsynced write, restart, and find every acknowledged
//! write.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::disk::Disk;
use common::{failed, lease};
use outbox_core::{Change, Claim, Guard, NewRecord, RecordId, State, Store, Transition};
use outbox_redb::{RedbConfig, RedbStore};

/// What the store acknowledged before the cut.
#[derive(Default)]
struct Acked {
    enqueued: Vec<RecordId>,
    /// Attempts whose `apply` returned, by record: the lowest count the record may show.
    attempts: HashMap<RecordId, u32>,
}

struct Run {
    store: RedbStore,
    disk: Disk,
    acked: Mutex<Acked>,
    acks: AtomicUsize,
    cut_after: usize,
    seed: u64,
}

impl Run {
    /// Counts an acknowledgement; the one that reaches `cut_after` cuts the power while the
    /// other tasks' writes are on their way.
    fn ack(&self) {
        if self.acks.fetch_add(1, Ordering::SeqCst) + 1 == self.cut_after {
            self.disk
                .cut_power(&mut fastrand::Rng::with_seed(self.seed));
        }
    }

    fn acked(&self) -> std::sync::MutexGuard<'_, Acked> {
        self.acked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn producer(run: Arc<Run>, who: u8) {
    for i in 0..200u32 {
        let record = NewRecord::new(vec![who; 64 + (i as usize % 300)]);
        match run.store.enqueue(vec![record], 1_000).await {
            Ok(ids) => {
                run.acked().enqueued.extend(ids);
                run.ack();
            }
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
                drop(acked);
                run.ack();
            }
            Err(_) => return,
        }
    }
}

async fn cut_and_restart(seed: u64, config: &RedbConfig) {
    let disk = Disk::default();
    let store = RedbStore::create_with_backend(disk.clone(), config.clone())
        .await
        .unwrap();
    let run = Arc::new(Run {
        store,
        disk: disk.clone(),
        acked: Mutex::default(),
        acks: AtomicUsize::new(0),
        cut_after: fastrand::Rng::with_seed(seed).usize(10..120),
        seed,
    });
    let mut tasks = tokio::task::JoinSet::new();
    for who in 0..3 {
        tasks.spawn(producer(Arc::clone(&run), who));
    }
    tasks.spawn(attempter(Arc::clone(&run)));
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let image = disk
        .image_after_cut()
        .unwrap_or_else(|| panic!("seed {seed}: the power was never cut"));
    let run = Arc::into_inner(run).expect("every task is done");
    let acked = run.acked.into_inner().unwrap_or_else(|e| e.into_inner());
    drop(run.store);

    let store = RedbStore::open_with_backend(Disk::from_image(image), config.clone())
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: reopen after the cut failed: {e}"));
    for id in &acked.enqueued {
        let record = store.get(*id).await.unwrap();
        assert!(record.is_some(), "seed {seed}: acknowledged {id} was lost");
    }
    for (id, attempts) in &acked.attempts {
        let record = store.get(*id).await.unwrap().unwrap();
        assert!(
            record.attempts >= *attempts,
            "seed {seed}: {id} shows {} attempts, {attempts} were acknowledged",
            record.attempts
        );
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
    assert!(next[0] > max_acked, "seed {seed}: id {} reused", next[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_power_cut() {
    for seed in 0..24 {
        cut_and_restart(seed, &RedbConfig::default()).await;
    }
}

/// The cheaper settings a user may choose keep the same promise: redb's one-phase commit
/// detects a torn commit by its checksums, and without quick repair the open after the cut
/// walks the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_power_cut_with_one_phase_commit() {
    let config = RedbConfig {
        two_phase_commit: false,
        quick_repair: false,
        ..RedbConfig::default()
    };
    for seed in 100..124 {
        cut_and_restart(seed, &config).await;
    }
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
