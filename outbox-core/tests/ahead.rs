//! The claim ahead through the public API: over a backlog, the next round is claimed while
//! one delivers, so the store's work and the deliveries overlap; rounds of a fixed size take
//! turns with the store as before; each group still goes in order, one record at a time; and
//! a shutdown's grace still ends deliveries while a store call is under way. Under tokio's paused clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::layer::StoreLayer;
use outbox_core::{
    sink_fn, Claim, Millis, NewRecord, Outbox, Outcome, Record, Result, Round, RunnerConfig, Store,
    TokioClock, Transition,
};
use outbox_memory::MemoryStore;

const BASE: Millis = 1_700_000_000_000;

/// The memory store, each round taking 20 ms, with a flag up while one is under way.
#[derive(Debug, Default)]
struct Slow {
    inner: MemoryStore,
    busy: AtomicBool,
    /// Deliveries running, as a sink that counts them says.
    running: AtomicUsize,
    /// Claims made while deliveries ran: claims ahead.
    claimed_beside: AtomicUsize,
}

#[async_trait]
impl StoreLayer for Slow {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        assert!(
            !self.busy.swap(true, Ordering::SeqCst),
            "one store call at a time"
        );
        if claim.is_some() && self.running.load(Ordering::SeqCst) > 0 {
            self.claimed_beside.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let round = self.inner.round(outcomes, claim).await;
        self.busy.store(false, Ordering::SeqCst);
        round
    }
}

/// Drains `backlog` records through a sink taking 5 ms each, 64 at a time; returns how many deliveries
/// started while the store worked on a round, and how long the drain took.
async fn drain(config: RunnerConfig, backlog: usize) -> (usize, Duration) {
    let store = Arc::new(Slow::default());
    let overlapped = Arc::new(AtomicUsize::new(0));
    let sink = {
        let store = Arc::clone(&store);
        let overlapped = Arc::clone(&overlapped);
        sink_fn(move |_: Record| {
            if store.busy.load(Ordering::SeqCst) {
                overlapped.fetch_add(1, Ordering::SeqCst);
            }
            async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Outcome::Delivered
            }
        })
    };
    let outbox = Outbox::builder(store.clone(), sink)
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .config(config.with_concurrency(64))
        .start()
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    outbox
        .enqueue_batch(
            (0..backlog)
                .map(|_| NewRecord::new(b"x".to_vec()))
                .collect(),
        )
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    outbox.flush(Duration::from_secs(60)).await.unwrap();
    let took = started.elapsed();
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.undelivered()), (backlog as u64, 0));
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    (overlapped.load(Ordering::SeqCst), took)
}

#[tokio::test(start_paused = true)]
async fn over_a_backlog_deliveries_go_on_while_the_store_claims_the_next_round() {
    let grows = RunnerConfig::default().with_batch(64).with_max_batch(256);
    let fixed = RunnerConfig::default().with_batch(256).with_max_batch(256);
    let (overlapped, ahead) = drain(grows, 4_096).await;
    let (none, turns) = drain(fixed, 4_096).await;
    // Rounds of 256 records, 64 at a time for 5 ms each: 20 ms of deliveries and 20 ms of
    // store work a round. Taking turns, the sixteen rounds cost both, 640 ms; claimed
    // ahead, the two overlap, and the drain takes little more than the store's work.
    assert_eq!(none, 0, "fixed rounds take turns with the store");
    assert!(turns >= Duration::from_millis(640), "{turns:?}");
    assert!(overlapped > 4_096 / 2, "{overlapped} deliveries overlapped");
    assert!(
        ahead < turns * 3 / 4,
        "{ahead:?} claimed ahead against {turns:?} in turns"
    );
}

/// The memory store whose writes that claim nothing (a commit of outcomes while deliveries
/// run) take ten seconds.
#[derive(Debug, Default)]
struct SlowCommits {
    inner: MemoryStore,
}

#[async_trait]
impl StoreLayer for SlowCommits {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        if claim.is_none() {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        self.inner.round(outcomes, claim).await
    }
}

