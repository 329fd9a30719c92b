//! Every store call is bounded: a statement that waits on a lock an application's transaction
//! holds fails after `lock_timeout`, as a temporary error the runner backs off from, instead of
//! stalling the runner (and its lease renewals) until the transaction ends.

mod common;

use std::time::Duration;

use common::{config, server_ready, url, Scratch};
use outbox_core::{Change, Claim, Guard, Lease, NewRecord, Store, Transition};
use outbox_postgres::PgStore;

const T0: u64 = 1_700_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_lock_held_by_an_open_transaction_fails_the_call_after_lock_timeout() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = PgStore::connect(
        config(&scratch.schema).with_lock_timeout(Some(Duration::from_millis(200))),
    )
    .await
    .unwrap();
    let (mut client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    // The application's transaction enqueues into group g and does not commit yet: it holds
    // the group's lock.
    let tx = client.transaction().await.unwrap();
    let record = |payload: &[u8]| NewRecord::new(payload.to_vec()).in_group("g");
    store.enqueue_in(&tx, vec![record(b"a")], T0).await.unwrap();
    // The store's own write into g waits for that lock, at most lock_timeout: the bound here
    // only catches a call that hangs, the store must answer long before it.
    let call = tokio::time::timeout(
        Duration::from_secs(20),
        store.enqueue(vec![record(b"b")], T0),
    );
    let error = call
        .await
        .expect("the store's call is bounded by lock_timeout, not by the transaction")
        .expect_err("the lock is held");
    assert!(
        error.is_temporary(),
        "a lock timeout is worth trying again: {error}"
    );
    assert!(
        error.to_string().contains("55P03"),
        "the server's reason: {error}"
    );
    // Once the transaction commits, the same write goes through, behind the committed one.
    tx.commit().await.unwrap();
    store.enqueue(vec![record(b"b")], T0).await.unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.pending, 2);
    drop(client);
    driver.abort();
}

/// A runner's round on its own leases (sent as two pipelines) that fails on a group lock
/// leaves no session of the store inside a transaction by the time it returns: the
/// connection is rolled back before it goes back to the pool. The report then goes through
/// once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_round_leaves_no_connection_inside_its_transaction() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let app = format!("outbox-round-{}", fastrand::u32(..));
    let store = PgStore::connect(
        config(&scratch.schema)
            .with_lock_timeout(Some(Duration::from_millis(200)))
            .with_application_name(&app),
    )
    .await
    .unwrap();
    let record = |payload: &[u8]| NewRecord::new(payload.to_vec()).in_group("g");
    store.enqueue(vec![record(b"a")], T0).await.unwrap();
    let lease = Lease {
        token: 3,
        until: T0 + 60_000,
    };
    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 1,
            lease,
        })
        .await
        .unwrap();
    let delivered = || {
        vec![Transition {
            id: claimed[0].id,
            guard: Guard::Lease(3),
            change: Change::Delivered,
        }]
    };
    let (mut client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let tx = client.transaction().await.unwrap();
    store.enqueue_in(&tx, vec![record(b"b")], T0).await.unwrap();
    let error = store
        .round(delivered(), None)
        .await
        .expect_err("the group's lock is held");
    assert!(error.to_string().contains("55P03"), "{error}");
    let stuck: i64 = tx
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
             AND state LIKE 'idle in transaction%'",
            &[&app],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        stuck, 0,
        "a store session was left inside the failed transaction"
    );
    tx.commit().await.unwrap();
    let round = store.round(delivered(), None).await.unwrap();
    assert!(round.applied.skipped.is_empty());
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.pending), (1, 1));
    drop(client);
    driver.abort();
}
