//! The runner: the one task per outbox that claims due records, delivers them, records what
//! happened and sleeps until the next reason to wake.
//!
//! It wakes on an enqueue (or [`Outbox::notify`](crate::Outbox::notify)), on a timer armed
//! after every drain for the earliest deadline, on a connectivity transition to online, on
//! `resume`, and on shutdown. Triggers that arrive during a drain coalesce into one more round.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastrand::Rng;
use tokio::sync::{broadcast, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::machine::{self, Step, Transition};
use crate::outcome::{duration_ms, ConflictResolver, Outcome};
use crate::policy::RetryPolicy;
use crate::record::{Lease, Millis, Record, RecordId};
use crate::sink::Sink;
use crate::store::{Claim, Store};

/// How the runner works through the queue.
///
/// ## Defaults
/// - `batch`: **32** records claimed per round: big enough to amortise a store transaction,
///   small enough that memory stays bounded whatever the backlog.
/// - `concurrency`: **4** deliveries in flight: a few requests in parallel without flooding a
///   server that has just come back.
/// - `lease`: **30 s**, renewed every third of it while a delivery runs, so only a dead
///   process lets a lease expire.
/// - `safety_poll`: **60 s**: the runner needs no polling to be correct; this slow poll only
///   recovers leases that other processes left to expire on a shared store.
/// - `delivery_timeout`: **60 s**: a sink that never reports must not hold its record (and
///   the queue behind it) forever; set the sink's own request timeout below it.
/// - `seed`: **random**; set it to make jitter reproducible.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::RunnerConfig;
///
/// let config = RunnerConfig { batch: 100, concurrency: 8, ..RunnerConfig::default() };
/// config.validate().unwrap();
/// assert_eq!(config.lease, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerConfig {
    /// Records claimed per round; at least 1.
    pub batch: usize,
    /// Deliveries in flight at once; at least 1.
    pub concurrency: usize,
    /// How long a claim holds a record before it may be recovered; at least 3 ms.
    pub lease: Duration,
    /// A slow poll for expired leases of other processes; `None` for none.
    pub safety_poll: Option<Duration>,
    /// Longest wait for the sink to report one delivery; past it the delivery counts as
    /// unanswered (nothing spent) and the record is scheduled again.
    pub delivery_timeout: Duration,
    /// Seed of the jitter RNG; `None` for a random seed.
    pub seed: Option<u64>,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            batch: 32,
            concurrency: 4,
            lease: Duration::from_secs(30),
            safety_poll: Some(Duration::from_secs(60)),
            delivery_timeout: Duration::from_secs(60),
            seed: None,
        }
    }
}

impl RunnerConfig {
    /// Checks every value is in range.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.concurrency == 0 {
            return Err(Error::InvalidConfig(
                "batch and concurrency must be at least 1".into(),
            ));
        }
        if self.lease < Duration::from_millis(3) || self.lease > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "lease must be between 3 ms and 7 days".into(),
            ));
        }
        if self.delivery_timeout.is_zero() || self.delivery_timeout > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "delivery_timeout must be between 1 ms and 7 days".into(),
            ));
        }
        if self
            .safety_poll
            .is_some_and(|d| d.is_zero() || d > MAX_WAIT)
        {
            return Err(Error::InvalidConfig(
                "safety_poll must be between 1 ms and 7 days".into(),
            ));
        }
        Ok(())
    }
}

/// The longest lease, delivery timeout or poll the runner accepts.
const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long finished deliveries wait for others of their round before their outcomes are
/// written anyway: long enough to gather a wave of quick deliveries into one write, short
/// enough that a slow neighbour does not hold them back.
const COMMIT_DELAY: Duration = Duration::from_millis(20);

/// However the jitter draws, a down link is probed no more often than this.
const MIN_PROBE: Duration = Duration::from_millis(50);

/// What the runner task and the handle share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) sink: Arc<dyn Sink>,
    pub(crate) policy: RetryPolicy,
    pub(crate) config: RunnerConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) resolver: Arc<dyn ConflictResolver>,
    pub(crate) events: broadcast::Sender<Event>,
    /// Coalescing wake-up: enqueue, notify, resume, manual verbs.
    pub(crate) wake: Notify,
    pub(crate) halted: AtomicBool,
    /// Records this runner holds (claimed, not yet reported or released).
    pub(crate) holding: AtomicUsize,
    /// Bumped after every round and every idle transition, for `flush`.
    pub(crate) progress: watch::Sender<u64>,
    pub(crate) rng: Mutex<Rng>,
}

