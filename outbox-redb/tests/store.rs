//! The store's behaviour: claim order, groups, guards, stats, prune, the caller's transaction,
//! group commit, the halt, requeue, group-key validation, the round's single commit,
//! coalescing (in the caller's transaction too, and its index), and a seeded comparison with the
//! memory reference model.

mod common;

use std::sync::Arc;

use common::disk::Disk;
use common::{deliver_claimed, failed, fresh, fresh_with, lease};
use outbox_core::{
    Attempt, AttemptClass, Change, Claim, Error, Guard, Halt, History, ListQuery, NewRecord,
    Progress, RecordId, State, Stats, Store, Transition,
};
use outbox_memory::MemoryStore;
use outbox_redb::{Durability, RedbConfig, RedbStore};

fn new(payload: &str) -> NewRecord {
    NewRecord::new(payload.as_bytes().to_vec())
}

fn claim(now: u64, limit: usize, token: u64) -> Claim {
    Claim {
        now,
        limit,
        lease: lease(token, now + 30_000),
    }
}

fn ids(records: &[outbox_core::Record]) -> Vec<u64> {
    records.iter().map(|r| r.id.0).collect()
}

#[tokio::test]
async fn claims_in_deadline_then_id_order_and_never_twice() {
    let (_dir, _path, store) = fresh().await;
    store.enqueue(vec![new("a"), new("b")], 200).await.unwrap();
    store.enqueue(vec![new("c")], 100).await.unwrap();
    store.enqueue(vec![new("later")], 5_000).await.unwrap();

    let first = store.claim(claim(1_000, 2, 1)).await.unwrap();
    assert_eq!(ids(&first), [3, 1]);
    assert!(first.iter().all(|r| r.state == State::InFlight));
    assert_eq!(first[0].lease, Some(lease(1, 31_000)));

    let second = store.claim(claim(1_000, 10, 2)).await.unwrap();
    assert_eq!(
        ids(&second),
        [2],
        "in-flight and not-yet-due records are not claimed"
    );
    assert_eq!(store.next_due().await.unwrap(), Some(5_000));
}

#[tokio::test]
async fn a_group_goes_one_at_a_time_in_id_order() {
    let (_dir, _path, store) = fresh().await;
    let g = |p: &str| new(p).in_group("doc");
    store
        .enqueue(vec![g("1"), g("2"), new("free")], 0)
        .await
        .unwrap();

    let claimed = store.claim(claim(0, 10, 1)).await.unwrap();
    assert_eq!(
        ids(&claimed),
        [1, 3],
        "only the head of the group is claimable"
    );

    let delivered = Transition {
        id: RecordId(1),
        guard: Guard::Lease(1),
        change: Change::Delivered,
    };
    store.apply(vec![delivered]).await.unwrap();
    let next = store.claim(claim(0, 10, 2)).await.unwrap();
    assert_eq!(ids(&next), [2], "the next member became the head");
}

#[tokio::test]
async fn a_parked_head_holds_its_group_only_and_counts_as_held() {
    let (_dir, _path, store) = fresh().await;
    let g = |p: &str| new(p).in_group("doc");
    store
        .enqueue(vec![g("1"), g("2"), g("3"), new("other")], 0)
        .await
        .unwrap();
    let claimed = store.claim(claim(0, 1, 1)).await.unwrap();
    let parked = Progress {
        state: State::NeedsAttention,
        next_attempt_at: None,
        ..failed(&claimed[0], 10, 0)
    };
    store
        .apply(vec![Transition {
            id: RecordId(1),
            guard: Guard::Lease(1),
            change: Change::Update(parked),
        }])
        .await
        .unwrap();

    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.needs_attention, stats.pending, stats.held),
        (1, 3, 2)
    );
    assert_eq!(ids(&store.claim(claim(100, 10, 2)).await.unwrap()), [4]);

    // Rejecting the parked head lets the group move on.
    let rejected = Progress {
        state: State::Rejected,
        next_attempt_at: None,
        ..failed(&claimed[0], 20, 0)
    };
    store
        .apply(vec![Transition {
            id: RecordId(1),
            guard: Guard::Idle,
            change: Change::Update(rejected),
        }])
        .await
        .unwrap();
    assert_eq!(ids(&store.claim(claim(100, 10, 3)).await.unwrap()), [2]);
    assert_eq!(store.stats().await.unwrap().held, 0);
}

