//! The redb store under the runner: records enqueued in the application's own transaction
//! and committed with the store's helper are announced and delivered with no `notify()` and
//! no polling; an aborted transaction announces nothing.

use std::sync::Arc;

use outbox_core::{Clock, NewRecord, Store, TokioClock};
use outbox_redb::{RedbConfig, RedbStore};
use outbox_testkit::WakeOnlyRunner;
use redb::{ReadableDatabase, TableDefinition};

const T0: u64 = 1_700_000_000_000;

const NOTES: TableDefinition<u64, &str> = TableDefinition::new("notes");

/// The runner the checks use, on the paused clock, fed through `store`.
async fn wake_only(store: &Arc<RedbStore>, clock: TokioClock) -> WakeOnlyRunner {
    let held: Arc<dyn Store> = outbox_testkit::PausedClockStore::wrap(store.clone());
    WakeOnlyRunner::start(held, Arc::new(clock)).await
}

async fn fresh() -> (tempfile::TempDir, Arc<RedbStore>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = RedbStore::create(dir.path().join("app.redb"), RedbConfig::default())
        .await
        .expect("create");
    (dir, Arc::new(store))
}

#[tokio::test(start_paused = true)]
async fn committing_with_the_helper_announces_and_wakes_the_runner_without_notify() {
    let (_dir, store) = fresh().await;
    let clock = TokioClock::starting_at(T0);
    let mut runner = wake_only(&store, clock).await;

    let txn = store
        .database()
        .expect("writable")
        .begin_write()
        .expect("begin");
    txn.open_table(NOTES)
        .expect("table")
        .insert(1, "hello")
        .expect("business write");
    let pending = store
        .enqueue_pending(&txn, WakeOnlyRunner::batch("note-1"), clock.now())
        .expect("enqueue pending");
    let ids = pending.ids().to_vec();
    assert!(
        runner.events_so_far().is_empty(),
        "nothing before the commit"
    );
    let enqueued = pending.commit(txn, &runner.outbox).expect("commit");
    runner.expect_announced(&ids, &enqueued, "note-1").await;
    runner.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_aborted_or_dropped_transaction_announces_nothing() {
    let (_dir, store) = fresh().await;
    let clock = TokioClock::starting_at(T0);
    let mut runner = wake_only(&store, clock).await;
    let db = store.database().expect("writable");

    let txn = db.begin_write().expect("begin");
    txn.open_table(NOTES)
        .expect("table")
        .insert(1, "aborted")
        .expect("business write");
    let pending = store
        .enqueue_pending(&txn, vec![NewRecord::new(b"aborted".to_vec())], clock.now())
        .expect("enqueue pending");
    let aborted = pending.ids()[0];
    txn.abort().expect("abort");
    drop(pending);

    let txn = db.begin_write().expect("begin");
    let pending = store
        .enqueue_pending(&txn, vec![NewRecord::new(b"dropped".to_vec())], clock.now())
        .expect("enqueue pending");
    drop(txn);
    drop(pending);

    runner.expect_nothing_announced().await;
    assert!(store.get(aborted).await.expect("get").is_none());
    assert_eq!(store.stats().await.expect("stats").undelivered(), 0);
    let read = db.begin_read().expect("read");
    let notes = read.open_table(NOTES);
    assert!(
        notes.is_err() || notes.expect("table").get(1).expect("get").is_none(),
        "the business write aborted too"
    );
    runner.shutdown().await;
}
