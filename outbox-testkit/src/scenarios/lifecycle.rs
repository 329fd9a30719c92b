//! A record's life: the budget rule, backoff, the ceiling, Retry-After, a person's retry and
//! discard.

use std::time::Duration;

use outbox_core::{
    machine, Ceiling, Change, Jitter, Outcome, Record, RecordId, RetryAfter, RetryPolicy, State,
};

use super::T0;
use super::{apply, claim, deadline, enqueue, exact_policy, fresh, get, ids, rec, rec_in, report};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};

/// Claims one record at `now`, failing unless it is `id`.
pub(super) async fn claim_one(
    store: &dyn outbox_core::Store,
    id: RecordId,
    now: u64,
    token: u64,
) -> Result<Record, Failure> {
    let claimed = claim(store, now, 1, token).await?;
    ensure_eq(ids(&claimed), vec![id], "the next due record")?;
    claimed
        .into_iter()
        .next()
        .ok_or_else(|| Failure::new(format!("record {id} is not due")))
}

/// The budget rule, both halves: a failure no server answered spends no budget however often it
/// happens (only `unanswered` grows, with the backoff growing to its cap); an answered failure
/// spends one attempt each time, and the ceiling parks the record.
pub async fn budget_rule_both_halves(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    // Off a whole second, so a store that keeps deadlines in seconds shows.
    let start = T0 + 123;
    let id = enqueue(store, start, vec![rec("r")]).await?[0];
    let mut now = start;
    // Backoff from 1 s doubling, capped at 60 s (no jitter).
    let expected_delays = [1, 2, 4, 8, 16, 32, 60, 60, 60];
    for (n, delay_s) in expected_delays.iter().enumerate() {
        let record = claim_one(store, id, now, n as u64 + 1).await?;
        report(store, &record, Outcome::no_answer("refused"), now).await?;
        let after = get(store, id).await?;
        ensure_eq(
            (
                after.state,
                after.attempts,
                after.unanswered,
                after.next_attempt_at,
            ),
            (
                State::Retrying,
                0,
                n as u32 + 1,
                Some(now + delay_s * 1_000),
            ),
            format!("after unanswered failure {}", n + 1),
        )?;
        now += delay_s * 1_000;
    }
    for attempt in 1..=3u32 {
        let record = claim_one(store, id, now, 100 + u64::from(attempt)).await?;
        report(store, &record, Outcome::transient("HTTP 503", None), now).await?;
        let after = get(store, id).await?;
        if attempt < 3 {
            let delay = 1_000u64 << (attempt - 1);
            ensure_eq(
                (after.state, after.attempts, after.next_attempt_at),
                (State::Retrying, attempt, Some(now + delay)),
                format!("after answered failure {attempt}"),
            )?;
            now += delay;
        } else {
            ensure_eq(
                (
                    after.state,
                    after.attempts,
                    after.unanswered,
                    after.next_attempt_at,
                ),
                (State::NeedsAttention, 3, 9, None),
                "the third answered failure reaches the ceiling",
            )?;
        }
    }
    Ok(Verdict::Passed)
}

/// Backoff with full jitter: every persisted deadline lies inside its window `[now, now +
/// min(initial * 2^(n-1), cap)]`, and is exactly the one the policy computed.
pub async fn backoff_jitter_window(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let policy = exact_policy()
        .with_jitter(Jitter::Full)
        .with_max_attempts(20);
    let id = enqueue(store, T0, vec![rec("r")]).await?[0];
    let mut rng = fastrand::Rng::with_seed(42);
    let mut now = T0;
    for n in 1..=10u32 {
        let record = claim_one(store, id, now, u64::from(n)).await?;
        let step = machine::on_outcome(
            &record,
            &Outcome::transient("HTTP 500", None),
            &policy,
            now,
            &mut rng,
        );
        let Change::Update(progress) = &step.transition.change else {
            return Err(Failure::new("a transient failure must reschedule"));
        };
        apply(store, vec![step.transition.clone()]).await?;
        let window = (1_000u64 << (n - 1)).min(60_000);
        let at = get(store, id).await?.next_attempt_at;
        ensure_eq(at, progress.next_attempt_at, "the persisted deadline")?;
        let at = at.unwrap_or(0);
        ensure(at >= now && at <= now + window, || {
            format!(
                "failure {n}: deadline {at} outside [{now}, {}]",
                now + window
            )
        })?;
        now = at;
    }
    Ok(Verdict::Passed)
}

