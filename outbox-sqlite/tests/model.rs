//! The SQLite store against the reference model: the same operations on both must give the same
//! answers, step by step (ids, claim order, group heads, guards, requeues, rounds, the halt,
//! stats, prune, coalescing).

use outbox_core::fastrand::Rng;
use outbox_core::{
    Change, Claim, Guard, Halt, Lease, ListQuery, NewRecord, Progress, RecordId, State, Store,
    Transition,
};
use outbox_memory::MemoryStore;
use outbox_sqlite::{Durability, SqliteConfig, SqliteStore};

const GROUPS: [Option<&str>; 4] = [None, None, Some("a"), Some("b")];

/// Coalescing keys: few, so that writes meet earlier ones of the same key, in the same group
/// or another, waiting, in flight, parked or rejected.
const KEYS: [&str; 3] = ["x", "y", "z"];

fn random_progress(rng: &mut Rng, now: u64) -> Progress {
    let state = [
        State::Pending,
        State::Retrying,
        State::NeedsAttention,
        State::Rejected,
    ][rng.usize(..4)];
    let time = |rng: &mut Rng| rng.bool().then(|| now + rng.u64(0..2_000));
    Progress {
        state,
        attempts: rng.u32(0..4),
        unanswered: rng.u32(0..4),
        interrupted: rng.u32(0..3),
        last_attempt_at: time(rng),
        next_attempt_at: time(rng),
        // Text that JSON must escape, and text that SQLite's C strings would cut short.
        last_error: rng.bool().then(|| match rng.u8(0..3) {
            0 => format!("error {}", rng.u8(..)),
            1 => format!("\"quoted\" \\ back\tslash\n é {}", rng.u8(..)),
            _ => format!("nul \0 inside {}", rng.u8(..)),
        }),
        history: {
            let mut history = outbox_core::History::default();
            for n in 0..rng.u64(0..4) {
                let class = [
                    outbox_core::AttemptClass::Later,
                    outbox_core::AttemptClass::NoAnswer,
                ][rng.usize(..2)];
                history.push(outbox_core::Attempt::new(now + n, class, "HTTP 503 \0 é"));
            }
            history
        },
    }
}

fn random_claim(rng: &mut Rng, now: u64, token: u64) -> Claim {
    Claim {
        now: now + rng.u64(0..1_000),
        limit: rng.usize(0..5),
        lease: Lease {
            token,
            until: now + rng.u64(0..3_000),
        },
    }
}

fn random_transitions(
    rng: &mut Rng,
    now: u64,
    step: usize,
    next_id: u64,
    tokens: &[u64],
) -> Vec<Transition> {
    (0..rng.usize(0..4))
        .map(|_| {
            let id = RecordId(rng.u64(1..next_id + 1));
            let guard = if rng.bool() {
                Guard::Idle
            } else {
                Guard::Lease(tokens[rng.usize(..tokens.len())])
            };
            let change = match rng.u8(0..5) {
                0 => Change::Delivered,
                1 => Change::Discard {
                    reason: format!("reason {step}"),
                    at: now,
                    attempts: 1,
                },
                2 => Change::Requeue {
                    at: now + rng.u64(0..500),
                },
                _ => Change::Update(random_progress(rng, now)),
            };
            Transition { id, guard, change }
        })
        .collect()
}

