//! The Store contract of rounds, requeues and the persisted halt, checked against the memory
//! reference store step by step, and the schema migration from the previous version.

mod common;

use std::collections::HashMap;

use common::{
    admin, down_to_3, down_to_4, down_to_5, payload_bytes_recounted, server_ready, Scratch,
};
use outbox_core::{
    Attempt, AttemptClass, Change, Claim, Guard, Halt, History, Lease, ListQuery, NewRecord,
    Progress, Record, RecordId, State, Store, TraceContext, Transition,
};
use outbox_memory::MemoryStore;

const T0: u64 = 1_700_000_000_000;

fn seed() -> u64 {
    std::env::var("OUTBOX_PG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

fn progress(state: State, now: u64, next: Option<u64>) -> Progress {
    Progress {
        state,
        attempts: 1,
        unanswered: 0,
        interrupted: 0,
        last_attempt_at: Some(now),
        next_attempt_at: next,
        last_error: Some(format!("{state:?} at {now}")),
        history: one_attempt(state, now),
    }
}

/// The history a failure at `now` leaves: one attempt, so every comparison with the reference
/// store checks that it is persisted, and kept by a requeue.
fn one_attempt(state: State, now: u64) -> History {
    let class = if state == State::Rejected {
        AttemptClass::Rejected
    } else {
        AttemptClass::Later
    };
    let mut history = History::default();
    history.push(Attempt::new(now, class, &format!("HTTP 503: {state:?}")));
    history
}

/// Random rounds (outcomes of held claims, stale reports, requeues, then a claim), enqueues
/// (some coalescing under a few shared keys, some with an expected version) and halts on
/// PostgreSQL and on the reference store: every result (which writes replaced which), every
/// record and the stats (the superseded counter too) must agree after every step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_requeues_and_halts_match_the_reference_model() {
    if !server_ready() {
        return;
    }
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let scratch = Scratch::new();
    let pg = scratch.store().await;
    let model = MemoryStore::new();
    let mut now = T0;
    let mut held: HashMap<RecordId, u64> = HashMap::new();
    let mut token = 0u64;
    let (mut requeued, mut skipped) = (0, 0);
    for step in 0..150 {
        let ctx = format!("step {step} (seed {seed})");
        match rng.u8(..10) {
            0..=2 => {
                let batch: Vec<NewRecord> = (0..rng.usize(1..5))
                    .map(|i| {
                        let r = NewRecord::new(format!("{step}-{i}").into_bytes());
                        let r = match rng.u8(..5) {
                            0 => r,
                            g => r.in_group(format!("g{g}")),
                        };
                        // Now and then a coalescing key (one per group, or one shared by all
                        // groups: few, so writes meet earlier ones in every state) and an
                        // expected version.
                        let r = match rng.u8(..6) {
                            0 => r.replacing("shared"),
                            1 | 2 => {
                                let key = format!("{:?}/body", r.group);
                                r.replacing(key)
                            }
                            _ => r,
                        };
                        if rng.bool() {
                            r.expecting(format!("v{step}"))
                        } else {
                            r
                        }
                    })
                    .collect();
                let a = pg.enqueue(batch.clone(), now).await.unwrap();
                let b = model.enqueue(batch, now).await.unwrap();
                assert_eq!(a, b, "{ctx}");
            }
            3 => {
                let halt = rng.bool().then(|| Halt {
                    reason: format!("HTTP 401 at {step}"),
                    since: now,
                });
                pg.set_halt(halt.clone()).await.unwrap();
                model.set_halt(halt).await.unwrap();
                assert_eq!(
                    pg.halt().await.unwrap(),
                    model.halt().await.unwrap(),
                    "{ctx}"
                );
            }
            _ => {
                let mut outcomes = Vec::new();
                let ids: Vec<RecordId> = held.keys().copied().collect();
                for id in ids {
                    if rng.u8(..3) == 0 {
                        continue;
                    }
                    let lease = held.remove(&id).unwrap_or_default();
                    let change = match rng.u8(..5) {
                        0 | 1 => Change::Delivered,
                        2 => Change::Update(progress(State::Rejected, now, None)),
                        3 => Change::Update(progress(
                            State::Retrying,
                            now,
                            Some(now + rng.u64(0..3_000)),
                        )),
                        _ => Change::Discard {
                            reason: "by hand".into(),
                            at: now,
                            attempts: 1,
                        },
                    };
                    // Now and then a report under a lease that is not (or no longer) held.
                    let guard = Guard::Lease(if rng.u8(..8) == 0 { lease + 1 } else { lease });
                    outcomes.push(Transition { id, guard, change });
                }
                let rejected = model
                    .list(&ListQuery::new(100).state(State::Rejected))
                    .await
                    .unwrap();
                for record in rejected.iter().filter(|_| rng.bool()) {
                    outcomes.push(Transition {
                        id: record.id,
                        guard: Guard::Idle,
                        change: Change::Requeue { at: now },
                    });
                }
                // A requeue of a record that is not rejected is skipped.
                if let Some(id) = held.keys().next() {
                    outcomes.push(Transition {
                        id: *id,
                        guard: Guard::Idle,
                        change: Change::Requeue { at: now },
                    });
                }
                token += 1;
                let claim = rng.bool().then(|| Claim {
                    now,
                    limit: rng.usize(1..5),
                    lease: Lease {
                        token,
                        until: now + 30_000,
                    },
                });
                let requeues: Vec<RecordId> = outcomes
                    .iter()
                    .filter(|t| matches!(t.change, Change::Requeue { .. }))
                    .map(|t| t.id)
                    .collect();
                let a = pg.round(outcomes.clone(), claim).await.unwrap();
                let b = model.round(outcomes, claim).await.unwrap();
                assert_eq!(a, b, "{ctx}");
                requeued += requeues
                    .iter()
                    .filter(|id| !a.applied.skipped.contains(id))
                    .count();
                skipped += a.applied.skipped.len();
                for record in &a.claimed {
                    held.insert(record.id, token);
                }
            }
        }
        now += rng.u64(0..1_000);
        let all = ListQuery::new(10_000);
        let a: Vec<Record> = pg.list(&all).await.unwrap();
        let b: Vec<Record> = model.list(&all).await.unwrap();
        assert_eq!(a, b, "{ctx}");
        assert_eq!(
            pg.stats().await.unwrap(),
            model.stats().await.unwrap(),
            "{ctx}"
        );
        assert_eq!(
            pg.tombstones(None, 10_000).await.unwrap(),
            model.tombstones(None, 10_000).await.unwrap(),
            "{ctx}"
        );
        assert_eq!(
            pg.stepped_back(now - 500, 100).await.unwrap(),
            model.stepped_back(now - 500, 100).await.unwrap(),
            "{ctx}"
        );
    }
    // The run exercised what it is about.
    assert!(
        requeued > 0 && skipped > 0,
        "seed {seed}: {requeued} requeued, {skipped} skipped"
    );
    let stats = pg.stats().await.unwrap();
    assert!(
        stats.delivered > 0 && stats.superseded > 0,
        "seed {seed}: {stats:?}"
    );
}

/// A requeued record keeps its id and its place in its group: it waits while its group has a
/// record in flight (two would be in flight), then goes before the later records of its group,
/// which give up their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_keeps_its_id_and_place_and_waits_while_its_group_is_in_flight() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let ids = store
        .enqueue(
            (0..3)
                .map(|i| NewRecord::new(vec![i]).in_group("g"))
                .collect(),
            T0,
        )
        .await
        .unwrap();
    let claim = |now, token| Claim {
        now,
        limit: 10,
        lease: Lease {
            token,
            until: now + 1_000,
        },
    };
    let ids_of = |records: Vec<Record>| records.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids_of(store.claim(claim(T0, 1)).await.unwrap()),
        vec![ids[0]]
    );
    let rejected = Transition {
        id: ids[0],
        guard: Guard::Lease(1),
        change: Change::Update(progress(State::Rejected, T0, None)),
    };
    // Rejected: it leaves its group's order and the next record goes.
    let round = store
        .round(vec![rejected], Some(claim(T0, 2)))
        .await
        .unwrap();
    assert_eq!(ids_of(round.claimed), vec![ids[1]]);
    let requeue = Transition {
        id: ids[0],
        guard: Guard::Idle,
        change: Change::Requeue { at: T0 + 5 },
    };
    let round = store.round(vec![requeue.clone()], None).await.unwrap();
    assert_eq!(
        round.applied.skipped,
        vec![ids[0]],
        "its group has a record in flight"
    );
    let delivered = Transition {
        id: ids[1],
        guard: Guard::Lease(2),
        change: Change::Delivered,
    };
    let round = store.round(vec![delivered, requeue], None).await.unwrap();
    assert!(round.applied.skipped.is_empty(), "{round:?}");
    let record = store
        .get(ids[0])
        .await
        .unwrap()
        .expect("the requeued record");
    assert_eq!(
        (
            record.state,
            record.attempts,
            record.next_attempt_at,
            record.last_error
        ),
        (State::Pending, 0, Some(T0 + 5), None)
    );
    assert_eq!((record.payload, record.created_at), (vec![0], T0));
    // Back at the head, before the last record, which is no longer claimable.
    assert_eq!(store.next_due().await.unwrap(), Some(T0 + 5));
    assert_eq!(
        ids_of(store.claim(claim(T0 + 10, 3)).await.unwrap()),
        vec![ids[0]]
    );
}