/// Reports `outcome` under `policy` (instead of the exact policy).
async fn report_with(
    store: &dyn outbox_core::Store,
    record: &Record,
    outcome: Outcome,
    policy: &RetryPolicy,
    now: u64,
) -> Result<(), Failure> {
    let mut rng = fastrand::Rng::with_seed(0);
    let step = machine::on_outcome(record, &outcome, policy, now, &mut rng);
    apply(store, vec![step.transition]).await
}

/// The ceiling: at `max_attempts` answered failures a record needs attention (no deadline, not
/// claimable, the reason kept), or with the discard ceiling leaves a tombstone.
pub async fn ceiling_parks_record(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(store, T0, vec![rec("park"), rec("drop")]).await?;
    let discard = exact_policy().with_ceiling(Ceiling::Discard);
    let mut now = T0;
    for round in 0..3u64 {
        let claimed = claim(store, now, 10, round + 1).await?;
        ensure_eq(ids(&claimed), r.clone(), format!("round {round}: both due"))?;
        report(
            store,
            &claimed[0],
            Outcome::transient("HTTP 503", None),
            now,
        )
        .await?;
        report_with(
            store,
            &claimed[1],
            Outcome::transient("HTTP 503", None),
            &discard,
            now,
        )
        .await?;
        now += 10_000;
    }
    let parked = get(store, r[0]).await?;
    ensure_eq(
        (parked.state, parked.attempts, parked.next_attempt_at),
        (State::NeedsAttention, 3, None),
        "parked at the ceiling",
    )?;
    ensure(
        parked
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("3 attempts") && e.contains("HTTP 503")),
        || {
            format!(
                "the reason names the attempts and the last error: {:?}",
                parked.last_error
            )
        },
    )?;
    ensure_eq(
        store.get(r[1]).await?,
        None,
        "the discard ceiling removes the record",
    )?;
    let tombstones = super::all_tombstones(store).await?;
    ensure_eq(
        tombstones
            .iter()
            .map(|t| {
                (
                    t.id,
                    t.key.as_str(),
                    t.reason.contains("3 attempts"),
                    t.attempts,
                )
            })
            .collect::<Vec<_>>(),
        vec![(r[1], "key-drop", true, 3)],
        "the discard ceiling leaves a tombstone with the reason and every attempt spent",
    )?;
    ensure_eq(
        ids(&claim(store, now + 10_000_000, 10, 9).await?),
        vec![],
        "a parked record is never due",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.needs_attention, stats.discarded, stats.next_due),
        (1, 1, None),
        "stats after the ceiling",
    )?;
    Ok(Verdict::Passed)
}

