//! What keeps a week-old backlog from overwriting newer data: preconditions persisted with the
//! record, coalescing per key in the enqueuing transaction, and the age policy through the
//! runner.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{Error, Event, Jitter, NewRecord, Outcome, RecordId, RetryPolicy, State, Store};

use super::runner::{config, paused_setup, policy, Rig};
use super::{claim, fresh, get, ids, report, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, skip_unless, waiting_for, Capability, Failure};
use crate::harness::{ScenarioResult, Verdict};
use crate::sink::Reply;

const DAY: u64 = 86_400_000;

/// An edit of a note: payload `name`, key derived from it, in the note's group, coalescing
/// under the note's body and made against `version`.
fn edit(name: &str, note: &str, version: &str) -> NewRecord {
    super::rec_in(name, note)
        .replacing(format!("{note}/body"))
        .expecting(version)
}

/// Enqueues and returns the one id, checking whether it replaced an earlier write.
async fn enqueue_one(
    store: &dyn Store,
    now: u64,
    record: NewRecord,
    replaced: bool,
) -> Result<RecordId, Failure> {
    let what = format!("enqueue of {:?}", String::from_utf8_lossy(&record.payload));
    let enqueued = store.enqueue(vec![record], now).await?;
    ensure_eq(enqueued.ids.len(), 1, format!("{what}: one id"))?;
    ensure_eq(
        enqueued.replaced(0),
        replaced,
        format!("{what}: reported as a replacement"),
    )?;
    Ok(enqueued.ids[0])
}