/// Sets the instant it is dropped.
struct Dropped(Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

impl Drop for Dropped {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(tokio::time::Instant::now());
    }
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_aborts_deliveries_at_its_grace_while_a_store_call_is_under_way() {
    let aborted = Arc::new(std::sync::Mutex::new(None));
    let sink = {
        let aborted = Arc::clone(&aborted);
        sink_fn(move |record: Record| {
            let guard = Dropped(Arc::clone(&aborted));
            async move {
                if record.payload == b"hangs" {
                    std::future::pending::<()>().await;
                }
                std::mem::forget(guard);
                Outcome::Delivered
            }
        })
    };
    let outbox = Outbox::builder(Arc::new(SlowCommits::default()), sink)
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .start()
        .await
        .unwrap();
    outbox
        .enqueue_batch(vec![
            NewRecord::new(b"hangs".to_vec()),
            NewRecord::new(b"ok".to_vec()),
        ])
        .await
        .unwrap();
    // The quick delivery's outcome is being written (ten seconds) while the other hangs.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let asked = tokio::time::Instant::now();
    let _ = outbox.shutdown(Duration::from_secs(1)).await;
    let at = aborted
        .lock()
        .unwrap()
        .expect("the hanging delivery was aborted");
    assert!(
        at - asked <= Duration::from_secs(1),
        "aborted {:?} after the shutdown began, past its grace",
        at - asked
    );
}

#[tokio::test(start_paused = true)]
async fn with_rounds_claimed_ahead_each_group_goes_in_order_one_record_at_a_time() {
    use std::collections::HashMap;
    use std::sync::Mutex;

    let store = Arc::new(Slow::default());
    /// Per group: whether a delivery is running, and the ids delivered, in order.
    type Groups = Mutex<HashMap<String, (bool, Vec<u64>)>>;
    let groups: Arc<Groups> = Arc::default();
    let overlapped = Arc::new(AtomicUsize::new(0));
    // Deliveries that started while another of their group ran (a panic in the sink would
    // only count as an interruption, so they are counted).
    let doubled = Arc::new(AtomicUsize::new(0));
    let sink = {
        let (store, groups) = (store.clone(), groups.clone());
        let (overlapped, doubled) = (overlapped.clone(), doubled.clone());
        sink_fn(move |record: Record| {
            if store.busy.load(Ordering::SeqCst) {
                overlapped.fetch_add(1, Ordering::SeqCst);
            }
            let group = record.group.clone().unwrap_or_default();
            store.running.fetch_add(1, Ordering::SeqCst);
            {
                let mut groups = groups.lock().unwrap();
                let entry = groups.entry(group.clone()).or_default();
                if std::mem::replace(&mut entry.0, true) {
                    doubled.fetch_add(1, Ordering::SeqCst);
                }
                entry.1.push(record.id.0);
            }
            let (groups, store) = (groups.clone(), store.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                groups.lock().unwrap().get_mut(&group).unwrap().0 = false;
                store.running.fetch_sub(1, Ordering::SeqCst);
                Outcome::Delivered
            }
        })
    };
    let outbox = Outbox::builder(store.clone(), sink)
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .config(RunnerConfig::default().with_concurrency(64))
        .start()
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    // 6,144 records over 2,048 groups of 3, interleaved: more heads than a round of 1,024
    // holds, so rounds come back full and are claimed ahead, while the groups' next records
    // wait for their heads.
    outbox
        .enqueue_batch(
            (0..6_144)
                .map(|i| NewRecord::new(b"x".to_vec()).in_group(format!("g{}", i % 2_048)))
                .collect(),
        )
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(600)).await.unwrap();
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.undelivered()), (6_144, 0));
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        doubled.load(Ordering::SeqCst),
        0,
        "a group had two in flight"
    );
    assert!(overlapped.load(Ordering::SeqCst) > 0);
    assert!(
        store.claimed_beside.load(Ordering::SeqCst) > 0,
        "nothing was claimed ahead"
    );
    for (group, (_, ids)) in groups.lock().unwrap().iter() {
        assert_eq!(ids.len(), 3, "{group}: {ids:?}");
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{group} out of order: {ids:?}"
        );
    }
}
