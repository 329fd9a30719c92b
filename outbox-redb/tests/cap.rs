//! The size cap on a redb file: the enqueue that would pass it is refused with `QueueFull`,
//! writes nothing and touches nothing queued, on the store's own path and inside the caller's
//! transaction alike; the payload-bytes counter that the cap and `stats` read follows every
//! write, across a reopen.

mod common;

use std::sync::Arc;

use common::{deliver_claimed, failed, fresh_with, lease, plant_unreadable};
use outbox_core::{
    Cap, CapLimit, Change, Claim, Error, Guard, ListQuery, NewRecord, Progress, Record, RecordId,
    State, Stats, Store, Transition, Usage,
};
use outbox_redb::{RedbConfig, RedbStore};
use redb::{ReadableDatabase, TableDefinition};

const NOTES: TableDefinition<u64, &str> = TableDefinition::new("notes");

fn capped(cap: Cap) -> RedbConfig {
    RedbConfig::default().with_cap(cap)
}

/// A record with a five-byte payload.
fn rec(n: usize) -> NewRecord {
    NewRecord::new(format!("r{n:04}").into_bytes())
}

/// An edit of `doc`, coalescing with the waiting one, of `len` bytes.
fn edit(doc: &str, len: usize) -> NewRecord {
    NewRecord::new(vec![b'e'; len]).replacing(doc)
}

/// Fills the store with `n` records of five bytes, in batches of 100.
async fn fill(store: &RedbStore, n: usize) {
    for start in (0..n).step_by(100) {
        let batch = (start..n.min(start + 100)).map(rec).collect();
        store.enqueue(batch, 1_000).await.unwrap();
    }
}

async fn all(store: &RedbStore) -> Vec<Record> {
    store.list(&ListQuery::new(usize::MAX)).await.unwrap()
}

/// Stats and every record: what a refusal must leave as it was.
async fn snapshot(store: &RedbStore) -> (Stats, Vec<Record>) {
    (store.stats().await.unwrap(), all(store).await)
}

/// The payload bytes of every record held, counted from the records themselves.
async fn counted(store: &RedbStore) -> u64 {
    all(store)
        .await
        .iter()
        .map(|r| r.payload.len() as u64)
        .sum()
}

fn full(limit: CapLimit, max: u64, used: u64, adding: u64) -> Error {
    Error::QueueFull {
        limit,
        max,
        used,
        adding,
    }
}

fn same(err: &Error, expected: &Error) -> bool {
    err.to_string() == expected.to_string() && matches!(err, Error::QueueFull { .. })
}

/// Claims the due head records and delivers `n` of them.
async fn deliver(store: &RedbStore, n: usize, token: u64) {
    let claim = Claim {
        now: 2_000,
        limit: n,
        lease: lease(token, 60_000),
    };
    let claimed = store.claim(claim).await.unwrap();
    assert_eq!(claimed.len(), n);
    deliver_claimed(store, &claimed, token).await;
}

#[tokio::test]
async fn the_1001st_enqueue_is_refused_and_a_delivery_makes_room() {
    let (_dir, _path, store) = fresh_with(capped(Cap::none().with_max_records(1_000))).await;
    fill(&store, 1_000).await;
    let before = snapshot(&store).await;
    assert_eq!((before.0.pending, before.0.payload_bytes), (1_000, 5_000));

    let err = store.enqueue(vec![rec(1_000)], 1_500).await.unwrap_err();
    assert!(matches!(
        err,
        Error::QueueFull {
            limit: CapLimit::Records,
            max: 1_000,
            used: 1_000,
            adding: 1
        }
    ));
    assert!(!err.is_temporary());
    assert_eq!(snapshot(&store).await, before, "nothing changed");

    deliver(&store, 1, 1).await;
    store.enqueue(vec![rec(1_000)], 2_500).await.unwrap();
    let err = store.enqueue(vec![rec(1_001)], 2_500).await.unwrap_err();
    assert!(
        same(&err, &full(CapLimit::Records, 1_000, 1_000, 1)),
        "{err}"
    );
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.usage().records, stats.payload_bytes, stats.delivered),
        (1_000, 5_000, 1)
    );
}

