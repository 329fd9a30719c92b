//! The claim of schema version 7: it writes the lease alone, so its row versions are
//! heap-only; a record in flight is known by its token; each claim's lease is listed in
//! `leases` until no record holds it; and a version 6 schema with records in flight is
//! brought to version 7 with their leases kept.

mod common;

use common::{admin, claim, down_to_6, payload_bytes_recounted, server_ready, Scratch, LEASE_MS};
use outbox_core::{
    Attempt, AttemptClass, Change, ErrorCount, Guard, History, Lease, NewRecord, Progress,
    RecordId, State, Store, Transition,
};
use outbox_postgres::PgStore;
use tokio_postgres::error::SqlState;

const T0: u64 = 1_700_000_000_000;

async fn enqueue(store: &PgStore, n: usize) -> Vec<RecordId> {
    let records = (0..n)
        .map(|i| NewRecord::new(format!("record {i}").into_bytes()))
        .collect();
    store.enqueue(records, T0).await.unwrap().ids
}

/// The lease rows, as `(token, until, ids)`, by token.
async fn lease_rows(client: &tokio_postgres::Client, s: &str) -> Vec<(i64, i64, Vec<i64>)> {
    client
        .query(
            &format!("SELECT token, until, ids FROM \"{s}\".leases ORDER BY token, until"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

fn raw(id: RecordId) -> i64 {
    i64::try_from(id.0).unwrap()
}

/// Every tuple of the records' first page that a heap-only update replaced, read with
/// `pageinspect` (`HEAP_HOT_UPDATED` in `t_infomask2`), or `None` where the extension cannot
/// be created (said loudly; under CI that fails the test).
async fn hot_updated(client: &tokio_postgres::Client, s: &str) -> Option<i64> {
    if let Err(err) = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .await
    {
        let why = format!("pageinspect cannot be created ({err}): the heap-only check is skipped");
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FROM heap_page_items(get_raw_page('\"{s}\".records', 0)) \
                 WHERE (t_infomask2 & 16384) <> 0"
            ),
            &[],
        )
        .await
        .unwrap();
    Some(row.get(0))
}

/// Each claimed row's old version was replaced by a heap-only update: the claim changed no
/// column an index holds or reads, so it added no index entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_writes_heap_only_row_versions() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    // Grouped and ungrouped, with a not-before time: every index of the table holds a row.
    let mut records: Vec<NewRecord> = (0..6)
        .map(|i| NewRecord::new(vec![i]).in_group(format!("g{i}")))
        .collect();
    records.push(NewRecord::new(b"loose".to_vec()));
    records.push(NewRecord::new(b"later".to_vec()).not_before(T0 - 5));
    records.push(NewRecord::new(b"merged".to_vec()).replacing("key"));
    store.enqueue(records, T0 - 10).await.unwrap();
    let client = admin().await;
    assert_eq!(hot_updated(&client, s).await.unwrap_or(0), 0);
    let claimed = store.claim(claim(T0, 100, 7)).await.unwrap();
    assert_eq!(claimed.len(), 9);
    assert!(claimed.iter().all(|r| r.state == State::InFlight));
    if let Some(hot) = hot_updated(&client, s).await {
        assert_eq!(hot, 9, "every claimed row's update is heap-only");
    }
}

/// A record claimed again after a failure keeps its stored state code (retrying) under its
/// lease: it counts as in flight, not as retrying, and not among the failed records; its
/// failure counts again once it is reported retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_flight_is_counted_in_flight_and_not_among_the_failed() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let ids = enqueue(&store, 2).await;
    store.claim(claim(T0, 1, 1)).await.unwrap();
    let mut history = History::default();
    history.push(Attempt::new(T0, AttemptClass::Later, "HTTP 503"));
    let retry = |token| Transition {
        id: ids[0],
        guard: Guard::Lease(token),
        change: Change::Update(Progress {
            state: State::Retrying,
            attempts: 1,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: Some(T0),
            // Due again at once, before the other record (same deadline, lower id).
            next_attempt_at: Some(T0),
            last_error: Some("HTTP 503".into()),
            history: history.clone(),
        }),
    };
    store.apply(vec![retry(1)]).await.unwrap();
    let failed = vec![ErrorCount {
        error: "HTTP 503".into(),
        count: 1,
    }];
    assert_eq!(store.common_errors(10).await.unwrap(), failed);

    let again = store.claim(claim(T0, 1, 2)).await.unwrap();
    assert_eq!(again[0].id, ids[0]);
    assert_eq!(again[0].state, State::InFlight);
    assert_eq!(again[0].last_error.as_deref(), Some("HTTP 503"));
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.retrying, stats.in_flight), (1, 0, 1));
    // The other record is still due; the one in flight is not.
    assert_eq!(stats.next_due, Some(T0));
    assert_eq!(store.common_errors(10).await.unwrap(), Vec::new());
    assert_eq!(
        store.get(ids[0]).await.unwrap().unwrap().state,
        State::InFlight
    );

    store.apply(vec![retry(2)]).await.unwrap();
    assert_eq!(store.common_errors(10).await.unwrap(), failed);
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.retrying, stats.in_flight), (1, 1, 0));
}

