//! The claim ahead through the public API: over a backlog, the next round is claimed while
//! one delivers, so the store's work and the deliveries overlap; rounds of a fixed size take
//! turns with the store as before; and a shutdown's grace still ends deliveries while a store
//! call is under way. Under tokio's paused clock.

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