#[tokio::test]
async fn guards_skip_stale_reports_and_verbs_on_in_flight_records() {
    let (_dir, _path, store) = fresh().await;
    store.enqueue(vec![new("a"), new("b")], 0).await.unwrap();
    store.claim(claim(0, 1, 7)).await.unwrap();

    let applied = store
        .apply(vec![
            Transition {
                id: RecordId(1),
                guard: Guard::Lease(8),
                change: Change::Delivered,
            },
            Transition {
                id: RecordId(1),
                guard: Guard::Idle,
                change: Change::Discard {
                    reason: "user".into(),
                    at: 5,
                    attempts: 1,
                },
            },
            Transition {
                id: RecordId(2),
                guard: Guard::Lease(7),
                change: Change::Delivered,
            },
            Transition {
                id: RecordId(99),
                guard: Guard::Idle,
                change: Change::Delivered,
            },
        ])
        .await
        .unwrap();
    assert_eq!(
        applied.skipped,
        [RecordId(1), RecordId(1), RecordId(2), RecordId(99)]
    );
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.in_flight, stats.pending, stats.delivered), (1, 1, 0));

    store
        .apply(vec![Transition {
            id: RecordId(1),
            guard: Guard::Lease(7),
            change: Change::Delivered,
        }])
        .await
        .unwrap();
    assert_eq!(store.stats().await.unwrap().delivered, 1);
}

#[tokio::test]
async fn renew_moves_only_leases_held_under_the_token() {
    let (_dir, _path, store) = fresh().await;
    store.enqueue(vec![new("a"), new("b")], 0).await.unwrap();
    store.claim(claim(0, 1, 1)).await.unwrap();
    store.claim(claim(0, 1, 2)).await.unwrap();
    store
        .renew(&[RecordId(1), RecordId(2)], lease(1, 90_000))
        .await
        .unwrap();
    let expired = store.expired(30_000, 10).await.unwrap();
    assert_eq!(ids(&expired), [2]);
    assert_eq!(
        store.get(RecordId(1)).await.unwrap().unwrap().lease,
        Some(lease(1, 90_000))
    );
}

#[tokio::test]
async fn discard_keeps_a_tombstone_and_prune_removes_old_ones() {
    let (_dir, _path, store) = fresh().await;
    store
        .enqueue(
            vec![new("a").in_group("g"), new("b").in_group("g"), new("c")],
            0,
        )
        .await
        .unwrap();
    store
        .apply(vec![Transition {
            id: RecordId(1),
            guard: Guard::Idle,
            change: Change::Discard {
                reason: "user".into(),
                at: 100,
                attempts: 1,
            },
        }])
        .await
        .unwrap();
    let tombstones = store.tombstones(None, 10).await.unwrap();
    assert_eq!(tombstones.len(), 1);
    assert_eq!(
        (
            tombstones[0].id,
            tombstones[0].group.as_deref(),
            tombstones[0].reason.as_str()
        ),
        (RecordId(1), Some("g"), "user")
    );
    assert_eq!(
        ids(&store.claim(claim(0, 10, 1)).await.unwrap()),
        [2, 3],
        "the discarded head let its group move on"
    );

    let record = store.get(RecordId(3)).await.unwrap().unwrap();
    let rejected = Progress {
        state: State::Rejected,
        next_attempt_at: None,
        ..failed(&record, 150, 0)
    };
    store
        .apply(vec![Transition {
            id: RecordId(3),
            guard: Guard::Lease(1),
            change: Change::Update(rejected),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.prune(100).await.unwrap(),
        0,
        "nothing is older than 100"
    );
    assert_eq!(store.prune(151).await.unwrap(), 2);
    assert!(store.tombstones(None, 10).await.unwrap().is_empty());
    assert!(store.get(RecordId(3)).await.unwrap().is_none());
}

#[tokio::test]
async fn payload_over_the_limit_is_refused_and_nothing_of_the_batch_is_enqueued() {
    let config = RedbConfig {
        max_payload: 4,
        ..RedbConfig::default()
    };
    let (_dir, _path, store) = fresh_with(config).await;
    let err = store
        .enqueue(vec![new("ok"), new("too long")], 0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::PayloadTooLarge { size: 8, max: 4 }),
        "{err:?}"
    );

    let db = store.database().unwrap();
    let txn = db.begin_write().unwrap();
    let err = store
        .enqueue_in(&txn, vec![new("ok"), new("too long")], 0)
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");
    txn.commit().unwrap();
    assert_eq!(store.stats().await.unwrap(), Stats::default());
    assert_eq!(
        store.enqueue(vec![new("ok")], 0).await.unwrap().ids,
        [RecordId(1)]
    );
}

#[tokio::test]
async fn invalid_group_keys_are_refused_on_every_enqueue_path_and_write_nothing() {
    let (_dir, _path, store) = fresh().await;
    let long = "g".repeat(outbox_core::MAX_GROUP_LEN + 1);
    for bad in ["", "a\0b", long.as_str()] {
        let err = store
            .enqueue(
                vec![new("ok").in_group("fine"), new("bad").in_group(bad)],
                0,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidGroup { .. }),
            "{bad:?}: {err:?}"
        );

        let db = store.database().unwrap();
        let txn = db.begin_write().unwrap();
        for record in [
            new("bad").in_group(bad),
            new("bad").replacing(bad),
            new("bad").expecting(bad),
        ] {
            let err = store
                .enqueue_in(&txn, vec![new("ok").replacing("k"), record], 0)
                .unwrap_err();
            assert!(
                matches!(err, Error::InvalidGroup { .. }),
                "{bad:?}: {err:?}"
            );
        }
        txn.commit().unwrap();
    }
    assert_eq!(store.stats().await.unwrap(), Stats::default());
    let longest = "g".repeat(outbox_core::MAX_GROUP_LEN);
    assert_eq!(
        store
            .enqueue(vec![new("ok").in_group(longest)], 0)
            .await
            .unwrap()
            .ids,
        [RecordId(1)],
        "no id was spent on the refused batches"
    );
}

