//! The attempt history of a record: every delivery that did not deliver it leaves one entry
//! (when, what kind of end, the status, the error, how long the sink took), the last
//! [`History::LIMIT`] kept in order, each bounded in bytes, and a person's requeue keeps them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    async_trait, machine, AttemptClass, Clock, History, Jitter, Millis, Outcome, Record, RecordId,
    RetryPolicy, Sink, State, Store,
};

use super::runner::{config, paused_setup, policy, Rig};
use super::{apply, claim, enqueue, exact_policy, fresh, get, rec, report, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};

/// An attempt as a scenario compares it: time, class, status, error.
type Seen = (Millis, AttemptClass, Option<u16>, String);

fn seen(record: &Record) -> Vec<Seen> {
    record
        .history
        .attempts()
        .iter()
        .map(|a| (a.at, a.class, a.status, a.error.clone()))
        .collect()
}

/// Claims the one record `id` at `now` (its deadline) under `token`.
async fn claim_it(
    store: &dyn Store,
    id: RecordId,
    now: Millis,
    token: u64,
) -> Result<Record, Failure> {
    let claimed = claim(store, now, 10, token).await?;
    match &claimed[..] {
        [record] if record.id == id => Ok(record.clone()),
        other => Err(Failure::new(format!(
            "claiming at {now}: expected only {id}, got {other:?}"
        ))),
    }
}

/// A record that failed with 503, 503, a timeout and a 422 lists the four attempts in order
/// with their times, classes, statuses and errors, read back by `get`, `list` and the next
/// claim; an interrupted delivery is an attempt too; a person's requeue gives a fresh budget
/// and keeps the history.
pub async fn history_kept_with_each_outcome(backend: &dyn Backend) -> ScenarioResult {
    let (_location, store) = fresh(backend).await?;
    let store = &*store;
    let id = enqueue(store, T0, vec![rec("note")]).await?[0];
    ensure_eq(
        get(store, id).await?.history,
        History::default(),
        "a new record has no history",
    )?;
    let replies = [
        Outcome::transient("HTTP 503", None),
        Outcome::transient("HTTP 503: try later", None),
        Outcome::no_answer("timed out after 30 s"),
        Outcome::rejected("HTTP 422: title is empty"),
    ];
    let mut now = T0;
    let mut expected: Vec<Seen> = Vec::new();
    for (n, outcome) in replies.into_iter().enumerate() {
        let record = claim_it(store, id, now, n as u64 + 1).await?;
        ensure_eq(
            seen(&record),
            expected.clone(),
            "the claim reads the history",
        )?;
        let ended = now + 250;
        let class = AttemptClass::of(&outcome).ok_or_else(|| Failure::new("no class"))?;
        let text = match &outcome {
            Outcome::Transient { error, .. } | Outcome::NoAnswer { error } => error.clone(),
            Outcome::Rejected { reason } => reason.clone(),
            _ => String::new(),
        };
        let status = text
            .strip_prefix("HTTP ")
            .and_then(|t| t.get(..3))
            .and_then(|t| t.parse().ok());
        expected.push((ended, class, status, text));
        let step = report(store, &record, outcome, ended).await?;
        now = super::deadline(&step).max(ended);
        let after = get(store, id).await?;
        ensure_eq(
            seen(&after),
            expected.clone(),
            format!("after attempt {}", n + 1),
        )?;
    }
    let rejected = get(store, id).await?;
    ensure_eq(
        (rejected.state, rejected.attempts, rejected.unanswered),
        (State::Rejected, 3, 1),
        "503, 503 and 422 spent, the timeout did not",
    )?;
    ensure_eq(
        expected
            .iter()
            .map(|(_, class, status, _)| (*class, *status))
            .collect::<Vec<_>>(),
        vec![
            (AttemptClass::Later, Some(503)),
            (AttemptClass::Later, Some(503)),
            (AttemptClass::NoAnswer, None),
            (AttemptClass::Rejected, Some(422)),
        ],
        "classes and statuses",
    )?;
    let listed = super::all_records(store).await?;
    ensure_eq(
        listed.iter().map(seen).collect::<Vec<_>>(),
        vec![expected.clone()],
        "`list` reads the history",
    )?;

    // A person requeues it: a fresh budget, the reasons it was rejected still there.
    let requeue = machine::requeue(&rejected, now)
        .ok_or_else(|| Failure::new("a rejected record can be requeued"))?;
    apply(store, vec![requeue]).await?;
    let requeued = get(store, id).await?;
    ensure_eq(
        (requeued.state, requeued.attempts, seen(&requeued)),
        (State::Pending, 0, expected.clone()),
        "a requeue keeps the history",
    )?;

    // Claimed and never reported (the process died): its recovery is an attempt.
    let record = claim_it(store, id, now, 9).await?;
    let lost = now + super::LEASE_MS;
    let expired = store.expired(lost, 10).await?;
    ensure_eq(super::ids(&expired), vec![id], "the lease expired")?;
    let step = machine::on_interrupted(&expired[0], &exact_policy(), lost);
    apply(store, vec![step.transition]).await?;
    let recovered = get(store, id).await?;
    let last = recovered.history.attempts().last().cloned();
    ensure(
        recovered.history.len() == 5
            && last.is_some_and(|a| a.class == AttemptClass::Interrupted && a.at == lost),
        || format!("the interrupted delivery of {record:?} is the fifth attempt: {recovered:?}"),
    )?;
    Ok(Verdict::Passed)
}

