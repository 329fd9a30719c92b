//! The queue itself: FIFO, deadlines, groups, the due query, paging, ids, exclusive claims.

use std::collections::BTreeSet;

use outbox_core::{Error, ListQuery, NewRecord, Outcome, RecordId, State};

use super::{
    all_records, all_tombstones, claim, deadline, enqueue, fresh, get, ids, rec, rec_in, report,
};
use super::{LEASE_MS, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, waiting_for, Failure, ScenarioResult, Verdict};

/// FIFO: ids increase in enqueue order and claims take never-tried records in id order, within
/// the claim's limit, each once while its lease holds.
pub async fn fifo(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let first = enqueue(store, T0, vec![rec("a"), rec("b"), rec("c")]).await?;
    let d = enqueue(store, T0 + 1, vec![rec("d")]).await?;
    let e = enqueue(store, T0 + 2, vec![rec_in("e", "g")]).await?;
    let all: Vec<RecordId> = first.iter().chain(&d).chain(&e).copied().collect();
    ensure(all.windows(2).all(|w| w[0] < w[1]), || {
        format!("ids must increase in enqueue order: {all:?}")
    })?;

    let batch = claim(store, T0 + 10, 2, 1).await?;
    ensure_eq(
        ids(&batch),
        all[..2].to_vec(),
        "first claim takes the two oldest",
    )?;
    let a = &batch[0];
    ensure_eq(
        (
            a.payload.as_slice(),
            a.key.as_str(),
            a.created_at,
            a.group.as_deref(),
        ),
        (b"a".as_slice(), "key-a", T0, None),
        "a claimed record keeps payload, key, enqueue time and group",
    )?;
    let rest = claim(store, T0 + 10, 10, 2).await?;
    ensure_eq(
        ids(&rest),
        all[2..].to_vec(),
        "second claim takes the rest in order",
    )?;
    ensure_eq(
        (rest[2].group.as_deref(), rest[2].attempts),
        (Some("g"), 0),
        "a claimed grouped record keeps its group and counters",
    )?;
    let again = claim(store, T0 + 20, 10, 3).await?;
    ensure_eq(
        ids(&again),
        vec![],
        "no record is claimed twice while its lease holds",
    )?;
    Ok(Verdict::Passed)
}