#[tokio::test]
async fn the_halt_survives_reopen_until_cleared() {
    let (_dir, path, store) = fresh().await;
    assert_eq!(store.halt().await.unwrap(), None);
    let halt = Halt {
        reason: "HTTP 401".into(),
        since: 4_000,
    };
    store.set_halt(Some(halt.clone())).await.unwrap();
    drop(store);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    assert_eq!(store.halt().await.unwrap(), Some(halt.clone()));
    assert_eq!(store.stats().await.unwrap().halt, Some(halt.clone()));
    assert_eq!(store.stats().await.unwrap().link, None);
    drop(store);

    let read_only = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap();
    assert_eq!(read_only.halt().await.unwrap(), Some(halt));
    let err = read_only.set_halt(None).await.unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    drop(read_only);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    store.set_halt(None).await.unwrap();
    drop(store);
    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    assert_eq!(store.halt().await.unwrap(), None);
}

#[tokio::test]
async fn requeue_puts_a_rejected_record_back_in_its_place() {
    let (_dir, path, store) = fresh().await;
    let g = |p: &str| new(p).in_group("doc");
    store
        .enqueue(vec![g("first"), g("second"), g("third")], 100)
        .await
        .unwrap();
    // The head is rejected: it leaves its group's order and the second becomes the head.
    let head = store.claim(claim(100, 1, 1)).await.unwrap();
    let rejected = Progress {
        state: State::Rejected,
        attempts: 1,
        last_attempt_at: Some(200),
        next_attempt_at: None,
        last_error: Some("HTTP 422".into()),
        ..head[0].progress()
    };
    let reject = Transition {
        id: RecordId(1),
        guard: Guard::Lease(1),
        change: Change::Update(rejected),
    };
    store.apply(vec![reject]).await.unwrap();
    let requeue = |id| Transition {
        id: RecordId(id),
        guard: Guard::Idle,
        change: Change::Requeue { at: 300 },
    };
    // While the second is in flight, a requeue would put two of the group in flight.
    let second = store.claim(claim(150, 1, 2)).await.unwrap();
    assert_eq!(second[0].id, RecordId(2));
    let applied = store.apply(vec![requeue(1)]).await.unwrap();
    assert_eq!(applied.skipped, [RecordId(1)]);
    let release = Transition {
        id: RecordId(2),
        guard: Guard::Lease(2),
        change: Change::Update(outbox_core::machine::released(&second[0])),
    };
    store.apply(vec![release]).await.unwrap();

    // Only a rejected record is requeued; a pending one is skipped.
    let applied = store.apply(vec![requeue(1), requeue(2)]).await.unwrap();
    assert_eq!(applied.skipped, [RecordId(2)]);
    let back = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(
        (
            back.state,
            back.attempts,
            back.last_attempt_at,
            back.last_error.as_deref()
        ),
        (State::Pending, 0, None, None),
        "a fresh budget"
    );
    assert_eq!(
        (
            back.payload.as_slice(),
            back.created_at,
            back.next_attempt_at
        ),
        (&b"first"[..], 100, Some(300))
    );
    drop(store);

    // It goes first again, before the second and third, also after a reopen.
    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    let mut order = Vec::new();
    for token in 10..14 {
        let claimed = store.claim(claim(1_000, 10, token)).await.unwrap();
        order.extend(claimed.iter().map(|r| r.id.0));
        deliver_claimed(&store, &claimed, token).await;
    }
    assert_eq!(order, [1, 2, 3]);
    assert_eq!(
        store.enqueue(vec![new("next")], 0).await.unwrap().ids,
        [RecordId(4)]
    );
}

/// redb's own commit is one sync; two-phase commit, and quick repair which implies it, are two.
/// An enqueue, a claim and a round that carries outcomes each make one commit.
#[tokio::test(flavor = "current_thread")]
async fn a_commit_syncs_once_by_default_and_twice_with_two_phase_commit() {
    let two_phase = RedbConfig::default().with_two_phase_commit(true);
    let quick_repair = RedbConfig::default().with_quick_repair(true);
    for (config, per_commit) in [
        (RedbConfig::default(), 1),
        (two_phase, 2),
        (quick_repair, 2),
    ] {
        let disk = Disk::default();
        let store = RedbStore::create_with_backend(disk.clone(), config.clone())
            .await
            .unwrap();
        let before = disk.commit_syncs();
        store.enqueue(vec![new("a"), new("b")], 0).await.unwrap();
        assert_eq!(
            disk.commit_syncs() - before,
            per_commit,
            "enqueue, {config:?}"
        );
        let before = disk.commit_syncs();
        let round = store.round(Vec::new(), Some(claim(0, 1, 1))).await.unwrap();
        assert_eq!(
            disk.commit_syncs() - before,
            per_commit,
            "claim, {config:?}"
        );
        let delivered = Transition {
            id: round.claimed[0].id,
            guard: Guard::Lease(1),
            change: Change::Delivered,
        };
        let before = disk.commit_syncs();
        let round = store
            .round(vec![delivered], Some(claim(0, 1, 2)))
            .await
            .unwrap();
        assert_eq!(ids(&round.claimed), [2]);
        assert_eq!(
            disk.commit_syncs() - before,
            per_commit,
            "round, {config:?}"
        );
    }
}