/// The halt is in the database: a store opened afterwards (a restarted process) finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_survives_a_restart_until_cleared() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let halt = Halt {
        reason: "HTTP 401: token expired".into(),
        since: T0,
    };
    scratch
        .store()
        .await
        .set_halt(Some(halt.clone()))
        .await
        .unwrap();
    let reopened = scratch.store().await;
    assert_eq!(reopened.halt().await.unwrap(), Some(halt.clone()));
    assert_eq!(reopened.stats().await.unwrap().halt, Some(halt));
    reopened.set_halt(None).await.unwrap();
    assert_eq!(scratch.store().await.halt().await.unwrap(), None);
}

/// A schema left at version 1 (no halt columns, no deadline index, no coalescing columns) is
/// brought to the current version with its records kept, and a step found half done by hand
/// still converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_is_migrated_and_the_step_is_idempotent() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let ids = scratch
        .store()
        .await
        .enqueue(vec![NewRecord::new(b"kept".to_vec())], T0)
        .await
        .unwrap();
    let client = admin().await;
    client
        .batch_execute(&format!(
            "{DOWN_TO_2} \
             ALTER TABLE \"{s}\".meta DROP COLUMN halt_reason, DROP COLUMN halt_since; \
             DROP INDEX \"{s}\".records_deadline; \
             UPDATE \"{s}\".schema_version SET version = 1;",
            DOWN_TO_2 = down_to_2(s)
        ))
        .await
        .unwrap();
    let version = || async {
        client
            .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
    };
    let store = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    let kept = store
        .get(ids[0])
        .await
        .unwrap()
        .expect("the record survives");
    assert_eq!(
        (
            kept.payload.as_slice(),
            kept.expected_version,
            kept.replaces
        ),
        (b"kept".as_slice(), None, None)
    );
    assert_eq!(store.stats().await.unwrap().superseded, 0);
    let halt = Halt {
        reason: "x".into(),
        since: 1,
    };
    store.set_halt(Some(halt.clone())).await.unwrap();
    // Half done: the columns exist, the version says 1.
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 1"))
        .await
        .unwrap();
    let again = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(again.halt().await.unwrap(), Some(halt));
    assert!(again.stepped_back(T0 - 1, 10).await.unwrap().len() == 1);
}