#[tokio::test]
async fn inside_a_business_transaction_the_refusal_leaves_its_own_write_to_commit() {
    let (_dir, _path, store) = fresh_with(capped(Cap::none().with_max_records(1_000))).await;
    fill(&store, 1_000).await;
    let before = snapshot(&store).await;
    let db = store.database().expect("writable");

    let txn = db.begin_write().unwrap();
    txn.open_table(NOTES).unwrap().insert(1, "renamed").unwrap();
    let err = store.enqueue_in(&txn, vec![rec(1_000)], 1_500).unwrap_err();
    assert!(
        same(&err, &full(CapLimit::Records, 1_000, 1_000, 1)),
        "{err}"
    );
    // The same transaction goes on: another write of the caller's, then its commit.
    txn.open_table(NOTES).unwrap().insert(2, "moved").unwrap();
    let err = store
        .enqueue_pending(&txn, vec![rec(1_000), rec(1_001)], 1_500)
        .unwrap_err();
    assert!(
        same(&err, &full(CapLimit::Records, 1_000, 1_000, 2)),
        "{err}"
    );
    txn.commit().unwrap();

    let read = db.begin_read().unwrap();
    let notes = read.open_table(NOTES).unwrap();
    assert_eq!(notes.get(1).unwrap().unwrap().value(), "renamed");
    assert_eq!(notes.get(2).unwrap().unwrap().value(), "moved");
    drop((notes, read));
    assert_eq!(
        snapshot(&store).await,
        before,
        "the outbox still holds 1,000"
    );

    // With room, the same call inside a transaction goes in and commits with it.
    deliver(&store, 1, 1).await;
    let txn = db.begin_write().unwrap();
    txn.open_table(NOTES).unwrap().insert(3, "kept").unwrap();
    let ids = store.enqueue_in(&txn, vec![rec(1_000)], 2_500).unwrap();
    txn.commit().unwrap();
    assert!(store.get(ids[0]).await.unwrap().is_some());
    assert_eq!(store.stats().await.unwrap().usage().records, 1_000);
}

#[tokio::test]
async fn a_refused_batch_takes_back_its_replacements_and_inserts() {
    // 100 bytes at most: a waiting edit of 10 and a grouped record of 80 are held.
    let (_dir, _path, store) = fresh_with(capped(Cap::none().with_max_bytes(100))).await;
    let held = vec![
        edit("doc-1", 10),
        NewRecord::new(vec![b'g'; 80]).in_group("g"),
    ];
    store.enqueue(held, 1_000).await.unwrap();
    let before = snapshot(&store).await;
    assert_eq!(before.0.payload_bytes, 90);

    // The edit grows by 5 (it fits alone), a new member of "g" adds 6
    // and the edit again 1 more: 102 bytes.
    let batch = || {
        vec![
            edit("doc-1", 15),
            NewRecord::new(vec![b'n'; 6]).in_group("g"),
            edit("doc-1", 16),
        ]
    };
    let err = store.enqueue(batch(), 1_100).await.unwrap_err();
    assert!(same(&err, &full(CapLimit::Bytes, 100, 90, 12)), "{err}");
    assert_eq!(snapshot(&store).await, before, "every write taken back");

    let db = store.database().expect("writable");
    let txn = db.begin_write().unwrap();
    txn.open_table(NOTES).unwrap().insert(1, "mine").unwrap();
    let err = store.enqueue_in(&txn, batch(), 1_100).unwrap_err();
    assert!(same(&err, &full(CapLimit::Bytes, 100, 90, 12)), "{err}");
    txn.commit().unwrap();
    assert_eq!(
        snapshot(&store).await,
        before,
        "nothing committed but the note"
    );

    // An edit that shrinks its record adds nothing and goes in, even at the cap.
    store
        .enqueue(vec![NewRecord::new(vec![b'x'; 10])], 1_200)
        .await
        .unwrap();
    let merged = store.enqueue(vec![edit("doc-1", 4)], 1_300).await.unwrap();
    assert!(merged.replaced(0));
    assert_eq!(store.stats().await.unwrap().payload_bytes, 94);
    // The group still claims in order: its head, then nothing behind it.
    let claimed = store
        .claim(Claim {
            now: 5_000,
            limit: 10,
            lease: lease(1, 60_000),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
}

#[tokio::test]
async fn concurrent_enqueues_fill_the_cap_exactly() {
    let (_dir, _path, store) = fresh_with(capped(Cap::none().with_max_records(50))).await;
    let store = Arc::new(store);
    let tasks: Vec<_> = (0..100)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.enqueue(vec![rec(n)], 1_000).await })
        })
        .collect();
    let (mut accepted, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => accepted += 1,
            Err(Error::QueueFull { max: 50, .. }) => refused += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!((accepted, refused), (50, 50));
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.payload_bytes), (50, 250));
}