/// A round's outcomes and its claim are one transaction: one commit (one set of syncs, as
/// many as an enqueue takes) when both hold, neither when the claim fails, and both after a
/// power cut right after the round returned.
#[tokio::test(flavor = "current_thread")]
async fn a_round_commits_its_outcomes_and_its_claim_together() {
    let disk = Disk::default();
    let store = RedbStore::create_with_backend(disk.clone(), RedbConfig::default())
        .await
        .unwrap();
    let before = disk.commit_syncs();
    store
        .enqueue(vec![new("a"), new("b"), new("c")], 0)
        .await
        .unwrap();
    let per_commit = disk.commit_syncs() - before;
    store.claim(claim(0, 1, 1)).await.unwrap();
    let done = |id, token| Transition {
        id: RecordId(id),
        guard: Guard::Lease(token),
        change: Change::Delivered,
    };

    let before = disk.commit_syncs();
    let round = store
        .round(vec![done(1, 1)], Some(claim(0, 1, 2)))
        .await
        .unwrap();
    assert_eq!(disk.commit_syncs() - before, per_commit, "one commit");
    assert!(round.applied.skipped.is_empty());
    assert_eq!(ids(&round.claimed), [2]);

    // Damage record 3 behind the store's back: the next round's outcome for it fails (a
    // claim would pass it by), and the other outcome it carried is not applied either.
    let db = store.database().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(RECORDS)
        .unwrap()
        .insert(3, &[9u8, 9, 9][..])
        .unwrap();
    txn.commit().unwrap();
    let err = store
        .round(vec![done(2, 2), done(3, 3)], Some(claim(0, 5, 3)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
    let second = store.get(RecordId(2)).await.unwrap().unwrap();
    assert_eq!(second.state, State::InFlight, "the outcome was not applied");

    // Repair it; a round that succeeds survives a power cut as a whole.
    let txn = db.begin_write().unwrap();
    txn.open_table(RECORDS).unwrap().remove(3).unwrap();
    txn.commit().unwrap();
    assert_eq!(store.stats().await.unwrap().delivered, 1);
    store.enqueue(vec![new("d")], 0).await.unwrap();
    let round = store
        .round(vec![done(2, 2)], Some(claim(0, 5, 4)))
        .await
        .unwrap();
    assert_eq!(ids(&round.claimed), [4]);
    disk.cut_power(&mut fastrand::Rng::with_seed(7));
    let image = disk.image_after_cut().unwrap();
    drop(store);

    let store = RedbStore::open_with_backend(Disk::from_image(image), RedbConfig::default())
        .await
        .unwrap();
    assert!(store.get(RecordId(2)).await.unwrap().is_none());
    assert_eq!(store.stats().await.unwrap().delivered, 2);
    let claimed = store.get(RecordId(4)).await.unwrap().unwrap();
    assert_eq!(claimed.state, State::InFlight);
    assert_eq!(claimed.lease.map(|l| l.token), Some(4));
}

const NOTES: redb::TableDefinition<u64, &str> = redb::TableDefinition::new("notes");

#[tokio::test]
async fn enqueue_in_commits_and_aborts_with_the_callers_writes() {
    let (_dir, path, store) = fresh().await;
    let db = store.database().unwrap();

    let txn = db.begin_write().unwrap();
    txn.open_table(NOTES).unwrap().insert(1, "kept").unwrap();
    let kept = store.enqueue_in(&txn, vec![new("kept")], 10).unwrap();
    txn.commit().unwrap();

    let txn = db.begin_write().unwrap();
    txn.open_table(NOTES).unwrap().insert(2, "dropped").unwrap();
    store.enqueue_in(&txn, vec![new("dropped")], 20).unwrap();
    // An idempotency key no header can carry: the core's rule, as in `enqueue`.
    let refused = store.enqueue_in(&txn, vec![new("bad").with_key("\u{7f}")], 20);
    assert!(
        matches!(refused, Err(Error::InvalidIdempotencyKey { .. })),
        "{refused:?}"
    );
    txn.abort().unwrap();

    let after = store.enqueue(vec![new("next")], 30).await.unwrap();
    assert_eq!(kept.ids, [RecordId(1)]);
    assert_eq!(after.ids, [RecordId(2)], "the aborted enqueue used no id");
    drop(store);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    let all = store.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(ids(&all), [1, 2]);
    assert_eq!(all[0].payload, b"kept");
    let db = store.database().unwrap();
    let read = redb::ReadableDatabase::begin_read(db).unwrap();
    let notes = read.open_table(NOTES).unwrap();
    assert!(redb::ReadableTable::get(&notes, 1).unwrap().is_some());
    assert!(redb::ReadableTable::get(&notes, 2).unwrap().is_none());
}

/// Coalescing through `enqueue_in` happens in the caller's transaction: an aborted one leaves
/// the earlier write and the counter as they were, a committed one replaces it.
#[tokio::test]
async fn enqueue_in_coalesces_in_the_callers_transaction() {
    let (_dir, _path, store) = fresh().await;
    let edit = |p: &str| new(p).in_group("doc").replacing("doc/body");
    let first = store.enqueue(vec![edit("v1")], 10).await.unwrap();
    assert_eq!(first.superseded, Vec::<usize>::new());
    let db = store.database().unwrap();

    let txn = db.begin_write().unwrap();
    let dropped = store
        .enqueue_in(&txn, vec![edit("dropped"), new("plain")], 20)
        .unwrap();
    assert_eq!(
        (dropped.ids, dropped.superseded),
        (vec![RecordId(1), RecordId(2)], vec![0])
    );
    txn.abort().unwrap();
    let record = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(record.payload, b"v1");
    assert_eq!(store.stats().await.unwrap().superseded, 0);

    let txn = db.begin_write().unwrap();
    let kept = store
        .enqueue_in(&txn, vec![edit("v2"), edit("v3").expecting("9")], 30)
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(
        (kept.ids, kept.superseded),
        (vec![RecordId(1), RecordId(1)], vec![0, 1])
    );
    let record = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(
        (
            record.payload.as_slice(),
            record.expected_version.as_deref(),
            record.created_at,
            record.next_attempt_at
        ),
        (b"v3".as_slice(), Some("9"), 30, Some(10))
    );
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.superseded), (1, 2));
}

