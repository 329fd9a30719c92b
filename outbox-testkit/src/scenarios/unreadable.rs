//! A row the backend cannot decode among records it can: a visible record, not an outage.

use outbox_core::{machine, Change, Guard, Outcome, RecordId, Stats, Transition, Unreadable};

use super::{all_records, all_tombstones, claim, enqueue, fresh, get, ids, rec, report, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, skip_unless, Capability, ScenarioResult, Verdict};

/// One planted unreadable row among 100 records: claims take the 99 others (the bad row is
/// set aside, `next_due` stops reporting it), they are delivered, stats count exactly them,
/// `list` passes the bad row by, `unreadable` lists it with a reason, `unreadable_row` names
/// it by id (and no readable or missing id), and `discard_unreadable` removes it, leaving a
/// tombstone.
pub async fn unreadable_row_passed_by(backend: &dyn Backend) -> ScenarioResult {
    if let Some(skip) = skip_unless(
        backend,
        "unreadable_row_passed_by",
        Capability::UnreadableRows,
    ) {
        return Ok(skip);
    }
    let (location, store) = fresh(backend).await?;
    let names: Vec<String> = (0..100).map(|i| format!("r{i}")).collect();
    let r = enqueue(&*store, T0, names.iter().map(|n| rec(n)).collect()).await?;
    let bad = r[41];
    drop(store);
    let reason = backend.plant_unreadable(&location, bad).await?;
    let store = backend.open(&location).await?;
    let store = &*store;

    ensure_eq(
        store.unreadable(10).await?,
        vec![Unreadable::new(bad, reason.clone())],
        "the planted row is listed as unreadable, with its reason",
    )?;
    ensure_eq(all_records(store).await?.len(), 99, "list passes it by")?;
    ensure_eq(
        store.unreadable_row(bad).await?,
        Some(Unreadable::new(bad, reason.clone())),
        "unreadable_row names the planted row, with its reason",
    )?;
    ensure_eq(
        store.unreadable_row(r[0]).await?,
        None,
        "unreadable_row passes a readable record by",
    )?;
    ensure_eq(
        store.unreadable_row(RecordId(u64::MAX)).await?,
        None,
        "unreadable_row finds nothing where no row is",
    )?;

    let mut delivered = Vec::new();
    let mut token = 1;
    loop {
        let claimed = claim(store, T0, 30, token).await?;
        token += 1;
        if claimed.is_empty() {
            break;
        }
        ensure(token < 10, || "claims never run dry".into())?;
        for record in &claimed {
            report(store, record, Outcome::Delivered, T0 + 1).await?;
        }
        delivered.extend(ids(&claimed));
    }
    let mut expected: Vec<RecordId> = r.iter().copied().filter(|id| *id != bad).collect();
    expected.sort();
    delivered.sort();
    ensure_eq(delivered, expected, "the 99 others are delivered")?;
    ensure_eq(store.next_due().await?, None, "next_due passes it by")?;
    ensure_eq(
        store.expired(u64::MAX / 2, 10).await?.len(),
        0,
        "no lease expires on a set-aside row",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        Stats {
            halt: None,
            link: None,
            ..stats.clone()
        },
        Stats {
            delivered: 99,
            ..Stats::default()
        },
        "stats count the others exactly",
    )?;

    ensure(store.discard_unreadable(bad, T0 + 5).await?, || {
        "discard_unreadable removes the row".into()
    })?;
    ensure_eq(
        store.unreadable(10).await?,
        vec![],
        "nothing unreadable left",
    )?;
    ensure_eq(store.unreadable_row(bad).await?, None, "nor that row")?;
    let tombstones = all_tombstones(store).await?;
    ensure_eq(
        tombstones
            .iter()
            .map(|t| (t.id, t.discarded_at))
            .collect::<Vec<_>>(),
        vec![(bad, T0 + 5)],
        "a tombstone stays",
    )?;
    ensure_eq(store.stats().await?.discarded, 1, "counted as discarded")?;
    ensure(!store.discard_unreadable(bad, T0 + 6).await?, || {
        "a second discard finds nothing".into()
    })?;
    ensure(!store.discard_unreadable(r[0], T0 + 6).await?, || {
        "a readable (delivered) id is not discarded as unreadable".into()
    })?;
    Ok(Verdict::Passed)
}