/// Rejects the record `id`, claimed under `token`, at `at`.
fn reject(record: &Record, token: u64, at: u64) -> Transition {
    Transition {
        id: record.id,
        guard: Guard::Lease(token),
        change: Change::Update(Progress {
            state: State::Rejected,
            next_attempt_at: None,
            ..failed(record, at, 0)
        }),
    }
}

#[tokio::test]
async fn payload_bytes_follow_every_write_and_survive_a_reopen() {
    let (_dir, path, store) = fresh_with(RedbConfig::default()).await;
    async fn check(store: &RedbStore, expected: u64, what: &str) {
        let stats = store.stats().await.unwrap();
        assert_eq!(stats.payload_bytes, expected, "{what}");
        assert_eq!(counted(store).await, expected, "{what}: the records agree");
    }

    store
        .enqueue(
            vec![rec(0), rec(1), edit("doc", 7), NewRecord::new(vec![0; 3])],
            1_000,
        )
        .await
        .unwrap();
    check(&store, 20, "enqueued").await;
    store.enqueue(vec![edit("doc", 12)], 1_100).await.unwrap();
    check(&store, 25, "a replacement counts its new payload only").await;
    store.enqueue(vec![edit("doc", 2)], 1_200).await.unwrap();
    check(&store, 15, "and shrinks").await;

    deliver(&store, 1, 1).await;
    check(&store, 10, "a delivery frees its payload").await;
    store
        .apply(vec![Transition {
            id: RecordId(2),
            guard: Guard::Idle,
            change: Change::Discard {
                reason: "user".into(),
                at: 3_000,
                attempts: 0,
            },
        }])
        .await
        .unwrap();
    check(&store, 5, "a discard too").await;

    let claimed = store
        .claim(Claim {
            now: 3_000,
            limit: 1,
            lease: lease(2, 60_000),
        })
        .await
        .unwrap();
    assert_eq!(claimed[0].payload.len(), 2);
    store
        .apply(vec![reject(&claimed[0], 2, 3_000)])
        .await
        .unwrap();
    check(&store, 5, "a rejected record keeps its payload").await;
    drop(store);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    check(&store, 5, "across a reopen").await;
    assert_eq!(store.prune(4_000).await.unwrap(), 2);
    check(&store, 3, "a prune frees the rejected payload").await;
    store.close().await;
    let reader = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap();
    check(&reader, 3, "read-only").await;
}

/// Claims everything due at `now` (up to 10) under `token`.
async fn claim_all(store: &RedbStore, now: u64, token: u64) -> Vec<Record> {
    store
        .claim(Claim {
            now,
            limit: 10,
            lease: lease(token, now + 60_000),
        })
        .await
        .unwrap()
}

