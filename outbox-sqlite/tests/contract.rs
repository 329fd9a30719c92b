//! The parts of this round's Store contract that live in the file: the halt across a reopen,
//! requeued records on fresh ids that are never reused, a round that commits all or nothing,
//! group keys refused on every enqueue path before anything is written, a drain that commits
//! once per round, and coalescing in the caller's transaction, undone with it.

use std::path::Path;

use outbox_core::{
    machine, Change, Claim, Error, Guard, Halt, Lease, NewRecord, Outcome, Record, RecordId,
    RetryPolicy, State, Store, Transition,
};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

fn claim(now: u64, limit: usize, token: u64) -> Claim {
    Claim {
        now,
        limit,
        lease: Lease {
            token,
            until: now + 60_000,
        },
    }
}

async fn create(path: &Path) -> SqliteStore {
    SqliteStore::create(path, SqliteConfig::default())
        .await
        .expect("create")
}

async fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteConfig::default())
        .await
        .expect("open")
}

#[tokio::test]
async fn the_halt_survives_a_reopen_and_so_does_its_release() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("halt.db");
    let store = create(&path).await;
    assert_eq!(store.halt().await.expect("halt"), None);
    let halt = Halt {
        reason: "HTTP 401: token refused".into(),
        since: 1_234,
    };
    store.set_halt(Some(halt.clone())).await.expect("set");
    store.close().await;

    let store = open(&path).await;
    assert_eq!(store.halt().await.expect("halt"), Some(halt.clone()));
    assert_eq!(store.stats().await.expect("stats").halt, Some(halt));
    // A second halt replaces the first; there is only ever one.
    let later = Halt {
        reason: "5 rejections in a row".into(),
        since: 9_000,
    };
    store.set_halt(Some(later.clone())).await.expect("again");
    assert_eq!(store.halt().await.expect("halt"), Some(later));
    store.set_halt(None).await.expect("resume");
    store.close().await;

    let store = open(&path).await;
    assert_eq!(store.halt().await.expect("halt"), None);
    assert_eq!(store.stats().await.expect("stats").halt, None);
}

/// The transition that rejects a claimed record at `now`.
fn reject(claimed: &Record, now: u64) -> Transition {
    let mut rng = outbox_core::fastrand::Rng::with_seed(1);
    let outcome = Outcome::Rejected {
        reason: "HTTP 422".into(),
    };
    machine::on_outcome(claimed, &outcome, &RetryPolicy::default(), now, &mut rng).transition
}

#[tokio::test]
async fn a_requeued_record_takes_its_place_again_once_its_group_is_idle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("requeue.db");
    let store = create(&path).await;
    let rec = |p: &str| NewRecord::new(p.as_bytes().to_vec()).in_group("doc-1");
    let ids = store
        .enqueue(vec![rec("a"), rec("b"), rec("c")], 1_000)
        .await
        .expect("enqueue");
    let claimed = store.claim(claim(1_000, 10, 7)).await.expect("claim");
    assert_eq!(claimed.len(), 1, "the group's head only");
    store
        .apply(vec![reject(&claimed[0], 2_000)])
        .await
        .expect("reject");
    let b = store.claim(claim(2_000, 1, 8)).await.expect("claim");
    assert_eq!(b[0].id, ids[1], "b is the group's head once a is rejected");
    store.close().await;

    let store = open(&path).await;
    let requeue = |id: RecordId| Transition {
        id,
        guard: Guard::Idle,
        change: Change::Requeue { at: 3_000 },
    };
    // While b is in flight, a requeue of a would put two of the group in flight; c is pending.
    let applied = store
        .apply(vec![requeue(ids[0]), requeue(ids[2])])
        .await
        .expect("requeue");
    assert_eq!(applied.skipped, vec![ids[0], ids[2]]);
    store
        .apply(vec![Transition {
            id: ids[1],
            guard: Guard::Lease(8),
            change: Change::Delivered,
        }])
        .await
        .expect("deliver b");
    let applied = store.apply(vec![requeue(ids[0])]).await.expect("requeue");
    assert!(applied.skipped.is_empty());
    let back = store.get(ids[0]).await.expect("get").expect("a, same id");
    assert_eq!(
        (back.state, back.attempts, back.last_error.as_deref()),
        (State::Pending, 0, None)
    );
    assert_eq!(
        (back.next_attempt_at, back.created_at),
        (Some(3_000), 1_000)
    );
    assert_eq!(
        (back.payload.as_slice(), back.group.as_deref()),
        (&b"a"[..], Some("doc-1"))
    );
    // a goes before c again: c waits behind it.
    assert!(store
        .claim(claim(2_999, 10, 9))
        .await
        .expect("claim")
        .is_empty());
    let next = store.claim(claim(5_000, 10, 10)).await.expect("claim");
    assert_eq!(next.iter().map(|r| r.id).collect::<Vec<_>>(), vec![ids[0]]);
    // Ids stay above every id ever assigned.
    let later = store
        .enqueue(vec![NewRecord::new(b"d".to_vec())], 5_000)
        .await
        .expect("enqueue");
    assert_eq!(later[0], RecordId(ids[2].0 + 1));
}