const COALESCING: redb::TableDefinition<(&str, u64), ()> = redb::TableDefinition::new("coalescing");

/// The `coalescing` index holds one entry per record with a coalescing key, and loses it when
/// the record leaves (delivered, discarded, pruned); records without a key have none.
#[tokio::test]
async fn the_coalescing_index_follows_the_records() {
    let (_dir, _path, store) = fresh().await;
    let entries = |store: &RedbStore| {
        let read = redb::ReadableDatabase::begin_read(store.database().unwrap()).unwrap();
        let table = read.open_table(COALESCING).unwrap();
        redb::ReadableTable::iter(&table)
            .unwrap()
            .map(|e| {
                let (key, _) = e.unwrap();
                let (k, id) = key.value();
                (k.to_owned(), id)
            })
            .collect::<Vec<_>>()
    };
    store
        .enqueue(
            vec![
                new("a").replacing("x"),
                new("b"),
                new("c").in_group("g").replacing("y"),
                new("d").replacing("x"),
            ],
            0,
        )
        .await
        .unwrap();
    assert_eq!(entries(&store), [("x".to_owned(), 1), ("y".to_owned(), 3)]);
    // In flight, the record keeps its entry, and a new write with its key gets its own.
    let claimed = store.claim(claim(0, 1, 7)).await.unwrap();
    assert_eq!(ids(&claimed), [1]);
    let fresh = store
        .enqueue(vec![new("e").replacing("x")], 1)
        .await
        .unwrap();
    assert_eq!((fresh.ids, fresh.superseded), (vec![RecordId(4)], vec![]));
    assert_eq!(
        entries(&store),
        [
            ("x".to_owned(), 1),
            ("x".to_owned(), 4),
            ("y".to_owned(), 3)
        ]
    );
    store
        .apply(vec![
            Transition {
                id: RecordId(1),
                guard: Guard::Lease(7),
                change: Change::Delivered,
            },
            Transition {
                id: RecordId(4),
                guard: Guard::Idle,
                change: Change::Discard {
                    reason: "user".into(),
                    at: 2,
                    attempts: 0,
                },
            },
            Transition {
                id: RecordId(3),
                guard: Guard::Idle,
                change: Change::Update(Progress {
                    state: State::Rejected,
                    last_attempt_at: Some(2),
                    next_attempt_at: None,
                    ..store.get(RecordId(3)).await.unwrap().unwrap().progress()
                }),
            },
        ])
        .await
        .unwrap();
    assert_eq!(
        entries(&store),
        [("y".to_owned(), 3)],
        "a rejected record keeps its entry"
    );
    assert_eq!(store.prune(10).await.unwrap(), 2);
    assert_eq!(entries(&store), []);
}

#[tokio::test]
async fn in_flight_records_expire_at_open_without_touching_counters() {
    let (_dir, path, store) = fresh().await;
    store.enqueue(vec![new("a"), new("b")], 0).await.unwrap();
    store.claim(claim(0, 1, 5)).await.unwrap();
    drop(store);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    let expired = store.expired(0, 10).await.unwrap();
    assert_eq!(ids(&expired), [1]);
    assert_eq!(expired[0].lease, Some(lease(5, 0)));
    assert_eq!(
        expired[0].interrupted, 0,
        "the core decides what the interruption means"
    );
    assert_eq!(store.stats().await.unwrap().in_flight, 1);
}