/// A record a claim set aside as unreadable leaves what the cap counts, as it leaves `stats`
/// (`Stats::usage`): the cap counts exactly what `stats` shows, records and bytes, and
/// discarding the row afterwards changes neither.
#[tokio::test]
async fn a_record_set_aside_as_unreadable_leaves_the_cap() {
    let cap = Cap::none().with_max_records(3).with_max_bytes(15);
    let (_dir, path, store) = fresh_with(capped(cap)).await;
    let ids = store
        .enqueue(vec![rec(0), rec(1), rec(2)], 1_000)
        .await
        .unwrap()
        .ids;
    store.close().await;
    plant_unreadable(&path, ids[1]);

    let store = RedbStore::open(&path, capped(cap)).await.unwrap();
    let claimed = claim_all(&store, 2_000, 1).await;
    assert_eq!(
        claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        [ids[0], ids[2]],
        "the claim takes the two that read and sets the third aside"
    );
    deliver_claimed(&store, &claimed, 1).await;
    let stats = store.stats().await.unwrap();
    assert_eq!(
        stats.usage(),
        Usage {
            records: 0,
            bytes: 0
        },
        "stats count nothing held"
    );

    // The cap counts what stats show: three records of five bytes fit again.
    store
        .enqueue(vec![rec(3), rec(4), rec(5)], 3_000)
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(
        stats.usage(),
        Usage {
            records: 3,
            bytes: 15
        }
    );
    let err = store.enqueue(vec![rec(6)], 3_100).await.unwrap_err();
    assert!(same(&err, &full(CapLimit::Records, 3, 3, 1)), "{err}");
    let Error::QueueFull { used, .. } = err else {
        unreachable!("checked above")
    };
    assert_eq!(used, stats.usage().records, "the refusal's usage is stats'");

    // Discarding the set-aside row changes neither count.
    assert!(store.discard_unreadable(ids[1], 3_200).await.unwrap());
    assert_eq!(store.stats().await.unwrap().usage(), stats.usage());
    let err = store.enqueue(vec![rec(6)], 3_300).await.unwrap_err();
    assert!(same(&err, &full(CapLimit::Records, 3, 3, 1)), "{err}");
    let err = store
        .enqueue(vec![NewRecord::new(vec![])], 3_300)
        .await
        .unwrap_err();
    assert!(same(&err, &full(CapLimit::Records, 3, 3, 1)), "{err}");
}

/// A version-6 file written before the `aside` table existed opens as it always did, read-only
/// and writable, and gets the table at its writable open: a claim then sets a row aside and
/// the cap stops counting it.
#[tokio::test]
async fn a_file_without_the_aside_table_opens_and_sets_rows_aside() {
    const ASIDE: TableDefinition<u64, ()> = TableDefinition::new("aside");
    let cap = Cap::none().with_max_records(2);
    let (_dir, path, store) = fresh_with(capped(cap)).await;
    let ids = store
        .enqueue(vec![rec(0), rec(1)], 1_000)
        .await
        .unwrap()
        .ids;
    store.close().await;
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(ASIDE).unwrap(), "a new file has the table");
        txn.commit().unwrap();
    }
    plant_unreadable(&path, ids[0]);

    let reader = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap();
    assert_eq!(reader.stats().await.unwrap().pending, 1);
    drop(reader);
    let store = RedbStore::open(&path, capped(cap)).await.unwrap();
    let claimed = claim_all(&store, 2_000, 1).await;
    assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[1]]);
    deliver_claimed(&store, &claimed, 1).await;
    store.enqueue(vec![rec(2), rec(3)], 3_000).await.unwrap();
    let err = store.enqueue(vec![rec(4)], 3_100).await.unwrap_err();
    assert!(same(&err, &full(CapLimit::Records, 2, 2, 1)), "{err}");
    store.close().await;

    let db = redb::Database::open(&path).unwrap();
    let read = db.begin_read().unwrap();
    let aside = read.open_table(ASIDE).unwrap();
    assert!(
        aside.get(ids[0].0).unwrap().is_some(),
        "the row is set aside"
    );
}
