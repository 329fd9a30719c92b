//! Every row of the outcome table as one case of the pure transition function.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::fastrand::Rng;
use outbox_core::{
    machine, Backoff, Ceiling, Change, Claim, ConflictResolution, Event, Guard, Jitter, Lease,
    NewRecord, Outcome, Progress, Record, RecordId, RetryAfter, RetryPolicy, State, Store,
};

const NOW: u64 = 1_000_000;

/// A record as a claim hands it to the runner.
fn claimed(attempts: u32) -> Record {
    let mut record = Record::fresh(RecordId(7), None, b"p".to_vec(), "k".into(), 0);
    record.attempts = attempts;
    record.state = State::InFlight;
    record.lease = Some(Lease {
        token: 99,
        until: NOW + 30_000,
    });
    record
}

fn exact_policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_jitter(Jitter::None)
        .with_backoff(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(60),
        ))
        .with_max_attempts(5)
}

fn progress(step: &outbox_core::Step) -> &Progress {
    match &step.transition.change {
        Change::Update(p) => p,
        other => panic!("expected an update, got {other:?}"),
    }
}

fn run(record: &Record, outcome: Outcome) -> outbox_core::Step {
    machine::on_outcome(
        record,
        &outcome,
        &exact_policy(),
        NOW,
        &mut Rng::with_seed(1),
    )
}

#[test]
fn delivered_removes_the_record() {
    let step = run(&claimed(2), Outcome::Delivered);
    assert_eq!(step.transition.change, Change::Delivered);
    assert_eq!(step.transition.guard, Guard::Lease(99));
    assert_eq!(step.event, Event::Delivered { id: RecordId(7) });
    assert!(!step.halt);
}

#[test]
fn no_answer_spends_no_budget() {
    let mut record = claimed(2);
    record.unanswered = 3;
    let step = run(&record, Outcome::no_answer("connection refused"));
    let p = progress(&step);
    assert_eq!(p.attempts, 2, "no answer must not spend an attempt");
    assert_eq!(p.unanswered, 4);
    assert_eq!(p.state, State::Retrying);
    // Backoff on the unanswered count: the 4th unanswered failure waits 8 s.
    assert_eq!(p.next_attempt_at, Some(NOW + 8_000));
    assert_eq!(p.last_error.as_deref(), Some("connection refused"));
    assert!(matches!(step.event, Event::Retrying { spent: false, .. }));
}

#[test]
fn no_answer_never_reaches_the_ceiling() {
    let mut record = claimed(4);
    record.unanswered = 10_000;
    let p = progress(&run(&record, Outcome::no_answer("timeout"))).clone();
    assert_eq!(p.state, State::Retrying);
    assert_eq!(p.next_attempt_at, Some(NOW + 60_000), "capped");
}

#[test]
fn transient_spends_one_attempt() {
    let step = run(&claimed(2), Outcome::transient("HTTP 503", None));
    let p = progress(&step);
    assert_eq!(p.attempts, 3);
    assert_eq!(p.unanswered, 0);
    assert_eq!(p.state, State::Retrying);
    assert_eq!(p.next_attempt_at, Some(NOW + 4_000));
    assert!(matches!(step.event, Event::Retrying { spent: true, .. }));
}

#[test]
fn retry_after_overrides_the_schedule() {
    let outcome = Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(42))));
    let p = progress(&run(&claimed(0), outcome)).clone();
    assert_eq!(p.attempts, 1);
    // The server's 42 s, spread by up to half of it so a crowd told the same does not
    // come back in the same second; never the local 1 s.
    let at = p.next_attempt_at.unwrap_or(0);
    assert!((NOW + 42_000..=NOW + 63_000).contains(&at), "{at}");

    // A date in the past, or 0, never undercuts the local schedule (1 s here, no jitter): a
    // server repeating it cannot make a tight loop.
    let past = Outcome::transient("HTTP 503", Some(RetryAfter::At(NOW - 5_000)));
    assert_eq!(
        progress(&run(&claimed(0), past)).next_attempt_at,
        Some(NOW + 1_000)
    );
    let zero = Outcome::transient("HTTP 503", Some(RetryAfter::Delay(Duration::ZERO)));
    assert_eq!(
        progress(&run(&claimed(0), zero)).next_attempt_at,
        Some(NOW + 1_000)
    );

    // Beyond the cap (60 s) as asked, up to max_retry_after (1 hour).
    let long = Outcome::transient(
        "HTTP 503",
        Some(RetryAfter::Delay(Duration::from_secs(3_000))),
    );
    let at = progress(&run(&claimed(0), long))
        .next_attempt_at
        .unwrap_or(0);
    assert!((NOW + 3_000_000..=NOW + 3_600_000).contains(&at), "{at}");
    // A day asked: cut to the hour, spread over its last third.
    let far = Outcome::transient(
        "HTTP 503",
        Some(RetryAfter::Delay(Duration::from_secs(86_400))),
    );
    let at = progress(&run(&claimed(0), far))
        .next_attempt_at
        .unwrap_or(0);
    assert!((NOW + 2_400_000..=NOW + 3_600_000).contains(&at), "{at}");
}