/// A schema left at version 4 (no not-before column, no scheduled index) is brought to the
/// current version with its records and counts kept and none held for later; a record held
/// for later then keeps its time (due then, counted as scheduled, passed by a re-base), and
/// the step found half done (the version set back) converges again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_schema_is_migrated_and_records_held_for_later_work_on_it() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"plain".to_vec()),
                NewRecord::new(b"edit".to_vec())
                    .in_group("g")
                    .replacing("g/body"),
            ],
            T0,
        )
        .await
        .unwrap();
    let before = store.list(&ListQuery::new(100)).await.unwrap();
    let stats_before = store.stats().await.unwrap();
    drop(store);
    let client = admin().await;
    client
        .batch_execute(&format!(
            "{} UPDATE \"{s}\".schema_version SET version = 4;",
            down_to_4(s)
        ))
        .await
        .unwrap();
    let version = || async {
        client
            .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
    };
    assert_eq!(version().await, 4);

    let store = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(store.list(&ListQuery::new(100)).await.unwrap(), before);
    assert!(before.iter().all(|r| r.not_before.is_none()));
    assert_eq!(store.stats().await.unwrap(), stats_before);
    assert_eq!(stats_before.scheduled, 0);

    let held = store
        .enqueue(
            vec![NewRecord::new(b"later".to_vec()).not_before(T0 + 3_600_000)],
            T0,
        )
        .await
        .unwrap();
    let record = store.get(held.ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (record.next_attempt_at, record.not_before),
        (Some(T0 + 3_600_000), Some(T0 + 3_600_000))
    );
    assert_eq!(store.stats().await.unwrap().scheduled, 1);
    let stepped = store.stepped_back(T0 - 60_000, 10).await.unwrap();
    assert_eq!(
        stepped.iter().map(|r| r.id).collect::<Vec<_>>(),
        ids.ids,
        "the two enqueued at T0, not the one held for later"
    );

    // Half done: the column and index exist, the version says 4.
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 4"))
        .await
        .unwrap();
    let again = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(again.stats().await.unwrap().scheduled, 1);
    assert_eq!(
        again.get(held.ids[0]).await.unwrap().unwrap().not_before,
        Some(T0 + 3_600_000)
    );
}

