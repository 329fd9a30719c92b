//! One queue with a record in every situation, built through the Store API at fixed times.

use outbox_core::{
    machine, Claim, Halt, Jitter, Lease, Millis, NewRecord, Outcome, RecordId, RetryPolicy, Store,
    Transition,
};

/// 2026-12-01 08:00:00 UTC: the scenario's first enqueue.
pub const T0: Millis = 1_796_112_000_000;
pub const MINUTE: Millis = 60_000;
/// The first delivery round.
pub const T1: Millis = T0 + 10 * MINUTE;
/// The second delivery round, an hour later.
pub const T2: Millis = T1 + 60 * MINUTE;
/// "Now" for every read command of the snapshot tests.
pub const NOW: Millis = T2 + 5 * MINUTE;

fn policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(2)
        .with_max_interruptions(1)
        .with_jitter(Jitter::None)
}

async fn report(store: &dyn Store, transitions: Vec<Transition>) {
    let applied = store.apply(transitions).await.expect("apply");
    assert!(
        applied.skipped.is_empty(),
        "seeding skipped {:?}",
        applied.skipped
    );
}

/// Builds the scenario on `store` (empty), ids 1 to 9:
///
/// | id | group | ends as |
/// |---|---|---|
/// | 1 | doc-1 | needs-attention after two 503s (ceiling) |
/// | 2 | doc-1 | pending, held back behind #1 |
/// | 3 | - | retrying after a 503 and a refused connection; binary payload |
/// | 4 | doc-2 | rejected with a 422; text payload |
/// | 5 | doc-3 | in flight, its lease expired |
/// | 6 | - | pending (released twice without an attempt) |
/// | 7 | - | delivered |
/// | 8 | doc-4 | discarded (tombstone) |
/// | 9 | doc-5 | needs-attention after a crash loop, never attempted |
///
/// and a persisted halt.
pub async fn seed(store: &dyn Store) {
    let payloads: [(Option<&str>, &[u8]); 9] = [
        (Some("doc-1"), br#"{"op":"rename","title":"Q3 report"}"#),
        (
            Some("doc-1"),
            br#"{"op":"append","text":"second paragraph"}"#,
        ),
        (None, &[0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, b'h', b'i']),
        (Some("doc-2"), b"plain text, not JSON"),
        (Some("doc-3"), br#"{"op":"delete"}"#),
        (None, br#"{"op":"ping"}"#),
        (None, br#"{"op":"delivered"}"#),
        (Some("doc-4"), br#"{"op":"obsolete"}"#),
        (Some("doc-5"), br#"{"op":"crash"}"#),
    ];
    for (n, (group, payload)) in payloads.iter().enumerate() {
        let mut record = NewRecord::new(payload.to_vec()).with_key(format!("key-{}", n + 1));
        if let Some(group) = group {
            record = record.in_group(*group);
        }
        let at = T0 + n as Millis * MINUTE;
        let ids = store.enqueue(vec![record], at).await.expect("enqueue");
        assert_eq!(ids, vec![RecordId(n as u64 + 1)]);
    }
    let policy = policy();
    let mut rng = outbox_core::fastrand::Rng::with_seed(7);
    let lease = Lease {
        token: 1,
        until: T1 + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: T1,
            limit: 100,
            lease,
        })
        .await
        .expect("claim");
    let mut outcomes = Vec::new();
    for record in &claimed {
        let outcome = match record.id.0 {
            1 | 3 => Outcome::transient("HTTP 503 Service Unavailable", None),
            4 => Outcome::rejected("HTTP 422 Unprocessable Entity: title too long"),
            7 => Outcome::Delivered,
            5 => continue, // stays in flight; its lease runs out
            6 | 8 => {
                outcomes.push(machine::release(record));
                continue;
            }
            9 => {
                outcomes.push(machine::on_interrupted(record, &policy, T1).transition);
                continue;
            }
            other => panic!("#{other} was not expected in the first claim"),
        };
        outcomes.push(machine::on_outcome(record, &outcome, &policy, T1, &mut rng).transition);
    }
    report(store, outcomes).await;

    let lease = Lease {
        token: 2,
        until: T2 + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: T2,
            limit: 100,
            lease,
        })
        .await
        .expect("claim");
    let mut outcomes = Vec::new();
    for record in &claimed {
        let outcome = match record.id.0 {
            1 => Outcome::transient("HTTP 503 Service Unavailable", None),
            3 => Outcome::no_answer("connection refused"),
            6 | 8 => {
                outcomes.push(machine::release(record));
                continue;
            }
            other => panic!("#{other} was not expected in the second claim"),
        };
        outcomes.push(machine::on_outcome(record, &outcome, &policy, T2, &mut rng).transition);
    }
    report(store, outcomes).await;
    let eight = store.get(RecordId(8)).await.expect("get").expect("#8");
    let discard = machine::discard(&eight, "duplicate of #6 (sent by hand)", T2).expect("idle");
    report(store, vec![discard.transition]).await;
    store
        .set_halt(Some(Halt {
            reason: "HTTP 401 Unauthorized: token expired".into(),
            since: T2,
        }))
        .await
        .expect("halt");
}