impl Shared {
    pub(crate) fn now(&self) -> Millis {
        self.clock.now()
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, Rng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn emit(&self, event: Event) {
        log_event(&event);
        // No receiver is fine: events are for observers, the store is the truth.
        let _ = self.events.send(event);
    }

    fn bump(&self) {
        self.progress.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Applies steps atomically and emits the events of those whose guard held.
    pub(crate) async fn commit(&self, steps: Vec<Step>) -> Result<Vec<Step>> {
        if steps.is_empty() {
            return Ok(steps);
        }
        let transitions = steps.iter().map(|s| s.transition.clone()).collect();
        let applied = self.store.apply(transitions).await?;
        let done: Vec<Step> = steps
            .into_iter()
            .filter(|s| !applied.skipped.contains(&s.transition.id))
            .collect();
        for step in &done {
            self.emit(step.event.clone());
        }
        Ok(done)
    }

    /// Recovers records whose lease expired with no report (their process died): each counts
    /// one interruption, and the crash-loop guard parks repeat offenders.
    pub(crate) async fn recover_expired(&self) -> Result<usize> {
        let mut recovered = 0;
        loop {
            let now = self.now();
            let expired = self.store.expired(now, 256).await?;
            if expired.is_empty() {
                return Ok(recovered);
            }
            let steps = expired
                .iter()
                .map(|r| machine::on_interrupted(r, &self.policy, now))
                .collect();
            let done = self.commit(steps).await?;
            if done.is_empty() {
                // Every lease was taken over meanwhile: nothing more to do now.
                return Ok(recovered);
            }
            recovered += done.len();
        }
    }

    /// Re-bases the deadlines set before the wall clock stepped back (see
    /// [`machine::rebase`]).
    pub(crate) async fn clamp_deadlines(&self) -> Result<()> {
        loop {
            let now = self.now();
            let stepped = self.store.stepped_back(now, 256).await?;
            let transitions: Vec<_> = stepped
                .iter()
                .filter_map(|r| machine::rebase(r, now))
                .collect();
            if transitions.is_empty() {
                return Ok(());
            }
            let applied = self.store.apply(transitions).await?;
            if applied.skipped.len() == stepped.len() {
                return Ok(());
            }
        }
    }

    /// The clamp for leases: no live runner holds a lease further ahead than the longest
    /// lease the configuration accepts, so one beyond it was taken by a process whose clock
    /// ran ahead, and that process is gone. Such records are recovered as interrupted now,
    /// instead of when the wall clock catches up.
    pub(crate) async fn recover_far_leases(&self) -> Result<()> {
        let now = self.now();
        let limit = now.saturating_add(duration_ms(MAX_WAIT));
        // In-flight records are few (batches of live runners): read them all, earliest first.
        let in_flight = self.store.expired(Millis::MAX, 4_096).await?;
        let steps: Vec<Step> = in_flight
            .iter()
            .filter(|r| r.lease.is_some_and(|l| l.until > limit))
            .map(|r| machine::on_interrupted(r, &self.policy, now))
            .collect();
        self.commit(steps).await.map(drop)
    }
}

fn log_event(event: &Event) {
    match event {
        Event::Parked { id, reason } => {
            tracing::warn!(record = id.0, %reason, "record parked: needs attention");
        }
        Event::Rejected { id, reason } => {
            tracing::warn!(record = id.0, %reason, "record rejected by the server");
        }
        Event::Discarded { id, reason } => {
            tracing::warn!(record = id.0, %reason, "record discarded");
        }
        Event::Halted { id, reason } => {
            tracing::error!(record = id.0, %reason, "credential refused: runner halted until resumed");
        }
        _ => {}
    }
}

/// The link's health as the runner sees it: after a no-answer it probes with one record on
/// backoff until some server answers.
#[derive(Debug, Default)]
struct Link {
    down: bool,
    failures: u32,
    probe_at: Millis,
}

/// Why a round ended.
enum RoundEnd {
    /// Nothing stopped it and more may be due right away.
    More,
    /// Nothing (more) to do now; wait for the next trigger.
    Idle,
}

/// How one delivery task ended.
enum Report {
    Outcome(Outcome),
    Panicked,
    Abandoned,
}

/// Marks a round in progress for `flush`: a claim on its way back from the store is not yet
/// visible as due, nor as held.
struct Busy(Arc<Shared>);

impl Busy {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.holding.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(shared))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.holding.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) struct Runner {
    pub(crate) shared: Arc<Shared>,
    /// `Some(grace deadline)` once shutdown was asked for.
    pub(crate) stop: watch::Receiver<Option<Instant>>,
    pub(crate) online: Option<watch::Receiver<bool>>,
    link: Link,
    /// Whether this round already counted a no-answer against the link.
    round_unanswered: bool,
    store_failures: u32,
    /// Outcomes whose store write failed: written again before the next claim, so a store
    /// hiccup neither loses an outcome nor leaves its record to expire as "interrupted".
    unsaved_steps: Vec<Step>,
    /// Releases whose store write failed, written again likewise.
    unsaved_releases: Vec<Transition>,
    /// Outcomes of the last round, written together with the next claim (the stores' group
    /// commit then folds both into one durable commit) or before the runner waits.
    deferred: Vec<Step>,
    /// When the next round looks for expired leases again.
    next_recovery: Millis,
}

impl Runner {
    pub(crate) fn new(
        shared: Arc<Shared>,
        stop: watch::Receiver<Option<Instant>>,
        online: Option<watch::Receiver<bool>>,
    ) -> Self {
        Runner {
            shared,
            stop,
            online,
            link: Link::default(),
            round_unanswered: false,
            store_failures: 0,
            unsaved_steps: Vec::new(),
            unsaved_releases: Vec::new(),
            deferred: Vec::new(),
            next_recovery: 0,
        }
    }

