//! One undecodable row among 100 under the real runner: the other 99 are delivered, the bad
//! one is said once, listed with its reason, and discarded by id.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{sink_fn, Event, NewRecord, Outbox, Outcome, Record, RecordId, Unreadable};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

/// A store file with `count` records (payloads `r0`, `r1`, …) enqueued at time 0, then
/// damaged behind the store's back: each `(sql, at)` of `damage` runs on the closed file with
/// `?1` the id of record `at`. Returns the reopened store, the records' ids, and the directory
/// that keeps the file.
async fn damaged(
    count: usize,
    damage: &[(&str, usize)],
) -> (tempfile::TempDir, SqliteStore, Vec<RecordId>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    let records = (0..count)
        .map(|i| NewRecord::new(format!("r{i}").into_bytes()))
        .collect();
    let ids = outbox_core::Store::enqueue(&store, records, 0)
        .await
        .expect("enqueue")
        .ids;
    store.close().await;
    let conn = Connection::open(&path).expect("open the file");
    for &(sql, at) in damage {
        conn.execute(sql, [i64::try_from(ids[at].0).unwrap()])
            .expect("plant");
    }
    drop(conn);
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open");
    (dir, store, ids)
}

#[tokio::test]
async fn ninety_nine_delivered_around_one_bad_row_which_is_listed_then_discarded() {
    // An older version's write, or a flipped bit: text that is not UTF-8.
    let (_dir, store, ids) = damaged(
        100,
        &[(
            "UPDATE records SET last_error = CAST(x'c328ff' AS TEXT) WHERE id = ?1",
            41,
        )],
    )
    .await;
    let bad = ids[41];
    let seen = Arc::new(Mutex::new(Vec::<RecordId>::new()));
    let sink = {
        let seen = Arc::clone(&seen);
        sink_fn(move |record: Record| {
            seen.lock().unwrap().push(record.id);
            async { Outcome::Delivered }
        })
    };
    let outbox = Outbox::builder(Arc::new(store), sink)
        .start()
        .await
        .expect("start");
    // Subscribed before the runner's task first runs (this runtime has one thread).
    let mut events = outbox.events();
    let (mut delivered, mut said) = (BTreeSet::new(), Vec::new());
    tokio::time::timeout(Duration::from_secs(60), async {
        while delivered.len() < 99 || said.is_empty() {
            match events.recv().await.expect("events") {
                Event::Delivered { id } => {
                    delivered.insert(id);
                }
                Event::Unreadable { id, reason } => said.push((id, reason)),
                _ => {}
            }
        }
    })
    .await
    .expect("99 deliveries and the bad row reported");
    let expected: BTreeSet<RecordId> = ids.iter().copied().filter(|id| *id != bad).collect();
    assert_eq!(delivered, expected);
    assert!(
        !seen.lock().unwrap().contains(&bad),
        "never given to the sink"
    );
    assert_eq!(said, [(bad, "last_error is not UTF-8".to_owned())]);

    let stats = outbox.stats().await.expect("stats");
    assert_eq!(
        (stats.delivered, stats.undelivered(), stats.next_due),
        (99, 0, None),
        "the bad row is counted nowhere and not due"
    );
    assert_eq!(
        outbox.unreadable(10).await.expect("unreadable"),
        [Unreadable::new(bad, "last_error is not UTF-8")]
    );
    assert!(outbox.discard_unreadable(bad).await.expect("discard"));
    assert_eq!(outbox.unreadable(10).await.expect("unreadable"), []);
    let tombstones = outbox.tombstones(None, 10).await.expect("tombstones");
    assert_eq!(tombstones.len(), 1);
    assert_eq!(tombstones[0].id, bad);
    assert_eq!(
        tombstones[0].reason,
        "unreadable row discarded: last_error is not UTF-8"
    );
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, Event::Unreadable { .. }),
            "said twice: {event:?}"
        );
    }
    outbox
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
}

/// A damaged history (bytes that are no history, or a value of another type) never makes its
/// record unreadable: the record reads whole with an empty history marked unreadable, is
/// claimed and delivered, and its next attempt starts a new history.
#[tokio::test]
async fn a_damaged_history_leaves_its_record_whole() {
    let (_dir, store, ids) = damaged(
        2,
        &[
            ("UPDATE records SET history = x'0109ff' WHERE id = ?1", 0),
            ("UPDATE records SET history = 'not a blob' WHERE id = ?1", 1),
        ],
    )
    .await;
    for id in [ids[0], ids[1]] {
        let record = outbox_core::Store::get(&store, id)
            .await
            .expect("get")
            .expect("the record reads");
        assert!(record.history.is_unreadable() && record.history.is_empty());
    }
    assert!(outbox_core::Store::unreadable(&store, 10)
        .await
        .expect("unreadable")
        .is_empty());
    let lease = outbox_core::Lease {
        token: 1,
        until: 60_000,
    };
    let claimed = outbox_core::Store::claim(
        &store,
        outbox_core::Claim {
            now: 1,
            limit: 10,
            lease,
        },
    )
    .await
    .expect("claim");
    assert_eq!(claimed.len(), 2, "both records are claimed");
    let mut rng = outbox_core::fastrand::Rng::with_seed(1);
    let step = outbox_core::machine::on_outcome(
        &claimed[0],
        &Outcome::transient("HTTP 503", None),
        &outbox_core::RetryPolicy::default(),
        5,
        &mut rng,
    );
    outbox_core::Store::apply(&store, vec![step.transition])
        .await
        .expect("apply");
    let record = outbox_core::Store::get(&store, claimed[0].id)
        .await
        .expect("get")
        .expect("record");
    assert!(!record.history.is_unreadable());
    assert_eq!(record.history.len(), 1, "a new history starts");
}

/// A waiting record whose lease column was damaged on disk is claimed and delivered like the
/// others: the claim writes the lease, so it never decodes what the row held there.
#[tokio::test]
async fn a_waiting_record_with_a_damaged_lease_column_is_claimed_with_a_fresh_lease() {
    use outbox_core::{Claim, Lease, Store};

    let (_dir, store, ids) = damaged(
        3,
        &[("UPDATE records SET lease_until = 'soon' WHERE id = ?1", 1)],
    )
    .await;
    let lease = Lease {
        token: 7,
        until: 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: 1,
            limit: 10,
            lease,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    assert!(claimed.iter().all(|r| r.lease == Some(lease)));
    assert_eq!(
        store.get(ids[1]).await.expect("get").map(|r| r.lease),
        Some(Some(lease))
    );
    assert!(store.unreadable(10).await.expect("unreadable").is_empty());
    assert_eq!(store.stats().await.expect("stats").in_flight, 3);
}
