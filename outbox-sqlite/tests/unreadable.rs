//! One undecodable row among 100 under the real runner: the other 99 are delivered, the bad
//! one is said once, listed with its reason, and discarded by id.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{sink_fn, Event, NewRecord, Outbox, Outcome, Record, RecordId, Unreadable};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

#[tokio::test]
async fn ninety_nine_delivered_around_one_bad_row_which_is_listed_then_discarded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    let records = (0..100)
        .map(|i| NewRecord::new(format!("r{i}").into_bytes()))
        .collect();
    let ids = outbox_core::Store::enqueue(&store, records, 0)
        .await
        .expect("enqueue");
    let bad = ids[41];
    store.close().await;
    // An older version's write, or a flipped bit: text that is not UTF-8.
    Connection::open(&path)
        .expect("open the file")
        .execute(
            "UPDATE records SET last_error = CAST(x'c328ff' AS TEXT) WHERE id = ?1",
            [i64::try_from(bad.0).unwrap()],
        )
        .expect("plant");

    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open");
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