    fn stopping(&self) -> bool {
        self.stop.borrow().is_some()
    }

    fn is_online(&self) -> bool {
        self.online.as_ref().is_none_or(|rx| *rx.borrow())
    }

    fn may_start(&self) -> bool {
        !self.stopping() && self.is_online() && !self.shared.halted.load(Ordering::SeqCst)
    }

    pub(crate) async fn run(mut self) {
        while !self.stopping() {
            if self.shared.halted.load(Ordering::SeqCst) || !self.is_online() {
                self.shared.bump();
                self.wait(None).await;
                continue;
            }
            if self.link.down && self.link.probe_at > self.shared.now() {
                let next = self.next_wake().await;
                self.shared.bump();
                self.wait(next).await;
                continue;
            }
            match self.round().await {
                Ok(RoundEnd::More) => {
                    self.store_failures = 0;
                    self.shared.bump();
                }
                Ok(RoundEnd::Idle) => {
                    self.store_failures = 0;
                    let next = self.next_wake().await;
                    self.shared.bump();
                    self.wait(next).await;
                }
                Err(err) => {
                    // The store failed (busy, disconnected, disk full): nothing is lost, the
                    // records stay where they are. Back off and try again.
                    self.store_failures = self.store_failures.saturating_add(1);
                    let delay = self.shared.policy.backoff.delay(self.store_failures);
                    tracing::error!(error = %err, retry_in = ?delay, "outbox store error; runner backing off");
                    self.shared.bump();
                    let at = self.shared.now().saturating_add(duration_ms(delay));
                    self.wait(Some(at)).await;
                }
            }
        }
        let deferred = std::mem::take(&mut self.deferred);
        self.save(deferred).await;
        if let Err(err) = self.save_unsaved().await {
            tracing::error!(error = %err, "outbox store error at shutdown; leases will expire");
        }
        self.shared.bump();
    }

