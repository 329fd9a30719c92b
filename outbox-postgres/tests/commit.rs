//! The caller's transaction under a running outbox: records enqueued with
//! `PgStore::enqueue_pending` and committed with `PendingEnqueue::commit` are announced and
//! delivered with no `notify()`, no listener and no polling; a rolled-back or failed
//! transaction announces nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{admin, server_ready, Scratch};
use outbox_core::{sink_fn, Event, NewRecord, Outbox, Outcome, Record, RunnerConfig, Store};
use outbox_postgres::PgStore;
use tokio::sync::{broadcast, mpsc};

/// Bounds every wait of these tests: long enough for a loaded CI machine, and a hang fails
/// instead of blocking the suite.
const PATIENCE: Duration = Duration::from_secs(30);

/// A runner with no safety poll and no listener: only a wake-up of the handle makes it
/// deliver. Returns the handle, its events from the start, and the sink's deliveries.
async fn quiet_runner(
    store: &PgStore,
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
    let outbox = Outbox::builder(Arc::new(store.clone()), sink)
        .clock(store.clock())
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await
        .expect("start");
    let events = outbox.events();
    // The runner's first round ends: it sleeps until woken.
    outbox.flush(PATIENCE).await.expect("the runner settles");
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

/// Business tables in the test's schema: orders must name an existing customer by the end of
/// each transaction (a deferred foreign key, to make a commit fail).
async fn business_tables(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".customers (id int PRIMARY KEY);
             INSERT INTO \"{schema}\".customers VALUES (1);
             CREATE TABLE \"{schema}\".orders (
                 id int PRIMARY KEY,
                 customer int REFERENCES \"{schema}\".customers (id) DEFERRABLE INITIALLY DEFERRED
             );"
        ))
        .await
        .expect("business tables");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committing_with_the_helper_announces_and_wakes_the_runner_without_notify() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let (outbox, mut events, mut deliveries) = quiet_runner(&store).await;
    let mut client = admin().await;
    business_tables(&client, s).await;

    // One plain record and two edits of one order: the second edit replaces the first.
    let edit = |body: &str| {
        NewRecord::new(body.as_bytes().to_vec())
            .in_group("order-7")
            .replacing("order-7/state")
    };
    let tx = client.transaction().await.expect("begin");
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (7, 1)"), &[])
        .await
        .expect("business write");
    let pending = store
        .enqueue_pending(
            &tx,
            vec![
                NewRecord::new(b"create 7".to_vec()),
                edit("paid"),
                edit("shipped"),
            ],
            store.clock().now(),
        )
        .await
        .expect("enqueue pending");
    let ids = pending.ids().to_vec();
    assert_eq!(ids[1], ids[2]);
    assert!(drain(&mut events).is_empty(), "nothing before the commit");
    let enqueued = pending.commit(tx, &outbox).await.expect("commit");
    assert_eq!(enqueued.ids, ids);
    assert_eq!(enqueued.superseded, vec![2]);

    // The events are sent by the commit itself: the first three the stream carries for these
    // records (the runner, woken, may report its deliveries' start right after).
    let announced: Vec<Event> = drain(&mut events)
        .into_iter()
        .filter(|e| matches!(e, Event::Enqueued { .. } | Event::Superseded { .. }))
        .collect();
    assert_eq!(
        announced,
        vec![
            Event::Enqueued {
                id: ids[0],
                group: None
            },
            Event::Enqueued {
                id: ids[1],
                group: Some("order-7".into())
            },
            Event::Superseded {
                id: ids[1],
                group: Some("order-7".into())
            },
        ]
    );
    // No notify(), no listener and no poll: the commit's wake-up alone delivers both.
    let mut payloads = Vec::new();
    for _ in 0..2 {
        let delivered = tokio::time::timeout(PATIENCE, deliveries.recv())
            .await
            .expect("a delivery woken by the commit")
            .expect("the sink is alive");
        payloads.push(delivered.payload);
    }
    payloads.sort();
    assert_eq!(payloads, vec![b"create 7".to_vec(), b"shipped".to_vec()]);
    outbox.flush(PATIENCE).await.expect("flush");
    let stats = outbox.stats().await.expect("stats");
    assert_eq!((stats.delivered, stats.undelivered()), (2, 0));
    outbox.shutdown(PATIENCE).await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_or_failed_commit_announces_nothing() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let (outbox, mut events, mut deliveries) = quiet_runner(&store).await;
    let mut client = admin().await;
    business_tables(&client, s).await;
    let now = store.clock().now();

    // Rolled back: the pending enqueue is never committed.
    let tx = client.transaction().await.expect("begin");
    let pending = store
        .enqueue_pending(&tx, vec![NewRecord::new(b"dropped".to_vec())], now)
        .await
        .expect("enqueue pending");
    let rolled_back = pending.ids()[0];
    tx.rollback().await.expect("rollback");
    drop(pending);

    // Failed: the deferred foreign key refuses the commit.
    let tx = client.transaction().await.expect("begin");
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (8, 99)"), &[])
        .await
        .expect("business write, checked at commit");
    let pending = store
        .enqueue_pending(&tx, vec![NewRecord::new(b"refused".to_vec())], now)
        .await
        .expect("enqueue pending");
    let refused = pending.ids()[0];
    assert!(
        pending.commit(tx, &outbox).await.is_err(),
        "the commit fails"
    );

    // Events are sent by the commit itself, before it returns; a runner woken by mistake
    // settles with nothing to deliver.
    outbox.flush(PATIENCE).await.expect("the runner settles");
    assert!(drain(&mut events).is_empty(), "no event for either");
    assert!(deliveries.try_recv().is_err(), "nothing delivered");
    for id in [rolled_back, refused] {
        assert!(store.get(id).await.expect("get").is_none());
    }
    assert_eq!(store.stats().await.expect("stats").undelivered(), 0);
    let orders: i64 = client
        .query_one(&format!("SELECT count(*) FROM \"{s}\".orders"), &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(orders, 0);
    outbox.shutdown(PATIENCE).await.expect("shutdown");
}
