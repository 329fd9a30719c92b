//! Scenarios where the wall clock steps back under the runner, and where a halt must outlive
//! the process: the schedule is data, so a store must keep what the runner re-bases and
//! persists exactly.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{
    async_trait, Backoff, Jitter, NewRecord, Outbox, Outcome, Record, RetryPolicy, RunnerConfig,
    Sink, SteppedClock, Store,
};
use tokio::time::Instant;

use super::runner::pause_time;
use super::{get, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};
use crate::paused::PausedClockStore;

const DAY: Duration = Duration::from_secs(86_400);

/// Answers from a script (the last answer repeats) and notes when each delivery came.
#[derive(Clone)]
struct Script {
    answers: Arc<Mutex<VecDeque<Outcome>>>,
    times: Arc<Mutex<Vec<Instant>>>,
}

impl Script {
    fn new(answers: Vec<Outcome>) -> Self {
        Script {
            answers: Arc::new(Mutex::new(answers.into())),
            times: Arc::default(),
        }
    }

    fn set(&self, answers: Vec<Outcome>) {
        *self.answers.lock().unwrap_or_else(|e| e.into_inner()) = answers.into();
    }

    fn times(&self) -> Vec<Instant> {
        self.times.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl Sink for Script {
    async fn deliver(&self, _: &Record) -> Outcome {
        self.times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if answers.len() > 1 {
            answers.pop_front().unwrap_or(Outcome::Delivered)
        } else {
            answers.front().cloned().unwrap_or(Outcome::Delivered)
        }
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_millis(1_500),
            2.0,
            Duration::from_secs(60),
        ))
        .with_jitter(Jitter::None)
}

async fn start(
    store: Arc<dyn Store>,
    sink: Script,
    clock: &SteppedClock,
) -> Result<Outbox, Failure> {
    Ok(Outbox::builder(store, sink)
        .policy(policy())
        .config(RunnerConfig::default().with_seed(7))
        .clock(Arc::new(clock.clone()))
        .start()
        .await?)
}

pub(super) async fn open(backend: &dyn Backend, location: &str) -> Result<Arc<dyn Store>, Failure> {
    let store = backend
        .open(location)
        .await
        .map_err(|e| Failure::from(e).context("open"))?;
    Ok(PausedClockStore::wrap(store))
}

fn http503() -> Outcome {
    Outcome::transient("HTTP 503", None)
}

/// The wall clock is set back a day while a 503'd record waits out its 1.5 s: the runner
/// notices the step at its next wake and the record is retried within the wait it was given,
/// not a day later.
pub async fn runner_step_back_while_waiting(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    let location = backend.create().await?;
    let store = open(backend, &location).await?;
    let clock = SteppedClock::starting_at(T0);
    let sink = Script::new(vec![http503(), Outcome::Delivered]);
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    let id = outbox.enqueue(NewRecord::new(b"step".to_vec())).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let failed = get(&*store, id).await?;
    ensure_eq(
        failed
            .next_attempt_at
            .zip(failed.last_attempt_at)
            .map(|(n, l)| n - l),
        Some(1_500),
        "the 503 was given a 1.5 s wait",
    )?;
    clock.step_back(DAY);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let times = sink.times();
    ensure_eq(times.len(), 2, "retried after the step, not a day later")?;
    let gap = times[1] - times[0];
    ensure(gap <= Duration::from_millis(1_600), || {
        format!("retried within its 1.5 s wait, not {gap:?}")
    })?;
    ensure_eq(outbox.stats().await?.delivered, 1, "delivered")?;
    outbox.shutdown(Duration::from_secs(5)).await?;
    Ok(Verdict::Passed)
}

/// The device is off while its clock is set back a day: after the restart, a record that was
/// given a 1.5 s wait is retried about 1.5 s after the start, not a day (nor an hour) later.
pub async fn runner_step_back_across_restart(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    let location = backend.create().await?;
    let store = open(backend, &location).await?;
    let clock = SteppedClock::starting_at(T0);
    let sink = Script::new(vec![http503()]);
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    let id = outbox.enqueue(NewRecord::new(b"step".to_vec())).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    outbox.shutdown(Duration::from_secs(5)).await?;
    // The handle holds the store too: a store one process may open must be let go of.
    drop(outbox);
    drop(store);
    ensure_eq(sink.times().len(), 1, "one attempt before the restart")?;
    clock.step_back(DAY);
    sink.set(vec![Outcome::Delivered]);
    let store = open(backend, &location).await?;
    let restarted = Instant::now();
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    let rebased = get(&*store, id).await?;
    ensure_eq(
        rebased
            .next_attempt_at
            .zip(rebased.last_attempt_at)
            .map(|(n, l)| n - l),
        Some(1_500),
        "the wait survives the restart and the step",
    )?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let times = sink.times();
    ensure_eq(times.len(), 2, "retried after the restart")?;
    let after = times[1] - restarted;
    ensure(after <= Duration::from_millis(1_600), || {
        format!("retried within its 1.5 s wait of the start, not {after:?}")
    })?;
    outbox.shutdown(Duration::from_secs(5)).await?;
    Ok(Verdict::Passed)
}

/// A refused credential halts once, and the halt is persisted: a restart stays halted and
/// sends nothing until `resume`, which clears it.
pub async fn runner_halt_survives_restart(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    let location = backend.create().await?;
    let store = open(backend, &location).await?;
    let clock = SteppedClock::starting_at(T0);
    let sink = Script::new(vec![Outcome::halt("HTTP 401")]);
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    outbox
        .enqueue_batch((0..3u8).map(|i| NewRecord::new(vec![i])).collect())
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let halt = outbox.stats().await?.halt;
    ensure(
        halt.as_ref().is_some_and(|h| h.reason == "HTTP 401"),
        || format!("the halt and its reason are in the stats: {halt:?}"),
    )?;
    outbox.shutdown(Duration::from_secs(5)).await?;
    // The handle holds the store too: a store one process may open must be let go of.
    drop(outbox);
    drop(store);
    let sent = sink.times().len();
    let store = open(backend, &location).await?;
    ensure(store.halt().await?.is_some(), || {
        "the halt was persisted".into()
    })?;
    sink.set(vec![Outcome::Delivered]);
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    ensure(outbox.is_halted(), || {
        "still halted after the restart".into()
    })?;
    ensure_eq(sink.times().len(), sent, "nothing sent while halted")?;
    outbox.resume();
    outbox.flush(Duration::from_secs(30)).await?;
    let stats = outbox.stats().await?;
    ensure_eq(
        (stats.delivered, stats.halt),
        (3, None),
        "resumed: all delivered",
    )?;
    ensure_eq(store.halt().await?, None, "the persisted halt is cleared")?;
    outbox.shutdown(Duration::from_secs(5)).await?;
    Ok(Verdict::Passed)
}