    /// The wall-clock time to wake at when idle: the earliest deadline (not before the next
    /// probe while the link is down), bounded by the safety poll.
    async fn next_wake(&self) -> Option<Millis> {
        let now = self.shared.now();
        let due = match self.shared.store.next_due().await {
            Ok(due) => due,
            Err(err) => {
                tracing::warn!(error = %err, "could not read the next deadline");
                Some(now.saturating_add(1_000))
            }
        };
        let due = if self.link.down {
            due.map(|d| d.max(self.link.probe_at))
        } else {
            due
        };
        let poll = self
            .shared
            .config
            .safety_poll
            .map(|p| now.saturating_add(duration_ms(p)));
        match (due, poll) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sleeps until `at` (wall-clock ms), a wake-up, a connectivity change or shutdown.
    async fn wait(&mut self, at: Option<Millis>) {
        // Nothing waits unwritten while the runner sleeps.
        let deferred = std::mem::take(&mut self.deferred);
        self.save(deferred).await;
        if self.stopping() {
            // A round may already have seen the stop signal: there is no change left to await.
            return;
        }
        let sleep = async {
            match at {
                Some(at) => {
                    let ms = at.saturating_sub(self.shared.now());
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                None => std::future::pending().await,
            }
        };
        let connectivity = tokio::select! {
            _ = self.shared.wake.notified() => false,
            _ = sleep => false,
            _ = online_changed(&mut self.online) => true,
            _ = self.stop.changed() => false,
        };
        if connectivity && self.is_online() && self.link.down {
            // The device just came online: probe at once instead of waiting out the backoff.
            self.link.probe_at = self.shared.now();
        }
    }

    async fn round(&mut self) -> Result<RoundEnd> {
        let shared = Arc::clone(&self.shared);
        let _busy = Busy::new(&shared);
        self.round_unanswered = false;
        self.save_unsaved().await?;
        let limit = if self.link.down {
            1
        } else {
            shared.config.batch
        };
        // Tokens come from the process-wide RNG, not the seeded jitter RNG: two runners with
        // the same seed must still hold different leases.
        let token = fastrand::u64(..);
        // Recovery first: its read must not sit between the outcomes and the claim, or they
        // reach the store's writer apart and commit apart. A lease another process left can
        // only expire once per lease, so looking a few times per lease is enough: a drain does
        // not pay one more query per round.
        let now = shared.now();
        if now >= self.next_recovery {
            shared.recover_expired().await?;
            self.next_recovery = now.saturating_add(duration_ms(shared.config.lease / 3));
        }
        let claim = async {
            let now = shared.now();
            let lease = Lease {
                token,
                until: now.saturating_add(duration_ms(shared.config.lease)),
            };
            let claimed = shared.store.claim(Claim { now, limit, lease }).await?;
            Ok::<_, Error>((lease, claimed))
        };
        // The last round's outcomes and this round's claim go to the store together.
        let deferred = std::mem::take(&mut self.deferred);
        let (saved, claimed) = tokio::join!(self.shared.commit(deferred.clone()), claim);
        match saved {
            Ok(_) => {
                shared.holding.fetch_sub(deferred.len(), Ordering::SeqCst);
            }
            Err(err) => {
                tracing::error!(error = %err, "could not record delivery outcomes; will retry");
                self.unsaved_steps.extend(deferred);
            }
        }
        let (lease, mut claimed) = claimed?;
        if claimed.is_empty() {
            return Ok(RoundEnd::Idle);
        }
        let full = claimed.len() == limit;
        shared.holding.fetch_add(claimed.len(), Ordering::SeqCst);
        let suspect = claimed
            .iter()
            .position(|r| r.interrupted > 0)
            .map(|at| claimed.remove(at));
        let mut held = Held {
            queue: claimed.into(),
            running: HashMap::new(),
        };
        let solo = suspect.is_some();
        let concurrency = match suspect {
            Some(suspect) => {
                // A record whose delivery was interrupted goes alone, so that if it kills the
                // process again only it is charged, never the records claimed with it.
                self.release(&mut held).await;
                held.queue.push_back(suspect);
                1
            }
            None => shared.config.concurrency,
        };
        let (cut_short, outcomes) = self.deliver_all(&mut held, lease, concurrency).await;
        // Whatever stopped the round, records not attempted go back untouched.
        self.release(&mut held).await;
        if cut_short || !(full || solo) {
            self.save(outcomes).await;
            return Ok(RoundEnd::Idle);
        }
        self.deferred = outcomes;
        Ok(RoundEnd::More)
    }

    /// Delivers the claimed records, `concurrency` at a time. Returns whether the round was
    /// cut short (no answer, halt, offline or shutdown) and the outcomes not yet written.
    async fn deliver_all(
        &mut self,
        held: &mut Held,
        mut lease: Lease,
        concurrency: usize,
    ) -> (bool, Vec<Step>) {
        let shared = Arc::clone(&self.shared);
        let mut deliveries: JoinSet<Outcome> = JoinSet::new();
        let mut cut_short = false;
        let renew_every = shared.config.lease / 3;
        let mut renew_at = Instant::now() + renew_every;
        let mut abort_at: Option<Instant> = *self.stop.borrow();
        let mut aborted = false;
        let timeout = shared.config.delivery_timeout;
        // Outcomes not yet written: one store write per round (or per COMMIT_DELAY while slow
        // deliveries run), not one per finished delivery.
        let mut outcomes: Vec<Step> = Vec::new();
        let mut commit_at: Option<Instant> = None;
        loop {
            if !self.may_start() {
                cut_short = true;
            }
            while !cut_short && deliveries.len() < concurrency {
                let Some(record) = held.queue.pop_front() else {
                    break;
                };
                shared.emit(Event::Attempted {
                    id: record.id,
                    attempts: record.attempts,
                });
                let sink = Arc::clone(&shared.sink);
                let copy = record.clone();
                let handle = deliveries.spawn(async move {
                    match tokio::time::timeout(timeout, sink.deliver(&copy)).await {
                        Ok(outcome) => outcome,
                        Err(_) => Outcome::no_answer(format!(
                            "the sink did not report within {timeout:?}"
                        )),
                    }
                });
                held.running.insert(handle.id(), record);
            }
            if deliveries.is_empty() {
                return (cut_short, outcomes);
            }
            let commit_sleep = async {
                match commit_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let abort_sleep = async {
                match abort_at {
                    Some(at) if !aborted => tokio::time::sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(first) = deliveries.join_next_with_id() => {
                    let mut done = vec![first];
                    while let Some(more) = deliveries.try_join_next_with_id() {
                        done.push(more);
                    }
                    if self.report(held, done, &mut outcomes) {
                        cut_short = true;
                    }
                    if commit_at.is_none() && !outcomes.is_empty() {
                        commit_at = Some(Instant::now() + COMMIT_DELAY);
                    }
                }
                _ = commit_sleep => {
                    // Deliveries are still running: record what is known so far.
                    self.save(std::mem::take(&mut outcomes)).await;
                    commit_at = None;
                }
                _ = tokio::time::sleep_until(renew_at) => {
                    lease.until = shared.now().saturating_add(duration_ms(shared.config.lease));
                    // Records waiting for a slot are renewed too: they are ours until released.
                    let ids: Vec<RecordId> = held
                        .running
                        .values()
                        .chain(held.queue.iter())
                        .map(|r| r.id)
                        .collect();
                    if let Err(err) = shared.store.renew(&ids, lease).await {
                        // Deliveries go on; the next tick tries again.
                        tracing::warn!(error = %err, "could not renew leases");
                    }
                    renew_at = Instant::now() + renew_every;
                }
                changed = self.stop.changed(), if abort_at.is_none() => {
                    abort_at = match changed {
                        Ok(()) => *self.stop.borrow(),
                        Err(_) => Some(Instant::now()),
                    };
                }
                _ = abort_sleep => {
                    // Shutdown's grace ran out: stop waiting for the sink. The aborted
                    // deliveries are released below, nothing spent.
                    deliveries.abort_all();
                    aborted = true;
                }
                _ = online_changed(&mut self.online) => {}
            }
        }
    }

    /// Turns finished deliveries into steps (added to `outcomes`, written later) and updates
    /// the link and halt state. Returns true when the round must stop launching deliveries.
    fn report(
        &mut self,
        held: &mut Held,
        done: Vec<std::result::Result<(tokio::task::Id, Outcome), tokio::task::JoinError>>,
        outcomes: &mut Vec<Step>,
    ) -> bool {
        let shared = Arc::clone(&self.shared);
        let now = shared.now();
        let mut steps = Vec::with_capacity(done.len());
        let mut stop = false;
        for result in done {
            let (id, report) = match result {
                Ok((id, outcome)) => (id, Report::Outcome(outcome)),
                Err(err) if err.is_panic() => (err.id(), Report::Panicked),
                Err(err) => (err.id(), Report::Abandoned),
            };
            let Some(record) = held.running.remove(&id) else {
                continue;
            };
            let step = match report {
                Report::Abandoned => {
                    // Aborted at shutdown: it never reported, so it goes back untouched.
                    held.queue.push_back(record);
                    continue;
                }
                Report::Panicked => {
                    tracing::error!(
                        record = record.id.0,
                        "sink panicked; the delivery counts as interrupted"
                    );
                    machine::on_interrupted(&record, &shared.policy, now)
                }
                Report::Outcome(outcome) => {
                    let outcome = outcome.resolve_conflict(&record, shared.resolver.as_ref());
                    if outcome.is_unanswered() {
                        self.link_failed(now);
                        stop = true;
                    } else if !matches!(outcome, Outcome::Halt { .. }) {
                        // A server answered: the link is up and the probe delay starts over.
                        self.link = Link::default();
                    }
                    let step = machine::on_outcome(
                        &record,
                        &outcome,
                        &shared.policy,
                        now,
                        &mut shared.rng(),
                    );
                    if step.halt {
                        shared.halted.store(true, Ordering::SeqCst);
                        stop = true;
                    }
                    step
                }
            };
            steps.push(step);
        }
        outcomes.extend(steps);
        stop
    }

    /// Writes outcomes in one store call; on failure they wait in `unsaved_steps` and are
    /// written again before the next claim.
    async fn save(&mut self, steps: Vec<Step>) {
        if steps.is_empty() {
            return;
        }
        let count = steps.len();
        match self.shared.commit(steps.clone()).await {
            Ok(_) => {
                self.shared.holding.fetch_sub(count, Ordering::SeqCst);
            }
            Err(err) => {
                tracing::error!(error = %err, "could not record delivery outcomes; will retry");
                self.unsaved_steps.extend(steps);
            }
        }
    }

    /// Counts one no-answer against the link (once per round, however many deliveries of the
    /// round went unanswered together) and schedules the next probe.
    fn link_failed(&mut self, now: Millis) {
        self.link.down = true;
        if self.round_unanswered {
            return;
        }
        self.round_unanswered = true;
        self.link.failures = self.link.failures.saturating_add(1);
        let delay = self
            .shared
            .policy
            .delay(self.link.failures, None, &mut self.shared.rng())
            .max(MIN_PROBE);
        self.link.probe_at = now.saturating_add(duration_ms(delay));
    }

    /// Gives back every record still held, unattempted or whose delivery was abandoned.
    async fn release(&mut self, held: &mut Held) {
        let transitions: Vec<Transition> = held
            .queue
            .drain(..)
            .chain(held.running.drain().map(|(_, r)| r))
            .map(|r| machine::release(&r))
            .collect();
        if transitions.is_empty() {
            return;
        }
        let count = transitions.len();
        match self.shared.store.apply(transitions.clone()).await {
            Ok(_) => {
                self.shared.holding.fetch_sub(count, Ordering::SeqCst);
            }
            Err(err) => {
                tracing::error!(error = %err, "could not release claimed records; will retry");
                self.unsaved_releases.extend(transitions);
            }
        }
    }

    /// Writes the outcomes and releases an earlier store failure left unsaved.
    async fn save_unsaved(&mut self) -> Result<()> {
        if !self.unsaved_steps.is_empty() {
            let steps = std::mem::take(&mut self.unsaved_steps);
            let count = steps.len();
            if let Err(err) = self.shared.commit(steps.clone()).await {
                self.unsaved_steps = steps;
                return Err(err);
            }
            self.shared.holding.fetch_sub(count, Ordering::SeqCst);
        }
        if !self.unsaved_releases.is_empty() {
            let releases = std::mem::take(&mut self.unsaved_releases);
            let count = releases.len();
            if let Err(err) = self.shared.store.apply(releases.clone()).await {
                self.unsaved_releases = releases;
                return Err(err);
            }
            self.shared.holding.fetch_sub(count, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Resolves when the connectivity signal changes; never when there is none. A dropped sender
/// turns the signal off for good (always online).
async fn online_changed(online: &mut Option<watch::Receiver<bool>>) {
    match online {
        Some(rx) => {
            if rx.changed().await.is_err() {
                *online = None;
            }
        }
        None => std::future::pending().await,
    }
}

/// The records a round holds: claimed and not yet attempted, or being delivered.
struct Held {
    queue: VecDeque<Record>,
    running: HashMap<tokio::task::Id, Record>,
}
