//! Scenarios through the runner: the backend's store under a real [`Outbox`], a scripted sink
//! and tokio's paused clock, so minutes of backoff pass in no wall-clock time.
//!
//! These scenarios need a current-thread runtime (the `conformance!` tests build one) and
//! pause its clock. Each store call holds the paused clock still while the backend works (see
//! [`PausedClockStore`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{
    async_trait, Backoff, Clock, Event, Jitter, Millis, NewRecord, Outbox, Outcome, Record,
    RecordId, RetryPolicy, RunnerConfig, Sink, State, Stats, Store, TokioClock,
};
use tokio::sync::broadcast;

use super::{fresh, get, rec, rec_in, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};
use crate::paused::PausedClockStore;
use crate::sink::{Reply, ScriptedSink};

/// How long (on the paused clock) a scenario waits for the runner to reach a state.
const PATIENCE: Duration = Duration::from_secs(86_400);

/// Pauses tokio's clock, refusing a runtime where that is impossible.
pub(super) fn pause_time() -> Result<(), Failure> {
    let flavor = tokio::runtime::Handle::try_current()
        .map_err(|_| Failure::new("runner scenarios need a tokio runtime"))?
        .runtime_flavor();
    ensure(
        flavor == tokio::runtime::RuntimeFlavor::CurrentThread,
        || "runner scenarios pause tokio's clock, which needs a current-thread runtime".into(),
    )?;
    tokio::time::pause();
    Ok(())
}

/// A fresh store whose calls keep the paused clock still (see [`PausedClockStore`]).
pub(super) async fn fresh_paused(backend: &dyn Backend) -> Result<Arc<dyn Store>, Failure> {
    let (_, store) = fresh(backend).await?;
    Ok(PausedClockStore::wrap(store))
}

/// What every runner scenario starts from: tokio's clock paused, a fresh store that keeps it
/// still, a clock at [`T0`] and a scripted sink reading it.
pub(super) async fn paused_setup(
    backend: &dyn Backend,
) -> Result<(Arc<dyn Store>, TokioClock, ScriptedSink), Failure> {
    pause_time()?;
    let store = fresh_paused(backend).await?;
    let clock = TokioClock::starting_at(T0);
    Ok((store, clock, ScriptedSink::new(clock)))
}

/// A policy with exact, small numbers; `jitter` as given.
pub(super) fn policy(jitter: Jitter, max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(8),
        ))
        .with_jitter(jitter)
        .with_max_attempts(max_attempts)
}

pub(super) fn config(batch: usize, concurrency: usize) -> RunnerConfig {
    RunnerConfig {
        batch,
        concurrency,
        seed: Some(7),
        ..RunnerConfig::default()
    }
}

/// An outbox under test with what the scenario watches.
pub(super) struct Rig {
    pub(super) outbox: Outbox,
    events: broadcast::Receiver<Event>,
    seen: Vec<Event>,
}

impl Rig {
    pub(super) async fn start(
        store: Arc<dyn Store>,
        sink: impl Sink,
        clock: TokioClock,
        policy: RetryPolicy,
        config: RunnerConfig,
    ) -> Result<Rig, Failure> {
        Self::start_with(store, sink, clock, policy, config, None).await
    }