/// A schema left at version 5 (no history or trace column, no payload bytes counted) is brought
/// to the current version with its records kept, each with an empty history and no trace
/// context; the next failure and the next trace context are then kept, and the step found half
/// done (the version set back) converges with both kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_5_schema_is_migrated_and_its_records_read_with_an_empty_history() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let cx = TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("congo=t61rcWkgMzE".into()),
    )
    .unwrap();
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"failed".to_vec()).trace_context(cx.clone()),
                NewRecord::new(b"waiting".to_vec()).in_group("g"),
            ],
            T0,
        )
        .await
        .unwrap();
    let lease = Lease {
        token: 1,
        until: T0 + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 1,
            lease,
        })
        .await
        .unwrap();
    assert_eq!(claimed[0].id, ids[0]);
    store
        .apply(vec![Transition {
            id: ids[0],
            guard: Guard::Lease(1),
            change: Change::Update(progress(State::Retrying, T0, Some(T0 + 500))),
        }])
        .await
        .unwrap();
    let all = ListQuery::new(100);
    let before = store.list(&all).await.unwrap();
    assert_eq!(before[0].history.len(), 1);
    assert_eq!(before[0].trace, Some(cx.clone()));
    let stats_before = store.stats().await.unwrap();
    drop(store);
    let client = admin().await;
    client
        .batch_execute(&format!(
            "{} UPDATE \"{s}\".schema_version SET version = 5;",
            down_to_5(s)
        ))
        .await
        .unwrap();
    let version = || async {
        client
            .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
    };
    assert_eq!(version().await, 5);

    let store = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    let after = store.list(&all).await.unwrap();
    assert!(after
        .iter()
        .all(|r| r.history.is_empty() && !r.history.is_unreadable() && r.trace.is_none()));
    let without_history: Vec<Record> = before
        .into_iter()
        .map(|r| Record {
            history: History::default(),
            trace: None,
            ..r
        })
        .collect();
    assert_eq!(after, without_history, "every other field kept");
    assert_eq!(store.stats().await.unwrap(), stats_before);
    // The payload bytes, which version 5 did not count, are counted from the records.
    assert_eq!(stats_before.payload_bytes, 13, "\"failed\" and \"waiting\"");
    assert_eq!(
        payload_bytes_recounted(&client, s).await,
        stats_before.payload_bytes
    );

    // The next failure is kept.
    let claimed = store
        .claim(Claim {
            now: T0 + 500,
            limit: 10,
            lease: Lease {
                token: 2,
                until: T0 + 30_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ids[1], ids[0]],
        "the one waiting since T0 first"
    );
    store
        .apply(vec![Transition {
            id: ids[0],
            guard: Guard::Lease(2),
            change: Change::Update(progress(State::Retrying, T0 + 500, Some(T0 + 900))),
        }])
        .await
        .unwrap();
    let failed = store.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(failed.history, one_attempt(State::Retrying, T0 + 500));
    // And the next trace context.
    let traced = store
        .enqueue(
            vec![NewRecord::new(b"t".to_vec()).trace_context(cx.clone())],
            T0 + 600,
        )
        .await
        .unwrap();
    let traced = store.get(traced.ids[0]).await.unwrap().unwrap();
    assert_eq!(traced.trace, Some(cx));

    // Half done: the columns exist, the version says 5.
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 5"))
        .await
        .unwrap();
    let again = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(again.get(ids[0]).await.unwrap(), Some(failed));
    assert_eq!(again.get(traced.id).await.unwrap(), Some(traced));
    assert_eq!(
        again.stats().await.unwrap().payload_bytes,
        14,
        "counted once: \"failed\", \"waiting\" and \"t\""
    );
}

