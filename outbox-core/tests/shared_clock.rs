//! A store that names the clock its records are judged by (`Store::shared_clock`): the plain
//! builder runs on it with no wiring, a different clock is refused, the store's own is
//! accepted, and a layer around the store keeps the clock it names.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    sink_fn, Clock, Error, ManualClock, Millis, NewRecord, Outbox, Outcome, Record, Store,
    StoreLayer, TokioClock,
};
use outbox_memory::MemoryStore;

/// The shared time, far from this host's: a runner on the host's clock would be told apart.
const SHARED: Millis = 4_000_000_000_000;

/// A memory store that says its records are judged by `clock`, as a shared server's would.
#[derive(Debug)]
struct Judged {
    inner: MemoryStore,
    clock: Arc<dyn Clock>,
}

impl StoreLayer for Judged {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    fn shared_clock(&self) -> Option<Arc<dyn Clock>> {
        Some(Arc::clone(&self.clock))
    }
}

/// A layer that changes nothing, around the store that names the clock.
#[derive(Debug)]
struct Pass(Judged);

impl StoreLayer for Pass {
    fn inner(&self) -> &dyn Store {
        &self.0
    }
}

fn judged() -> (Judged, Arc<dyn Clock>) {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(SHARED));
    (
        Judged {
            inner: MemoryStore::new(),
            clock: Arc::clone(&clock),
        },
        clock,
    )
}

fn sink() -> impl outbox_core::Sink {
    sink_fn(|_: Record| async { Outcome::Delivered })
}

#[tokio::test]
async fn the_plain_builder_runs_on_the_clock_the_store_names_and_enqueues_in_it() {
    let (store, _) = judged();
    let store = Arc::new(store);
    let outbox = Outbox::builder(Arc::clone(&store) as Arc<dyn Store>, sink())
        .start()
        .await
        .unwrap();
    assert_eq!(outbox.now(), SHARED, "the runner's time is the store's");
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        store.inner.stats().await.unwrap().delivered,
        1,
        "record {id}"
    );
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_layer_around_the_store_keeps_the_clock_it_names() {
    let (store, _) = judged();
    let outbox = Outbox::builder(Arc::new(Pass(store)), sink())
        .start()
        .await
        .unwrap();
    assert_eq!(outbox.now(), SHARED);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_clock_of_its_own_on_such_a_store_is_a_typed_error_and_starts_nothing() {
    let (store, _) = judged();
    store
        .inner
        .enqueue(vec![NewRecord::new(b"x".to_vec())], SHARED)
        .await
        .unwrap();
    let store = Arc::new(store);
    let started = Outbox::builder(Arc::clone(&store) as Arc<dyn Store>, sink())
        .clock(Arc::new(TokioClock::new()))
        .start()
        .await;
    match started {
        Err(Error::InvalidConfig(why)) => assert!(why.contains("twice"), "{why}"),
        other => panic!("a foreign clock was accepted: {other:?}"),
    }
    // No runner started: the waiting record is still pending, never claimed.
    let stats = store.inner.stats().await.unwrap();
    assert_eq!((stats.pending, stats.delivered), (1, 0));
}

#[tokio::test]
async fn the_stores_own_clock_given_by_hand_is_accepted() {
    let (store, clock) = judged();
    let outbox = Outbox::builder(Arc::new(store), sink())
        .clock(clock)
        .start()
        .await
        .unwrap();
    assert_eq!(outbox.now(), SHARED);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_store_that_names_no_clock_runs_on_the_one_given() {
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink())
        .clock(Arc::new(ManualClock::new(123)))
        .start()
        .await
        .unwrap();
    assert_eq!(outbox.now(), 123);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}
