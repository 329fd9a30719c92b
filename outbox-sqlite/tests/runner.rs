//! The SQLite store under the runner: a record enqueued in the application's own transaction
//! is delivered once the handle is notified, with no polling.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    async_trait, sink_fn, Applied, Claim, Clock, Error, Event, Halt, Lease, ListQuery, Millis,
    NewRecord, Outbox, Outcome, Record, RecordId, Result, Round, RunnerConfig, Stats, Store,
    TokioClock, Tombstone, Transition,
};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;
use tokio::sync::{broadcast, mpsc};

const T0: u64 = 1_700_000_000_000;

/// Holds tokio's paused clock still while the store works. The store's writer answers from a
/// thread of its own, and a task waiting on another thread looks idle to tokio, whose paused
/// clock would then leap to the next timer in the middle of a store call. A running blocking
/// task holds the clock, so each call runs on the blocking pool. (The testkit's runner
/// scenarios wrap their stores the same way.)
#[derive(Debug)]
struct HoldClock(Arc<dyn Store>);

impl HoldClock {
    async fn run<T, F, Fut>(&self, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn Store>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>>,
    {
        let store = Arc::clone(&self.0);
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || handle.block_on(call(store)))
            .await
            .map_err(Error::backend)?
    }
}

#[async_trait]
impl Store for HoldClock {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Vec<RecordId>> {
        self.run(move |s| async move { s.enqueue(records, now).await })
            .await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        self.run(move |s| async move { s.claim(claim).await }).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let ids = ids.to_vec();
        self.run(move |s| async move { s.renew(&ids, lease).await })
            .await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.run(move |s| async move { s.apply(transitions).await })
            .await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        self.run(move |s| async move { s.round(outcomes, claim).await })
            .await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |s| async move { s.expired(now, limit).await })
            .await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |s| async move { s.stepped_back(now, limit).await })
            .await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.run(move |s| async move { s.get(id).await }).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let query = query.clone();
        self.run(move |s| async move { s.list(&query).await }).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.run(move |s| async move { s.tombstones(after, limit).await })
            .await
    }

    async fn stats(&self) -> Result<Stats> {
        self.run(|s| async move { s.stats().await }).await
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.run(|s| async move { s.next_due().await }).await
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        self.run(|s| async move { s.halt().await }).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.run(move |s| async move { s.set_halt(halt).await })
            .await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.run(move |s| async move { s.prune(older_than).await })
            .await
    }
}

/// The id of the next delivered record. On the paused clock, a runner that is never woken
/// sleeps through the hour and the wait fails.
async fn delivered_next(events: &mut broadcast::Receiver<Event>) -> RecordId {
    let next = async {
        loop {
            match events.recv().await {
                Ok(Event::Delivered { id }) => return id,
                Ok(_) => {}
                Err(err) => panic!("event stream ended: {err}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3_600), next)
        .await
        .expect("a delivery")
}

#[tokio::test(start_paused = true)]
async fn a_record_enqueued_in_the_callers_transaction_is_delivered_after_notify() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = Arc::new(
        SqliteStore::create(&path, SqliteConfig::default())
            .await
            .expect("create"),
    );
    let (delivered, mut deliveries) = mpsc::unbounded_channel::<Record>();
    let sink = sink_fn(move |record: Record| {
        let delivered = delivered.clone();
        async move {
            let _ = delivered.send(record);
            Outcome::Delivered
        }
    });
    let clock = TokioClock::starting_at(T0);
    let held: Arc<dyn Store> = Arc::new(HoldClock(store.clone()));
    let outbox = Outbox::builder(held, sink)
        .clock(Arc::new(clock))
        // No safety poll: only the notification can wake the runner.
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await
        .expect("start");
    let mut events = outbox.events();

    // A first record through the handle, so the runner has drained once and gone idle.
    let first = outbox
        .enqueue(NewRecord::new(b"warm up".to_vec()))
        .await
        .expect("enqueue");
    assert_eq!(delivered_next(&mut events).await, first);
    deliveries.recv().await.expect("the sink saw the first");
    // On the paused clock this returns only once every task, the runner included, waits
    // with nothing to do: the runner has finished its round and sleeps until woken.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut conn = Connection::open(&path).expect("app connection");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn.execute_batch("CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT)")
        .expect("business table");
    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO docs (title) VALUES ('hello')", [])
        .expect("business write");
    let ids = store
        .enqueue_in(
            &tx,
            vec![NewRecord::new(b"create hello".to_vec())],
            clock.now(),
        )
        .expect("enqueue in");
    tx.commit().expect("commit");
    outbox.notify();

    assert_eq!(delivered_next(&mut events).await, ids[0]);
    let record = deliveries.recv().await.expect("the sink saw it");
    assert_eq!(record.payload, b"create hello");
    let stats = outbox.stats().await.expect("stats");
    assert_eq!((stats.delivered, stats.undelivered()), (2, 0));
    outbox
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
}