/// What versions 3 to 6 added, dropped again: the statements that bring a current schema
/// back to version 2 as that build left it (the dropped columns are gone for every query).
fn down_to_2(s: &str) -> String {
    format!(
        "{} DROP INDEX \"{s}\".records_replaces; \
         ALTER TABLE \"{s}\".records DROP COLUMN expected_version, DROP COLUMN replaces, \
           DROP COLUMN absorbed; \
         ALTER TABLE \"{s}\".meta DROP COLUMN superseded;",
        down_to_3(s)
    )
}

/// A schema left at version 2 (no expected version, no coalescing key, no superseded
/// counter) with records in every kind of state is brought to the current version: every
/// record, every counter and the group order are kept, the new fields are none and the new
/// counter 0; coalescing then works on it, and a step found half done by hand still
/// converges with its counter kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_schema_is_migrated_with_its_records_and_the_step_is_idempotent() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"plain".to_vec()),
                NewRecord::new(b"first".to_vec()).in_group("g"),
                NewRecord::new(b"second".to_vec()).in_group("g"),
                NewRecord::new(b"third".to_vec()),
            ],
            T0,
        )
        .await
        .unwrap();
    let lease = Lease {
        token: 1,
        until: T0 + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 2,
            lease,
        })
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ids[0], ids[1]]
    );
    // One delivered, one retrying, one waiting behind it, one pending.
    store
        .apply(vec![
            Transition {
                id: ids[0],
                guard: Guard::Lease(1),
                change: Change::Delivered,
            },
            Transition {
                id: ids[1],
                guard: Guard::Lease(1),
                change: Change::Update(progress(State::Retrying, T0, Some(T0 + 500))),
            },
        ])
        .await
        .unwrap();
    let all = ListQuery::new(100);
    let before = store.list(&all).await.unwrap();
    let stats_before = store.stats().await.unwrap();
    drop(store);
    let client = admin().await;
    client
        .batch_execute(&format!(
            "{} UPDATE \"{s}\".schema_version SET version = 2;",
            down_to_2(s)
        ))
        .await
        .unwrap();
    let version = || async {
        client
            .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
    };
    assert_eq!(version().await, 2);

    let store = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    let after = store.list(&all).await.unwrap();
    // Version 2 kept no history: the retrying record's attempt went with the column.
    let before: Vec<Record> = before
        .into_iter()
        .map(|r| Record {
            history: History::default(),
            ..r
        })
        .collect();
    assert_eq!(after, before);
    assert_eq!(after.len(), 3);
    assert!(after
        .iter()
        .all(|r| r.expected_version.is_none() && r.replaces.is_none()));
    let stats = store.stats().await.unwrap();
    assert_eq!(stats, stats_before);
    assert_eq!((stats.superseded, stats.delivered), (0, 1));
    let indexed: bool = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("\"{s}\".records_replaces")],
        )
        .await
        .unwrap()
        .get(0);
    assert!(indexed, "the coalescing index was built");
    // The group keeps its order: a write queued behind the retrying head is not its head.
    assert_eq!(store.next_due().await.unwrap(), Some(T0));

    // Coalescing on the migrated schema.
    let edit = |payload: &str| {
        NewRecord::new(payload.as_bytes().to_vec())
            .in_group("note")
            .replacing("note/body")
            .expecting("7")
    };
    let first = store.enqueue(vec![edit("v1")], T0 + 1).await.unwrap();
    let second = store.enqueue(vec![edit("v2")], T0 + 2).await.unwrap();
    assert_eq!(
        (first.superseded.len(), second.superseded.clone()),
        (0, vec![0])
    );
    assert_eq!(second.ids, first.ids);
    let record = store.get(first[0]).await.unwrap().unwrap();
    assert_eq!(
        (
            record.payload.as_slice(),
            record.expected_version.as_deref(),
            record.replaces.as_deref()
        ),
        (b"v2".as_slice(), Some("7"), Some("note/body"))
    );
    assert_eq!(store.stats().await.unwrap().superseded, 1);

    // Half done: the columns exist, the version says 2.
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 2"))
        .await
        .unwrap();
    let again = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(again.stats().await.unwrap().superseded, 1);
    assert_eq!(again.get(first[0]).await.unwrap(), Some(record));
}

