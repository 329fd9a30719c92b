//! The caller's transaction under a running outbox: records enqueued with
//! `PgStore::enqueue_pending` and committed with `PendingEnqueue::commit` are announced and
//! delivered with no `notify()`, no listener and no polling; a rolled-back or failed
//! transaction announces nothing.

mod common;

use std::sync::Arc;

use common::{admin, server_ready, Scratch};
use outbox_core::{NewRecord, Store};
use outbox_postgres::PgStore;
use outbox_testkit::WakeOnlyRunner;

/// The test's schema, its store, the runner the checks use (on the server's clock, with no
/// listener: only the commit's wake-up makes it deliver) and the application's connection,
/// with the business tables in place.
async fn app() -> (Scratch, PgStore, WakeOnlyRunner, tokio_postgres::Client) {
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let runner = WakeOnlyRunner::start(Arc::new(store.clone()), store.clock()).await;
    let client = admin().await;
    business_tables(&client, &scratch.schema).await;
    (scratch, store, runner, client)
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
    let (scratch, store, mut runner, mut client) = app().await;
    let s = &scratch.schema;

    let tx = client.transaction().await.expect("begin");
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (7, 1)"), &[])
        .await
        .expect("business write");
    let pending = store
        .enqueue_pending(&tx, WakeOnlyRunner::batch("order-7"), runner.outbox.now())
        .await
        .expect("enqueue pending");
    let ids = pending.ids().to_vec();
    assert!(
        runner.events_so_far().is_empty(),
        "nothing before the commit"
    );
    let enqueued = pending.commit(tx, &runner.outbox).await.expect("commit");
    runner.expect_announced(&ids, &enqueued, "order-7").await;
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_or_failed_commit_announces_nothing() {
    if !server_ready() {
        return;
    }
    let (scratch, store, mut runner, mut client) = app().await;
    let s = &scratch.schema;
    let now = runner.outbox.now();

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
        pending.commit(tx, &runner.outbox).await.is_err(),
        "the commit fails"
    );

    // Events are sent by the commit itself, before it returns.
    runner.expect_nothing_announced().await;
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
    runner.shutdown().await;
}
