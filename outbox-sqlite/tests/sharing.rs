//! One file shared: enqueue in the caller's transaction, several handles claiming at once, and
//! many producers sharing commits.

use std::collections::BTreeSet;
use std::sync::Arc;

use outbox_core::{Claim, Error, Lease, NewRecord, RecordId, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

async fn new_store(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::create(dir.path().join("shared.db"), SqliteConfig::default())
        .await
        .expect("create")
}

fn app_connection(store: &SqliteStore) -> Connection {
    let conn = Connection::open(store.path()).expect("open");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    conn.execute_batch("CREATE TABLE IF NOT EXISTS docs (id INTEGER PRIMARY KEY, title TEXT)")
        .expect("business table");
    conn
}

#[tokio::test]
async fn enqueue_in_commits_with_the_business_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = new_store(&dir).await;
    let mut conn = app_connection(&store);

    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO docs (title) VALUES ('kept')", [])
        .expect("business write");
    let ids = store
        .enqueue_in(
            &tx,
            vec![NewRecord::new(b"create kept".to_vec()).in_group("doc")],
            10,
        )
        .expect("enqueue in");
    // Not visible to the store before the caller commits.
    assert_eq!(store.get(ids[0]).await.expect("get"), None);
    tx.commit().expect("commit");

    let record = store.get(ids[0]).await.expect("get").expect("committed");
    assert_eq!(record.payload, b"create kept");
    let lease = Lease {
        token: 1,
        until: 1_000,
    };
    let claimed = store
        .claim(Claim {
            now: 10,
            limit: 5,
            lease,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, ids[0]);
}

#[tokio::test]
async fn enqueue_in_rolls_back_with_the_business_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = new_store(&dir).await;
    let mut conn = app_connection(&store);

    let tx = conn.transaction().expect("begin");
    tx.execute("INSERT INTO docs (title) VALUES ('dropped')", [])
        .expect("business write");
    let ids = store
        .enqueue_in(&tx, vec![NewRecord::new(b"create dropped".to_vec())], 10)
        .expect("enqueue in");
    tx.rollback().expect("rollback");

    assert_eq!(store.get(ids[0]).await.expect("get"), None);
    assert_eq!(store.stats().await.expect("stats").pending, 0);
    let docs: i64 = conn
        .query_row("SELECT count(*) FROM docs", [], |r| r.get(0))
        .expect("count");
    assert_eq!(docs, 0);
}