/// The count of merged writes lives with the records that absorbed them until they leave:
/// delivering, discarding or pruning such a record moves its count into the persisted
/// counter in the same statement, so the total never moves, and it survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_writes_stay_counted_when_their_records_leave() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let edit = |key: &str, n: u8| NewRecord::new(vec![n]).replacing(key);
    // Three records: "a" absorbs two writes (one in the batch, one later), "b" and "c" one.
    let first = store
        .enqueue(
            vec![edit("a", 1), edit("a", 2), edit("b", 1), edit("c", 1)],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(first.superseded, vec![1]);
    let later = store
        .enqueue(vec![edit("a", 3), edit("b", 2), edit("c", 2)], T0)
        .await
        .unwrap();
    assert_eq!(later.superseded, vec![0, 1, 2]);
    let (a, b, c) = (first[0], first[2], first[3]);
    assert_eq!(store.stats().await.unwrap().superseded, 4);
    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 10,
            lease: Lease {
                token: 7,
                until: T0 + 1_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert_eq!(claimed[0].payload, vec![3]);
    store
        .apply(vec![
            Transition {
                id: a,
                guard: Guard::Lease(7),
                change: Change::Delivered,
            },
            Transition {
                id: b,
                guard: Guard::Lease(7),
                change: Change::Discard {
                    reason: "by hand".into(),
                    at: T0,
                    attempts: 0,
                },
            },
            Transition {
                id: c,
                guard: Guard::Lease(7),
                change: Change::Update(progress(State::Rejected, T0, None)),
            },
        ])
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.superseded,
            stats.delivered,
            stats.discarded,
            stats.rejected
        ),
        (4, 1, 1, 1)
    );
    assert_eq!(
        store.prune(T0 + 1).await.unwrap(),
        2,
        "the rejected record and the tombstone"
    );
    assert_eq!(store.stats().await.unwrap().superseded, 4);
    assert_eq!(store.list(&ListQuery::new(10)).await.unwrap(), vec![]);
    drop(store);
    let reopened = scratch.store().await;
    assert_eq!(reopened.stats().await.unwrap().superseded, 4);
}

/// `stepped_back` reads the deadline index, never the due backlog: with 20,000 due records
/// and 3 scheduled later, the plan the server picks (custom and generic) scans
/// `records_deadline`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stepped_back_reads_the_deadline_index_not_the_backlog() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    for _ in 0..20 {
        store
            .enqueue((0..1_000).map(|_| NewRecord::new(vec![1])).collect(), T0)
            .await
            .unwrap();
    }
    store
        .enqueue(
            (0..3).map(|_| NewRecord::new(vec![2])).collect(),
            T0 + 60_000,
        )
        .await
        .unwrap();
    let later = store.stepped_back(T0 + 1, 10).await.unwrap();
    assert_eq!(later.len(), 3);
    let client = admin().await;
    let s = &scratch.schema;
    client
        .batch_execute(&format!("ANALYZE \"{s}\".records"))
        .await
        .unwrap();
    // The statement as the store sends it (its text is the crate's; the shape is what counts).
    let sql = format!(
        "WITH later AS MATERIALIZED (SELECT id, payload FROM \"{s}\".records \
         WHERE state IN (0, 1) AND next_attempt_at > $1 \
         AND (last_attempt_at IS NULL OR last_attempt_at > $1) \
         ORDER BY next_attempt_at) SELECT * FROM later ORDER BY id LIMIT $2"
    );
    client
        .batch_execute(&format!("PREPARE later(bigint, bigint) AS {sql}"))
        .await
        .unwrap();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        client
            .batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .await
            .unwrap();
        let plan: String = client
            .query(&format!("EXPLAIN EXECUTE later({}, 10)", T0 + 1), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0) + "\n")
            .collect();
        assert!(plan.contains("records_deadline"), "{mode}:\n{plan}");
        assert!(!plan.contains("Seq Scan"), "{mode}:\n{plan}");
    }
}