#[tokio::test]
async fn the_delivered_counter_and_ids_survive_reopen() {
    let (_dir, path, store) = fresh().await;
    store.enqueue(vec![new("a"), new("b")], 0).await.unwrap();
    store.claim(claim(0, 2, 1)).await.unwrap();
    let done = |id| Transition {
        id: RecordId(id),
        guard: Guard::Lease(1),
        change: Change::Delivered,
    };
    store.apply(vec![done(1), done(2)]).await.unwrap();
    drop(store);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    assert_eq!(store.stats().await.unwrap().delivered, 2);
    assert_eq!(
        store.enqueue(vec![new("c")], 0).await.unwrap().ids,
        [RecordId(3)],
        "ids are never reused"
    );
}

/// While a caller holds the write lock, 64 concurrent enqueues queue up; then they share at
/// most two commits, counted as syncs of the disk.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_enqueues_share_commits() {
    let disk = Disk::default();
    let store = RedbStore::create_with_backend(disk.clone(), RedbConfig::default())
        .await
        .unwrap();
    let before = disk.syncs();
    store.enqueue(vec![new("alone")], 0).await.unwrap();
    let per_commit = disk.syncs() - before;
    assert!(per_commit > 0, "an immediate commit syncs");

    let store = Arc::new(store);
    let held = store.database().unwrap().begin_write().unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let store = Arc::clone(&store);
        tasks.spawn(async move { store.enqueue(vec![new(&i.to_string())], 0).await });
    }
    // Each task sends its request on its first poll; one yield polls them all.
    tokio::task::yield_now().await;
    let before = disk.syncs();
    held.abort().unwrap();

    let mut got = Vec::new();
    while let Some(result) = tasks.join_next().await {
        got.extend(result.unwrap().unwrap());
    }
    got.sort();
    assert_eq!(got, (2..=65).map(RecordId).collect::<Vec<_>>());
    // Requests that reach the writer while it is committing go in the next commit, so the
    // count is not always one; one commit per enqueue would be 64.
    assert!(
        disk.syncs() - before <= 8 * per_commit,
        "64 enqueues took {} syncs; one commit takes {per_commit}",
        disk.syncs() - before
    );
    // Each write of a shared commit reads the counters as the one before it left them.
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.pending, 65);
    let bytes = "alone".len() + (0..64).map(|i: u32| i.to_string().len()).sum::<usize>();
    assert_eq!(stats.payload_bytes, bytes as u64);
}

/// Writes that change nothing (a claim with nothing due, an apply whose guards all fail, a renew
/// under a token that holds nothing, a prune with nothing old) sync nothing, and the writes
/// that do change something still commit.
#[tokio::test(flavor = "current_thread")]
async fn writes_that_change_nothing_sync_nothing() {
    let disk = Disk::default();
    let store = RedbStore::create_with_backend(disk.clone(), RedbConfig::default())
        .await
        .unwrap();
    let enqueued = store.enqueue(vec![new("later")], 5_000).await.unwrap();
    let idle = disk.syncs();

    // Due at 5_000: a claim at 4_999 finds nothing.
    assert!(store.claim(claim(4_999, 10, 1)).await.unwrap().is_empty());
    assert!(store.claim(claim(9_000, 0, 1)).await.unwrap().is_empty());
    let stale = Transition {
        id: enqueued[0],
        guard: Guard::Lease(99),
        change: Change::Delivered,
    };
    let applied = store.apply(vec![stale]).await.unwrap();
    assert_eq!(applied.skipped, enqueued.ids);
    store.renew(&enqueued, lease(99, 60_000)).await.unwrap();
    assert_eq!(store.prune(1).await.unwrap(), 0);
    assert_eq!(disk.syncs(), idle, "nothing changed, so nothing was synced");

    // The record is untouched and a real claim still commits.
    assert_eq!(
        store.get(enqueued[0]).await.unwrap().unwrap().state,
        State::Pending
    );
    let claimed = store.claim(claim(5_000, 10, 7)).await.unwrap();
    assert_eq!(ids(&claimed), vec![enqueued[0].0]);
    assert!(disk.syncs() > idle, "a claim that took a record commits");
    let record = store.get(enqueued[0]).await.unwrap().unwrap();
    assert_eq!(record.state, State::InFlight);
    assert_eq!(record.lease.map(|l| l.token), Some(7));
}

/// A seeded random sequence of operations gives the same answers as the memory reference model.
#[tokio::test]
async fn behaves_like_the_memory_model() {
    for seed in 0..6 {
        compare_with_model(seed).await;
    }
}