#[tokio::test]
async fn enqueue_in_refuses_big_payloads_bad_keys_and_foreign_databases() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("small.db");
    let store = SqliteStore::create(&path, SqliteConfig::default().max_payload(4))
        .await
        .expect("create");
    let mut conn = app_connection(&store);
    let tx = conn.transaction().expect("begin");
    let big = store.enqueue_in(&tx, vec![NewRecord::new(vec![0u8; 5])], 1);
    assert!(
        matches!(big, Err(Error::PayloadTooLarge { size: 5, max: 4 })),
        "{big:?}"
    );
    // An idempotency key no header can carry: the core's rule, as in `enqueue`.
    let bad_key = NewRecord::new(vec![0u8; 1]).with_key("line\nbreak");
    let refused = store.enqueue_in(&tx, vec![bad_key], 1);
    assert!(
        matches!(refused, Err(Error::InvalidIdempotencyKey { .. })),
        "{refused:?}"
    );
    drop(tx);

    let mut other = Connection::open(dir.path().join("other.db")).expect("open");
    let tx = other.transaction().expect("begin");
    let foreign = store.enqueue_in(&tx, vec![NewRecord::new(vec![0u8; 1])], 1);
    assert!(
        matches!(foreign, Err(Error::NotAnOutbox { .. })),
        "{foreign:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_file_never_claim_the_same_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Arc::new(new_store(&dir).await);
    let second = Arc::new(
        SqliteStore::open(first.path(), SqliteConfig::default())
            .await
            .expect("second handle"),
    );
    let records: Vec<NewRecord> = (0..300)
        .map(|i| {
            let record = NewRecord::new(vec![i as u8]);
            // Some groups too: one head at a time, across handles.
            if i % 3 == 0 {
                record.in_group(format!("g{}", i % 7))
            } else {
                record
            }
        })
        .collect();
    let all: BTreeSet<RecordId> = first
        .enqueue(records, 100)
        .await
        .expect("enqueue")
        .into_iter()
        .collect();

    // Both handles claim in the same rounds, so their transactions meet at the file's lock.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let claimer = |store: Arc<SqliteStore>, token: u64| {
        let barrier = barrier.clone();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            // 207 claimable records at up to 6 a round: 50 rounds leave both empty-handed.
            for _ in 0..50 {
                barrier.wait().await;
                let claimed = store
                    .claim(Claim {
                        now: 100,
                        limit: 3,
                        lease: Lease {
                            token,
                            until: 1_000_000,
                        },
                    })
                    .await
                    .expect("claim");
                mine.extend(claimed.into_iter().map(|r| r.id));
            }
            mine
        })
    };
    let (a, b) = tokio::join!(claimer(first.clone(), 1), claimer(second.clone(), 2));
    let (a, b) = (a.expect("first claimer"), b.expect("second claimer"));
    let mut seen = BTreeSet::new();
    for id in a.iter().chain(&b) {
        assert!(seen.insert(*id), "{id} was claimed twice");
    }
    // Every ungrouped record and each group's head went to exactly one handle.
    let expected = all.len() - (100 - 7);
    assert_eq!(seen.len(), expected);
    assert!(!a.is_empty() && !b.is_empty(), "both handles claimed");
    let stats = second.stats().await.expect("stats");
    assert_eq!(stats.in_flight, expected as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_producers_share_commits_and_every_acknowledged_record_is_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(new_store(&dir).await);
    let producers: Vec<_> = (0..64)
        .map(|p| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..5 {
                    let record =
                        NewRecord::new(format!("{p}-{i}").into_bytes()).in_group(format!("p{p}"));
                    ids.extend(store.enqueue(vec![record], 10).await.expect("enqueue"));
                }
                ids
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for producer in producers {
        let ids = producer.await.expect("producer");
        // One producer's records keep their order.
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        acknowledged.extend(ids);
    }
    acknowledged.sort();
    acknowledged.dedup();
    assert_eq!(acknowledged.len(), 320);
    // One transaction per enqueue at most; group commit may share them (how much depends on
    // timing, so only the bound is a promise).
    assert!(store.write_transactions() <= 320);
    let path = store.path().to_path_buf();
    Arc::into_inner(store).expect("last handle").close().await;

    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("reopen");
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.pending, 320);
}

#[tokio::test]
async fn a_write_lock_held_elsewhere_past_the_busy_timeout_is_a_temporary_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("busy.db");
    let config = SqliteConfig::default().busy_timeout(std::time::Duration::from_millis(20));
    let store = SqliteStore::create(&path, config).await.expect("create");
    let other = Connection::open(&path).expect("open");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");

    let busy = store.enqueue(vec![NewRecord::new(b"x".to_vec())], 1).await;
    match busy {
        Err(err) => assert!(err.is_temporary(), "{err:?}"),
        Ok(ids) => panic!("enqueued {ids:?} under another writer's lock"),
    }
    // Reads are not blocked by a writer (WAL).
    assert_eq!(store.stats().await.expect("stats").pending, 0);

    other.execute_batch("COMMIT").expect("release");
    let ids = store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 1)
        .await
        .expect("enqueue once the lock is free");
    assert_eq!(ids, vec![RecordId(1)]);
}

/// A claim with nothing due answers from the read connection: it neither waits for nor is
/// refused by another handle holding the file's write lock. Once the lock is free and a record
/// is due, the claim takes it.
#[tokio::test]
async fn a_claim_with_nothing_due_does_not_need_the_write_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("shared.db");
    let config = SqliteConfig::default().busy_timeout(std::time::Duration::from_millis(50));
    let store = SqliteStore::create(&path, config).await.expect("create");
    let ids = store
        .enqueue(vec![NewRecord::new(b"later".to_vec())], 5_000)
        .await
        .expect("enqueue");
    let lease = Lease {
        token: 1,
        until: 60_000,
    };

    let mut conn = app_connection(&store);
    let held = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("take the write lock");
    let idle = store
        .claim(Claim {
            now: 4_999,
            limit: 10,
            lease,
        })
        .await;
    assert!(
        idle.expect("answered without the write lock").is_empty(),
        "nothing is due before 5_000"
    );
    held.rollback().expect("release the write lock");

    let claimed = store
        .claim(Claim {
            now: 5_000,
            limit: 10,
            lease,
        })
        .await
        .expect("claim");
    assert_eq!(ids, claimed.iter().map(|r| r.id).collect::<Vec<_>>());
}