/// Coalescing in place: ten edits of one note (one by one and in a batch) are one record that
/// keeps the first one's id and schedule and carries the last one's payload, idempotency key,
/// expected version and enqueue time; nine replacements are counted. A write queued after
/// them in the group (a delete) is not overtaken: a later edit queues behind it and coalesces
/// only with edits behind it. A write of another group or without the key, and a record that
/// waits for a person, are never replaced; a retrying record is, keeping its attempts and
/// deadline. Bad coalescing keys and versions refuse the batch.
pub async fn coalescing_replaces_in_place(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let s = &*store;
    let first = enqueue_one(s, T0, edit("e1", "note", "3"), false).await?;
    ensure_eq(
        get(s, first).await?.expected_version.as_deref(),
        Some("3"),
        "the first edit, a new record, keeps its expected version",
    )?;
    for n in 2..=6 {
        let id = enqueue_one(s, T0 + n, edit(&format!("e{n}"), "note", "3"), true).await?;
        ensure_eq(
            id,
            first,
            format!("edit {n} lands in the first edit's record"),
        )?;
    }
    let batch = (7..=10)
        .map(|n| edit(&format!("e{n}"), "note", "3"))
        .collect();
    let enqueued = s.enqueue(batch, T0 + 7).await?;
    ensure_eq(enqueued.ids.clone(), vec![first; 4], "a batch of edits")?;
    ensure_eq(
        enqueued.superseded.clone(),
        vec![0, 1, 2, 3],
        "all replaced",
    )?;
    let record = get(s, first).await?;
    ensure_eq(
        (
            record.payload.as_slice(),
            record.key.as_str(),
            record.expected_version.as_deref(),
            record.replaces.as_deref(),
            record.created_at,
            record.next_attempt_at,
            record.state,
        ),
        (
            b"e10".as_slice(),
            "key-e10",
            Some("3"),
            Some("note/body"),
            T0 + 7,
            Some(T0),
            State::Pending,
        ),
        "the record after ten edits",
    )?;
    let stats = s.stats().await?;
    ensure_eq(
        (stats.pending, stats.superseded),
        (1, 9),
        "one record, nine merged",
    )?;

    // A delete after the edits; a later edit must not jump ahead of it.
    let delete = enqueue_one(s, T0 + 20, super::rec_in("delete", "note"), false).await?;
    let late = enqueue_one(s, T0 + 21, edit("e11", "note", "4"), false).await?;
    ensure(late > delete, || {
        "the late edit queues behind the delete".into()
    })?;
    let later = enqueue_one(s, T0 + 22, edit("e12", "note", "4"), true).await?;
    ensure_eq(
        later,
        late,
        "an edit behind the delete coalesces with the one behind it",
    )?;
    // Another group, or no coalescing key: never replaced.
    let other = enqueue_one(s, T0 + 23, edit("o1", "other", "1"), false).await?;
    enqueue_one(s, T0 + 24, super::rec_in("plain", "note"), false).await?;
    let moved = enqueue_one(
        s,
        T0 + 25,
        super::rec_in("moved", "elsewhere").replacing("note/body"),
        false,
    )
    .await?;
    ensure_eq(s.stats().await?.superseded, 10, "ten replacements in all")?;

    // The group goes out in order: the coalesced edit, the delete, the later edits.
    let mut order = Vec::new();
    let mut now = T0 + 100;
    loop {
        let claimed = claim(s, now, 10, now).await?;
        if claimed.is_empty() {
            break;
        }
        for record in &claimed {
            if record.group.as_deref() == Some("note") {
                order.push(String::from_utf8_lossy(&record.payload).into_owned());
            }
            report(s, record, Outcome::Delivered, now).await?;
        }
        now += 10;
    }
    ensure_eq(
        order,
        vec![
            "e10".to_owned(),
            "delete".into(),
            "e12".into(),
            "plain".into(),
        ],
        "the note's group in order",
    )?;
    ensure_eq(
        (get_gone(s, other).await?, get_gone(s, moved).await?),
        (true, true),
        "the other writes delivered",
    )?;

    // A retrying record is replaced and keeps its schedule; a parked one is not.
    let retrying = enqueue_one(s, now, edit("r1", "retry", "1"), false).await?;
    let claimed = claim(s, now, 10, 900).await?;
    ensure_eq(ids(&claimed), vec![retrying], "the retrying edit claimed")?;
    report(s, &claimed[0], Outcome::transient("HTTP 503", None), now).await?;
    let before = get(s, retrying).await?;
    enqueue_one(s, now + 1, edit("r2", "retry", "1"), true).await?;
    let after = get(s, retrying).await?;
    ensure_eq(
        (
            after.state,
            after.attempts,
            after.next_attempt_at,
            after.payload.as_slice(),
        ),
        (
            before.state,
            before.attempts,
            before.next_attempt_at,
            b"r2".as_slice(),
        ),
        "a retrying record keeps its schedule when replaced",
    )?;
    let claimed = claim(s, before.next_attempt_at.unwrap_or(now) + 1, 10, 901).await?;
    ensure_eq(ids(&claimed), vec![retrying], "the retrying edit due again")?;
    report(s, &claimed[0], Outcome::conflict("HTTP 409"), now + 2_000).await?;
    let fresh_id = enqueue_one(s, now + 3_000, edit("r3", "retry", "1"), false).await?;
    ensure(fresh_id != retrying, || {
        "a record that waits for a person is never replaced".into()
    })?;
    ensure_eq(
        get(s, retrying).await?.payload,
        b"r2".to_vec(),
        "the parked record keeps its payload",
    )?;

    for (what, bad) in [
        ("an empty coalescing key", super::rec("x").replacing("")),
        (
            "a coalescing key with NUL",
            super::rec("x").replacing("a\0b"),
        ),
        ("an empty expected version", super::rec("x").expecting("")),
        (
            "an expected version with a space",
            super::rec("x").expecting("v 3"),
        ),
        ("a weak entity tag", super::rec("x").expecting("W/\"3\"")),
    ] {
        waiting_for(format!("enqueue of {what}"));
        match s.enqueue(vec![super::rec("fine"), bad], now).await {
            Err(Error::InvalidGroup { .. }) => {}
            other => {
                return Err(Failure::new(format!(
                    "{what} must be refused with InvalidGroup, got {other:?}"
                )))
            }
        }
    }
    Ok(Verdict::Passed)
}

