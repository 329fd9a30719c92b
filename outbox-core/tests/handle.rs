//! The handle shared by an application's tasks: `shutdown` through an `Arc`, twice, after a
//! timed-out first call; `Drop` still stopping the runner; `prune` by age; a resume of the halt
//! a person was shown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::Halt;
use outbox_core::{
    sink_fn, Claim, Error, Event, Millis, NewRecord, Outbox, Outcome, Record, Round, RunnerConfig,
    State, Store, TokioClock, Transition,
};
use outbox_memory::MemoryStore;

const BASE: Millis = 1_700_000_000_000;

/// A sink that takes `delay` per delivery, then delivers.
fn slow(delay: Duration) -> impl outbox_core::Sink {
    sink_fn(move |_: Record| async move {
        tokio::time::sleep(delay).await;
        Outcome::Delivered
    })
}

async fn start(store: Arc<MemoryStore>, sink: impl outbox_core::Sink) -> Outbox {
    Outbox::builder(store, sink)
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .config(RunnerConfig::default().with_seed(5))
        .start()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn any_holder_of_a_shared_handle_can_shut_it_down_and_a_second_call_is_fine() {
    let store = Arc::new(MemoryStore::new());
    let outbox = Arc::new(start(Arc::clone(&store), slow(Duration::from_secs(1))).await);
    outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Another task holds the handle too, and shuts it down while the delivery runs.
    let other = Arc::clone(&outbox);
    let stopper = tokio::spawn(async move { other.shutdown(Duration::from_secs(10)).await });
    stopper.await.unwrap().unwrap();
    // The delivery under way reported within the grace.
    assert_eq!(store.stats().await.unwrap().delivered, 1);
    outbox.shutdown(Duration::from_secs(10)).await.unwrap();
    // Enqueuing still writes, but nothing delivers it any more.
    outbox.enqueue(NewRecord::new(b"y".to_vec())).await.unwrap();
    assert!(matches!(
        outbox.flush(Duration::from_secs(1)).await,
        Err(Error::Stopped)
    ));
    // The store stays readable through the handle.
    assert_eq!(outbox.stats().await.unwrap().delivered, 1);
}

/// The memory store, with rounds that take 5 s (of the paused clock) once `slow` is set.
#[derive(Debug, Default)]
struct SlowRounds {
    inner: MemoryStore,
    slow: AtomicBool,
}

#[outbox_core::async_trait]
impl outbox_core::layer::StoreLayer for SlowRounds {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn round(&self, t: Vec<Transition>, c: Option<Claim>) -> outbox_core::Result<Round> {
        if self.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        self.inner.round(t, c).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_second_shutdown_waits_for_the_runner_the_first_one_gave_up_on() {
    let store = Arc::new(SlowRounds::default());
    let outbox = Outbox::builder(store.clone(), slow(Duration::from_secs(60)))
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .start()
        .await
        .unwrap();
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    store.slow.store(true, Ordering::SeqCst);
    // The delivery is abandoned after the grace, but writing its release takes 5 s: the
    // call gives up first.
    assert!(matches!(
        outbox.shutdown(Duration::from_millis(100)).await,
        Err(Error::Timeout(_))
    ));
    assert_eq!(store.get(id).await.unwrap().unwrap().state, State::InFlight);
    // The runner goes on ending in the background; a second call waits for it.
    outbox.shutdown(Duration::from_secs(10)).await.unwrap();
    let record = store.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, State::Pending, "released, nothing spent");
    assert_eq!(record.attempts + record.unanswered + record.interrupted, 0);
}

#[tokio::test(start_paused = true)]
async fn two_tasks_shutting_down_at_once_both_see_the_runner_end() {
    let store = Arc::new(MemoryStore::new());
    let outbox = Arc::new(start(Arc::clone(&store), slow(Duration::from_secs(1))).await);
    outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let outbox = Arc::clone(&outbox);
            tokio::spawn(async move {
                outbox.shutdown(Duration::from_secs(10)).await?;
                // Each call returns only once the runner has ended and recorded the delivery.
                Ok::<_, Error>(store_delivered(&outbox).await)
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 1);
    }
}

async fn store_delivered(outbox: &Outbox) -> u64 {
    outbox.store().stats().await.unwrap().delivered
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_still_stops_the_runner_and_releases_its_records() {
    let store = Arc::new(MemoryStore::new());
    let outbox = start(Arc::clone(&store), slow(Duration::from_secs(3_600))).await;
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.get(id).await.unwrap().unwrap().state, State::InFlight);
    drop(outbox);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let record = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        State::Pending,
        "released by the ending runner"
    );
    assert_eq!(record.attempts + record.unanswered + record.interrupted, 0);
}

#[tokio::test(start_paused = true)]
async fn prune_removes_what_is_older_than_the_age_given() {
    let store = Arc::new(MemoryStore::new());
    let sink = sink_fn(|_: Record| async { Outcome::rejected("HTTP 422") });
    let outbox = start(Arc::clone(&store), sink).await;
    outbox
        .enqueue(NewRecord::new(b"old".to_vec()))
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    outbox
        .enqueue(NewRecord::new(b"new".to_vec()))
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(outbox.stats().await.unwrap().rejected, 2);
    // Older than half an hour: the first only.
    assert_eq!(outbox.prune(Duration::from_secs(1_800)).await.unwrap(), 1);
    assert_eq!(outbox.stats().await.unwrap().rejected, 1);
    // A retention longer than the clock has run is no cut at all.
    assert_eq!(outbox.prune(Duration::MAX).await.unwrap(), 0);
    assert_eq!(outbox.prune(Duration::ZERO).await.unwrap(), 1);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The memory store, with a round that claims stopping after its commit until `open` is
/// notified (and telling `committed`): the claim is in the store, the runner does not know yet.
#[derive(Debug, Default)]
struct HeldClaims {
    inner: MemoryStore,
    committed: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

#[outbox_core::async_trait]
impl outbox_core::layer::StoreLayer for HeldClaims {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn round(&self, t: Vec<Transition>, c: Option<Claim>) -> outbox_core::Result<Round> {
        let round = self.inner.round(t, c).await?;
        if !round.claimed.is_empty() {
            self.committed.notify_one();
            self.open.notified().await;
        }
        Ok(round)
    }
}

#[tokio::test(start_paused = true)]
async fn flush_waits_for_a_claim_the_store_committed_before_the_runner_heard_of_it() {
    let store = Arc::new(HeldClaims::default());
    let outbox = Outbox::builder(store.clone(), slow(Duration::from_millis(1)))
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .start()
        .await
        .unwrap();
    outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    store.committed.notified().await;
    // In flight in the store, so not due; the runner's claim is under way, so held.
    assert_eq!(store.inner.stats().await.unwrap().in_flight, 1);
    assert!(matches!(
        outbox.flush(Duration::from_millis(100)).await,
        Err(Error::Timeout(_))
    ));
    store.open.notify_one();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(store.inner.stats().await.unwrap().delivered, 1);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Records a transaction of the caller's wrote (here straight into the store, out of the
/// handle's sight) are announced by `committed` as the handle's own enqueue would: one
/// `Enqueued` per record, `Superseded` for a replacement, and a wake-up that delivers them
/// with no poll.
#[tokio::test(start_paused = true)]
async fn committed_announces_the_callers_records_and_wakes_the_runner() {
    let store = Arc::new(MemoryStore::new());
    let outbox = Outbox::builder(store.clone(), slow(Duration::ZERO))
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let mut events = outbox.events();
    // The runner has gone idle and sleeps until woken.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let edit = |body: &[u8]| {
        NewRecord::new(body.to_vec())
            .in_group("doc")
            .replacing("doc/title")
    };
    let records = vec![NewRecord::new(b"plain".to_vec()), edit(b"v1"), edit(b"v2")];
    let groups: Vec<Option<String>> = records.iter().map(|r| r.group.clone()).collect();
    let enqueued = store.enqueue(records, BASE).await.unwrap();
    assert_eq!(enqueued.superseded, vec![2]);
    outbox.committed(&enqueued, &groups);

    let doc = Some("doc".to_owned());
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(3_600), async {
        while seen
            .iter()
            .filter(|e| matches!(e, Event::Delivered { .. }))
            .count()
            < 2
        {
            seen.push(events.recv().await.unwrap());
        }
    })
    .await
    .expect("the wake-up alone delivers both records");
    let announced: Vec<&Event> = seen
        .iter()
        .filter(|e| matches!(e, Event::Enqueued { .. } | Event::Superseded { .. }))
        .collect();
    assert_eq!(
        announced,
        [
            &Event::Enqueued {
                id: enqueued[0],
                group: None
            },
            &Event::Enqueued {
                id: enqueued[1],
                group: doc.clone()
            },
            &Event::Superseded {
                id: enqueued[1],
                group: doc
            },
        ]
    );
    assert_eq!(store.stats().await.unwrap().delivered, 2);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_resume_of_the_halt_shown_lifts_it_only_while_the_store_holds_it() {
    let store = Arc::new(MemoryStore::new());
    // Another process's refusal halted the fleet; this runner started halted by it.
    let shown = Halt {
        reason: "HTTP 401".into(),
        since: BASE - 5_000,
    };
    store.set_halt(Some(shown.clone())).await.unwrap();
    let outbox = start(Arc::clone(&store), slow(Duration::from_millis(1))).await;
    let mut events = outbox.events();
    outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(outbox.is_halted());
    assert_eq!(outbox.stats().await.unwrap().halt, Some(shown.clone()));

    // A newer refusal elsewhere replaced it before the person clicked: nothing is lifted.
    let newer = Halt {
        reason: "HTTP 403".into(),
        since: BASE - 1_000,
    };
    store.set_halt(Some(newer.clone())).await.unwrap();
    assert!(!outbox.resume_if(&shown).await.unwrap());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.halt().await.unwrap(), Some(newer.clone()));
    assert!(outbox.is_halted());
    assert_eq!(store_delivered(&outbox).await, 0);

    // The person is shown the newer one and lifts it: the runner resumes, says so, delivers.
    assert!(outbox.resume_if(&newer).await.unwrap());
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert!(!outbox.is_halted());
    assert_eq!(store_delivered(&outbox).await, 1);
    let said: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(
        said.iter().filter(|e| matches!(e, Event::Resumed)).count(),
        1,
        "{said:?}"
    );
    assert!(!outbox.resume_if(&newer).await.unwrap(), "lifted already");
}