/// Retry-After: the server's delay (seconds or a date) sets the deadline over the local
/// schedule, spread by up to half of itself, and the record is not due a millisecond before
/// it.
pub async fn retry_after_honoured(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    // Reports off whole seconds, so a store that keeps deadlines in seconds shows.
    let at = T0 + 250;
    let id = enqueue(store, T0, vec![rec("r")]).await?[0];
    let record = claim_one(store, id, at, 1).await?;
    let seconds = Some(RetryAfter::Delay(Duration::from_secs(30)));
    let step = report(store, &record, Outcome::transient("HTTP 429", seconds), at).await?;
    // Every Retry-After is spread by up to half of itself, so a crowd told "30 s" in one
    // second does not come back in one second.
    let first = deadline(&step);
    ensure_eq(
        get(store, id).await?.next_attempt_at,
        Some(first),
        "the deadline kept to the millisecond",
    )?;
    ensure((at + 30_000..=at + 45_000).contains(&first), || {
        format!(
            "Retry-After: 30: expected a deadline 30–45 s out, got {} ms",
            first as i64 - at as i64
        )
    })?;
    ensure_eq(
        claim(store, first - 1, 10, 2).await?.len(),
        0,
        "not due before Retry-After",
    )?;
    let now = first;
    let record = claim_one(store, id, now, 3).await?;
    // A date too: a fleet told one instant does not return in it.
    let date = Some(RetryAfter::At(now + 45_000));
    report(store, &record, Outcome::transient("HTTP 503", date), now).await?;
    let after = get(store, id).await?;
    let at = after.next_attempt_at.unwrap_or(0);
    ensure(
        after.attempts == 2 && (now + 45_000..=now + 67_500).contains(&at),
        || {
            format!("Retry-After as a date: expected 2 attempts and a deadline 45–67.5 s out, got {} and {:?}", after.attempts, after.next_attempt_at.map(|t| t as i64 - now as i64))
        },
    )?;
    ensure_eq(
        claim(store, at - 1, 10, 4).await?.len(),
        0,
        "not due before the date",
    )?;
    claim_one(store, id, at, 5).await?;
    Ok(Verdict::Passed)
}

/// A person's retry: a parked record gets a fresh budget (attempts, unanswered and
/// interruptions back to zero), is due at once, and parks again only after a full budget.
pub async fn manual_retry_resets_budget(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let id = enqueue(store, T0, vec![rec("r")]).await?[0];
    let mut now = T0;
    let mut token = 0;
    ensure_eq(
        fail_until_parked(store, id, &mut now, &mut token).await?,
        3,
        "first budget",
    )?;
    let parked = get(store, id).await?;
    let step = machine::retry_now(&parked, now).ok_or_else(|| Failure::new("retry_now refused"))?;
    apply(store, vec![step.transition]).await?;
    let retried = get(store, id).await?;
    ensure_eq(
        (
            retried.state,
            retried.attempts,
            retried.unanswered,
            retried.interrupted,
            retried.next_attempt_at,
        ),
        (State::Retrying, 0, 0, 0, Some(now)),
        "a fresh budget, due now",
    )?;
    ensure_eq(
        retried.last_error,
        parked.last_error,
        "the last error stays for the person",
    )?;
    ensure_eq(
        fail_until_parked(store, id, &mut now, &mut token).await?,
        3,
        "a full second budget",
    )?;
    Ok(Verdict::Passed)
}

/// Fails the record (one unanswered, one answered failure per round) until it parks; returns
/// the answered failures it took.
async fn fail_until_parked(
    store: &dyn outbox_core::Store,
    id: RecordId,
    now: &mut u64,
    token: &mut u64,
) -> Result<u32, Failure> {
    let mut failures = 0;
    loop {
        *token += 1;
        let record = claim_one(store, id, *now, *token).await?;
        report(store, &record, Outcome::no_answer("refused"), *now).await?;
        *now += 60_000;
        *token += 1;
        let record = claim_one(store, id, *now, *token).await?;
        report(store, &record, Outcome::transient("HTTP 500", None), *now).await?;
        failures += 1;
        *now += 60_000;
        if get(store, id).await?.state == State::NeedsAttention {
            return Ok(failures);
        }
        if failures > 10 {
            return Err(Failure::new("the record never reached the ceiling"));
        }
    }
}