/// Twelve failed attempts keep the last ten, oldest dropped first, and an error of 2,000
/// bytes is kept as its first 512 at most.
pub async fn history_bounded(backend: &dyn Backend) -> ScenarioResult {
    let (_location, store) = fresh(backend).await?;
    let store = &*store;
    let id = enqueue(store, T0, vec![rec("chatty")]).await?[0];
    let long = format!("HTTP 503: {}", "é".repeat(1_000));
    let policy = RetryPolicy::default()
        .with_jitter(Jitter::None)
        .with_max_attempts(100);
    let mut rng = fastrand::Rng::with_seed(1);
    let mut now = T0;
    for n in 0..12u64 {
        let record = claim_it(store, id, now, n + 1).await?;
        let ended = now + 1;
        let outcome = if n % 2 == 0 {
            Outcome::transient(long.clone(), None)
        } else {
            Outcome::no_answer(format!("refused {n}"))
        };
        let step = machine::on_outcome(&record, &outcome, &policy, ended, &mut rng);
        now = super::deadline(&step);
        apply(store, vec![step.transition]).await?;
        let kept = get(store, id).await?.history;
        let want = (n as usize + 1).min(History::LIMIT);
        ensure_eq(kept.len(), want, format!("after attempt {}", n + 1))?;
        let newest = kept.attempts().last().map(|a| a.at);
        ensure_eq(newest, Some(ended), "the newest attempt is last")?;
    }
    let kept = get(store, id).await?.history;
    let errors = kept.attempts().iter().map(|a| &a.error);
    for (n, error) in errors.enumerate() {
        let n = n + 2; // the two oldest were dropped
        if n % 2 == 0 {
            ensure(
                error.len() <= History::ERROR_BYTES
                    && error.len() + 1 >= History::ERROR_BYTES
                    && long.starts_with(error.as_str()),
                || {
                    format!(
                        "attempt {n}: the error's first 512 bytes at most, got {} bytes",
                        error.len()
                    )
                },
            )?;
        } else {
            ensure_eq(error.clone(), format!("refused {n}"), "attempt order")?;
        }
    }
    ensure(kept.encode().len() <= History::MAX_BYTES, || {
        "a full history stays within its bound".into()
    })?;
    Ok(Verdict::Passed)
}

/// Answers every delivery after `took` of tokio time: 503 first, then 422.
struct Timed {
    took: [Duration; 2],
    calls: AtomicUsize,
}

#[async_trait]
impl Sink for Timed {
    async fn deliver(&self, _record: &Record) -> Outcome {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.took[n.min(1)]).await;
        if n == 0 {
            Outcome::transient("HTTP 503", None)
        } else {
            Outcome::rejected("HTTP 422: title is empty")
        }
    }
}

/// Through the runner, on the paused clock: a delivery that took 1.5 s and answered 503, then
/// one that took 0.25 s and answered 422: both attempts on the record, at the times they
/// ended, with how long each took.
pub async fn runner_history_measures_each_attempt(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, _) = paused_setup(backend).await?;
    let sink = Timed {
        took: [Duration::from_millis(1_500), Duration::from_millis(250)],
        calls: AtomicUsize::new(0),
    };
    let mut rig = Rig::start(
        Arc::clone(&store),
        sink,
        clock,
        policy(Jitter::None, 5),
        config(8, 1),
    )
    .await?;
    let id = rig.outbox.enqueue(rec("timed")).await?;
    rig.until("the record rejected", |s| s.rejected == 1)
        .await?;
    let record = get(&*store, id).await?;
    let got: Vec<(AttemptClass, Option<u16>)> = record
        .history
        .attempts()
        .iter()
        .map(|a| (a.class, a.status))
        .collect();
    ensure_eq(
        got,
        vec![
            (AttemptClass::Later, Some(503)),
            (AttemptClass::Rejected, Some(422)),
        ],
        "both attempts in order",
    )?;
    // The paused clock's timers end on the millisecond after their deadline at most.
    let took: Vec<Option<u64>> = record
        .history
        .attempts()
        .iter()
        .map(|a| a.took_ms)
        .collect();
    ensure(
        matches!(took[..], [Some(a), Some(b)] if (1_500..=1_510).contains(&a) && (250..=260).contains(&b)),
        || format!("each attempt with how long the sink took (1,500 and 250 ms): {took:?}"),
    )?;
    let [first, second] = record.history.attempts() else {
        return Err(Failure::new("two attempts"));
    };
    ensure(
        second.at >= first.at + 1_000 + 250 && second.at <= clock.now(),
        || {
            format!(
                "the second attempt ended a backoff and its delivery after the first: {record:?}"
            )
        },
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}
