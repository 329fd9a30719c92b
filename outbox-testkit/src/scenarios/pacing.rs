//! Pacing through the runner: a retry goes out at the deadline it drew, however soon that is.

use std::sync::Arc;

use outbox_core::{Jitter, Millis, RunnerConfig};

use super::rec;
use super::runner::{config, enqueue, paused_setup, policy, Rig};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, ScenarioResult, Verdict};
use crate::sink::Reply;

/// Runners started one after another, each failing its first write with a 503.
const RUNNERS: u64 = 200;

/// Retries at their draw: 200 runners, each started on an empty queue, each failing one write
/// with a 503 and drawing its wait by full jitter over the first second; every retry goes out
/// at its own deadline (never before it, within 5 ms after it), so no 10 ms window holds more
/// than 5 % of them. A runner that held early retries until some timer of its own (the quiet
/// after its start's empty claim was one) sends a fleet that failed together back together.
pub async fn runner_retries_at_their_draw(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    let mut waits: Vec<Millis> = Vec::new();
    for runner in 0..RUNNERS {
        let payload = format!("w{runner}");
        sink.script_payload(payload.clone().into_bytes(), [Reply::Unavailable]);
        let mut rig = Rig::start(
            Arc::clone(&store),
            sink.clone(),
            clock,
            policy(Jitter::Full, 5),
            RunnerConfig {
                seed: Some(runner),
                ..config(32, 4)
            },
        )
        .await?;
        let id = enqueue(&rig, vec![rec(&payload)]).await?[0];
        rig.until("the write delivered after its 503", |s| {
            s.delivered == runner + 1
        })
        .await?;
        let times: Vec<Millis> = sink.deliveries_of(id).iter().map(|d| d.at).collect();
        ensure_eq(times.len(), 2, "a failure and its retry")?;
        let deadline = rig.retry_deadlines(id).first().copied().unwrap_or(0);
        ensure((deadline..=deadline + 5).contains(&times[1]), || {
            format!(
                "runner {runner}: retried {} ms after its failure, its deadline was {} ms",
                times[1] - times[0],
                deadline.saturating_sub(times[0])
            )
        })?;
        waits.push(times[1] - times[0]);
        rig.stop().await?;
    }
    let mut buckets = std::collections::BTreeMap::<Millis, u64>::new();
    for wait in &waits {
        *buckets.entry(wait / 10).or_default() += 1;
    }
    let (bucket, most) = buckets
        .iter()
        .max_by_key(|(_, n)| **n)
        .map_or((0, 0), |(b, n)| (*b, *n));
    ensure(most * 100 <= 5 * RUNNERS, || {
        format!(
            "{most} of {RUNNERS} retries within {}–{} ms of their failure",
            bucket * 10,
            bucket * 10 + 10
        )
    })?;
    Ok(Verdict::Passed)
}