/// Poison at the head does not block: a record that always fails sits first in line, yet the
/// three behind it are delivered one claim at a time while it backs off, and it ends parked:
/// `3 processed · 1 parked · 0 blocked`.
pub async fn poison_at_head_does_not_block(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    enqueue(store, T0, vec![rec("poison"), rec("a"), rec("b"), rec("c")]).await?;
    let mut now = T0;
    let mut order = Vec::new();
    for token in 1..=20u64 {
        let Some(record) = claim(store, now, 1, token).await?.into_iter().next() else {
            match store.next_due().await? {
                Some(at) => {
                    now = at;
                    continue;
                }
                None => break,
            }
        };
        let name = String::from_utf8_lossy(&record.payload).into_owned();
        let outcome = if name == "poison" {
            Outcome::transient("HTTP 500", None)
        } else {
            Outcome::Delivered
        };
        report(store, &record, outcome, now).await?;
        order.push(name);
    }
    ensure_eq(
        order.iter().map(String::as_str).collect::<Vec<_>>(),
        vec!["poison", "a", "b", "c", "poison", "poison"],
        "the others go while the poison backs off",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (
            stats.delivered,
            stats.needs_attention,
            stats.pending + stats.retrying,
            stats.held,
        ),
        (3, 1, 0, 0),
        "3 processed · 1 parked · 0 blocked",
    )?;
    Ok(Verdict::Passed)
}

/// Discard: the record leaves the queue and a tombstone (id, group, key, reason, time,
/// attempts) stays, listable until pruned; its group moves on. Prune removes tombstones and
/// rejected records older than the cut, and nothing newer.
pub async fn discard_leaves_tombstone(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(
        store,
        T0,
        vec![rec_in("a", "g"), rec_in("b", "g"), rec("c")],
    )
    .await?;
    let claimed = claim(store, T0, 10, 1).await?;
    ensure_eq(ids(&claimed), vec![r[0], r[2]], "heads")?;
    report(store, &claimed[0], Outcome::transient("HTTP 503", None), T0).await?;
    report(store, &claimed[1], Outcome::rejected("HTTP 422"), T0 + 1).await?;

    let in_flight = claim(store, T0 + 1_000, 10, 2).await?;
    ensure_eq(ids(&in_flight), vec![r[0]], "a is due again")?;
    ensure(
        machine::discard(&in_flight[0], "user", T0 + 1_500).is_none(),
        || "discarding an in-flight record must be refused".into(),
    )?;
    report(
        store,
        &in_flight[0],
        Outcome::no_answer("refused"),
        T0 + 1_500,
    )
    .await?;
    let a = get(store, r[0]).await?;
    let step = machine::discard(&a, "discarded by user", T0 + 2_000)
        .ok_or_else(|| Failure::new("discard refused an idle record"))?;
    apply(store, vec![step.transition]).await?;

    ensure_eq(
        store.get(r[0]).await?,
        None,
        "a discarded record leaves the queue",
    )?;
    let tombstones = super::all_tombstones(store).await?;
    ensure_eq(
        tombstones,
        vec![outbox_core::Tombstone {
            id: r[0],
            group: Some("g".into()),
            key: "key-a".into(),
            reason: "discarded by user".into(),
            discarded_at: T0 + 2_000,
            attempts: 1,
        }],
        "the tombstone",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + 2_000, 10, 3).await?),
        vec![r[1]],
        "b moves up",
    )?;
    let stats = store.stats().await?;
    ensure_eq((stats.discarded, stats.rejected), (1, 1), "counts")?;

    ensure_eq(store.prune(T0 + 1).await?, 0, "nothing is older than T0+1")?;
    ensure_eq(
        store.prune(T0 + 2).await?,
        1,
        "the rejected record (last attempt T0+1) goes",
    )?;
    ensure_eq(store.get(r[2]).await?, None, "pruned rejected record")?;
    ensure_eq(
        store.prune(T0 + 2_000).await?,
        0,
        "the tombstone at T0+2000 stays",
    )?;
    ensure_eq(store.prune(T0 + 2_001).await?, 1, "then goes")?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.discarded, stats.rejected, stats.in_flight),
        (0, 0, 1),
        "after prune",
    )?;
    Ok(Verdict::Passed)
}