#[tokio::test]
async fn a_round_whose_claim_fails_applies_none_of_its_outcomes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("round.db");
    let store = create(&path).await;
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"one".to_vec()),
                NewRecord::new(b"two".to_vec()),
            ],
            1_000,
        )
        .await
        .expect("enqueue");
    let first = store.claim(claim(1_000, 1, 5)).await.expect("claim");
    assert_eq!(first[0].id, ids[0]);
    let delivered = Transition {
        id: ids[0],
        guard: Guard::Lease(5),
        change: Change::Delivered,
    };

    // From now on the file refuses to put a record in flight: the round's claim part fails
    // after its outcome was written inside the same transaction.
    Connection::open(&path)
        .expect("connection")
        .execute_batch(
            "CREATE TRIGGER no_claims BEFORE UPDATE ON records WHEN NEW.state = 2
             BEGIN SELECT RAISE(ABORT, 'claims refused'); END;",
        )
        .expect("trigger");
    let failed = store
        .round(vec![delivered.clone()], Some(claim(1_000, 10, 6)))
        .await;
    assert!(failed.is_err(), "{failed:?}");
    let stats = store.stats().await.expect("stats");
    assert_eq!(
        (stats.delivered, stats.in_flight, stats.pending),
        (0, 1, 1),
        "the outcome was rolled back with the claim"
    );
    assert_eq!(
        store.get(ids[0]).await.expect("get").map(|r| r.state),
        Some(State::InFlight)
    );

    Connection::open(&path)
        .expect("connection")
        .execute_batch("DROP TRIGGER no_claims")
        .expect("drop trigger");
    let round = store
        .round(vec![delivered], Some(claim(1_000, 10, 6)))
        .await
        .expect("round");
    assert!(round.applied.skipped.is_empty());
    assert_eq!(
        round.claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    let stats = store.stats().await.expect("stats");
    assert_eq!((stats.delivered, stats.in_flight, stats.pending), (1, 1, 0));
}

#[tokio::test]
async fn invalid_group_keys_are_refused_on_every_enqueue_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("groups.db");
    let store = create(&path).await;
    let bad = [
        String::new(),
        "nul\0inside".to_owned(),
        "x".repeat(outbox_core::MAX_GROUP_LEN + 1),
    ];
    for group in &bad {
        // A good record first: the whole batch is refused, not just the bad one.
        let batch = vec![
            NewRecord::new(b"good".to_vec()).in_group("fine"),
            NewRecord::new(b"bad".to_vec()).in_group(group.clone()),
        ];
        let result = store.enqueue(batch.clone(), 1_000).await;
        assert!(
            matches!(result, Err(Error::InvalidGroup { .. })),
            "{group:?}: {result:?}"
        );

        let mut conn = Connection::open(&path).expect("connection");
        let tx = conn.transaction().expect("begin");
        let result = store.enqueue_in(&tx, batch, 1_000);
        assert!(
            matches!(result, Err(Error::InvalidGroup { .. })),
            "{group:?} in the caller's transaction: {result:?}"
        );
        tx.commit().expect("commit");
    }
    let longest = "x".repeat(outbox_core::MAX_GROUP_LEN);
    store
        .enqueue(
            vec![NewRecord::new(b"ok".to_vec()).in_group(longest)],
            1_000,
        )
        .await
        .expect("the longest key is accepted");
    let stats = store.stats().await.expect("stats");
    assert_eq!(
        stats.pending, 1,
        "nothing of the refused batches was written"
    );
}

