//! The SQLite store under the runner: a record enqueued in the application's own transaction
//! is delivered once the handle is notified, with no polling.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    sink_fn, Clock, Event, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig, Store,
    TokioClock,
};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;
use tokio::sync::{broadcast, mpsc};

const T0: u64 = 1_700_000_000_000;

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
    let held: Arc<dyn Store> = outbox_testkit::PausedClockStore::wrap(store.clone());
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