/// An unreadable row at the head of its group holds back that group only: records `g:a`,
/// `g:b`, `h:c`, an ungrouped `d` and `g:e`, with `g:a` planted unreadable. A claim sets `g:a`
/// aside and takes `h:c` and `d`; `g:b` and `g:e` wait behind it (no claim takes them,
/// `next_due` does not report them, stats show them pending), since a group's writes go in
/// order. The group's other records stay in reach meanwhile: a person discards `g:e`; a
/// record of the group rejected earlier, `g:x`, is not requeued while the head is in flight
/// (skipped, as behind any record in flight) and is pruned. Once `g:a` is discarded, `g:b` is
/// due and claimed.
pub async fn unreadable_head_holds_its_group(backend: &dyn Backend) -> ScenarioResult {
    if let Some(skip) = skip_unless(
        backend,
        "unreadable_head_holds_its_group",
        Capability::UnreadableRows,
    ) {
        return Ok(skip);
    }
    let (location, store) = fresh(backend).await?;
    let x = enqueue(&*store, T0, vec![rec("x").in_group("g")]).await?[0];
    let rejected = claim(&*store, T0, 10, 9).await?;
    ensure_eq(ids(&rejected), vec![x], "g:x is claimed first")?;
    report(&*store, &rejected[0], Outcome::rejected("no"), T0).await?;
    let r = enqueue(
        &*store,
        T0,
        vec![
            rec("a").in_group("g"),
            rec("b").in_group("g"),
            rec("c").in_group("h"),
            rec("d"),
            rec("e").in_group("g"),
        ],
    )
    .await?;
    drop(store);
    backend.plant_unreadable(&location, r[0]).await?;
    let store = backend.open(&location).await?;
    let store = &*store;

    let claimed = claim(store, T0, 10, 1).await?;
    let mut taken = ids(&claimed);
    taken.sort();
    ensure_eq(
        taken,
        vec![r[2], r[3]],
        "the other group and the ungrouped record are claimed, not the record behind the bad head",
    )?;
    for record in &claimed {
        report(store, record, Outcome::Delivered, T0 + 1).await?;
    }
    ensure_eq(
        ids(&claim(store, T0 + 2, 10, 2).await?),
        vec![],
        "the group waits behind its unreadable head",
    )?;
    ensure_eq(
        store.next_due().await?,
        None,
        "next_due does not report the held record",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.pending, stats.delivered),
        (2, 2),
        "the held records are pending",
    )?;
    let discard_e = Transition {
        id: r[4],
        guard: Guard::Idle,
        change: Change::Discard {
            reason: "by hand".into(),
            at: T0 + 3,
            attempts: 0,
        },
    };
    ensure_eq(
        store.apply(vec![discard_e]).await?.skipped,
        vec![],
        "a later record of the held group can be discarded",
    )?;
    ensure_eq(store.stats().await?.pending, 1, "and is gone")?;
    let requeue = machine::requeue(&get(store, x).await?, T0 + 3)
        .ok_or_else(|| crate::harness::Failure::new("a rejected record can be requeued"))?;
    ensure_eq(
        store.apply(vec![requeue]).await?.skipped,
        vec![x],
        "no requeue into a group whose head is in flight",
    )?;
    ensure_eq(
        store.prune(T0 + 1).await?,
        1,
        "the rejected record of the held group is pruned",
    )?;

    ensure(store.discard_unreadable(r[0], T0 + 3).await?, || {
        "discard_unreadable removes the head".into()
    })?;
    ensure_eq(
        store.next_due().await?,
        Some(T0),
        "the group's next record is due once its head is gone",
    )?;
    let claimed = claim(store, T0 + 4, 10, 3).await?;
    ensure_eq(ids(&claimed), vec![r[1]], "and is claimed")?;
    Ok(Verdict::Passed)
}