async fn get_gone(store: &dyn Store, id: RecordId) -> Result<bool, Failure> {
    Ok(store.get(id).await?.is_none())
}

/// A write in flight is never replaced: an edit enqueued while the previous one is being
/// delivered queues behind it with a fresh id, and both go out in order; an edit enqueued
/// between a claim and the report of a delivered record (a drain under way) is not lost.
pub async fn coalescing_leaves_in_flight_alone(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let s = &*store;
    let first = enqueue_one(s, T0, edit("v1", "note", "1"), false).await?;
    let claimed = claim(s, T0, 10, 1).await?;
    ensure_eq(ids(&claimed), vec![first], "the first edit in flight")?;
    let second = enqueue_one(s, T0 + 1, edit("v2", "note", "1"), false).await?;
    ensure(second > first, || {
        "the edit queues behind the one in flight".into()
    })?;
    let third = enqueue_one(s, T0 + 2, edit("v3", "note", "1"), true).await?;
    ensure_eq(
        third,
        second,
        "the next edit coalesces with the waiting one",
    )?;
    ensure_eq(
        get(s, first).await?.payload,
        b"v1".to_vec(),
        "the record in flight keeps its payload",
    )?;
    ensure_eq(
        claim(s, T0 + 3, 10, 2).await?.len(),
        0,
        "nothing else of the group while one is in flight",
    )?;
    report(s, &claimed[0], Outcome::Delivered, T0 + 4).await?;
    let next = claim(s, T0 + 5, 10, 3).await?;
    ensure_eq(
        next.iter()
            .map(|r| (r.id, r.payload.clone()))
            .collect::<Vec<_>>(),
        vec![(second, b"v3".to_vec())],
        "the waiting edit, with the last payload",
    )?;
    let stats = s.stats().await?;
    ensure_eq(
        (stats.delivered, stats.in_flight, stats.superseded),
        (1, 1, 1),
        "one delivered, one in flight, one merged",
    )?;
    Ok(Verdict::Passed)
}

/// Coalescing under concurrent enqueue: eight tasks each enqueue ten edits of one key at once.
/// Every write is either the one record left or counted as merged into it (none lost, none
/// doubled), and the record carries one of the writes.
pub async fn coalescing_under_concurrent_enqueue(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let mut tasks = Vec::new();
    for task in 0..8 {
        let store: Arc<dyn Store> = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 0..10 {
                let record = super::rec(&format!("t{task}-{n}")).replacing("shared");
                ids.extend(store.enqueue(vec![record], T0 + n).await?.ids);
            }
            Ok::<_, Error>(ids)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(
            task.await
                .map_err(|e| Failure::new(format!("an enqueuing task failed: {e}")))??,
        );
    }
    let records = super::all_records(&*store).await?;
    let stats = store.stats().await?;
    ensure_eq(
        (records.len() as u64 + stats.superseded, stats.pending),
        (80, records.len() as u64),
        "records plus merged writes account for all 80",
    )?;
    ensure_eq(records.len(), 1, "one record left for the key")?;
    ensure(all.iter().all(|id| *id == records[0].id), || {
        format!("every enqueue landed in {}: {all:?}", records[0].id)
    })?;
    ensure(
        String::from_utf8_lossy(&records[0].payload).starts_with('t'),
        || "the record carries one of the writes".into(),
    )?;
    Ok(Verdict::Passed)
}

