//! The SQLite store under the runner: a record enqueued in the application's own transaction
//! is delivered once the handle is notified, with no polling; one committed with the store's
//! helper (`enqueue_pending`, then `PendingEnqueue::commit`) is announced and delivered with no
//! `notify()` at all, and a rolled-back or failed transaction announces nothing.

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

/// A runner on the paused clock with no safety poll, fed through `store`: only a wake-up
/// makes it deliver. Returns the handle, its events from the start, and the sink's deliveries.
async fn quiet_runner(
    store: &Arc<SqliteStore>,
    clock: TokioClock,
) -> (
    Outbox,
    broadcast::Receiver<Event>,
    mpsc::UnboundedReceiver<Record>,
) {
    let (delivered, deliveries) = mpsc::unbounded_channel::<Record>();
    let sink = sink_fn(move |record: Record| {
        let delivered = delivered.clone();
        async move {
            let _ = delivered.send(record);
            Outcome::Delivered
        }
    });
    let held: Arc<dyn Store> = outbox_testkit::PausedClockStore::wrap(store.clone());
    let outbox = Outbox::builder(held, sink)
        .clock(Arc::new(clock))
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await
        .expect("start");
    let events = outbox.events();
    // On the paused clock this returns once the runner has gone idle, asleep until woken.
    tokio::time::sleep(Duration::from_secs(1)).await;
    (outbox, events, deliveries)
}

/// The application's connection, with a business table whose rows must name an existing
/// parent by the end of each transaction (a deferred foreign key, to make a commit fail).
fn app_connection(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).expect("app connection");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn.execute_batch(
        "PRAGMA foreign_keys = ON;
         CREATE TABLE parents (id INTEGER PRIMARY KEY);
         INSERT INTO parents (id) VALUES (1);
         CREATE TABLE docs (
             id INTEGER PRIMARY KEY,
             parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED,
             title TEXT
         );",
    )
    .expect("business tables");
    conn
}

/// The events sent so far, without waiting.
fn drain(events: &mut broadcast::Receiver<Event>) -> Vec<Event> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn committing_with_the_helper_announces_and_wakes_the_runner_without_notify() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = Arc::new(
        SqliteStore::create(&path, SqliteConfig::default())
            .await
            .expect("create"),
    );
    let clock = TokioClock::starting_at(T0);
    let (outbox, mut events, mut deliveries) = quiet_runner(&store, clock).await;
    let mut conn = app_connection(&path);

    // One plain record and two edits of one title: the second edit replaces the first.
    let edit = |title: &str| {
        NewRecord::new(title.as_bytes().to_vec())
            .in_group("doc-1")
            .replacing("doc-1/title")
    };
    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO docs (parent, title) VALUES (1, 'hello')", [])
        .expect("business write");
    let pending = store
        .enqueue_pending(
            &tx,
            vec![
                NewRecord::new(b"create hello".to_vec()),
                edit("Plans"),
                edit("Plans v2"),
            ],
            clock.now(),
        )
        .expect("enqueue pending");
    let ids = pending.ids().to_vec();
    assert_eq!(ids[1], ids[2]);
    assert!(drain(&mut events).is_empty(), "nothing before the commit");
    let enqueued = pending.commit(tx, &outbox).expect("commit");
    assert_eq!(enqueued.ids, ids);
    assert_eq!(enqueued.superseded, vec![2]);

    // The events are sent by the commit itself, before the runner has run.
    assert_eq!(
        drain(&mut events),
        vec![
            Event::Enqueued {
                id: ids[0],
                group: None
            },
            Event::Enqueued {
                id: ids[1],
                group: Some("doc-1".into())
            },
            Event::Superseded {
                id: ids[1],
                group: Some("doc-1".into())
            },
        ]
    );
    // No notify() and no poll: the commit's wake-up alone delivers both records.
    let mut payloads = Vec::new();
    for _ in 0..2 {
        let delivered = tokio::time::timeout(Duration::from_secs(3_600), deliveries.recv())
            .await
            .expect("a delivery woken by the commit")
            .expect("the sink is alive");
        payloads.push(delivered.payload);
    }
    payloads.sort();
    assert_eq!(
        payloads,
        vec![b"Plans v2".to_vec(), b"create hello".to_vec()]
    );
    outbox.flush(Duration::from_secs(60)).await.expect("flush");
    let stats = outbox.stats().await.expect("stats");
    assert_eq!((stats.delivered, stats.undelivered()), (2, 0));
    outbox
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_rolled_back_or_failed_commit_announces_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = Arc::new(
        SqliteStore::create(&path, SqliteConfig::default())
            .await
            .expect("create"),
    );
    let clock = TokioClock::starting_at(T0);
    let (outbox, mut events, mut deliveries) = quiet_runner(&store, clock).await;
    let mut conn = app_connection(&path);

    // Rolled back: the pending enqueue is never committed.
    let tx = conn.transaction().expect("begin");
    let pending = store
        .enqueue_pending(&tx, vec![NewRecord::new(b"dropped".to_vec())], clock.now())
        .expect("enqueue pending");
    let rolled_back = pending.ids()[0];
    tx.rollback().expect("rollback");
    drop(pending);

    // Failed: the deferred foreign key refuses the commit.
    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO docs (parent, title) VALUES (99, 'orphan')", [])
        .expect("business write, checked at commit");
    let pending = store
        .enqueue_pending(&tx, vec![NewRecord::new(b"refused".to_vec())], clock.now())
        .expect("enqueue pending");
    let refused = pending.ids()[0];
    assert!(pending.commit(tx, &outbox).is_err(), "the commit fails");

    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(drain(&mut events).is_empty(), "no event for either");
    assert!(deliveries.try_recv().is_err(), "nothing delivered");
    assert!(store.get(rolled_back).await.expect("get").is_none());
    assert!(store.get(refused).await.expect("get").is_none());
    let docs: i64 = conn
        .query_row("SELECT count(*) FROM docs", [], |row| row.get(0))
        .expect("count");
    assert_eq!(docs, 0);
    outbox
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
}