/// A claim lists its lease; a renewal of all its records replaces the row, one of some adds
/// one; a round that reports the last record of a lease removes its rows, and `expired`
/// removes the rows of records reported elsewhere once they are due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_rows_live_as_long_as_a_record_holds_them() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let client = admin().await;
    let ids = enqueue(&store, 4).await;
    let first = store.claim(claim(T0, 2, 5)).await.unwrap();
    assert_eq!(first.len(), 2);
    let until = (T0 + LEASE_MS) as i64;
    assert_eq!(
        lease_rows(&client, s).await,
        vec![(5, until, vec![raw(ids[0]), raw(ids[1])])]
    );

    // Renewing both replaces the row; renewing one of them adds a row for it.
    let renewed = Lease {
        token: 5,
        until: T0 + 60_000,
    };
    store.renew(&ids[..2], renewed).await.unwrap();
    assert_eq!(
        lease_rows(&client, s).await,
        vec![(5, renewed.until as i64, vec![raw(ids[0]), raw(ids[1])])]
    );
    let longer = Lease {
        token: 5,
        until: T0 + 90_000,
    };
    store.renew(&ids[1..2], longer).await.unwrap();
    assert_eq!(lease_rows(&client, s).await.len(), 2);
    // Nothing has expired before its own lease, whichever row lists it.
    assert!(store.expired(T0 + 60_000 - 1, 10).await.unwrap().is_empty());
    let lapsed = store.expired(T0 + 60_000, 10).await.unwrap();
    assert_eq!(
        lapsed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );

    // A round reporting both ends the lease: no row is left.
    let delivered = |id| Transition {
        id,
        guard: Guard::Lease(5),
        change: Change::Delivered,
    };
    let round = store
        .round(
            vec![delivered(ids[0]), delivered(ids[1])],
            Some(claim(T0, 1, 6)),
        )
        .await
        .unwrap();
    assert!(round.applied.skipped.is_empty());
    assert_eq!(round.claimed[0].id, ids[2]);
    assert_eq!(
        lease_rows(&client, s).await,
        vec![(6, until, vec![raw(ids[2])])]
    );

    // Reported, then discarded in the same batch (which takes the general path): its row
    // goes with it.
    let applied = store
        .apply(vec![
            Transition {
                id: ids[2],
                guard: Guard::Lease(6),
                change: Change::Update(Progress::requeued(T0 + 5)),
            },
            Transition {
                id: ids[2],
                guard: Guard::Idle,
                change: Change::Discard {
                    reason: "by hand".into(),
                    at: T0,
                    attempts: 0,
                },
            },
        ])
        .await
        .unwrap();
    assert!(applied.skipped.is_empty());
    assert!(store.get(ids[2]).await.unwrap().is_none());
    assert!(lease_rows(&client, s).await.is_empty());

    // A row whose record left by a path that does not end leases (a hand edit here) goes
    // when `expired` reaches it.
    store.claim(claim(T0, 1, 8)).await.unwrap();
    client
        .execute(
            &format!("UPDATE \"{s}\".records SET lease_token = NULL, lease_until = NULL"),
            &[],
        )
        .await
        .unwrap();
    assert!(store.expired(T0 + LEASE_MS, 10).await.unwrap().is_empty());
    assert!(lease_rows(&client, s).await.is_empty());
}

