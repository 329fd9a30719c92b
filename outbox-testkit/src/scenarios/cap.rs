//! The size cap: a store opened with a [`Cap`] refuses the enqueue that would pass it with
//! [`Error::QueueFull`], writes nothing of that batch and touches nothing queued; writes that
//! add nothing go in; deliveries and prunes free room; `stats` shows the usage, and a row set
//! aside as unreadable leaves both.

use outbox_core::{Cap, CapLimit, Error, NewRecord, Outcome, Stats, Store, Usage};

use super::{all_records, claim, enqueue, fresh, ids, rec, report, T0};
use crate::backend::Backend;
use crate::harness::{
    ensure, ensure_eq, skip_unless, Capability, Failure, ScenarioResult, Verdict,
};

/// What a refused enqueue must have returned.
fn full(result: outbox_core::Result<outbox_core::Enqueued>) -> Result<Error, Failure> {
    match result {
        Err(err @ Error::QueueFull { .. }) => Ok(err),
        Err(other) => Err(Failure::new(format!("expected QueueFull, got {other}"))),
        Ok(enqueued) => Err(Failure::new(format!(
            "an enqueue past the cap was accepted: {:?}",
            enqueued.ids
        ))),
    }
}

fn queue_full(limit: CapLimit, max: u64, used: u64, adding: u64) -> String {
    Error::QueueFull {
        limit,
        max,
        used,
        adding,
    }
    .to_string()
}

/// Stats and every record, to check a refusal touched nothing.
async fn snapshot(store: &dyn Store) -> Result<(Stats, Vec<outbox_core::Record>), Failure> {
    Ok((store.stats().await?, all_records(store).await?))
}