/// Deadlines: a record is claimable at its deadline and not a millisecond before, for pending
/// records (deadline = enqueue time) and rescheduled ones alike; `next_due` follows.
pub async fn deadlines_honoured(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let ids_ = enqueue(store, T0, vec![rec("slow"), rec("fast")]).await?;
    let claimed = claim(store, T0, 10, 1).await?;
    ensure_eq(
        ids(&claimed),
        ids_.clone(),
        "both due at their enqueue time",
    )?;
    // "slow": the server asks for 60 s; "fast": no answer, 1 s backoff (no jitter).
    let retry_after = outbox_core::RetryAfter::Delay(std::time::Duration::from_secs(60));
    let slow = report(
        store,
        &claimed[0],
        Outcome::transient("HTTP 503", Some(retry_after)),
        T0,
    )
    .await?;
    let slow = deadline(&slow);
    report(store, &claimed[1], Outcome::no_answer("refused"), T0).await?;
    ensure_eq(
        store.next_due().await?,
        Some(T0 + 1_000),
        "next_due after the reports",
    )?;
    // The server's 60 s, spread by up to half of it.
    ensure((T0 + 60_000..=T0 + 90_000).contains(&slow), || {
        format!(
            "slow's deadline 60–90 s out, got {} ms",
            slow as i64 - T0 as i64
        )
    })?;

    let later = enqueue(store, T0 + 5_000, vec![rec("later")]).await?;
    ensure_eq(
        ids(&claim(store, T0 + 999, 10, 2).await?),
        vec![],
        "nothing is due at T0+999",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + 1_000, 10, 3).await?),
        vec![ids_[1]],
        "fast is due at T0+1000",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + 4_999, 10, 4).await?),
        vec![],
        "a record enqueued at T0+5000 is not due before its enqueue time",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + 5_000, 10, 5).await?),
        later,
        "later is due at T0+5000",
    )?;
    ensure_eq(
        store.next_due().await?,
        Some(slow),
        "next_due is slow's deadline",
    )?;
    ensure_eq(
        ids(&claim(store, slow - 1, 10, 6).await?),
        vec![],
        "slow not due a millisecond before its deadline",
    )?;
    ensure_eq(
        ids(&claim(store, slow, 10, 7).await?),
        vec![ids_[0]],
        "slow due at its deadline",
    )?;
    ensure_eq(store.next_due().await?, None, "nothing left to be due")?;

    // Boundaries off whole seconds: a store comparing deadlines in seconds claims these early.
    let odd = enqueue(store, T0 + 91_234, vec![rec("odd")]).await?;
    ensure_eq(
        store.next_due().await?,
        Some(T0 + 91_234),
        "next_due off a whole second",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + 91_233, 10, 8).await?),
        vec![],
        "odd not due at T0+91233",
    )?;
    let odd_claim = claim(store, T0 + 91_234, 10, 9).await?;
    ensure_eq(ids(&odd_claim), odd.clone(), "odd due at T0+91234")?;
    let retry_after = outbox_core::RetryAfter::Delay(std::time::Duration::from_millis(2_250));
    let again = report(
        store,
        &odd_claim[0],
        Outcome::transient("HTTP 503", Some(retry_after)),
        T0 + 91_500,
    )
    .await?;
    let again = deadline(&again);
    ensure((T0 + 93_750..=T0 + 94_875).contains(&again), || {
        format!(
            "2.25 s spread by up to half after the report at T0+91500, got {} ms",
            again as i64 - T0 as i64 - 91_500
        )
    })?;
    ensure_eq(
        ids(&claim(store, again - 1, 10, 10).await?),
        vec![],
        "odd not due a millisecond before its deadline",
    )?;
    ensure_eq(
        ids(&claim(store, again, 10, 11).await?),
        odd,
        "odd due again at its deadline",
    )?;
    Ok(Verdict::Passed)
}

