//! The link through the runner: offline means nothing is attempted, and after a failure no
//! server answered the runner probes with one record on backoff instead of hammering the rest.

use std::time::Duration;

use outbox_core::{Jitter, Millis};

use super::runner::{config, enqueue, paused_setup, policy, Rig};
use super::{rec, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, ScenarioResult, Verdict};
use crate::sink::Reply;

/// Offline: while the connectivity signal says offline nothing is attempted, however long it
/// lasts; the transition to online delivers everything.
pub async fn runner_offline_waits(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    let (online, signal) = tokio::sync::watch::channel(false);
    let policy = policy(Jitter::None, 3);
    let mut rig = Rig::start_with(
        store,
        sink.clone(),
        clock,
        policy,
        config(32, 4),
        Some(signal),
    )
    .await?;
    enqueue(&rig, vec![rec("a"), rec("b"), rec("c")]).await?;
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    ensure_eq(
        sink.deliveries().len(),
        0,
        "nothing attempted while offline",
    )?;
    ensure_eq(
        rig.outbox.stats().await?.pending,
        3,
        "all three still pending",
    )?;
    online.send_replace(true);
    rig.until("delivered once online", |s| s.delivered == 3)
        .await?;
    ensure(
        sink.deliveries().iter().all(|d| d.at >= T0 + 3_600_000),
        || "every delivery happened after the link came up".into(),
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// No answer: the first failure where no server answered stops the round; the runner then
/// probes with one record at a time on a growing backoff, and once a server answers it drains
/// the whole queue.
pub async fn runner_no_answer_probes(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    sink.otherwise(Reply::NoAnswer);
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(32, 1),
    )
    .await?;
    let names: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    enqueue(&rig, names.iter().map(|n| rec(n)).collect()).await?;
    let probes = sink.clone();
    rig.until("five attempts while the link is down", move |_| {
        probes.deliveries().len() >= 5
    })
    .await?;
    let outage: Vec<Millis> = sink.deliveries().iter().take(5).map(|d| d.at).collect();
    ensure(outage.windows(2).all(|w| w[1] > w[0]), || {
        format!("one attempt per probe while the link is down, at {outage:?}")
    })?;
    let gaps: Vec<Millis> = outage.windows(2).map(|w| w[1] - w[0]).collect();
    // The policy (1 s doubling to an 8 s cap, no jitter) on the unanswered count: a fixed
    // interval, or a backoff that forgets the count, shows here. Tokio's timer wakes on the
    // millisecond after a deadline, hence the 2 ms of slack.
    let policy_gaps: [Millis; 4] = [1_000, 2_000, 4_000, 8_000];
    ensure(
        gaps.len() == 4
            && gaps
                .iter()
                .zip(policy_gaps)
                .all(|(g, p)| (p..=p + 2).contains(g)),
        || format!("the probes back off as the policy says ({policy_gaps:?} ms): gaps {gaps:?}"),
    )?;

    let records = super::all_records(&**rig.outbox.store()).await?;
    ensure(records.iter().all(|r| r.attempts == 0), || {
        format!("no answer spends no budget: {records:?}")
    })?;
    // Each unanswered probe is counted on its record (the one still being answered may not
    // be written yet).
    let mut counted = 0;
    for record in &records {
        let probes = sink.deliveries_of(record.id).len() as u32;
        ensure(
            record.unanswered == probes || record.unanswered + 1 == probes,
            || format!("{} was probed {probes} times: {record:?}", record.id),
        )?;
        counted += record.unanswered;
    }
    ensure(counted >= 4, || {
        format!("the unanswered probes are counted on their records: {counted}")
    })?;
    sink.otherwise(Reply::Success);
    rig.until("drained once a server answers", |s| s.delivered == 10)
        .await?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}