async fn compare_with_model(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let config = RedbConfig {
        durability: Durability::None,
        ..RedbConfig::default()
    };
    let (_dir, _path, redb) = fresh_with(config).await;
    let model = MemoryStore::new();
    let mut now = 1_000u64;
    let mut tokens = vec![1u64];
    let groups = [None, Some("a"), Some("b"), Some("c")];
    for step in 0..250 {
        let ctx = format!("seed {seed} step {step}");
        match rng.u8(0..10) {
            0 | 1 => {
                let batch: Vec<NewRecord> = (0..rng.usize(1..4))
                    .map(|i| {
                        let mut record = NewRecord::new(vec![i as u8; rng.usize(0..20)])
                            .with_key(format!("k{step}-{i}"));
                        if let Some(g) = groups[rng.usize(0..groups.len())] {
                            record = record.in_group(g);
                        }
                        // Mostly coalescing writes over few keys, so they often meet.
                        if rng.u8(0..3) != 0 {
                            record = record.replacing(["x", "y", "z"][rng.usize(0..3)]);
                        }
                        if rng.bool() {
                            record = record.expecting(format!("v{step}"));
                        }
                        record
                    })
                    .collect();
                let at = now.saturating_sub(rng.u64(0..500));
                let a = model.enqueue(batch.clone(), at).await.unwrap();
                let b = redb.enqueue(batch, at).await.unwrap();
                assert_eq!(a, b, "{ctx}");
            }
            2 | 3 => {
                let token = rng.u64(1..1_000);
                tokens.push(token);
                let c = Claim {
                    now,
                    limit: rng.usize(0..5),
                    lease: lease(token, now + rng.u64(1..2_000)),
                };
                assert_eq!(
                    model.claim(c).await.unwrap(),
                    redb.claim(c).await.unwrap(),
                    "{ctx}"
                );
            }
            4..=6 => {
                let records = model.list(&ListQuery::new(usize::MAX)).await.unwrap();
                let transitions: Vec<Transition> = (0..rng.usize(1..4))
                    .map(|_| random_transition(&mut rng, &records, &tokens, now))
                    .collect();
                if rng.bool() {
                    assert_eq!(
                        model.apply(transitions.clone()).await.unwrap(),
                        redb.apply(transitions).await.unwrap(),
                        "{ctx}"
                    );
                } else {
                    // A round: the outcomes, then (mostly) a claim, in one call.
                    let token = rng.u64(1..1_000);
                    tokens.push(token);
                    let c = (rng.u8(0..4) != 0).then(|| Claim {
                        now,
                        limit: rng.usize(0..5),
                        lease: lease(token, now + rng.u64(1..2_000)),
                    });
                    let transitions = if rng.u8(0..4) == 0 {
                        Vec::new()
                    } else {
                        transitions
                    };
                    assert_eq!(
                        model.round(transitions.clone(), c).await.unwrap(),
                        redb.round(transitions, c).await.unwrap(),
                        "{ctx}"
                    );
                }
            }
            7 => {
                let ids: Vec<RecordId> = (0..3).map(|_| RecordId(rng.u64(1..40))).collect();
                let token = tokens[rng.usize(0..tokens.len())];
                let l = lease(token, now + rng.u64(0..3_000));
                model.renew(&ids, l).await.unwrap();
                redb.renew(&ids, l).await.unwrap();
            }
            8 if rng.u8(0..4) == 0 => {
                let halt = rng.bool().then(|| Halt {
                    reason: format!("HTTP 401 at step {step}"),
                    since: now,
                });
                model.set_halt(halt.clone()).await.unwrap();
                redb.set_halt(halt).await.unwrap();
            }
            8 => {
                let older = now.saturating_sub(rng.u64(0..5_000));
                assert_eq!(
                    model.prune(older).await.unwrap(),
                    redb.prune(older).await.unwrap(),
                    "{ctx}"
                );
            }
            _ => now += rng.u64(0..800),
        }
        if step % 5 == 0 {
            compare_reads(&model, &redb, now, &ctx).await;
        }
    }
    compare_reads(&model, &redb, now, &format!("seed {seed} end")).await;
    assert!(
        redb.stats().await.unwrap().superseded > 0,
        "seed {seed}: the comparison covered coalescing"
    );
}

/// A history of up to three attempts (mostly none), so the comparison covers its storage.
fn random_history(rng: &mut fastrand::Rng, now: u64) -> History {
    let mut history = History::default();
    for i in 0..rng.u64(0..4) {
        let class = [
            AttemptClass::Later,
            AttemptClass::NoAnswer,
            AttemptClass::Rejected,
        ][rng.usize(0..3)];
        let mut attempt = Attempt::new(now.saturating_sub(i), class, "HTTP 503: busy");
        attempt.took_ms = rng.bool().then(|| rng.u64(0..100));
        history.push(attempt);
    }
    history
}