    /// [`Rig::start`] with a connectivity signal.
    pub(super) async fn start_with(
        store: Arc<dyn Store>,
        sink: impl Sink,
        clock: TokioClock,
        policy: RetryPolicy,
        config: RunnerConfig,
        online: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Rig, Failure> {
        let mut builder = Outbox::builder(store, sink)
            .policy(policy)
            .config(config)
            .clock(Arc::new(clock));
        if let Some(online) = online {
            builder = builder.connectivity(online);
        }
        let outbox = builder.start().await?;
        let events = outbox.events();
        Ok(Rig {
            outbox,
            events,
            seen: Vec::new(),
        })
    }

    /// Waits (on the paused clock) until the stats satisfy `done`, collecting events.
    pub(super) async fn until(
        &mut self,
        what: &str,
        done: impl Fn(&Stats) -> bool,
    ) -> Result<Stats, Failure> {
        crate::harness::waiting_for(format!("the runner: {what}"));
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            while let Ok(event) = self.events.try_recv() {
                self.seen.push(event);
            }
            let stats = self.outbox.stats().await?;
            if done(&stats) {
                return Ok(stats);
            }
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => self.seen.push(event),
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => {
                    return Err(Failure::new(format!(
                        "{what}: not reached within {PATIENCE:?} of paused time; stats {stats:?}"
                    )))
                }
            }
        }
    }

    /// Waits (on the paused clock) for an event matching `wanted`.
    pub(super) async fn until_event(
        &mut self,
        what: &str,
        wanted: impl Fn(&Event) -> bool,
    ) -> Result<(), Failure> {
        crate::harness::waiting_for(format!("an event: {what}"));
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.seen.iter().any(&wanted) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => self.seen.push(event),
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => {
                    return Err(Failure::new(format!(
                        "{what}: no such event within {PATIENCE:?}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// `Retrying` deadlines seen for `id`, in order.
    pub(super) fn retry_deadlines(&self, id: RecordId) -> Vec<Millis> {
        self.seen
            .iter()
            .filter_map(|e| match e {
                Event::Retrying { id: i, at, .. } if *i == id => Some(*at),
                _ => None,
            })
            .collect()
    }

    pub(super) async fn stop(self) -> Result<(), Failure> {
        self.outbox.shutdown(Duration::from_secs(60)).await?;
        Ok(())
    }
}

/// Enqueues through the handle, as an application does.
pub(super) async fn enqueue(rig: &Rig, records: Vec<NewRecord>) -> Result<Vec<RecordId>, Failure> {
    Ok(rig.outbox.enqueue_batch(records).await?)
}

/// Backoff through the runner: without jitter the gaps between attempts double from 1 s up to
/// the 8 s cap; with full jitter every retry lies inside its window `[0, min(2^(n-1) s, 8 s)]`
/// and the runner attempts it at its deadline, not before.
pub async fn runner_backoff_growth_and_cap(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    for jitter in [Jitter::None, Jitter::Full] {
        let store = fresh_paused(backend).await?;
        let clock = TokioClock::starting_at(T0);
        let sink = ScriptedSink::new(clock);
        sink.script_payload(b"r".to_vec(), vec![Reply::Unavailable; 6]);
        let mut rig = Rig::start(
            store,
            sink.clone(),
            clock,
            policy(jitter, 10),
            config(32, 4),
        )
        .await?;
        let id = enqueue(&rig, vec![rec("r")]).await?[0];
        rig.until("delivered after six 503s", |s| s.delivered == 1)
            .await?;
        let times: Vec<Millis> = sink.deliveries().iter().map(|d| d.at).collect();
        let deadlines = rig.retry_deadlines(id);
        ensure_eq(times.len(), 7, format!("{jitter:?}: seven deliveries"))?;
        ensure_eq(
            deadlines.len(),
            6,
            format!("{jitter:?}: six retries scheduled"),
        )?;
        for n in 0..6 {
            let window = (1_000u64 << n).min(8_000);
            let delay = deadlines[n].saturating_sub(times[n]);
            if jitter == Jitter::None {
                ensure_eq(
                    delay,
                    window,
                    format!("no jitter: delay before retry {}", n + 1),
                )?;
            } else {
                ensure(deadlines[n] >= times[n] && delay <= window, || {
                    format!(
                        "full jitter: retry {} delay {delay} outside [0, {window}]",
                        n + 1
                    )
                })?;
            }
            ensure(times[n + 1] >= deadlines[n], || {
                format!(
                    "attempt {} at {} before its deadline {}",
                    n + 2,
                    times[n + 1],
                    deadlines[n]
                )
            })?;
            ensure(times[n + 1] <= deadlines[n] + 1_000, || {
                format!(
                    "attempt {} at {} long after its deadline {}",
                    n + 2,
                    times[n + 1],
                    deadlines[n]
                )
            })?;
        }
        rig.stop().await?;
    }
    Ok(Verdict::Passed)
}

/// Poison at the head through the runner, one record per round: the poison is tried first,
/// the three behind it are delivered while it backs off, and it parks at the ceiling:
/// `3 processed · 1 parked · 0 blocked`.
pub async fn runner_poison_at_head(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    sink.script_payload(b"poison".to_vec(), vec![Reply::Unavailable; 10]);
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(1, 1),
    )
    .await?;
    enqueue(&rig, vec![rec("poison"), rec("a"), rec("b"), rec("c")]).await?;
    let stats = rig
        .until("three delivered and the poison parked", |s| {
            s.delivered == 3 && s.needs_attention == 1
        })
        .await?;
    ensure_eq(
        (
            stats.delivered,
            stats.needs_attention,
            stats.pending + stats.retrying,
            stats.held,
        ),
        (3, 1, 0, 0),
        "3 processed · 1 parked · 0 blocked",
    )?;
    let order: Vec<String> = sink
        .deliveries()
        .iter()
        .map(|d| String::from_utf8_lossy(&d.payload).into_owned())
        .collect();
    ensure_eq(
        order.iter().map(String::as_str).collect::<Vec<_>>(),
        vec!["poison", "a", "b", "c", "poison", "poison"],
        "the others are delivered while the poison backs off",
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// Retry-After through the runner: a 429 asking for 120 s is retried 120 s later, not after
/// the 1 s of the local schedule.
pub async fn runner_retry_after(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    let retry_after = Duration::from_secs(120);
    sink.script_payload(b"r".to_vec(), [Reply::TooManyRequests { retry_after }]);
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        // The default cap (15 min) is above the server's delay, so nothing shortens it.
        RetryPolicy::default(),
        config(32, 4),
    )
    .await?;
    let id = enqueue(&rig, vec![rec("r")]).await?[0];
    rig.until("delivered after the 429", |s| s.delivered == 1)
        .await?;
    let times: Vec<Millis> = sink.deliveries().iter().map(|d| d.at).collect();
    ensure_eq(times.len(), 2, "two deliveries")?;
    // The server's 120 s, spread by up to half of it, never below.
    let deadlines = rig.retry_deadlines(id);
    ensure(
        deadlines.len() == 1 && (times[0] + 120_000..=times[0] + 180_000).contains(&deadlines[0]),
        || {
            format!(
                "the deadline is the server's: {deadlines:?} after a delivery at {}",
                times[0]
            )
        },
    )?;
    ensure(
        times[1] >= deadlines[0] && times[1] <= deadlines[0] + 1_000,
        || {
            format!(
                "retried at +{} ms, its deadline +{} ms",
                times[1] - times[0],
                deadlines[0] - times[0]
            )
        },
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// Halt and resume: a 401 pauses the whole runner with no budget spent; nothing is attempted
/// however long it waits; `resume` delivers everything.
pub async fn runner_halt_resume(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    sink.script_payload(b"a".to_vec(), [Reply::Unauthorized]);
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(1, 1),
    )
    .await?;
    let ids = enqueue(&rig, vec![rec("a"), rec("b")]).await?;
    rig.until_event(
        "a Halted event naming a",
        |e| matches!(e, Event::Halted { id, .. } if *id == ids[0]),
    )
    .await?;
    ensure(rig.outbox.is_halted(), || "a 401 halts the runner".into())?;
    tokio::time::sleep(Duration::from_secs(600)).await;
    ensure_eq(
        sink.deliveries().len(),
        1,
        "nothing attempted while halted, however long",
    )?;
    let a = get(&**rig.outbox.store(), ids[0]).await?;
    ensure(
        a.state.is_due_kind() && a.attempts == 0 && a.unanswered == 0 && a.lease.is_none(),
        || format!("a halted delivery spends no budget and releases the record: {a:?}"),
    )?;
    rig.outbox.resume();
    rig.until("both delivered after resume", |s| s.delivered == 2)
        .await?;
    ensure(!rig.outbox.is_halted(), || "resumed".into())?;
    ensure_eq(sink.deliveries().len(), 3, "a twice, b once")?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// A sink that takes a second per delivery and tracks how many run at once, per group.
#[derive(Clone)]
struct Tracking {
    inner: ScriptedSink,
    state: Arc<Mutex<Concurrency>>,
}

#[derive(Default)]
struct Concurrency {
    now: HashMap<Option<String>, usize>,
    total: usize,
    max_group: usize,
    max_total: usize,
}

#[async_trait]
impl Sink for Tracking {
    async fn deliver(&self, record: &Record) -> Outcome {
        {
            let mut c = self.state.lock().unwrap_or_else(|e| e.into_inner());
            c.total += 1;
            c.max_total = c.max_total.max(c.total);
            let n = c.now.entry(record.group.clone()).or_default();
            *n += 1;
            let n = *n;
            if record.group.is_some() {
                c.max_group = c.max_group.max(n);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let outcome = self.inner.answer(record).await;
        let mut c = self.state.lock().unwrap_or_else(|e| e.into_inner());
        c.total -= 1;
        if let Some(n) = c.now.get_mut(&record.group) {
            *n -= 1;
        }
        outcome
    }
}

/// Groups through the runner: records of a group go one at a time in id order, groups are
/// delivered in parallel, and a parked head (a 409 with the default resolver) holds back its
/// own group only, counted as held.
pub async fn runner_groups(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    let store = fresh_paused(backend).await?;
    let clock = TokioClock::starting_at(T0);
    let inner = ScriptedSink::new(clock);
    inner.script_payload(b"a1".to_vec(), [Reply::Conflict]);
    let sink = Tracking {
        inner: inner.clone(),
        state: Arc::default(),
    };
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(32, 4),
    )
    .await?;
    let records = ["a1", "b1", "a2", "b2", "c1", "b3", "a3"]
        .iter()
        .map(|n| rec_in(n, &n[..1]))
        .collect();
    let ids = enqueue(&rig, records).await?;
    let stats = rig
        .until("b and c delivered, a parked", |s| {
            s.delivered == 4 && s.needs_attention == 1
        })
        .await?;
    ensure_eq(
        (stats.held, stats.pending),
        (2, 2),
        "a2 and a3 held behind a1",
    )?;
    ensure_eq(
        get(&**rig.outbox.store(), ids[0]).await?.state,
        State::NeedsAttention,
        "a1 parked",
    )?;
    let b_order: Vec<RecordId> = inner
        .deliveries()
        .iter()
        .filter(|d| d.group.as_deref() == Some("b"))
        .map(|d| d.id)
        .collect();
    ensure_eq(b_order, vec![ids[1], ids[3], ids[5]], "b in id order")?;
    let (max_group, max_total) = {
        let c = sink.state.lock().unwrap_or_else(|e| e.into_inner());
        (c.max_group, c.max_total)
    };
    ensure_eq(max_group, 1, "at most one record of a group in flight")?;
    ensure(max_total >= 2, || {
        format!("groups are delivered in parallel: at most {max_total} ran at once")
    })?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// A person's retry through the runner: a record parked at the ceiling gets a fresh budget and
/// is delivered.
pub async fn runner_manual_retry(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    sink.script_payload(b"r".to_vec(), vec![Reply::Unavailable; 3]);
    let mut rig = Rig::start(
        store,
        sink.clone(),
        clock,
        policy(Jitter::None, 2),
        config(32, 4),
    )
    .await?;
    let id = enqueue(&rig, vec![rec("r")]).await?[0];
    rig.until("parked", |s| s.needs_attention == 1).await?;
    ensure_eq(
        get(&**rig.outbox.store(), id).await?.attempts,
        2,
        "parked after two",
    )?;
    rig.outbox.retry(id).await?;
    rig.until("delivered after the retry", |s| s.delivered == 1)
        .await?;
    ensure_eq(
        sink.deliveries().len(),
        4,
        "two, then a fresh budget of two",
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// Recovery at start and the in-process crash-loop guard: a record left in flight by a dead
/// runner is recovered at start (`interrupted += 1`) and delivered; a record whose delivery
/// panics every time is parked after `max_interruptions`, and the runner goes on delivering.
pub async fn runner_recovers_interrupted(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    let store = fresh_paused(backend).await?;
    let ids = store.enqueue(vec![rec("left"), rec("boom")], T0).await?;
    let lease = outbox_core::Lease {
        token: 99,
        until: T0 + 1_000,
    };
    let left = store
        .claim(outbox_core::Claim {
            now: T0,
            limit: 1,
            lease,
        })
        .await?;
    ensure_eq(super::ids(&left), vec![ids[0]], "a dead runner's claim")?;
    let clock = TokioClock::starting_at(T0 + 5_000);
    let sink = ScriptedSink::new(clock);
    sink.script_payload(b"boom".to_vec(), vec![Reply::Panic; 10]);
    let mut rig = Rig::start(
        store.clone(),
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config(32, 4),
    )
    .await?;
    let stats = rig
        .until("left delivered, boom parked", |s| {
            s.delivered == 1 && s.needs_attention == 1
        })
        .await?;
    ensure_eq(stats.in_flight, 0, "nothing left in flight")?;
    ensure_eq(
        sink.deliveries_of(ids[0]).len(),
        1,
        "the recovered record is delivered once",
    )?;
    let left = sink.deliveries_of(ids[0]);
    ensure_eq(
        (left[0].interrupted, left[0].attempts),
        (1, 0),
        "start-up recovery counted one interruption and spent nothing",
    )?;
    let boom = get(&*store, ids[1]).await?;
    ensure_eq(
        (boom.state, boom.interrupted, boom.attempts),
        (State::NeedsAttention, 3, 0),
        "a delivery that panics every time is parked after max_interruptions",
    )?;
    ensure_eq(sink.deliveries_of(ids[1]).len(), 3, "three tries")?;
    // The panics did not kill the runner: a record enqueued after them is delivered.
    let after = enqueue(&rig, vec![rec("after")]).await?;
    rig.until("a record enqueued after the panics delivered", |s| {
        s.delivered == 2
    })
    .await?;
    ensure_eq(
        sink.deliveries_of(after[0]).len(),
        1,
        "the runner survives a panicking sink",
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}

/// A delivery that outlasts its lease: the runner renews the lease while the sink works, so
/// the lease never runs out under it; the record is delivered once and never counted as
/// interrupted, while a quick record beside it goes on.
pub async fn runner_long_delivery_keeps_lease(backend: &dyn Backend) -> ScenarioResult {
    let (store, clock, sink) = paused_setup(backend).await?;
    let lease = RunnerConfig::default().lease;
    sink.script_payload(b"slow".to_vec(), [Reply::Slow { after: lease * 4 }]);
    let config = RunnerConfig {
        delivery_timeout: lease * 10,
        ..config(32, 4)
    };
    let mut rig = Rig::start(
        store.clone(),
        sink.clone(),
        clock,
        policy(Jitter::None, 3),
        config,
    )
    .await?;
    let ids = enqueue(&rig, vec![rec("slow"), rec("quick")]).await?;
    let (started, slow_id) = (sink.clone(), ids[0]);
    rig.until("the slow delivery to start", move |_| {
        !started.deliveries_of(slow_id).is_empty()
    })
    .await?;
    // Two leases into the delivery, another runner looking for expired leases finds none.
    tokio::time::sleep(lease * 2).await;
    let now = clock.now();
    let expired = store.expired(now, 10).await?;
    ensure(expired.is_empty(), || {
        format!("two leases into a delivery its lease must have been renewed, yet at {now} these are expired: {expired:?}")
    })?;
    let stats = rig
        .until("the slow and the quick record delivered", |s| {
            s.delivered == 2
        })
        .await?;
    let slow = sink.deliveries_of(ids[0]);
    ensure_eq(
        slow.len(),
        1,
        "the slow record is delivered once: its lease was renewed, never taken over",
    )?;
    ensure_eq(slow[0].interrupted, 0, "never counted as interrupted")?;
    ensure_eq(
        (stats.in_flight, stats.retrying, stats.needs_attention),
        (0, 0, 0),
        "nothing left",
    )?;
    rig.stop().await?;
    Ok(Verdict::Passed)
}
