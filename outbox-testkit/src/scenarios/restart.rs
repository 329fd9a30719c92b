//! Restarts of persistent stores: everything a record carries survives dropping the store and
//! opening it again.

use std::sync::Arc;

use outbox_core::{machine, Outcome, State, Store};

use super::{all_records, all_tombstones, apply, claim, enqueue, fresh, get, ids, rec, rec_in};
use super::{report, T0};
use crate::backend::Backend;
use crate::harness::Verdict;
use crate::harness::{ensure, ensure_eq, skip_unless, Capability, Failure, ScenarioResult};

/// Drops `store` and opens `location` again.
pub(super) async fn reopen(
    backend: &dyn Backend,
    location: &str,
    store: Arc<dyn Store>,
) -> Result<Arc<dyn Store>, Failure> {
    drop(store);
    backend
        .open(location)
        .await
        .map_err(|e| Failure::from(e).context("reopen"))
}

/// The ceiling survives a restart: a parked record is still needs-attention after reopening,
/// with its attempts and reason, and still never due.
pub async fn ceiling_survives_reopen(backend: &dyn Backend) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "ceiling_survives_reopen", Capability::Persistent) {
        return Ok(skip);
    }
    let (location, store) = fresh(backend).await?;
    let id = enqueue(&*store, T0, vec![rec_in("p", "g"), rec_in("q", "g")]).await?[0];
    let mut now = T0;
    for token in 1..=3 {
        let claimed = claim(&*store, now, 10, token).await?;
        ensure_eq(ids(&claimed), vec![id], "p alone")?;
        report(
            &*store,
            &claimed[0],
            Outcome::transient("HTTP 503", None),
            now,
        )
        .await?;
        now += 60_000;
    }
    let parked = get(&*store, id).await?;
    ensure_eq(
        parked.state,
        State::NeedsAttention,
        "parked before the restart",
    )?;
    let store = reopen(backend, &location, store).await?;
    ensure_eq(
        get(&*store, id).await?,
        parked,
        "the parked record after the restart",
    )?;
    ensure_eq(
        claim(&*store, now + 86_400_000, 10, 9).await?.len(),
        0,
        "still never due",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.needs_attention, stats.held, stats.next_due),
        (1, 1, None),
        "stats after restart",
    )?;
    Ok(Verdict::Passed)
}

/// A restart preserves every record exactly (state, attempts, unanswered, interrupted,
/// deadlines, last error, payload, key, group), the tombstones, the delivered counter, and the
/// id sequence; in-flight records keep their lease or are recoverable at once.
pub async fn restart_preserves_records(backend: &dyn Backend) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "restart_preserves_records", Capability::Persistent) {
        return Ok(skip);
    }
    let (location, store) = fresh(backend).await?;
    let s = &*store;
    let r = enqueue(
        s,
        T0,
        vec![
            rec("delivered"),
            rec_in("retrying", "g"),
            rec_in("behind", "g"),
            rec("rejected"),
            rec("discarded"),
            rec("in-flight"),
            rec("unanswered"),
        ],
    )
    .await?;
    let last = enqueue(s, T0 + 1_000, vec![rec("pending")]).await?[0];
    let claimed = claim(s, T0 + 10, 10, 1).await?;
    ensure_eq(
        ids(&claimed),
        vec![r[0], r[1], r[3], r[4], r[5], r[6]],
        "the heads due at T0+10",
    )?;
    report(s, &claimed[0], Outcome::Delivered, T0 + 10).await?;
    report(
        s,
        &claimed[1],
        Outcome::transient("HTTP 500", None),
        T0 + 10,
    )
    .await?;
    report(s, &claimed[2], Outcome::rejected("HTTP 410"), T0 + 10).await?;
    report(s, &claimed[3], Outcome::no_answer("reset"), T0 + 10).await?;
    report(s, &claimed[5], Outcome::no_answer("timeout"), T0 + 10).await?;
    let step = machine::discard(&get(s, r[4]).await?, "by user", T0 + 20)
        .ok_or_else(|| Failure::new("discard refused an idle record"))?;
    apply(s, vec![step.transition]).await?;
    // r[6] is recovered once (interrupted) and then left retrying with a far deadline.
    let again = claim(s, T0 + 2_000, 10, 2).await?;
    ensure(again.iter().any(|x| x.id == r[6]), || {
        "unanswered is due again".into()
    })?;
    for record in &again {
        if record.id == r[6] {
            let step = machine::on_interrupted(record, &super::exact_policy(), T0 + 40_000);
            apply(s, vec![step.transition]).await?;
        }
    }

    let records = all_records(s).await?;
    let tombstones = all_tombstones(s).await?;
    let stats = s.stats().await?;
    let store = reopen(backend, &location, store).await?;
    let s = &*store;
    let after = all_records(s).await?;
    ensure_eq(
        after.len(),
        records.len(),
        "as many records after the restart",
    )?;
    let now = T0 + 40_000;
    let recoverable = ids(&s.expired(now + super::LEASE_MS, 100).await?);
    for (before, after) in records.iter().zip(&after) {
        if before.state == State::InFlight && before != after {
            // A store that only one process opens may expire leases at open: the record must
            // still be in flight with everything else intact, and recoverable at once.
            ensure_eq(
                (after.state, after.progress(), &after.payload, &after.key),
                (
                    State::InFlight,
                    before.progress(),
                    &before.payload,
                    &before.key,
                ),
                format!("in-flight record {} after the restart", before.id),
            )?;
            ensure(recoverable.contains(&after.id), || {
                format!(
                    "in-flight record {} must keep its lease or be recoverable",
                    after.id
                )
            })?;
        } else {
            ensure_eq(after, before, "a record after the restart")?;
        }
    }
    ensure_eq(
        all_tombstones(s).await?,
        tombstones,
        "tombstones after the restart",
    )?;
    let stats_after = s.stats().await?;
    ensure_eq(
        (
            stats_after.delivered,
            stats_after.discarded,
            stats_after.next_due,
        ),
        (stats.delivered, stats.discarded, stats.next_due),
        "counters after the restart",
    )?;
    let next = enqueue(s, now, vec![rec("new")]).await?[0];
    ensure(next > last, || {
        format!("id {next} after the restart must exceed every earlier id (last was {last})")
    })?;
    Ok(Verdict::Passed)
}