/// Mostly transitions that apply (an existing record, the guard that holds), sometimes stale
/// ones: an unknown id, a wrong token, a verb on an in-flight record.
fn random_transition(
    rng: &mut fastrand::Rng,
    records: &[outbox_core::Record],
    tokens: &[u64],
    now: u64,
) -> Transition {
    let record =
        (!records.is_empty() && rng.u8(0..10) != 0).then(|| &records[rng.usize(0..records.len())]);
    let id = record.map_or(RecordId(rng.u64(1..200)), |r| r.id);
    let holding = record.and_then(|r| r.lease).map(|l| Guard::Lease(l.token));
    let guard = match (holding, rng.u8(0..5)) {
        (Some(guard), 0..=3) => guard,
        (None, 0..=3) => Guard::Idle,
        (_, _) if rng.bool() => Guard::Idle,
        _ => Guard::Lease(tokens[rng.usize(0..tokens.len())]),
    };
    let change = match rng.u8(0..7) {
        0 | 1 => Change::Delivered,
        6 => Change::Requeue {
            at: now + rng.u64(0..1_500),
        },
        2 => Change::Discard {
            reason: "test".into(),
            at: now,
            attempts: 1,
        },
        _ => {
            let state = [
                State::Pending,
                State::Retrying,
                State::NeedsAttention,
                State::Rejected,
            ][rng.usize(0..4)];
            let next = state
                .is_due_kind()
                .then(|| now + rng.u64(0..1_500))
                .filter(|_| rng.u8(0..8) != 0);
            Change::Update(Progress {
                state,
                attempts: rng.u32(0..5),
                unanswered: rng.u32(0..5),
                interrupted: rng.u32(0..3),
                last_attempt_at: Some(now.saturating_sub(rng.u64(0..1_000))),
                next_attempt_at: next,
                last_error: rng.bool().then(|| "boom".to_string()),
                history: random_history(rng, now),
            })
        }
    };
    Transition { id, guard, change }
}

async fn compare_reads(model: &MemoryStore, redb: &RedbStore, now: u64, ctx: &str) {
    assert_eq!(
        model.stats().await.unwrap(),
        redb.stats().await.unwrap(),
        "{ctx}"
    );
    assert_eq!(
        model.next_due().await.unwrap(),
        redb.next_due().await.unwrap(),
        "{ctx}"
    );
    let all = ListQuery::new(usize::MAX);
    assert_eq!(
        model.list(&all).await.unwrap(),
        redb.list(&all).await.unwrap(),
        "{ctx}"
    );
    let page = ListQuery::new(3).group("a").after(RecordId(2));
    assert_eq!(
        model.list(&page).await.unwrap(),
        redb.list(&page).await.unwrap(),
        "{ctx}"
    );
    assert_eq!(
        model.tombstones(None, usize::MAX).await.unwrap(),
        redb.tombstones(None, usize::MAX).await.unwrap(),
        "{ctx}"
    );
    assert_eq!(
        model.expired(now, usize::MAX).await.unwrap(),
        redb.expired(now, usize::MAX).await.unwrap(),
        "{ctx}"
    );
    // A step back of up to two seconds, and one past every deadline, with and without a limit.
    for (before, limit) in [(0, usize::MAX), (700, usize::MAX), (2_000, 3), (0, 1)] {
        let at = now.saturating_sub(before);
        assert_eq!(
            model.stepped_back(at, limit).await.unwrap(),
            redb.stepped_back(at, limit).await.unwrap(),
            "{ctx}: stepped_back({at}, {limit})"
        );
    }
    assert_eq!(
        model.halt().await.unwrap(),
        redb.halt().await.unwrap(),
        "{ctx}"
    );
}

const RECORDS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("records");

/// One failing request in a group commit fails alone: the others of its batch still commit,
/// and the failed one wrote nothing.
#[tokio::test(flavor = "current_thread")]
async fn a_failing_request_does_not_take_its_batch_down() {
    let (_dir, _path, store) = fresh().await;
    store.enqueue(vec![new("a"), new("b")], 0).await.unwrap();
    let store = Arc::new(store);
    // Damage record 2 behind the store's back, then hold the write lock so that the next
    // requests queue up into one batch.
    let db = store.database().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(RECORDS)
        .unwrap()
        .insert(2, &[9u8, 9, 9][..])
        .unwrap();
    txn.commit().unwrap();
    let held = db.begin_write().unwrap();

    let failing = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let discard = |id| Transition {
                id: RecordId(id),
                guard: Guard::Idle,
                change: Change::Discard {
                    reason: "user".into(),
                    at: 1,
                    attempts: 1,
                },
            };
            store.apply(vec![discard(1), discard(2)]).await
        })
    };
    let fine = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.enqueue(vec![new("c")], 0).await })
    };
    tokio::task::yield_now().await;
    held.abort().unwrap();

    let err = failing.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
    assert_eq!(fine.await.unwrap().unwrap().ids, [RecordId(3)]);
    assert!(
        store.get(RecordId(1)).await.unwrap().is_some(),
        "the failed apply discarded nothing"
    );
    assert!(store.tombstones(None, 10).await.unwrap().is_empty());
    // The damaged record reads as absent, and is listed as unreadable instead.
    assert_eq!(store.get(RecordId(2)).await.unwrap(), None);
    let unreadable = store.unreadable(10).await.unwrap();
    assert_eq!(
        unreadable.iter().map(|u| u.id).collect::<Vec<_>>(),
        [RecordId(2)]
    );
}
