//! Leases: expiry and recovery, renewal, and the guards that keep a stale report from
//! overwriting newer state.

use outbox_core::{machine, Change, Guard, Lease, Outcome, RecordId, State, Transition};

use super::lifecycle::claim_one;
use super::{apply, claim, enqueue, exact_policy, fresh, get, ids, rec};
use super::{LEASE_MS, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};

/// Lease expiry: `expired` lists in-flight records once their lease ran out, earliest first;
/// recovery counts `interrupted += 1` and makes the record due at once; a stale report from the
/// old lease is skipped; `max_interruptions` in a row park it (the crash-loop guard).
pub async fn lease_expiry_recovers(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(store, T0, vec![rec("x"), rec("y")]).await?;
    claim_one(store, r[0], T0, 1)
        .await
        .map_err(|f| f.context("claim x"))?;
    let y = claim(store, T0 + 5, 10, 2).await?;
    ensure_eq(ids(&y), vec![r[1]], "claim y")?;
    ensure_eq(
        store.expired(T0 + LEASE_MS - 1, 10).await?.len(),
        0,
        "no lease expired yet",
    )?;
    ensure_eq(
        ids(&store.expired(T0 + LEASE_MS, 10).await?),
        vec![r[0]],
        "x's lease expired",
    )?;
    ensure_eq(
        ids(&store.expired(T0 + 40_000, 1).await?),
        vec![r[0]],
        "earliest expiry first, limit 1",
    )?;
    let expired = store.expired(T0 + 40_000, 10).await?;
    ensure_eq(ids(&expired), r.clone(), "both expired")?;
    ensure(
        expired[0].lease
            == Some(Lease {
                token: 1,
                until: T0 + LEASE_MS,
            }),
        || format!("an expired record keeps its lease: {:?}", expired[0]),
    )?;

    let policy = exact_policy();
    let mut record = expired[0].clone();
    let mut now = T0 + 40_000;
    for round in 1..=3u32 {
        let step = machine::on_interrupted(&record, &policy, now);
        apply(store, vec![step.transition]).await?;
        let after = get(store, r[0]).await?;
        if round < 3 {
            ensure_eq(
                (
                    after.state,
                    after.interrupted,
                    after.attempts,
                    after.next_attempt_at,
                    after.lease,
                ),
                (State::Retrying, round, 0, Some(now), None),
                format!("recovery {round}: interrupted += 1 and due now"),
            )?;
            let stale = Transition {
                id: r[0],
                guard: Guard::Lease(record.lease.map_or(0, |l| l.token)),
                change: Change::Delivered,
            };
            let applied = store.apply(vec![stale]).await?;
            ensure_eq(
                applied.skipped,
                vec![r[0]],
                "a report under the expired lease is skipped",
            )?;
            record = claim(store, now, 1, 10 + u64::from(round))
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| Failure::new("recovered record is due"))?;
            ensure_eq(record.id, r[0], "the recovered record is claimed again")?;
            now += LEASE_MS;
            ensure_eq(
                ids(&store.expired(now, 1).await?),
                vec![r[1]],
                "y expired first",
            )?;
        } else {
            ensure_eq(
                (after.state, after.interrupted, after.next_attempt_at),
                (State::NeedsAttention, 3, None),
                "three interruptions in a row park the record",
            )?;
        }
    }
    Ok(Verdict::Passed)
}

/// Renewal: `renew` moves the lease of records still held under the token, and leaves other
/// records alone.
pub async fn renew_extends_lease(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(store, T0, vec![rec("held"), rec("idle")]).await?;
    claim_one(store, r[0], T0, 1).await?;
    let extended = Lease {
        token: 1,
        until: T0 + 90_000,
    };
    store.renew(&[r[0], r[1]], extended).await?;
    ensure_eq(
        get(store, r[0]).await?.lease,
        Some(extended),
        "the lease moved",
    )?;
    let idle = get(store, r[1]).await?;
    ensure_eq(
        (idle.state, idle.lease),
        (State::Pending, None),
        "an idle record is untouched",
    )?;
    ensure_eq(
        store.expired(T0 + 60_000, 10).await?.len(),
        0,
        "not expired at the old expiry",
    )?;
    store
        .renew(
            &[r[0]],
            Lease {
                token: 2,
                until: T0 + 500_000,
            },
        )
        .await?;
    ensure_eq(
        get(store, r[0]).await?.lease,
        Some(extended),
        "another token cannot renew",
    )?;
    ensure_eq(
        ids(&store.expired(T0 + 90_000, 10).await?),
        vec![r[0]],
        "expires at the new time",
    )?;
    Ok(Verdict::Passed)
}

/// Guards: a transition applies only where its guard holds; the others are reported skipped
/// and change nothing, while the rest of the batch applies.
pub async fn guards_skip_stale(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(store, T0, vec![rec("a"), rec("b")]).await?;
    let a = claim_one(store, r[0], T0, 7).await?;
    let before = get(store, r[0]).await?;
    let wrong_token = Transition {
        id: r[0],
        guard: Guard::Lease(8),
        change: Change::Delivered,
    };
    let idle_on_flight = Transition {
        id: r[0],
        guard: Guard::Idle,
        change: Change::Discard {
            reason: "x".into(),
            at: T0,
            attempts: 0,
        },
    };
    let lease_on_idle = Transition {
        id: r[1],
        guard: Guard::Lease(7),
        change: Change::Delivered,
    };
    let missing = Transition {
        id: RecordId(r[1].0 + 1_000),
        guard: Guard::Idle,
        change: Change::Delivered,
    };
    let applied = store
        .apply(vec![
            wrong_token,
            idle_on_flight,
            lease_on_idle,
            missing.clone(),
        ])
        .await?;
    ensure_eq(
        applied.skipped,
        vec![r[0], r[0], r[1], missing.id],
        "every transition whose guard fails is skipped",
    )?;
    ensure_eq(
        get(store, r[0]).await?,
        before,
        "a skipped transition changes nothing",
    )?;
    ensure_eq(get(store, r[1]).await?.state, State::Pending, "b untouched")?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.delivered, stats.discarded),
        (0, 0),
        "nothing delivered or discarded",
    )?;

    let good = machine::on_outcome(
        &a,
        &Outcome::Delivered,
        &exact_policy(),
        T0 + 1,
        &mut fastrand::Rng::with_seed(0),
    );
    let applied = store.apply(vec![good.transition, missing.clone()]).await?;
    ensure_eq(
        applied.skipped,
        vec![missing.id],
        "only the bad one is skipped",
    )?;
    ensure_eq(store.get(r[0]).await?, None, "the good one applied")?;
    ensure_eq(store.stats().await?.delivered, 1, "delivered counted")?;
    Ok(Verdict::Passed)
}
