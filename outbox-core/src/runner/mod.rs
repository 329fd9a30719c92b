//! The runner: the one task per outbox that claims due records, delivers them, records what
//! happened and sleeps until the next reason to wake.
//!
//! It is split the way a sans-IO protocol stack is: [`scheduler`] holds every decision as a
//! plain value (what to claim, what to write, when to wake, what the link and a halt mean, how
//! a clock step is handled), and `shell` is the thin async task that performs its actions on
//! the store and the sink and feeds back what happened. The runner wakes on an enqueue (or
//! [`Outbox::notify`](crate::Outbox::notify)), on a timer for the earliest deadline, on a
//! connectivity transition, on `resume` and on shutdown; triggers that arrive during a drain
//! coalesce into one more round.

mod perform;
pub mod scheduler;
pub(crate) mod shell;
mod timeout;

pub use perform::perform;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch, Notify};

use self::scheduler::Scheduler;
use crate::clock::Clock;
use crate::config::RunnerConfig;
use crate::error::Result;
use crate::event::Event;
use crate::link::LinkState;
use crate::machine::Step;
use crate::outcome::ConflictResolver;
use crate::policy::RetryPolicy;
use crate::record::{Millis, RecordId};
use crate::sink::Sink;
use crate::store::Store;
use crate::unreadable::Unreadable;

/// Capacity of the event channel; a receiver that falls further behind sees `Lagged`.
const EVENT_CAPACITY: usize = 1024;

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
    /// Set by `resume()`, taken by the runner at its next wake.
    pub(crate) resume: AtomicBool,
    /// The runner's halt as last published (the store holds the persisted one).
    pub(crate) halted: AtomicBool,
    /// Records the runner holds, as the scheduler derives it.
    pub(crate) holding: AtomicUsize,
    /// The runner's look for unreadable rows, asked for at its start, has not ended (nor
    /// been put off, nor failed), or its last row is not said yet: `flush` waits for it.
    pub(crate) looking: AtomicBool,
    /// The link as the runner last saw it.
    pub(crate) link: Mutex<LinkState>,
    /// Bumped whenever the runner may have become settled, for `flush`.
    pub(crate) progress: watch::Sender<u64>,
    /// Set once the runner task has ended (however it ended).
    pub(crate) stopped: AtomicBool,
    /// Unreadable rows already reported by this process: each is said once.
    pub(crate) unreadable: Mutex<HashSet<RecordId>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("store", &self.store)
            .field("config", &self.config)
            .field("halted", &self.halted)
            .finish_non_exhaustive()
    }
}

/// The channel of an outbox's events, made with its builder so that a subscriber can be there
/// before the runner starts.
pub(crate) fn event_channel() -> broadcast::Sender<Event> {
    broadcast::channel(EVENT_CAPACITY).0
}

impl Shared {
    /// Everything the runner and the handle share, nothing held yet.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        sink: Arc<dyn Sink>,
        policy: RetryPolicy,
        config: RunnerConfig,
        clock: Arc<dyn Clock>,
        resolver: Arc<dyn ConflictResolver>,
        events: broadcast::Sender<Event>,
    ) -> Self {
        Shared {
            store,
            sink,
            policy,
            config,
            clock,
            resolver,
            events,
            wake: Notify::new(),
            resume: AtomicBool::new(false),
            halted: AtomicBool::new(false),
            holding: AtomicUsize::new(0),
            looking: AtomicBool::new(false),
            link: Mutex::new(LinkState::Up),
            progress: watch::channel(0).0,
            stopped: AtomicBool::new(false),
            unreadable: Mutex::new(HashSet::new()),
        }
    }

    pub(crate) fn now(&self) -> Millis {
        self.clock.now()
    }

    pub(crate) fn emit(&self, event: Event) {
        if let Event::Unreadable { id, .. } = &event {
            let mut seen = self.unreadable.lock().unwrap_or_else(|e| e.into_inner());
            if !seen.insert(*id) {
                return;
            }
        }
        log_event(&event);
        #[cfg(feature = "metrics")]
        crate::metrics::event(&event);
        // No receiver is fine: events are for observers, the store is the truth.
        let _ = self.events.send(event);
    }

    /// Emits an [`Event::Unreadable`] for each row ([`Shared::emit`] says each once).
    pub(crate) fn report_unreadable(&self, rows: &[Unreadable]) {
        for row in rows {
            self.emit(Event::Unreadable {
                id: row.id,
                reason: row.reason.clone(),
            });
        }
    }

    pub(crate) fn link(&self) -> LinkState {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
}

/// The log line of each event that a person should hear of.
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
            tracing::error!(record = id.0, %reason, "runner halted until resumed");
        }
        Event::StillHalted { reason } => {
            tracing::warn!(
                %reason,
                "resume did not lift the halt: the store holds a newer one, which holds"
            );
        }
        Event::Unreadable { id, reason } => {
            tracing::warn!(record = id.0, %reason, "row {} cannot be read: {reason}", id.0);
        }
        Event::Requeued { id } => {
            tracing::info!(record = id.0, "rejected record requeued");
        }
        Event::LinkDown { error, .. } => {
            tracing::warn!(%error, "no answer from the server: link down, probing on backoff");
        }
        Event::LinkUp { down_for } => {
            tracing::info!(?down_for, "the server answers again: link up");
        }
        _ => {}
    }
}

/// Makes what the scheduler holds, its halt, its link and whether it owes the start's look
/// visible on the handle; wakes `flush` when nothing is held.
pub(crate) fn publish(shared: &Shared, scheduler: &Scheduler) {
    shared
        .looking
        .store(scheduler.owes_look(), Ordering::SeqCst);
    publish_held(shared, scheduler);
}

/// [`publish`], but for whether the start's look is owed: what an event about to be sent
/// publishes. The look's own events are sent after the look has ended; `flush` must not see it
/// ended before the last of them is sent (the shell publishes it once every action is taken).
pub(crate) fn publish_held(shared: &Shared, scheduler: &Scheduler) {
    let holding = scheduler.holding();
    shared.holding.store(holding, Ordering::SeqCst);
    shared.halted.store(scheduler.is_halted(), Ordering::SeqCst);
    {
        let link = scheduler.link();
        let mut current = shared.link.lock().unwrap_or_else(|e| e.into_inner());
        if *current != *link {
            current.clone_from(link);
        }
    }
    if holding == 0 {
        shared.progress.send_modify(|n| *n = n.wrapping_add(1));
    }
}
