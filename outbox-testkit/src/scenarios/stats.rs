//! Stats: every count, the held count, the oldest undelivered record and the next deadline,
//! exact.

use outbox_core::{machine, Outcome, State, Stats};

use super::{apply, claim, enqueue, fresh, get, ids, rec, rec_in, report, T0};
use crate::backend::Backend;
use crate::harness::{ensure_eq, Failure, ScenarioResult, Verdict};

/// Stats exact: after a known mix of states, [`Stats`] equals the values worked out by hand,
/// field by field, and follows each change.
pub async fn stats_exact(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    ensure_eq(store.stats().await?, Stats::default(), "an empty store")?;

    let rj = enqueue(store, T0 - 500, vec![rec("rj")]).await?[0];
    let n1 = enqueue(store, T0, vec![rec_in("n1", "n")]).await?[0];
    let n23 = enqueue(store, T0 + 10, vec![rec_in("n2", "n"), rec_in("n3", "n")]).await?;
    let first = claim(store, T0, 2, 1).await?;
    ensure_eq(ids(&first), vec![rj, n1], "rj then n1")?;
    report(store, &first[0], Outcome::rejected("HTTP 422"), T0).await?;
    report(store, &first[1], Outcome::transient("HTTP 503", None), T0).await?;
    for (token, now) in [(2, T0 + 1_000), (3, T0 + 3_000)] {
        let again = claim(store, now, 1, token).await?;
        ensure_eq(ids(&again), vec![n1], "n1 alone")?;
        report(store, &again[0], Outcome::transient("HTTP 503", None), now).await?;
    }
    ensure_eq(
        get(store, n1).await?.state,
        State::NeedsAttention,
        "n1 parked",
    )?;

    let names = ["rt", "fl", "ds", "dv1", "dv2"];
    let mut mid = Vec::new();
    for (i, name) in names.iter().enumerate() {
        mid.push(enqueue(store, T0 + 5_000 + 10 * i as u64, vec![rec(name)]).await?[0]);
    }
    let pn = enqueue(store, T0 + 9_000, vec![rec("pn")]).await?[0];
    let claimed = claim(store, T0 + 6_000, 10, 4).await?;
    ensure_eq(
        ids(&claimed),
        mid.clone(),
        "the five due ones; pn not yet due, n2 and n3 held",
    )?;
    let (rt, fl, ds) = (mid[0], mid[1], mid[2]);
    report(
        store,
        &claimed[0],
        Outcome::no_answer("refused"),
        T0 + 6_000,
    )
    .await?;
    report(
        store,
        &claimed[2],
        Outcome::no_answer("refused"),
        T0 + 6_000,
    )
    .await?;
    report(store, &claimed[3], Outcome::Delivered, T0 + 6_000).await?;
    report(store, &claimed[4], Outcome::Delivered, T0 + 6_000).await?;
    let ds_rec = get(store, ds).await?;
    let discard = machine::discard(&ds_rec, "user", T0 + 6_500)
        .ok_or_else(|| Failure::new("discard refused an idle record"))?;
    apply(store, vec![discard.transition]).await?;

    let expected = Stats {
        pending: 3,
        retrying: 1,
        in_flight: 1,
        needs_attention: 1,
        rejected: 1,
        discarded: 1,
        delivered: 2,
        superseded: 0,
        held: 2,
        scheduled: 0,
        // rj, n1, n2, n3, rt, fl and pn, two bytes each (the rejected rj included).
        payload_bytes: 14,
        oldest_created_at: Some(T0),
        next_due: Some(T0 + 7_000),
        halt: None,
        link: None,
    };
    ensure_eq(store.stats().await?, expected.clone(), "stats of the mix")?;
    ensure_eq(
        store.stats().await?.oldest_age(T0 + 60_000),
        Some(std::time::Duration::from_secs(60)),
        "oldest pending age",
    )?;

    // Release fl unattempted: pending again, keeping its deadline, which is now the earliest.
    let fl_rec = get(store, fl).await?;
    apply(store, vec![machine::release(&fl_rec)]).await?;
    let expected = Stats {
        pending: 4,
        in_flight: 0,
        next_due: Some(T0 + 5_010),
        ..expected
    };
    ensure_eq(store.stats().await?, expected.clone(), "after releasing fl")?;

    // A person retries n1; the claim then goes by (deadline, id), not by id.
    let n1_rec = get(store, n1).await?;
    let retry = machine::retry_now(&n1_rec, T0 + 10_000)
        .ok_or_else(|| Failure::new("retry_now refused a needs-attention record"))?;
    apply(store, vec![retry.transition]).await?;
    let expected = Stats {
        retrying: 2,
        needs_attention: 0,
        held: 0,
        ..expected
    };
    ensure_eq(store.stats().await?, expected.clone(), "after retrying n1")?;
    let order = claim(store, T0 + 10_000, 10, 5).await?;
    ensure_eq(
        ids(&order),
        vec![fl, rt, pn, n1],
        "claim order is (deadline, id)",
    )?;
    for record in &order {
        report(store, record, Outcome::Delivered, T0 + 10_001).await?;
    }
    let expected = Stats {
        pending: 2,
        retrying: 0,
        delivered: 6,
        payload_bytes: 6,
        oldest_created_at: Some(T0 + 10),
        next_due: Some(T0 + 10),
        ..expected
    };
    ensure_eq(
        store.stats().await?,
        expected,
        "after delivering four: the oldest is n2 (the rejected rj does not count)",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + 10_001, 10, 6).await?),
        vec![n23[0]],
        "n2 is the head of n",
    )?;
    Ok(Verdict::Passed)
}
