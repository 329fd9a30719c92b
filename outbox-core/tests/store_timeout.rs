//! Every store call the runner makes is bounded: a call that never returns (a half-open
//! connection, a lock held elsewhere) counts as a failure after `store_timeout`, the outcome
//! it carried is kept, and the runner goes on once the store answers again. On tokio's paused
//! clock, so the minute of waiting takes no time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::layer::StoreLayer;
use outbox_core::{
    async_trait, sink_fn, Claim, Event, NewRecord, Outbox, Outcome, Record, RecordId, Result,
    Round, RunnerConfig, Store, TokioClock, Transition, Unreadable,
};
use outbox_memory::MemoryStore;

/// The reference store whose first `hangs` rounds never return.
#[derive(Debug)]
struct Hanging {
    inner: MemoryStore,
    hangs: AtomicU32,
}

#[async_trait]
impl StoreLayer for Hanging {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        let left = self.hangs.load(Ordering::SeqCst);
        if left > 0 {
            self.hangs.store(left - 1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        self.inner.round(outcomes, claim).await
    }
}

/// A runner over `store` with a 5 s store deadline on tokio's paused clock, delivering to a
/// sink that counts what it is sent.
async fn start(store: Arc<dyn Store>) -> (Outbox, Arc<AtomicU32>) {
    let (outbox, sent, _) = start_watching(store).await;
    (outbox, sent)
}

/// [`start`], with a subscription to the runner's events made before it starts.
async fn start_watching(
    store: Arc<dyn Store>,
) -> (
    Outbox,
    Arc<AtomicU32>,
    tokio::sync::broadcast::Receiver<Event>,
) {
    let sent = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&sent);
    let sink = sink_fn(move |_: Record| {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Outcome::Delivered
        }
    });
    let config = RunnerConfig::default().with_store_timeout(Duration::from_secs(5));
    let builder = Outbox::builder(store, sink)
        .config(config)
        .clock(Arc::new(TokioClock::starting_at(1_700_000_000_000)));
    let events = builder.events();
    let outbox = builder.start().await.unwrap();
    (outbox, sent, events)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_store_call_that_never_returns_is_given_up_and_the_write_still_goes_out() {
    let store = Arc::new(Hanging {
        inner: MemoryStore::new(),
        hangs: AtomicU32::new(2),
    });
    let (outbox, sent) = start(Arc::clone(&store) as Arc<dyn Store>).await;
    // The runner's first claim hangs (given up after 5 s), and so does the next one; the
    // third gets through and the write is delivered, once.
    outbox.enqueue(NewRecord::new(b"w".to_vec())).await.unwrap();
    outbox.flush(Duration::from_secs(120)).await.unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.undelivered()), (1, 0));
    assert_eq!(
        store.hangs.load(Ordering::SeqCst),
        0,
        "both hanging calls were made"
    );
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The reference store whose look for undecodable rows never ends while records are owed a
/// delivery: what a backlog too large to read within `store_timeout` looks like to the
/// runner. Once the backlog is gone, the look finds one damaged row; with `hang_first`, the
/// first look never ends whatever the backlog, and with `endless`, no look ever ends.
#[derive(Debug, Default)]
struct SlowLook {
    inner: MemoryStore,
    looks: AtomicU32,
    hang_first: bool,
    endless: bool,
}

#[async_trait]
impl StoreLayer for SlowLook {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn unreadable(&self, _limit: usize) -> Result<Vec<Unreadable>> {
        let before = self.looks.fetch_add(1, Ordering::SeqCst);
        if self.endless
            || (self.hang_first && before == 0)
            || self.inner.stats().await?.undelivered() > 0
        {
            std::future::pending::<()>().await;
        }
        Ok(vec![Unreadable::new(RecordId(42), "unknown state code 9")])
    }
}

/// Waits up to two minutes for the runner to say an unreadable row.
async fn said(events: &mut tokio::sync::broadcast::Receiver<Event>) -> (RecordId, String) {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if let Event::Unreadable { id, reason } = events.recv().await.unwrap() {
                return (id, reason);
            }
        }
    })
    .await
    .expect("the row is said once the queue is idle")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_start_up_look_waits_for_the_backlog_to_go_out_and_says_its_row_once() {
    let store = Arc::new(SlowLook::default());
    // A backlog before the start, whose look would outgrow the store's deadline.
    let backlog = vec![NewRecord::new(b"w".to_vec()), NewRecord::new(b"x".to_vec())];
    store
        .inner
        .enqueue(backlog, 1_700_000_000_000)
        .await
        .unwrap();
    let (outbox, sent, mut events) = start_watching(Arc::clone(&store) as Arc<dyn Store>).await;
    // The backlog goes out first (before, the look stood in front of the first claim), then
    // the queue is idle and the look is made, once, and ends.
    outbox.flush(Duration::from_secs(60)).await.unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    assert_eq!(
        said(&mut events).await,
        (RecordId(42), "unknown state code 9".to_owned())
    );
    assert_eq!(store.looks.load(Ordering::SeqCst), 1, "made once, idle");
    // Said once: the runner does not look again while it idles.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(store.looks.load(Ordering::SeqCst), 1);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_look_that_outgrows_the_deadline_is_put_off_and_writes_go_out() {
    let store = Arc::new(SlowLook {
        hang_first: true,
        ..SlowLook::default()
    });
    let (outbox, sent, mut events) = start_watching(Arc::clone(&store) as Arc<dyn Store>).await;
    // Idle at once, the runner looks; a write made meanwhile waits for the look's deadline
    // (5 s), then goes out: the look is put off, not tried again ahead of the claim.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.looks.load(Ordering::SeqCst), 1);
    outbox.enqueue(NewRecord::new(b"w".to_vec())).await.unwrap();
    outbox.flush(Duration::from_secs(30)).await.unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    assert_eq!(store.looks.load(Ordering::SeqCst), 1);
    // Ten deadlines after the time out, on an idle runner, the look is made again and ends.
    assert_eq!(
        said(&mut events).await,
        (RecordId(42), "unknown state code 9".to_owned())
    );
    assert_eq!(store.looks.load(Ordering::SeqCst), 2);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_shutdown_does_not_wait_for_a_look_that_was_put_off() {
    let store = Arc::new(SlowLook {
        endless: true,
        ..SlowLook::default()
    });
    let (outbox, _) = start(Arc::clone(&store) as Arc<dyn Store>).await;
    // The start's look times out after 5 s and is put off for ten deadlines: made again at
    // 55 s, on an idle runner, and still under way at 57 s.
    tokio::time::sleep(Duration::from_secs(57)).await;
    assert_eq!(store.looks.load(Ordering::SeqCst), 2);
    // The shutdown does not wait for its deadline (3 s more).
    outbox.shutdown(Duration::from_secs(1)).await.unwrap();
}