/// The deadlines a crowd of records gets when each is told the same `retry_after`.
fn crowd(retry_after: RetryAfter) -> Vec<u64> {
    let mut rng = Rng::with_seed(5);
    (0..500)
        .map(|_| {
            let outcome = Outcome::transient("HTTP 429", Some(retry_after));
            let step = machine::on_outcome(&claimed(0), &outcome, &exact_policy(), NOW, &mut rng);
            progress(&step).next_attempt_at.unwrap_or(0) - NOW
        })
        .collect()
}

#[test]
fn a_crowd_told_the_same_retry_after_is_spread_over_half_of_it_above_it() {
    let waits = crowd(RetryAfter::Delay(Duration::from_secs(30)));
    let (low, high) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
    assert!(*low >= 30_000 && *high <= 45_000, "{low}..{high}");
    // Spread over the whole half, not bunched: each 3 s slice of it holds some of the crowd.
    for slice in 0..5 {
        let from = 30_000 + slice * 3_000;
        let count = waits
            .iter()
            .filter(|w| (from..from + 3_000).contains(*w))
            .count();
        assert!(count > 50, "{count} of 500 in {from}..{} ms", from + 3_000);
    }
    // Asked for more than max_retry_after (1 hour): spread over its last third, not all on it.
    let waits = crowd(RetryAfter::Delay(Duration::from_secs(86_400)));
    assert!(waits.iter().all(|w| (2_400_000..=3_600_000).contains(w)));
    let on_the_bound = waits.iter().filter(|w| **w == 3_600_000).count();
    assert!(on_the_bound < 5, "{on_the_bound} of 500 on the bound");
}

#[test]
fn transient_at_the_ceiling_parks() {
    let step = run(&claimed(4), Outcome::transient("HTTP 500", None));
    let p = progress(&step);
    assert_eq!(p.attempts, 5);
    assert_eq!(p.state, State::NeedsAttention);
    assert_eq!(p.next_attempt_at, None);
    assert!(matches!(step.event, Event::Parked { .. }));
}

#[test]
fn transient_at_the_ceiling_discards_when_asked() {
    let policy = exact_policy().with_ceiling(Ceiling::Discard);
    let step = machine::on_outcome(
        &claimed(4),
        &Outcome::transient("HTTP 500", None),
        &policy,
        NOW,
        &mut Rng::with_seed(1),
    );
    assert!(matches!(
        step.transition.change,
        Change::Discard { at: NOW, .. }
    ));
    assert!(matches!(step.event, Event::Discarded { .. }));
}

#[test]
fn rejected_is_final_after_exactly_one_attempt() {
    let step = run(&claimed(0), Outcome::rejected("HTTP 422"));
    let p = progress(&step);
    assert_eq!(p.state, State::Rejected);
    assert_eq!(p.attempts, 1);
    assert_eq!(p.next_attempt_at, None);
    assert_eq!(p.last_error.as_deref(), Some("HTTP 422"));
    assert!(matches!(step.event, Event::Rejected { .. }));
}

#[test]
fn halt_spends_nothing_and_pauses_the_runner() {
    let mut record = claimed(2);
    record.last_attempt_at = Some(NOW - 10);
    record.next_attempt_at = Some(NOW - 10);
    record.interrupted = 2;
    let step = run(&record, Outcome::halt("HTTP 401"));
    assert!(step.halt);
    let p = progress(&step);
    assert_eq!((p.attempts, p.unanswered), (2, 0));
    assert_eq!(p.interrupted, 0, "it reported: not a crash loop");
    assert_eq!(p.state, State::Retrying);
    assert_eq!(
        p.next_attempt_at,
        Some(NOW - 10),
        "still due: it was not its fault"
    );
    assert!(matches!(step.event, Event::Halted { .. }));
}