/// Groups: only a group's head is claimable, so records of a group go one at a time in id
/// order while groups proceed in parallel; a needs-attention head holds back its own group only
/// (counted as held), a rejected record lets its group move on.
pub async fn groups_in_order_held_back(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(
        store,
        T0,
        vec![
            rec_in("a1", "A"),
            rec_in("b1", "B"),
            rec_in("a2", "A"),
            rec("u"),
            rec_in("b2", "B"),
            rec_in("a3", "A"),
        ],
    )
    .await?;
    let (a1, b1, a2, u, b2, a3) = (r[0], r[1], r[2], r[3], r[4], r[5]);
    let heads = claim(store, T0, 10, 1).await?;
    ensure_eq(
        ids(&heads),
        vec![a1, b1, u],
        "one claim takes the head of each group, in parallel",
    )?;
    ensure_eq(
        ids(&claim(store, T0, 10, 2).await?),
        vec![],
        "no second record of a group while one is in flight",
    )?;

    report(store, &heads[0], Outcome::Delivered, T0 + 1).await?;
    let next = claim(store, T0 + 1, 10, 3).await?;
    ensure_eq(
        ids(&next),
        vec![a2],
        "after a1 is delivered, a2 is the head of A",
    )?;

    // b1 spends its whole budget (3 answered failures) and parks: B is held back.
    let mut b1_rec = heads[1].clone();
    for round in 0..3u64 {
        let now = T0 + 100_000 * (round + 1);
        if round > 0 {
            let again = claim(store, now, 10, 10 + round).await?;
            ensure_eq(
                ids(&again),
                vec![b1],
                "b1 comes back alone after its backoff",
            )?;
            b1_rec = again[0].clone();
        }
        report(store, &b1_rec, Outcome::transient("HTTP 503", None), now).await?;
    }
    ensure_eq(
        get(store, b1).await?.state,
        State::NeedsAttention,
        "b1 parked at the ceiling",
    )?;
    let stats = store.stats().await?;
    ensure_eq(stats.held, 1, "b2 is counted as held behind b1")?;

    // a2 is rejected: a final verdict no longer holds its group, so a3 moves up.
    report(store, &next[0], Outcome::rejected("HTTP 422"), T0 + 400_000).await?;
    let after = claim(store, T0 + 400_001, 10, 20).await?;
    ensure_eq(
        ids(&after),
        vec![a3],
        "a3 follows a rejected a2; b2 stays held behind b1",
    )?;
    ensure_eq(
        get(store, b2).await?.state,
        State::Pending,
        "b2 is untouched while held",
    )?;

    // A person retries b1: B moves again, in order.
    let b1_now = get(store, b1).await?;
    let step = outbox_core::machine::retry_now(&b1_now, T0 + 500_000)
        .ok_or_else(|| Failure::new("retry_now refused a needs-attention record"))?;
    super::apply(store, vec![step.transition]).await?;
    let b = claim(store, T0 + 500_000, 10, 21).await?;
    ensure_eq(ids(&b), vec![b1], "the retried head goes first")?;
    report(store, &b[0], Outcome::Delivered, T0 + 500_001).await?;
    ensure_eq(
        ids(&claim(store, T0 + 500_001, 10, 22).await?),
        vec![b2],
        "then b2",
    )?;
    ensure_eq(store.stats().await?.held, 0, "nothing held any more")?;
    Ok(Verdict::Passed)
}

/// The due query with a large backlog of records that are not yet due: a claim returns exactly
/// the due ones, in order, among 100,000 that are not, and a claim that finds nothing due costs
/// about what it costs on a store of three records (the medians of interleaved claims, within
/// 10× and 0.5 ms).
pub async fn due_query_ignores_backlog(backend: &dyn Backend) -> ScenarioResult {
    const BACKLOG: usize = 100_000;
    const CHUNK: usize = 10_000;
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let future = T0 + 86_400_000;
    for chunk in 0..BACKLOG / CHUNK {
        let batch = (0..CHUNK)
            .map(|i| NewRecord::new(Vec::new()).with_key(format!("backlog-{chunk}-{i}")))
            .collect();
        enqueue(store, future, batch).await?;
    }
    let due = enqueue(store, T0, vec![rec("d1"), rec("d2"), rec("d3")]).await?;
    let claimed = claim(store, T0 + 1, 10, 1).await?;
    ensure_eq(
        ids(&claimed),
        due,
        "only the three due records, in id order",
    )?;
    ensure_eq(
        claim(store, T0 + 2, 10, 2).await?.len(),
        0,
        "nothing else is due",
    )?;
    ensure_eq(
        store.next_due().await?,
        Some(future),
        "next_due is the backlog's deadline",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.pending, stats.in_flight),
        (BACKLOG as u64, 3),
        "counts",
    )?;

    // The cost: a claim that finds nothing due among the 100,000 must cost about what it
    // costs on a store holding three records, not a scan of the backlog. Samples of both are
    // interleaved, so a busy machine slows both alike; the medians are compared.
    waiting_for("claims timed on the backlog and on a small store");
    let (_, small) = fresh(backend).await?;
    enqueue(&*small, future, vec![rec("s1"), rec("s2"), rec("s3")]).await?;
    let (mut on_backlog, mut on_small) = (Vec::new(), Vec::new());
    for sample in 0..COST_SAMPLES {
        for (target, times) in [(store, &mut on_backlog), (&*small, &mut on_small)] {
            let started = std::time::Instant::now();
            let got = claim(target, T0 + 3, 10, 100 + sample).await?;
            times.push(started.elapsed());
            ensure_eq(got.len(), 0, "nothing due while timing")?;
        }
    }
    let (backlog, small) = (median(on_backlog), median(on_small));
    ensure(
        backlog <= small * 10 + std::time::Duration::from_micros(500),
        || {
            format!(
                "a claim that finds nothing due takes {backlog:?} among {BACKLOG} records not yet \
             due, against {small:?} on a store of three: the due query reads the backlog \
             (medians of {COST_SAMPLES} interleaved claims)"
            )
        },
    )?;
    Ok(Verdict::Passed)
}