/// A version 6 schema with records in flight (state 2, found through the lease index) is
/// brought to version 7: the records stay in flight under their leases, their leases are
/// listed so they expire as before, the counts stay exact, and a report under the lease
/// applies; a claim as version 6 wrote it (state 2 with a token), from a process of that build
/// still running, is refused, so it cannot take a record a current runner holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_schema_is_migrated_with_its_records_in_flight() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let ids = enqueue(&store, 4).await;
    store.claim(claim(T0, 2, 3)).await.unwrap();
    store.claim(claim(T0, 1, 4)).await.unwrap();
    let before = store.stats().await.unwrap();
    drop(store);
    let client = admin().await;
    client
        .batch_execute(&format!(
            "{} UPDATE \"{s}\".schema_version SET version = 6;",
            down_to_6(s)
        ))
        .await
        .unwrap();

    let states = || async {
        client
            .query(
                &format!("SELECT state FROM \"{s}\".records ORDER BY id"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, i16>(0))
            .collect::<Vec<_>>()
    };
    assert_eq!(states().await, vec![2, 2, 2, 0], "as version 6 left them");

    let store = scratch.store().await;
    assert_eq!(
        states().await,
        vec![0, 0, 0, 0],
        "in flight by their tokens alone"
    );
    let version: i32 = client
        .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, outbox_postgres::SCHEMA_VERSION as i32);
    let after = store.stats().await.unwrap();
    assert_eq!(
        (after.pending, after.in_flight, after.payload_bytes),
        (before.pending, before.in_flight, before.payload_bytes)
    );
    assert_eq!((after.pending, after.in_flight), (1, 3));
    assert_eq!(
        after.payload_bytes,
        payload_bytes_recounted(&client, s).await
    );
    // Version 6's claim, as a process of that build would send it, is refused.
    let refused = client
        .execute(
            &format!(
                "UPDATE \"{s}\".records AS r SET state = 2, claimable = false, \
                 lease_token = 77, lease_until = $1 WHERE r.id = $2"
            ),
            &[&((T0 + LEASE_MS) as i64), &raw(ids[3])],
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(&SqlState::CHECK_VIOLATION));
    // Still in flight: a claim takes only the pending record.
    let taken = store.claim(claim(T0, 10, 9)).await.unwrap();
    assert_eq!(taken.iter().map(|r| r.id).collect::<Vec<_>>(), vec![ids[3]]);
    // Their leases expire when they did.
    assert!(store
        .expired(T0 + LEASE_MS - 1, 10)
        .await
        .unwrap()
        .is_empty());
    let lapsed = store.expired(T0 + LEASE_MS, 10).await.unwrap();
    assert_eq!(lapsed.len(), 4);
    assert!(lapsed
        .iter()
        .take(3)
        .all(|r| r.lease.is_some_and(|l| l.token == 3 || l.token == 4)));
    // A report under the old lease applies.
    let applied = store
        .apply(vec![Transition {
            id: ids[0],
            guard: Guard::Lease(3),
            change: Change::Delivered,
        }])
        .await
        .unwrap();
    assert!(applied.skipped.is_empty());
    assert_eq!(store.stats().await.unwrap().delivered, 1);
}
