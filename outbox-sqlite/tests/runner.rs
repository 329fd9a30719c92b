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
use outbox_testkit::WakeOnlyRunner;
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

/// An application's file: the outbox store on it, the runner the checks use (on the paused
/// clock, fed through the store) and the application's own connection.
async fn app() -> (
    tempfile::TempDir,
    Arc<SqliteStore>,
    TokioClock,
    WakeOnlyRunner,
    Connection,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = Arc::new(
        SqliteStore::create(&path, SqliteConfig::default())
            .await
            .expect("create"),
    );
    let clock = TokioClock::starting_at(T0);
    let held: Arc<dyn Store> = outbox_testkit::PausedClockStore::wrap(store.clone());
    let runner = WakeOnlyRunner::start(held, Arc::new(clock)).await;
    let conn = app_connection(&path);
    (dir, store, clock, runner, conn)
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

#[tokio::test(start_paused = true)]
async fn committing_with_the_helper_announces_and_wakes_the_runner_without_notify() {
    let (_dir, store, clock, mut runner, mut conn) = app().await;

    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO docs (parent, title) VALUES (1, 'hello')", [])
        .expect("business write");
    let pending = store
        .enqueue_pending(&tx, WakeOnlyRunner::batch("doc-1"), clock.now())
        .expect("enqueue pending");
    let ids = pending.ids().to_vec();
    assert!(
        runner.events_so_far().is_empty(),
        "nothing before the commit"
    );
    let enqueued = pending.commit(tx, &runner.outbox).expect("commit");
    runner.expect_announced(&ids, &enqueued, "doc-1").await;
    runner.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_rolled_back_or_failed_commit_announces_nothing() {
    let (_dir, store, clock, mut runner, mut conn) = app().await;

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
    assert!(
        pending.commit(tx, &runner.outbox).is_err(),
        "the commit fails"
    );

    runner.expect_nothing_announced().await;
    assert!(store.get(rolled_back).await.expect("get").is_none());
    assert!(store.get(refused).await.expect("get").is_none());
    let docs: i64 = conn
        .query_row("SELECT count(*) FROM docs", [], |row| row.get(0))
        .expect("count");
    assert_eq!(docs, 0);
    runner.shutdown().await;
}
