//! Events through the runner: each is sent only after the store write it describes returned,
//! so an observer that reads the store on an event sees the write.

use outbox_core::{Event, Jitter, State};

use super::rec;
use super::runner::{config, enqueue, paused_setup, policy, Rig};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};
use crate::sink::Reply;

/// Events follow commits: on `Delivered` the record is gone, on `Rejected` it is rejected, on
/// `Parked` it needs attention, on `Discarded` its tombstone is listed; every record is
/// announced as enqueued, and attempted before its fate.
pub async fn runner_events_follow_commits(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    sink.script_payload(b"retried".to_vec(), [Reply::Unavailable]);
    sink.script_payload(b"rejected".to_vec(), [Reply::Unprocessable]);
    sink.script_payload(b"parked".to_vec(), [Reply::Conflict]);
    sink.script_payload(b"discarded".to_vec(), [Reply::Conflict]);
    let rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(32, 2),
    )
    .await?;
    let mut events = rig.outbox.events();
    let names = ["delivered", "retried", "rejected", "parked", "discarded"];
    let ids = enqueue(&rig, names.iter().map(|n| rec(n)).collect()).await?;
    let store = rig.outbox.store().clone();
    let mut seen: Vec<Event> = Vec::new();
    let (mut discarded, mut delivered) = (false, 0);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3_600);
    while !discarded || delivered < 2 {
        let event = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(event)) => event,
            Ok(Err(err)) => return Err(Failure::new(format!("event stream: {err}"))),
            Err(_) => return Err(Failure::new(format!("events stopped; seen {seen:?}"))),
        };
        match &event {
            Event::Delivered { id } => {
                ensure_eq(
                    store.get(*id).await?,
                    None,
                    format!("{id} on its Delivered event"),
                )?;
                delivered += 1;
            }
            Event::Rejected { id, .. } => {
                let state = store.get(*id).await?.map(|r| r.state);
                ensure_eq(
                    state,
                    Some(State::Rejected),
                    format!("{id} on its Rejected event"),
                )?;
            }
            Event::Parked { id, .. } => {
                let state = store.get(*id).await?.map(|r| r.state);
                ensure_eq(
                    state,
                    Some(State::NeedsAttention),
                    format!("{id} on Parked"),
                )?;
                if *id == ids[4] {
                    rig.outbox.discard(*id, "by the scenario").await?;
                }
            }
            Event::Discarded { id, .. } => {
                ensure_eq(
                    store.get(*id).await?,
                    None,
                    format!("{id} on its Discarded event"),
                )?;
                let listed = store
                    .tombstones(None, 100)
                    .await?
                    .iter()
                    .any(|t| t.id == *id);
                ensure(listed, || {
                    format!("{id}'s tombstone is listed on its event")
                })?;
                discarded = true;
            }
            _ => {}
        }
        seen.push(event);
    }
    for (id, fate) in ids
        .iter()
        .zip(["delivered", "delivered", "rejected", "parked", "discarded"])
    {
        let kinds: Vec<&str> = seen
            .iter()
            .filter(|e| e.record() == Some(*id))
            .map(kind)
            .collect();
        let attempted = kinds.iter().position(|k| *k == "attempted");
        let end = kinds.iter().position(|k| *k == fate);
        // `Enqueued` comes from the enqueuing task and may reach observers after a runner that
        // was already awake claimed the record, so only the runner's own events are ordered.
        ensure(
            kinds.contains(&"enqueued") && attempted.is_some() && end.is_some() && attempted < end,
            || format!("events of {id} out of order: {kinds:?}"),
        )?;
    }
    rig.stop().await?;
    Ok(Verdict::Passed)
}

fn kind(event: &Event) -> &'static str {
    match event {
        Event::Enqueued { .. } => "enqueued",
        Event::Attempted { .. } => "attempted",
        Event::Delivered { .. } => "delivered",
        Event::Retrying { .. } => "retrying",
        Event::Parked { .. } => "parked",
        Event::Rejected { .. } => "rejected",
        Event::Halted { .. } => "halted",
        Event::Discarded { .. } => "discarded",
        _ => "other",
    }
}