/// Runs one sequence; returns how many writes coalesced in it.
async fn run_sequence(seed: u64, steps: usize) -> u64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = SqliteConfig::default().durability(Durability::Off);
    let sqlite = SqliteStore::create(dir.path().join("model.db"), config)
        .await
        .expect("create");
    let memory = MemoryStore::new();
    let mut rng = Rng::with_seed(seed);
    let mut now = 1_000u64;
    let mut next_id = 1u64;
    let mut tokens = vec![1u64];
    for step in 0..steps {
        let at = format!("seed {seed}, step {step}");
        now += rng.u64(0..300);
        match rng.u8(0..12) {
            0 | 1 => {
                let batch: Vec<NewRecord> = (0..rng.usize(1..4))
                    .map(|i| {
                        let mut record = NewRecord::new(vec![rng.u8(..); rng.usize(0..16)])
                            .with_key(format!("k{step}-{i}"));
                        if let Some(group) = GROUPS[rng.usize(..GROUPS.len())] {
                            record = record.in_group(group);
                        }
                        if rng.bool() {
                            record = record.replacing(KEYS[rng.usize(..KEYS.len())]);
                        }
                        if rng.bool() {
                            record = record.expecting(format!("v{step}-{i}"));
                        }
                        record
                    })
                    .collect();
                let a = memory.enqueue(batch.clone(), now).await.expect("memory");
                let b = sqlite.enqueue(batch, now).await.expect("sqlite");
                assert_eq!(a, b, "{at}: enqueue");
                next_id += (a.len() - a.superseded.len()) as u64;
            }
            2 | 3 => {
                // A random token, huge ones included, so tokens are stored bit for bit.
                let token = if rng.bool() {
                    rng.u64(..)
                } else {
                    rng.u64(1..4)
                };
                tokens.push(token);
                let claim = random_claim(&mut rng, now, token);
                let a = memory.claim(claim).await.expect("memory");
                let b = sqlite.claim(claim).await.expect("sqlite");
                assert_eq!(a, b, "{at}: claim");
            }
            4..=6 => {
                let transitions = random_transitions(&mut rng, now, step, next_id, &tokens);
                let a = memory.apply(transitions.clone()).await.expect("memory");
                let b = sqlite.apply(transitions).await.expect("sqlite");
                assert_eq!(a, b, "{at}: apply");
            }
            7 => {
                let ids: Vec<RecordId> =
                    (0..3).map(|_| RecordId(rng.u64(1..next_id + 1))).collect();
                let lease = Lease {
                    token: tokens[rng.usize(..tokens.len())],
                    until: now + rng.u64(0..3_000),
                };
                memory.renew(&ids, lease).await.expect("memory");
                sqlite.renew(&ids, lease).await.expect("sqlite");
            }
            8 => {
                let older_than = now.saturating_sub(rng.u64(0..1_500));
                let a = memory.prune(older_than).await.expect("memory");
                let b = sqlite.prune(older_than).await.expect("sqlite");
                assert_eq!(a, b, "{at}: prune");
            }
            9 => {
                let token = rng.u64(..);
                tokens.push(token);
                let transitions = random_transitions(&mut rng, now, step, next_id, &tokens);
                let claim = rng.bool().then(|| random_claim(&mut rng, now, token));
                let a = memory
                    .round(transitions.clone(), claim)
                    .await
                    .expect("memory");
                let b = sqlite.round(transitions, claim).await.expect("sqlite");
                assert_eq!(a, b, "{at}: round");
            }
            10 => {
                let halt = rng.bool().then(|| Halt {
                    reason: format!("HTTP 401 at step {step}"),
                    since: now,
                });
                memory.set_halt(halt.clone()).await.expect("memory");
                sqlite.set_halt(halt).await.expect("sqlite");
                assert_eq!(
                    memory.halt().await.expect("memory"),
                    sqlite.halt().await.expect("sqlite"),
                    "{at}: halt"
                );
            }
            _ => {
                let probe = now + rng.u64(0..3_000);
                assert_eq!(
                    memory.expired(probe, 4).await.expect("memory"),
                    sqlite.expired(probe, 4).await.expect("sqlite"),
                    "{at}: expired"
                );
                let moment = now.saturating_sub(rng.u64(0..1_000));
                assert_eq!(
                    memory.stepped_back(moment, 3).await.expect("memory"),
                    sqlite.stepped_back(moment, 3).await.expect("sqlite"),
                    "{at}: stepped_back"
                );
            }
        }
        // The observable state after every step.
        assert_eq!(
            memory.stats().await.expect("memory"),
            sqlite.stats().await.expect("sqlite"),
            "{at}: stats"
        );
        assert_eq!(
            memory.next_due().await.expect("memory"),
            sqlite.next_due().await.expect("sqlite"),
            "{at}: next_due"
        );
        let query = ListQuery {
            state: rng
                .bool()
                .then(|| State::ALL[rng.usize(..State::ALL.len())]),
            group: rng.bool().then(|| "a".to_owned()),
            after: rng.bool().then(|| RecordId(rng.u64(0..next_id))),
            limit: rng.usize(1..50),
        };
        assert_eq!(
            memory.list(&query).await.expect("memory"),
            sqlite.list(&query).await.expect("sqlite"),
            "{at}: list {query:?}"
        );
        let id = RecordId(rng.u64(1..next_id + 1));
        assert_eq!(
            memory.get(id).await.expect("memory"),
            sqlite.get(id).await.expect("sqlite"),
            "{at}: get {id}"
        );
    }
    assert_eq!(
        memory
            .list(&ListQuery::new(usize::MAX))
            .await
            .expect("memory"),
        sqlite
            .list(&ListQuery::new(usize::MAX))
            .await
            .expect("sqlite"),
        "seed {seed}: final records"
    );
    assert_eq!(
        memory.tombstones(None, usize::MAX).await.expect("memory"),
        sqlite.tombstones(None, usize::MAX).await.expect("sqlite"),
        "seed {seed}: final tombstones"
    );
    memory.stats().await.expect("memory").superseded
}

#[tokio::test]
async fn random_operation_sequences_match_the_reference_model() {
    let mut superseded = 0;
    for seed in 0..12 {
        superseded += run_sequence(seed, 250).await;
    }
    assert!(superseded > 0, "the sequences coalesced nothing");
}