#[tokio::test]
async fn a_drain_of_rounds_commits_once_per_round() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = create(&dir.path().join("drain.db")).await;
    let records = (0..100u8).map(|i| NewRecord::new(vec![i])).collect();
    store.enqueue(records, 1_000).await.expect("enqueue");
    let before = store.write_transactions();
    let mut rounds = 0u64;
    let mut token = 1;
    let mut claimed = store
        .round(Vec::new(), Some(claim(1_000, 32, token)))
        .await
        .expect("first round")
        .claimed;
    rounds += 1;
    while !claimed.is_empty() {
        let outcomes = claimed
            .iter()
            .map(|r| Transition {
                id: r.id,
                guard: Guard::Lease(token),
                change: Change::Delivered,
            })
            .collect();
        token += 1;
        let round = store
            .round(outcomes, Some(claim(1_000, 32, token)))
            .await
            .expect("round");
        assert!(round.applied.skipped.is_empty());
        claimed = round.claimed;
        rounds += 1;
    }
    assert_eq!(rounds, 5, "32 + 32 + 32 + 4, then the last outcomes");
    assert_eq!(store.write_transactions() - before, rounds);
    let stats = store.stats().await.expect("stats");
    assert_eq!((stats.delivered, stats.undelivered()), (100, 0));
}

#[tokio::test]
async fn coalescing_in_the_callers_transaction_rolls_back_with_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("coalesce.db");
    let store = create(&path).await;
    let edit = |body: &[u8], version: &str| {
        NewRecord::new(body.to_vec())
            .in_group("note")
            .replacing("note/body")
            .expecting(version)
    };
    let first = store
        .enqueue(vec![edit(b"v1", "1")], 1_000)
        .await
        .expect("enqueue")
        .ids[0];

    // A replacement inside a transaction that rolls back: the record and the count stay.
    let mut conn = Connection::open(&path).expect("connection");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let enqueued = store
        .enqueue_in(&tx, vec![edit(b"v2", "2")], 1_001)
        .expect("enqueue in");
    assert_eq!(
        (enqueued.ids.clone(), enqueued.superseded),
        (vec![first], vec![0])
    );
    tx.rollback().expect("rollback");
    let record = store.get(first).await.expect("get").expect("record");
    assert_eq!(
        (
            record.payload.as_slice(),
            record.expected_version.as_deref()
        ),
        (b"v1".as_slice(), Some("1"))
    );
    assert_eq!(store.stats().await.expect("stats").superseded, 0);

    // Committed, with a second edit of the batch and a fresh write between: the batch
    // coalesces with the file and with itself, and a later write of the group is not overtaken.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let batch = vec![
        edit(b"v2", "2"),
        edit(b"v3", "3"),
        NewRecord::new(b"delete".to_vec()).in_group("note"),
        edit(b"v4", "4"),
        edit(b"v5", "5"),
    ];
    let enqueued = store.enqueue_in(&tx, batch, 1_002).expect("enqueue in");
    tx.commit().expect("commit");
    let ids = enqueued.ids.clone();
    assert_eq!((ids[0], ids[1]), (first, first));
    assert!(
        ids[2] > first && ids[3] > ids[2] && ids[4] == ids[3],
        "{ids:?}"
    );
    assert_eq!(enqueued.superseded, vec![0, 1, 4]);
    let stats = store.stats().await.expect("stats");
    assert_eq!((stats.pending, stats.superseded), (3, 3));
    let last = store.get(ids[3]).await.expect("get").expect("record");
    assert_eq!(
        (
            last.payload.as_slice(),
            last.expected_version.as_deref(),
            last.replaces.as_deref(),
            last.created_at
        ),
        (b"v5".as_slice(), Some("5"), Some("note/body"), 1_002)
    );
    // Only the group's head is claimable, carrying the last edit before the delete.
    let claimed = store.claim(claim(2_000, 10, 1)).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        (claimed[0].id, claimed[0].payload.as_slice()),
        (first, b"v3".as_slice())
    );
    assert_eq!(claimed[0].expected_version.as_deref(), Some("3"));
}