#[test]
fn conflict_defaults_to_needs_attention_and_resolvers_decide() {
    let record = claimed(0);
    let step = run(&record, Outcome::conflict("HTTP 409"));
    assert_eq!(progress(&step).state, State::NeedsAttention);
    assert_eq!(progress(&step).attempts, 1);

    let resolve = |resolution: ConflictResolution| {
        let resolver = move |_: &Record, _: &str| resolution;
        Outcome::conflict("HTTP 409").resolve_conflict(&record, &resolver)
    };
    assert_eq!(
        resolve(ConflictResolution::AlreadyDelivered),
        Outcome::Delivered
    );
    assert!(matches!(
        resolve(ConflictResolution::Reject),
        Outcome::Rejected { .. }
    ));
    assert!(matches!(
        resolve(ConflictResolution::Retry),
        Outcome::Transient { .. }
    ));
    assert!(matches!(
        resolve(ConflictResolution::NeedsAttention),
        Outcome::Conflict { .. }
    ));
}

#[test]
fn a_reported_outcome_resets_the_crash_loop_count() {
    let mut record = claimed(0);
    record.interrupted = 2;
    let p = progress(&run(&record, Outcome::transient("HTTP 503", None))).clone();
    assert_eq!(p.interrupted, 0);
}

#[test]
fn interruptions_park_only_in_a_row() {
    let policy = exact_policy().with_max_interruptions(3);
    let mut record = claimed(0);
    record.interrupted = 1;
    let step = machine::on_interrupted(&record, &policy, NOW);
    let p = progress(&step);
    assert_eq!((p.state, p.interrupted), (State::Retrying, 2));
    assert_eq!(p.next_attempt_at, Some(NOW));
    record.interrupted = 2;
    let step = machine::on_interrupted(&record, &policy, NOW);
    assert_eq!(progress(&step).state, State::NeedsAttention);
    assert!(matches!(step.event, Event::Parked { .. }));
}

#[test]
fn release_restores_the_state_before_the_claim() {
    let fresh = claimed(0);
    assert_eq!(
        machine::release(&fresh).change,
        Change::Update(Progress {
            state: State::Pending,
            ..fresh.progress()
        })
    );
    let mut tried = claimed(1);
    tried.last_attempt_at = Some(5);
    let Change::Update(p) = machine::release(&tried).change else {
        panic!()
    };
    assert_eq!(p.state, State::Retrying);
}

#[test]
fn rebase_keeps_the_wait_a_record_was_given() {
    let mut record = claimed(1);
    record.state = State::Retrying;
    record.lease = None;
    // Scheduled a day ahead of the clock now, with a 1.5 s wait: the clock stepped back.
    record.last_attempt_at = Some(NOW + 86_400_000);
    record.next_attempt_at = Some(NOW + 86_401_500);
    let t = machine::rebase(&record, NOW).unwrap();
    assert_eq!(t.guard, Guard::Idle);
    let Change::Update(p) = t.change else {
        panic!()
    };
    assert_eq!(p.last_attempt_at, Some(NOW));
    assert_eq!(p.next_attempt_at, Some(NOW + 1_500));
    assert_eq!((p.attempts, p.state), (record.attempts, State::Retrying));

    // Scheduled from the past: its wait is its own, nothing to re-base, however far out.
    record.last_attempt_at = Some(NOW - 1);
    record.next_attempt_at = Some(NOW + 86_400_000);
    assert!(machine::rebase(&record, NOW).is_none());

    // Never reported and due in the future (enqueued before the step): due now.
    record.last_attempt_at = None;
    record.next_attempt_at = Some(NOW + 5_000);
    let Change::Update(p) = machine::rebase(&record, NOW).unwrap().change else {
        panic!()
    };
    assert_eq!(p.next_attempt_at, Some(NOW));

    // Parked records have no deadline to re-base.
    record.state = State::NeedsAttention;
    assert!(machine::rebase(&record, NOW).is_none());
}

