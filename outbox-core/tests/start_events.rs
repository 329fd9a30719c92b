//! What a runner says at its start reaches a subscriber made with the builder, on any runtime:
//! before the runner starts, not after, when the runner's task may have spoken already (the
//! rows it cannot read: `unreadable.rs`). The stream ends with the outbox.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    sink_fn, Claim, Clock, Event, Lease, NewRecord, Outbox, Outcome, Record, RetryPolicy, State,
    Store, SystemClock,
};
use outbox_memory::MemoryStore;
use tokio::sync::broadcast;

fn delivered() -> impl outbox_core::Sink {
    sink_fn(|_: Record| async { Outcome::Delivered })
}

/// The first event `wanted` picks out, within ten seconds.
async fn first(
    events: &mut broadcast::Receiver<Event>,
    wanted: impl Fn(&Event) -> bool,
) -> Option<Event> {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(event) if wanted(&event) => return Some(event),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_recovery_parks_is_said_to_a_subscriber_made_before_the_start() {
    // A previous process died delivering the record: its lease ran out with no report. One
    // interruption is the limit here, so the recovery parks it, before `start` returns.
    let store = Arc::new(MemoryStore::new());
    // The runner reads the system clock; so does the past this sets up.
    let now = SystemClock.now();
    let id = store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], now - 2_000)
        .await
        .unwrap()
        .ids[0];
    let lease = Lease {
        token: 7,
        until: now - 1_000,
    };
    let claim = Claim {
        now: now - 2_000,
        limit: 1,
        lease,
    };
    assert_eq!(store.claim(claim).await.unwrap().len(), 1);

    let builder = Outbox::builder(store.clone(), delivered())
        .policy(RetryPolicy::default().with_max_interruptions(1));
    let mut early = builder.events();
    let outbox = builder.start().await.unwrap();
    let mut late = outbox.events();
    assert_eq!(
        store.get(id).await.unwrap().map(|r| r.state),
        Some(State::NeedsAttention),
        "parked by the recovery"
    );
    let parked = first(&mut early, |e| matches!(e, Event::Parked { .. })).await;
    assert!(
        matches!(parked, Some(Event::Parked { id: parked, .. }) if parked == id),
        "{parked:?}"
    );
    // Subscribed after the start, the event went by: that is why the builder subscribes.
    assert!(matches!(
        late.try_recv(),
        Err(broadcast::error::TryRecvError::Empty)
    ));
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_builder_that_fails_to_start_ends_its_subscription() {
    let builder = Outbox::builder(Arc::new(MemoryStore::new()), delivered())
        .policy(RetryPolicy::default().with_max_interruptions(0));
    let mut events = builder.events();
    assert!(builder.start().await.is_err());
    assert!(matches!(
        events.recv().await,
        Err(broadcast::error::RecvError::Closed)
    ));
}

#[tokio::test]
async fn the_stream_ends_with_the_outbox_even_while_a_notifier_lives() {
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), delivered())
        .start()
        .await
        .unwrap();
    let mut events = outbox.events();
    // A wake-up source (PostgreSQL's listener holds one) outlives the outbox here.
    let notifier = outbox.notifier();
    drop(outbox);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Err(broadcast::error::RecvError::Closed) = events.recv().await {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream is still open");
    notifier.notify();
}
