//! A record's history on PostgreSQL: the attempts the machine appends are persisted by both
//! write paths (a runner's guarded round and the general locked one), kept by a requeue and by
//! a coalescing rewrite, and a damaged history reads as empty without making its record
//! unreadable.

mod common;

use common::{admin, server_ready, Scratch};
use outbox_core::{
    machine, AttemptClass, Change, Claim, Guard, History, Lease, NewRecord, Outcome, Record,
    RecordId, RetryPolicy, State, Store, Transition,
};
use outbox_postgres::PgStore;

const T0: u64 = 1_700_000_000_000;
const DAY: u64 = 86_400_000;

/// Claims the one due record at `now` under `token`.
async fn claim_one(store: &PgStore, now: u64, token: u64) -> Record {
    let claimed = store
        .claim(Claim {
            now,
            limit: 10,
            lease: Lease {
                token,
                until: now + 30_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "one record due at {now}");
    claimed.into_iter().next().unwrap()
}

/// The transition a sink's `outcome` for the claimed `record` makes at `now`.
fn report(record: &Record, outcome: &Outcome, now: u64) -> Transition {
    let mut rng = fastrand::Rng::with_seed(7);
    machine::on_outcome(record, outcome, &RetryPolicy::default(), now, &mut rng).transition
}

/// Three failed deliveries leave three attempts, oldest first, whichever path wrote them; a
/// requeue keeps them; damaged bytes read as an unreadable empty history on a record that is
/// otherwise whole and still delivered, and the next attempt starts a new history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_kept_in_order_through_a_requeue_and_damage_is_contained() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let id = store
        .enqueue(vec![NewRecord::new(b"rename".to_vec())], T0)
        .await
        .unwrap()[0];
    assert!(store.get(id).await.unwrap().unwrap().history.is_empty());

    // "Later", reported under the lease: the runner's guarded path.
    let claimed = claim_one(&store, T0, 1).await;
    let first = T0 + 10;
    let applied = store
        .apply(vec![report(
            &claimed,
            &Outcome::transient("HTTP 503", None),
            first,
        )])
        .await
        .unwrap();
    assert!(applied.skipped.is_empty());

    // No answer, in a batch with a person's change of a record that does not exist: the
    // general path, which locks the rows first.
    let claimed = claim_one(&store, T0 + DAY, 2).await;
    assert_eq!(claimed.history.len(), 1, "a claim reads the history");
    let second = T0 + DAY + 10;
    let missing = RecordId(1 << 40);
    let applied = store
        .apply(vec![
            report(&claimed, &Outcome::no_answer("connection refused"), second),
            Transition {
                id: missing,
                guard: Guard::Idle,
                change: Change::Delivered,
            },
        ])
        .await
        .unwrap();
    assert_eq!(applied.skipped, vec![missing]);

    // Rejected, reported in a round that claims nothing more.
    let claimed = claim_one(&store, T0 + 2 * DAY, 3).await;
    let third = T0 + 2 * DAY + 10;
    let round = store
        .round(
            vec![report(&claimed, &Outcome::rejected("HTTP 422: bad"), third)],
            None,
        )
        .await
        .unwrap();
    assert!(round.applied.skipped.is_empty());

    let rejected = store.get(id).await.unwrap().unwrap();
    assert_eq!(rejected.state, State::Rejected);
    let attempts = rejected.history.attempts();
    assert_eq!(
        attempts
            .iter()
            .map(|a| (a.at, a.class, a.status, a.error.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (first, AttemptClass::Later, Some(503), "HTTP 503"),
            (second, AttemptClass::NoAnswer, None, "connection refused"),
            (third, AttemptClass::Rejected, Some(422), "HTTP 422: bad"),
        ]
    );
    assert!(!rejected.history.is_unreadable());
    let listed = store.list(&outbox_core::ListQuery::new(10)).await.unwrap();
    assert_eq!(
        listed,
        vec![rejected.clone()],
        "a list reads the history too"
    );

    // A requeue: a fresh budget, the same attempts.
    let requeue = machine::requeue(&rejected, T0 + 3 * DAY).unwrap();
    let applied = store.apply(vec![requeue]).await.unwrap();
    assert!(applied.skipped.is_empty());
    let requeued = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (
            requeued.state,
            requeued.attempts,
            requeued.last_error.as_deref()
        ),
        (State::Pending, 0, None)
    );
    assert_eq!(
        requeued.history, rejected.history,
        "a requeue keeps the history"
    );

    // Damaged bytes in the column: the record reads, whole but for its history.
    let changed = admin()
        .await
        .execute(
            &format!(
                "UPDATE \"{}\".records SET history = '\\x0109ff'::bytea WHERE id = $1",
                scratch.schema
            ),
            &[&i64::try_from(id.0).unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
    let damaged = store.get(id).await.unwrap().unwrap();
    assert!(damaged.history.is_unreadable() && damaged.history.is_empty());
    assert_eq!(
        Record {
            history: requeued.history.clone(),
            ..damaged.clone()
        },
        requeued,
        "every other field as it was"
    );
    assert!(store.unreadable(10).await.unwrap().is_empty());

    // Still delivered: claimed, and its next failure starts a new history.
    let claimed = claim_one(&store, T0 + 3 * DAY, 4).await;
    assert_eq!(claimed.id, id);
    assert!(claimed.history.is_unreadable());
    let fourth = T0 + 3 * DAY + 10;
    store
        .apply(vec![report(
            &claimed,
            &Outcome::transient("HTTP 503: busy", None),
            fourth,
        )])
        .await
        .unwrap();
    let again = store.get(id).await.unwrap().unwrap();
    assert!(!again.history.is_unreadable());
    assert_eq!(
        again
            .history
            .attempts()
            .iter()
            .map(|a| (a.at, a.class))
            .collect::<Vec<_>>(),
        vec![(fourth, AttemptClass::Later)]
    );
}

/// A later write that replaces a retrying record in place takes its payload, not its
/// history: the attempts of the record stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalescing_rewrite_keeps_the_history() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let edit = |payload: &str| NewRecord::new(payload.as_bytes().to_vec()).replacing("note/7");
    let id = store.enqueue(vec![edit("v1")], T0).await.unwrap()[0];
    let claimed = claim_one(&store, T0, 1).await;
    store
        .apply(vec![report(
            &claimed,
            &Outcome::transient("HTTP 503", None),
            T0 + 10,
        )])
        .await
        .unwrap();
    let retrying = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (retrying.state, retrying.history.len()),
        (State::Retrying, 1)
    );

    let replaced = store.enqueue(vec![edit("v2")], T0 + 20).await.unwrap();
    assert_eq!(
        (replaced.ids.clone(), replaced.superseded),
        (vec![id], vec![0])
    );
    let rewritten = store.get(id).await.unwrap().unwrap();
    assert_eq!(rewritten.payload, b"v2");
    assert_eq!(rewritten.history, retrying.history);
    assert_ne!(rewritten.history, History::default());
}