#[test]
fn manual_retry_gives_a_fresh_budget() {
    let mut record = claimed(5);
    record.state = State::NeedsAttention;
    record.lease = None;
    record.unanswered = 4;
    record.last_attempt_at = Some(1);
    record.next_attempt_at = None;
    let step = machine::retry_now(&record, NOW).unwrap();
    let p = progress(&step);
    assert_eq!((p.attempts, p.unanswered, p.interrupted), (0, 0, 0));
    assert_eq!(p.next_attempt_at, Some(NOW));
    assert_eq!(p.state, State::Retrying);
    assert!(machine::retry_now(&claimed(0), NOW).is_none(), "in flight");
    record.state = State::Rejected;
    assert!(
        machine::retry_now(&record, NOW).is_none(),
        "a verdict is final"
    );
}

#[test]
fn the_same_seed_gives_the_same_schedule_after_a_restart() {
    // The schedule is a function of the persisted row, the policy and the seed.
    let policy = RetryPolicy::default();
    let record = claimed(3);
    let a = machine::on_outcome(
        &record,
        &Outcome::transient("x", None),
        &policy,
        NOW,
        &mut Rng::with_seed(5),
    );
    let b = machine::on_outcome(
        &record.clone(),
        &Outcome::transient("x", None),
        &policy,
        NOW,
        &mut Rng::with_seed(5),
    );
    assert_eq!(a, b);
}

#[tokio::test]
async fn the_store_trait_is_object_safe() {
    let store: Arc<dyn Store> = Arc::new(outbox_memory::MemoryStore::new());
    let ids = store
        .enqueue(vec![NewRecord::new(b"a".to_vec())], NOW)
        .await
        .unwrap();
    let claimed = store
        .claim(Claim {
            now: NOW,
            limit: 1,
            lease: Lease {
                token: 1,
                until: NOW + 1,
            },
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, ids[0]);
}

/// The deadline a transition writes, or `None` when it writes none.
fn next_of(t: &outbox_core::Transition) -> Option<u64> {
    match &t.change {
        Change::Update(p) => p.next_attempt_at,
        _ => None,
    }
}

#[test]
fn a_not_before_time_is_a_floor_no_rebase_or_relink_moves_a_deadline_below() {
    const T: u64 = 1_700_000_000_000;
    const HOUR: u64 = 3_600_000;
    const DAY: u64 = 86_400_000;
    // Held until T + 1 h, enqueued at T: a step back of a day leaves it alone, whether
    // the runner measured the step or not.
    let held = Record::enqueued(RecordId(1), NewRecord::new(vec![]).not_before(T + HOUR), T);
    assert!(!held.needs_rebase(T - DAY));
    assert!(machine::rebase(&held, T - DAY).is_none());
    assert!(machine::rebase_by(&held, T - DAY, DAY).is_none());

    // A plain record enqueued at the same moment is re-based: its deadline was the enqueue.
    let plain = Record::enqueued(RecordId(2), NewRecord::new(vec![]), T);
    let moved = machine::rebase(&plain, T - DAY).expect("re-based");
    assert_eq!(next_of(&moved), Some(T - DAY));

    // Enqueued a day ahead of the clock with a time already behind that wrong clock: its
    // deadline was the enqueue, so it is re-based, but not below its time.
    let early = Record::enqueued(
        RecordId(3),
        NewRecord::new(vec![]).not_before(T - HOUR),
        T + DAY,
    );
    assert!(early.needs_rebase(T - DAY));
    let moved = machine::rebase(&early, T - DAY).expect("re-based");
    assert_eq!(next_of(&moved), Some(T - HOUR));
    let moved = machine::rebase_by(&early, T - DAY, 2 * DAY).expect("re-based");
    assert_eq!(
        next_of(&moved),
        Some(T - HOUR),
        "shifted by the step, floored"
    );

    // A retrying record held by a replacing write's time: the link coming back does not make
    // it due before that time, and a re-base keeps its wait but not below the time.
    let mut waiting = held.clone();
    waiting.state = State::Retrying;
    waiting.unanswered = 3;
    waiting.last_attempt_at = Some(T + 10);
    waiting.next_attempt_at = Some(T + 20);
    waiting.not_before = Some(T + HOUR);
    let relinked = machine::relink(&waiting, T + 15).expect("relinked");
    assert_eq!(next_of(&relinked), Some(T + HOUR));
    let rebased = machine::rebase(&waiting, T - DAY).expect("re-based");
    assert_eq!(next_of(&rebased), Some(T + HOUR));

    // A person's retry or requeue is due at once: the time held the first delivery only.
    let fresh = Progress::requeued(T + 5);
    assert_eq!(fresh.next_attempt_at, Some(T + 5));
}