/// A cap of 1,000 records: the 1,000th goes in, the 1,001st is refused with `QueueFull`
/// naming the limit, the usage and the addition, and nothing changes (a batch that does not
/// fit is refused whole); a write replacing a waiting one adds nothing and goes in; a rejected
/// record still counts, its prune frees its place, and so does a delivery. A cap on payload
/// bytes is held the same way, and `stats` shows the usage throughout.
pub async fn queue_full_refuses_and_touches_nothing(backend: &dyn Backend) -> ScenarioResult {
    let (location, unlimited) = fresh(backend).await?;
    drop(unlimited);
    let store = backend
        .open_capped(&location, Cap::none().with_max_records(1_000))
        .await?;
    let store = &*store;
    for batch in 0..10u64 {
        let records = (0..100)
            .map(|i| rec(&format!("r{:04}", batch * 100 + i)))
            .collect();
        enqueue(store, T0 + batch, records).await?;
    }
    let stats = store.stats().await?;
    ensure_eq(
        (stats.usage(), stats.payload_bytes),
        (
            Usage {
                records: 1_000,
                bytes: 5_000,
            },
            5_000,
        ),
        "1,000 records of 5 bytes held",
    )?;
    let before = snapshot(store).await?;
    let refused = full(store.enqueue(vec![rec("r1000")], T0 + 20).await)?;
    ensure_eq(
        refused.to_string(),
        queue_full(CapLimit::Records, 1_000, 1_000, 1),
        "the 1,001st is refused, naming the limit and the usage",
    )?;
    ensure_eq(snapshot(store).await?, before.clone(), "nothing changed")?;

    // A write that replaces a waiting one adds no record: it goes in even when full.
    let keyed = |n: u8| {
        NewRecord::new(vec![b'k'; 5 + usize::from(n)])
            .with_key(format!("key-edit-{n}"))
            .replacing("doc-1")
    };
    let mut room = claim(store, T0 + 30, 1, 1).await?;
    report(store, &room.remove(0), Outcome::Delivered, T0 + 31).await?;
    let edit = enqueue(store, T0 + 32, vec![keyed(0)]).await?[0];
    ensure_eq(
        store.stats().await?.usage().records,
        1_000,
        "a delivery made room for the first edit",
    )?;
    let merged = store.enqueue(vec![keyed(1)], T0 + 33).await?;
    ensure_eq(
        (merged.ids.clone(), merged.replaced(0)),
        (vec![edit], true),
        "a later edit of a waiting write replaces it, adding no record",
    )?;
    ensure_eq(
        store.stats().await?.usage(),
        Usage {
            records: 1_000,
            bytes: 5_000 - 5 + 6,
        },
        "the edit's payload bytes replace the earlier ones",
    )?;

    // A batch that does not fit is refused whole, even the part that would.
    let mut room = claim(store, T0 + 40, 1, 2).await?;
    report(store, &room.remove(0), Outcome::Delivered, T0 + 41).await?;
    let before = snapshot(store).await?;
    let refused = full(
        store
            .enqueue(vec![rec("a0001"), rec("a0002")], T0 + 42)
            .await,
    )?;
    ensure_eq(
        refused.to_string(),
        queue_full(CapLimit::Records, 1_000, 999, 2),
        "two do not fit in one place",
    )?;
    ensure_eq(
        snapshot(store).await?,
        before,
        "nothing of the batch written",
    )?;

    // A rejected record keeps its place until it is pruned.
    let mut one = claim(store, T0 + 50, 1, 3).await?;
    report(
        store,
        &one.remove(0),
        Outcome::rejected("HTTP 422"),
        T0 + 51,
    )
    .await?;
    enqueue(store, T0 + 52, vec![rec("a0003")]).await?;
    full(store.enqueue(vec![rec("a0004")], T0 + 53).await)?;
    let pruned = store.prune(T0 + 60).await?;
    ensure(pruned >= 1, || {
        format!("the rejected record pruned ({pruned})")
    })?;
    enqueue(store, T0 + 61, vec![rec("a0004")]).await?;
    let stats = store.stats().await?;
    let held = all_records(store).await?;
    let bytes: u64 = held.iter().map(|r| r.payload.len() as u64).sum();
    ensure_eq(
        (stats.usage().records, stats.payload_bytes),
        (1_000, bytes),
        "stats count what is held",
    )?;

    // A cap on bytes: 100 bytes, nine records of 10 held.
    let (location, unlimited) = fresh(backend).await?;
    drop(unlimited);
    let store = backend
        .open_capped(&location, Cap::none().with_max_bytes(100))
        .await?;
    let store = &*store;
    let ten = |name: &str| NewRecord::new(format!("{name:<10}").into_bytes());
    let nine: Vec<NewRecord> = (0..9).map(|i| ten(&format!("b{i}"))).collect();
    let first = enqueue(store, T0, nine).await?;
    let before = snapshot(store).await?;
    let refused = full(
        store
            .enqueue(vec![NewRecord::new(vec![b'x'; 11])], T0 + 1)
            .await,
    )?;
    ensure_eq(
        refused.to_string(),
        queue_full(CapLimit::Bytes, 100, 90, 11),
        "eleven bytes do not fit in ten",
    )?;
    ensure_eq(snapshot(store).await?, before, "nothing changed")?;
    enqueue(store, T0 + 2, vec![ten("b9")]).await?;
    ensure_eq(store.stats().await?.payload_bytes, 100, "exactly full")?;
    full(
        store
            .enqueue(vec![NewRecord::new(vec![b'x'])], T0 + 3)
            .await,
    )?;
    let claimed = claim(store, T0 + 10, 100, 4).await?;
    ensure_eq(
        ids(&claimed).into_iter().take(9).collect::<Vec<_>>(),
        first,
        "all ten claimed in order",
    )?;
    report(store, &claimed[0], Outcome::Delivered, T0 + 11).await?;
    enqueue(store, T0 + 12, vec![ten("c0")]).await?;
    ensure_eq(
        store.stats().await?.payload_bytes,
        100,
        "a delivery freed its ten bytes",
    )?;
    Ok(Verdict::Passed)
}