/// The expected version, the coalescing key and the count of merged writes survive a restart,
/// and a write after the restart still coalesces with the record queued before it.
pub async fn writes_survive_restart(backend: &dyn Backend) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "writes_survive_restart", Capability::Persistent) {
        return Ok(skip);
    }
    let (location, store) = fresh(backend).await?;
    let first = enqueue_one(&*store, T0, edit("a", "note", "\"7\""), false).await?;
    enqueue_one(&*store, T0 + 1, edit("b", "note", "8"), true).await?;
    let before = get(&*store, first).await?;
    let store = super::restart::reopen(backend, &location, store).await?;
    let after = get(&*store, first).await?;
    ensure_eq(&after, &before, "the record after the restart")?;
    ensure_eq(
        (after.expected_version.as_deref(), after.replaces.as_deref()),
        (Some("8"), Some("note/body")),
        "version and coalescing key",
    )?;
    ensure_eq(store.stats().await?.superseded, 1, "the merged count")?;
    let id = enqueue_one(&*store, T0 + 2, edit("c", "note", "9"), true).await?;
    ensure_eq(id, first, "coalescing after the restart")?;
    ensure_eq(
        store.stats().await?.superseded,
        2,
        "counted after the restart",
    )?;
    Ok(Verdict::Passed)
}

/// The age policy through the runner: with `max_age` three days, a record enqueued four days
/// ago is not sent but parked ("stale: created 4 days ago") while one a day old is delivered;
/// a person's retry then sends the stale one.
pub async fn runner_stale_parked(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    let old = store
        .enqueue(vec![super::rec("old")], T0 - 4 * DAY)
        .await?
        .ids[0];
    store.enqueue(vec![super::rec("recent")], T0 - DAY).await?;
    let policy: RetryPolicy = policy(Jitter::None, 3).with_max_age(Duration::from_secs(3 * 86_400));
    let mut rig = Rig::start(store.clone(), sink.clone(), clock, policy, config(32, 4)).await?;
    rig.until("the recent one delivered, the old one parked", |s| {
        s.delivered == 1 && s.needs_attention == 1
    })
    .await?;
    rig.until_event("the old one parked as stale", |e| {
        matches!(e, Event::Parked { id, reason } if *id == old && reason == "stale: created 4 days ago")
    })
    .await?;
    let sent: Vec<Vec<u8>> = sink
        .deliveries()
        .iter()
        .map(|d| d.payload.clone())
        .collect();
    ensure_eq(
        sent,
        vec![b"recent".to_vec()],
        "the stale record is not sent",
    )?;
    let parked = get(&*store, old).await?;
    ensure_eq(
        (parked.state, parked.attempts, parked.last_error.as_deref()),
        (State::NeedsAttention, 0, Some("stale: created 4 days ago")),
        "parked with its reason, nothing spent",
    )?;
    rig.outbox.retry(old).await?;
    rig.until("the retried stale record delivered", |s| s.delivered == 2)
        .await?;
    ensure_eq(sink.deliveries().len(), 2, "sent once after the retry")?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// Coalescing during a drain, through the runner: thirty edits of one note arrive one every
/// 100 ms while each delivery takes 300 ms. An edit never joins the delivery under way: the
/// sink sees edits in the order they were made, ending with the last one, and every edit is
/// either sent or counted as merged.
pub async fn runner_coalescing_during_a_drain(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    sink.otherwise(Reply::Slow {
        after: Duration::from_millis(300),
    });
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(32, 4),
    )
    .await?;
    const EDITS: u64 = 30;
    for n in 0..EDITS {
        rig.outbox
            .enqueue(edit(&format!("{n}"), "note", "1"))
            .await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats = rig
        .until("every edit sent or merged", |s| {
            s.pending + s.retrying + s.in_flight == 0
        })
        .await?;
    let sent: Vec<u64> = sink
        .deliveries()
        .iter()
        .map(|d| {
            String::from_utf8_lossy(&d.payload)
                .parse()
                .unwrap_or(u64::MAX)
        })
        .collect();
    ensure(sent.windows(2).all(|w| w[0] < w[1]), || {
        format!("edits sent in the order they were made: {sent:?}")
    })?;
    ensure_eq(
        sent.last().copied(),
        Some(EDITS - 1),
        "the last edit is sent",
    )?;
    ensure_eq(
        (stats.delivered, stats.superseded),
        (sent.len() as u64, EDITS - sent.len() as u64),
        "every edit sent or merged",
    )?;
    ensure(sent.len() > 1 && stats.superseded > 0, || {
        format!("edits both sent during the drain and merged: {sent:?}")
    })?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}