/// Claims timed on each store in [`due_query_ignores_backlog`].
const COST_SAMPLES: u64 = 31;

fn median(mut times: Vec<std::time::Duration>) -> std::time::Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

/// Paging: `list` pages in id order by `after` and `limit`, filtered by state and group;
/// `tombstones` pages the same way.
pub async fn paging(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let batch = (0..25)
        .map(|i| rec_in(&format!("r{i}"), if i % 2 == 0 { "even" } else { "odd" }))
        .collect();
    let all = enqueue(store, T0, batch).await?;
    // Claim the heads (r0, r1) and deliver nothing: they are in flight.
    let heads = claim(store, T0, 10, 1).await?;
    ensure_eq(ids(&heads), vec![all[0], all[1]], "heads of both groups")?;

    let mut seen = Vec::new();
    let mut query = ListQuery::new(10);
    let mut pages = 0;
    loop {
        let page = store.list(&query).await?;
        ensure(page.len() <= 10, || {
            format!("a page has at most `limit` records: {}", page.len())
        })?;
        let Some(last) = page.last().map(|r| r.id) else {
            break;
        };
        pages += 1;
        seen.extend(ids(&page));
        query = query.after(last);
    }
    ensure_eq(
        seen,
        all.clone(),
        "pages cover every record once, in id order",
    )?;
    ensure_eq(pages, 3, "25 records in pages of 10")?;

    let in_flight = store
        .list(&ListQuery::new(10).state(State::InFlight))
        .await?;
    ensure_eq(ids(&in_flight), vec![all[0], all[1]], "filter by state")?;
    let odd: Vec<RecordId> = all.iter().copied().skip(1).step_by(2).collect();
    let odd_page = store
        .list(&ListQuery::new(5).group("odd").after(odd[1]))
        .await?;
    ensure_eq(
        ids(&odd_page),
        odd[2..7].to_vec(),
        "filter by group, after an id",
    )?;
    let none = store
        .list(&ListQuery::new(5).group("odd").state(State::Rejected))
        .await?;
    ensure_eq(ids(&none), vec![], "state and group together")?;
    ensure_eq(
        ids(&store.list(&ListQuery::new(0)).await?),
        vec![],
        "limit 0 returns nothing",
    )?;

    // Tombstones page like records.
    let mut transitions = Vec::new();
    for &id in &all[2..9] {
        let record = get(store, id).await?;
        let step = outbox_core::machine::discard(&record, "paging test", T0 + 1)
            .ok_or_else(|| Failure::new("discard refused an idle record"))?;
        transitions.push(step.transition);
    }
    super::apply(store, transitions).await?;
    let first = store.tombstones(None, 4).await?;
    let first_ids: Vec<RecordId> = first.iter().map(|t| t.id).collect();
    ensure_eq(first_ids, all[2..6].to_vec(), "first page of tombstones")?;
    let second = store.tombstones(Some(all[5]), 4).await?;
    let second_ids: Vec<RecordId> = second.iter().map(|t| t.id).collect();
    ensure_eq(second_ids, all[6..9].to_vec(), "second page of tombstones")?;
    ensure_eq(all_tombstones(store).await?.len(), 7, "seven tombstones")?;
    ensure_eq(all_records(store).await?.len(), 18, "eighteen records left")?;
    Ok(Verdict::Passed)
}