/// The usage a [`Error::QueueFull`] reports for the limit it names.
fn used_of(refused: &Error) -> Result<(CapLimit, u64), Failure> {
    match refused {
        Error::QueueFull { limit, used, .. } => Ok((*limit, *used)),
        other => Err(Failure::new(format!("expected QueueFull, got {other}"))),
    }
}

/// What `usage` holds under `limit`.
fn usage_under(usage: Usage, limit: CapLimit) -> u64 {
    match limit {
        CapLimit::Records => usage.records,
        CapLimit::Bytes => usage.bytes,
    }
}

/// A row set aside as unreadable leaves the cap as it leaves `stats` (the cap counts exactly
/// [`Stats::usage`]): three records, one planted unreadable, the store reopened capped at three
/// records and the three payloads' bytes; a claim sets the bad row aside and takes the other
/// two, which are delivered. `stats` then shows nothing held, three more records fit, a fourth
/// is refused with `QueueFull` whose usage is what `stats` shows, and discarding the bad row
/// changes neither.
///
/// It needs a backend that plants unreadable rows and opens capped stores; the scenario list
/// names the first, and the scenario skips itself on a backend without the second.
pub async fn unreadable_row_leaves_the_cap(backend: &dyn Backend) -> ScenarioResult {
    let name = "unreadable_row_leaves_the_cap";
    for needs in [Capability::UnreadableRows, Capability::SizeCap] {
        if let Some(skip) = skip_unless(backend, name, needs) {
            return Ok(skip);
        }
    }
    let (location, store) = fresh(backend).await?;
    let first: Vec<NewRecord> = ["u1", "u2", "u3"].into_iter().map(rec).collect();
    let bytes: u64 = first.iter().map(|r| r.payload.len() as u64).sum();
    let r = enqueue(&*store, T0, first).await?;
    let bad = r[1];
    drop(store);
    backend.plant_unreadable(&location, bad).await?;
    let cap = Cap::none().with_max_records(3).with_max_bytes(bytes);
    let store = backend.open_capped(&location, cap).await?;
    let store = &*store;

    let claimed = claim(store, T0 + 10, 10, 1).await?;
    ensure_eq(
        ids(&claimed),
        vec![r[0], r[2]],
        "the claim sets the unreadable row aside and takes the two others",
    )?;
    for record in &claimed {
        report(store, record, Outcome::Delivered, T0 + 11).await?;
    }
    ensure_eq(
        store.stats().await?.usage(),
        Usage {
            records: 0,
            bytes: 0,
        },
        "stats count nothing held: the set-aside row is not counted",
    )?;

    let more: Vec<NewRecord> = ["u4", "u5", "u6"].into_iter().map(rec).collect();
    enqueue(store, T0 + 20, more).await.map_err(|failure| {
        failure.context("three records fit a cap of three once the set-aside row left it")
    })?;
    let usage = store.stats().await?.usage();
    ensure_eq(
        usage,
        Usage { records: 3, bytes },
        "stats show the three new records",
    )?;
    let refused = full(store.enqueue(vec![rec("u7")], T0 + 21).await)?;
    let (limit, used) = used_of(&refused)?;
    ensure_eq(
        used,
        usage_under(usage, limit),
        format!("the refusal's usage ({refused}) is what stats show ({usage:?})"),
    )?;

    ensure(store.discard_unreadable(bad, T0 + 30).await?, || {
        "discard_unreadable removes the set-aside row".into()
    })?;
    ensure_eq(
        store.stats().await?.usage(),
        usage,
        "discarding the set-aside row leaves the usage as it was",
    )?;
    let refused = full(store.enqueue(vec![rec("u7")], T0 + 31).await)?;
    let (limit, used) = used_of(&refused)?;
    ensure_eq(
        used,
        usage_under(usage, limit),
        format!("after the discard the cap still counts what stats show ({refused})"),
    )?;
    Ok(Verdict::Passed)
}
