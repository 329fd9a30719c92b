//! The redb store under the runner: records enqueued in the application's own transaction
//! and committed with the store's helper are announced and delivered with no `notify()` and
//! no polling; an aborted transaction announces nothing.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    sink_fn, Clock, Event, NewRecord, Outbox, Outcome, Record, RunnerConfig, Store, TokioClock,
};
use outbox_redb::{RedbConfig, RedbStore};
use redb::{ReadableDatabase, TableDefinition};
use tokio::sync::{broadcast, mpsc};

const T0: u64 = 1_700_000_000_000;

const NOTES: TableDefinition<u64, &str> = TableDefinition::new("notes");

/// A runner on the paused clock with no safety poll, fed through `store`: only a wake-up
/// makes it deliver. Returns the handle, its events from the start, and the sink's deliveries.
async fn quiet_runner(
    store: &Arc<RedbStore>,
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

/// The events sent so far, without waiting.
fn drain(events: &mut broadcast::Receiver<Event>) -> Vec<Event> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    seen
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
    let (outbox, mut events, mut deliveries) = quiet_runner(&store, clock).await;

    // One plain record and two edits of one title: the second edit replaces the first.
    let edit = |title: &str| {
        NewRecord::new(title.as_bytes().to_vec())
            .in_group("note-1")
            .replacing("note-1/title")
    };
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
        .enqueue_pending(
            &txn,
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
    let enqueued = pending.commit(txn, &outbox).expect("commit");
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
                group: Some("note-1".into())
            },
            Event::Superseded {
                id: ids[1],
                group: Some("note-1".into())
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
async fn an_aborted_or_dropped_transaction_announces_nothing() {
    let (_dir, store) = fresh().await;
    let clock = TokioClock::starting_at(T0);
    let (outbox, mut events, mut deliveries) = quiet_runner(&store, clock).await;
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

    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(drain(&mut events).is_empty(), "no event for either");
    assert!(deliveries.try_recv().is_err(), "nothing delivered");
    assert!(store.get(aborted).await.expect("get").is_none());
    assert_eq!(store.stats().await.expect("stats").undelivered(), 0);
    let read = db.begin_read().expect("read");
    let notes = read.open_table(NOTES);
    assert!(
        notes.is_err() || notes.expect("table").get(1).expect("get").is_none(),
        "the business write aborted too"
    );
    outbox
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
}