/// The payload limit: a batch with one payload over the backend's maximum is refused with
/// `PayloadTooLarge` and nothing of it is enqueued; a payload of exactly the maximum is taken.
pub async fn payload_limit(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let max = backend.max_payload();
    let batch = vec![
        NewRecord::new(b"small".to_vec()),
        NewRecord::new(vec![7u8; max + 1]),
    ];
    match store.enqueue(batch, T0).await {
        Err(Error::PayloadTooLarge { size, max: m }) => {
            ensure_eq(
                (size, m),
                (max + 1, max),
                "the error names the size and the maximum",
            )?;
        }
        other => {
            return Err(Failure::new(format!(
                "a payload of {} bytes must be refused with PayloadTooLarge, got {other:?}",
                max + 1
            )))
        }
    }
    ensure_eq(
        store.stats().await?.pending,
        0,
        "nothing of the refused batch is enqueued",
    )?;
    let ok = enqueue(store, T0, vec![NewRecord::new(vec![1u8; max])]).await?;
    ensure_eq(
        get(store, ok[0]).await?.payload.len(),
        max,
        "a payload of exactly the maximum",
    )?;
    Ok(Verdict::Passed)
}

/// Ids are never reused: after the newest record leaves the queue, the next enqueue still gets
/// a higher id.
pub async fn ids_never_reused(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let first = enqueue(store, T0, vec![rec("a"), rec("b"), rec("c")]).await?;
    let claimed = claim(store, T0, 10, 1).await?;
    for record in &claimed {
        report(store, record, Outcome::Delivered, T0 + 1).await?;
    }
    ensure_eq(store.stats().await?.delivered, 3, "three delivered")?;
    let next = enqueue(store, T0 + 2, vec![rec("d")]).await?;
    ensure(next[0] > first[2], || {
        format!(
            "id {} after the queue emptied must exceed {}",
            next[0], first[2]
        )
    })?;
    Ok(Verdict::Passed)
}

/// Claims are exclusive: many tasks claiming at once (each on its own handle when the backend
/// is shared) never get the same record twice, and together get every record.
pub async fn claims_are_exclusive(backend: &dyn Backend) -> ScenarioResult {
    const RECORDS: usize = 300;
    const TASKS: u64 = 8;
    let (location, store) = fresh(backend).await?;
    let batch = (0..RECORDS).map(|i| rec(&format!("x{i}"))).collect();
    let all = enqueue(&*store, T0, batch).await?;
    waiting_for("the claimers to run out of due records");
    let mut tasks = Vec::new();
    for token in 1..=TASKS {
        let handle = if backend.capabilities().shared {
            backend.open(&location).await?
        } else {
            store.clone()
        };
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let lease = super::lease(token, T0);
                let claim = outbox_core::Claim {
                    now: T0,
                    limit: 7,
                    lease,
                };
                let batch = handle.claim(claim).await?;
                if batch.is_empty() {
                    return Ok::<_, Error>(got);
                }
                got.extend(batch.iter().map(|r| (r.id, r.lease)));
                // A store that hands out records again never runs dry: stop at more claims
                // than there are records, and let the check below name the double claim.
                if got.len() > RECORDS {
                    return Ok(got);
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut seen = BTreeSet::new();
    for task in tasks {
        let got = task
            .await
            .map_err(|e| Failure::new(format!("claim task failed: {e}")))??;
        for (id, lease) in got {
            ensure(seen.insert(id), || format!("record {id} was claimed twice"))?;
            ensure(lease.is_some_and(|l| l.until == T0 + LEASE_MS), || {
                format!("record {id} has the wrong lease {lease:?}")
            })?;
        }
    }
    ensure_eq(
        seen.into_iter().collect::<Vec<_>>(),
        all,
        "every record claimed once",
    )?;
    Ok(Verdict::Passed)
}
