//! The runner's decisions as a plain value: events in, actions and the next wake-up out.
//!
//! Nothing here reads a clock, sleeps, spawns or touches the store or the sink. The async
//! shell (`runner::shell`, private) feeds it what happened ([`Input`], with the wall and monotonic
//! time of the reading) and performs what it asks for ([`Action`]), one store call at a time,
//! sleeping until [`Scheduler::poll_timeout`] in between. Every rule of the runner is
//! therefore a unit test on plain values.
//!
//! It is public for those who drive many runners without tokio, e.g. a simulation of a fleet
//! on a virtual clock (the `fleet-sim` crate does exactly that). An application
//! uses [`Outbox`](crate::Outbox), which runs it for you.
//!
//! ```
//! use outbox_core::runner::scheduler::{Action, Io, Now, Scheduler};
//! use outbox_core::{RetryPolicy, RunnerConfig};
//!
//! let now = Now { wall: 1_700_000_000_000, mono: 0 };
//! let mut runner = Scheduler::new(RunnerConfig::default(), RetryPolicy::default(), 1, 2, now, None);
//! // Started, it looks for due work: one store call that claims.
//! let Some(Action::Io(Io::Write { claim: Some(claim), .. })) = runner.poll_action() else {
//!     unreachable!()
//! };
//! assert_eq!(claim.limit, 32);
//! ```

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use fastrand::Rng;

use crate::config::RunnerConfig;
use crate::event::Event;
use crate::link::{Link, LinkState};
use crate::machine::{self, Step, Transition};
use crate::outcome::{duration_ms, Outcome};
use crate::policy::RetryPolicy;
use crate::record::{Lease, Millis, Record, RecordId};
use crate::store::{Claim, Halt};

/// How long finished deliveries wait for others of their round before their outcomes are
/// written anyway: long enough to gather a wave of quick deliveries into one write, short
/// enough that a slow neighbour does not hold them back.
pub const COMMIT_DELAY: Millis = 20;

/// A change of the wall clock against the monotonic clock larger than this is a step.
pub const STEP_TOLERANCE: Millis = 2_000;

/// After a claim that found nothing, the next claim that no enqueue or verb asked for waits at
/// least this long, doubling with every empty claim in a row up to [`MAX_QUIET`]: a store whose
/// `next_due` says "due" while its claim finds nothing (another runner was quicker, or a bug)
/// must not spin the runner.
const EMPTY_CLAIM_QUIET: Millis = 50;
const MAX_QUIET: Millis = 5_000;

/// Records remembered as already warned about a cut `Retry-After`.
const MAX_WARNED: usize = 1_024;

/// One reading of both clocks: wall-clock milliseconds (persisted deadlines) and milliseconds
/// of the monotonic clock since the runner started (timers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Wall-clock milliseconds since the Unix epoch.
    pub wall: Millis,
    /// Milliseconds of a monotonic clock since the runner started.
    pub mono: Millis,
}

/// How one delivery ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Report {
    /// The sink reported (a conflict already through the resolver).
    Outcome(Outcome),
    /// The sink panicked: counted as an interruption.
    Panicked,
    /// Aborted at shutdown: it never reported.
    Abandoned,
}

/// What happened, as the shell tells it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// An enqueue, `notify` or a manual verb: look for due work.
    Wake,
    /// A timeout the scheduler asked for passed (or nothing but the clock changed).
    Timer,
    /// The connectivity signal changed.
    Online(bool),
    /// The application resumed the runner.
    Resume,
    /// Shutdown: deliveries under way may report until `grace` (monotonic).
    Shutdown {
        /// Monotonic milliseconds.
        grace: Millis,
    },
    /// A delivery ended.
    Reported {
        /// The record.
        id: RecordId,
        /// How the delivery ended.
        report: Report,
    },
    /// The store call of the last [`Io`] returned.
    Done(Result<IoDone, String>),
}

/// What a store call returned.
#[derive(Debug, Default)]
pub struct IoDone {
    /// Ids of the written transitions whose guard did not hold.
    pub skipped: Vec<RecordId>,
    /// Records claimed by a write with a claim.
    pub claimed: Vec<Record>,
    /// The earliest deadline, for [`Io::NextDue`].
    pub next_due: Option<Millis>,
    /// Records a chore changed (recovered, re-based, released).
    pub changed: usize,
}

/// A store call for the shell to make, then report with [`Input::Done`].
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Io {
    /// `Store::round`: the transitions, then the claim if any, in one commit.
    Write {
        /// Outcomes and releases to apply first.
        transitions: Vec<Transition>,
        /// The claim to make after them, if any.
        claim: Option<Claim>,
    },
    /// `Store::renew` for the records of the round.
    Renew {
        /// The records.
        ids: Vec<RecordId>,
        /// The lease with its new expiry.
        lease: Lease,
    },
    /// `Store::next_due`.
    NextDue,
    /// Recover expired leases of any process (each counts one interruption).
    RecoverExpired,
    /// Recover in-flight records whose lease lies further ahead than one lease (taken before
    /// the wall clock stepped back, by a process now gone), except `ours`.
    RecoverFarLeases {
        /// Records this runner holds: never recovered.
        ours: Vec<RecordId>,
    },
    /// Re-base records scheduled before a step back: by `step` when measured, else from now.
    Rebase {
        /// The step back, in milliseconds, when the runner measured it.
        step: Option<Millis>,
    },
    /// Make records waiting out a no-answer backoff due now (the link is back).
    Relink {
        /// The records.
        ids: Vec<RecordId>,
    },
    /// Persist the halt, or clear it.
    SetHalt(Option<Halt>),
}

/// A log line that is not an event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The link is still down.
    LinkStillDown {
        /// When it went down.
        since: Millis,
        /// The last transport error.
        last_error: String,
    },
    /// A server asked to wait longer than `max_retry_after`; warned once per record.
    RetryAfterCut {
        /// The record.
        id: RecordId,
        /// What the server asked for.
        asked: Duration,
    },
    /// A sink panicked.
    SinkPanicked {
        /// The record.
        id: RecordId,
    },
    /// A store call failed; the runner tries again after `retry_in`.
    StoreFailed {
        /// What the store said.
        error: String,
        /// When the runner tries again.
        retry_in: Duration,
    },
}

/// What the shell must do next.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Start delivering the record.
    Deliver(Record),
    /// Abort every delivery under way (shutdown's grace ran out).
    AbortDeliveries,
    /// Tell observers (and log, for the events that are logged).
    Emit(Event),
    /// Log a line.
    Log(Notice),
    /// Make a store call and report it.
    Io(Io),
}

/// A transition waiting to be written, with the event to send once it is.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Write {
    transition: Transition,
    event: Option<Event>,
}

impl Write {
    /// A claimed record given back without an attempt.
    fn release(record: &Record) -> Self {
        Write {
            transition: machine::release(record),
            event: None,
        }
    }
}

impl From<Step> for Write {
    fn from(step: Step) -> Self {
        Write {
            transition: step.transition,
            event: Some(step.event),
        }
    }
}

/// The records a round holds.
#[derive(Debug)]
struct RoundState {
    lease: Lease,
    /// Claimed, not yet started.
    queue: VecDeque<Record>,
    /// Being delivered.
    running: HashMap<RecordId, Record>,
    /// The claim was full: more may be due right away.
    full: bool,
    /// A suspect record goes alone (see the crash-loop guard).
    solo: bool,
    /// No delivery starts any more (no answer, halt, offline or shutdown).
    cut_short: bool,
    concurrency: usize,
}

impl RoundState {
    fn held(&self) -> usize {
        self.queue.len() + self.running.len()
    }
}

/// Which kind of store call is under way, and what it carried.
#[derive(Debug)]
enum Pending {
    Write {
        writes: Vec<Write>,
        claim: Option<Lease>,
    },
    NextDue,
    SetHalt(Option<Halt>),
    /// A chore that may have made records due (recovery, re-basing, relinking).
    Changed,
    Other,
}

/// A rejection storm: records of different groups rejected in a row for one reason.
#[derive(Debug, Default)]
struct Storm {
    reason: Option<String>,
    groups: Vec<Option<String>>,
}

impl Storm {
    /// Counts a rejection; returns the count in a row.
    fn rejected(&mut self, group: &Option<String>, reason: &str) -> usize {
        if self.reason.as_deref() != Some(reason) {
            self.reason = Some(reason.to_owned());
            self.groups.clear();
        }
        if group.is_none() || !self.groups.contains(group) {
            self.groups.push(group.clone());
        }
        self.groups.len()
    }

    fn reset(&mut self) {
        self.reason = None;
        self.groups.clear();
    }
}

/// The runner as a pure value (see the module documentation).
#[derive(Debug)]
pub struct Scheduler {
    config: RunnerConfig,
    policy: RetryPolicy,
    /// The jitter RNG (seeded by the configuration).
    rng: Rng,
    /// Lease tokens: never from the jitter RNG, so two runners with one seed hold different
    /// leases.
    tokens: Rng,
    now: Now,
    /// `wall - mono` at the last reading, to see the wall clock step.
    offset: i128,
    link: Link,
    online: bool,
    halt: Option<Halt>,
    /// The `Halted` event, sent once the halt is persisted.
    halted_event: Option<Event>,
    /// Monotonic grace deadline once shutdown was asked for.
    stopping: Option<Millis>,
    aborted: bool,
    finished: bool,
    /// A trigger arrived: look for due work.
    wanted: bool,
    actions: VecDeque<Action>,
    /// Store calls the scheduler wants made, in order, before it claims again.
    chores: VecDeque<Io>,
    /// The store call under way.
    pending: Option<Pending>,
    /// The one buffer of transitions not yet written.
    writes: Vec<Write>,
    round: Option<RoundState>,
    /// Earliest deadline as last read, and whether it must be read again.
    next_due: Option<Millis>,
    next_due_stale: bool,
    commit_at: Option<Millis>,
    renew_at: Option<Millis>,
    /// When the next claim first looks for expired leases (monotonic).
    recover_at: Millis,
    far_leases_at: Option<Millis>,
    poll_at: Option<Millis>,
    warn_at: Option<Millis>,
    store_failures: u32,
    retry_io_at: Option<Millis>,
    /// A server's `Retry-After` holds the whole runner, not only its record: nothing is
    /// claimed before this wall-clock time.
    hold_until: Option<Millis>,
    /// Deliveries allowed in flight at once: back to 1 after a server asked this client to
    /// wait, doubled by every answer that does not ask it again, up to `concurrency`. A
    /// device that was told "too many" tries one request before it sends its backlog.
    window: usize,
    /// Claims in a row that found nothing, and when the next unasked claim may go.
    empty_claims: u32,
    quiet_until: Millis,
    storm: Storm,
    warned: VecDeque<RecordId>,
}

impl Scheduler {
    /// A runner starting at `now`, halted if the store says so. `token_seed` must differ
    /// between runners (the shell takes it from the process-wide RNG).
    pub fn new(
        config: RunnerConfig,
        policy: RetryPolicy,
        seed: u64,
        token_seed: u64,
        now: Now,
        halt: Option<Halt>,
    ) -> Self {
        let lease_ms = duration_ms(config.lease);
        let window = config.concurrency;
        Scheduler {
            poll_at: config
                .safety_poll
                .map(|p| now.mono.saturating_add(duration_ms(p))),
            // Leases further ahead than one lease were taken before a step back, or by a
            // process that is still renewing: after one lease, a live one has renewed.
            far_leases_at: Some(now.mono.saturating_add(lease_ms)),
            recover_at: now.mono.saturating_add(lease_ms / 3),
            config,
            policy,
            rng: Rng::with_seed(seed),
            tokens: Rng::with_seed(token_seed),
            now,
            offset: offset(now),
            link: Link::default(),
            online: true,
            halt,
            halted_event: None,
            stopping: None,
            aborted: false,
            finished: false,
            wanted: true,
            actions: VecDeque::new(),
            chores: VecDeque::new(),
            pending: None,
            writes: Vec::new(),
            round: None,
            next_due: None,
            next_due_stale: true,
            commit_at: None,
            renew_at: None,
            warn_at: None,
            store_failures: 0,
            retry_io_at: None,
            hold_until: None,
            window,
            empty_claims: 0,
            quiet_until: 0,
            storm: Storm::default(),
            warned: VecDeque::new(),
        }
    }

    /// Records this runner holds: claimed and not yet reported, or reported and not yet
    /// written. Derived, never counted by hand.
    pub fn holding(&self) -> usize {
        let writing = match &self.pending {
            Some(Pending::Write { writes, claim }) => writes.len() + usize::from(claim.is_some()),
            _ => 0,
        };
        self.round.as_ref().map_or(0, RoundState::held) + self.writes.len() + writing
    }

    /// The halt in force, if any.
    pub fn halt(&self) -> Option<&Halt> {
        self.halt.as_ref()
    }

    /// The link as this runner sees it.
    pub fn link(&self) -> &LinkState {
        self.link.state()
    }

    /// True once shutdown finished: nothing held, everything written or given up.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Takes in what happened at `now`.
    pub fn handle(&mut self, now: Now, input: Input) {
        self.observe(now);
        match input {
            Input::Wake => self.wanted = true,
            Input::Timer => {}
            Input::Online(online) => self.set_online(online),
            Input::Resume => self.resume(),
            Input::Shutdown { grace } => {
                self.stopping = Some(self.stopping.map_or(grace, |g| g.min(grace)));
                self.cut_round();
            }
            Input::Reported { id, report } => self.reported(id, report),
            Input::Done(result) => self.done(result),
        }
        self.timers();
    }

    /// The next thing to do, or `None` to wait for an input (until [`Self::poll_timeout`]).
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.actions.is_empty() && self.pending.is_none() && !self.finished {
            self.decide();
        }
        self.actions.pop_front()
    }

    /// When to feed [`Input::Timer`] at the latest (monotonic milliseconds).
    pub fn poll_timeout(&self) -> Option<Millis> {
        let mut at: Option<Millis> = None;
        let mut earliest = |t: Option<Millis>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        earliest(self.poll_at);
        earliest(self.far_leases_at);
        earliest(self.retry_io_at);
        earliest(self.warn_at.filter(|_| self.link.is_down()));
        match &self.round {
            Some(round) => {
                earliest(self.renew_at);
                earliest(self.commit_at.filter(|_| !self.writes.is_empty()));
                if !self.aborted && !round.running.is_empty() {
                    earliest(self.stopping);
                }
            }
            None if self.may_start() => {
                let not_before = match (self.link.probe_at(), self.hold_until) {
                    (Some(probe), Some(hold)) => Some(probe.max(hold)),
                    (probe, hold) => probe.or(hold),
                };
                // A trigger that arrived during a hold or a probe wait is served when it ends.
                let next_due = if self.wanted {
                    Some(self.now.wall)
                } else {
                    self.next_due
                };
                let due = match (next_due, not_before) {
                    (Some(due), Some(not_before)) => Some(due.max(not_before)),
                    (due, None) => due,
                    (None, Some(_)) => None,
                };
                let not_before = self.quiet_until.max(self.retry_io_at.unwrap_or(0));
                earliest(due.map(|wall| self.mono_of(wall).max(not_before)));
            }
            None => {}
        }
        at
    }

    fn mono_of(&self, wall: Millis) -> Millis {
        self.now
            .mono
            .saturating_add(wall.saturating_sub(self.now.wall))
    }

    fn may_start(&self) -> bool {
        self.stopping.is_none() && self.online && self.halt.is_none()
    }

    /// Reads the clocks: a wall clock that moved against the monotonic clock stepped.
    fn observe(&mut self, now: Now) {
        self.now = now;
        let offset = offset(now);
        let moved = offset - self.offset;
        self.offset = offset;
        if moved < -i128::from(STEP_TOLERANCE) {
            let step = Millis::try_from(-moved).unwrap_or(Millis::MAX);
            self.link.step_back(step);
            if let Some(hold) = &mut self.hold_until {
                *hold = hold.saturating_sub(step);
            }
            self.chores.push_back(Io::Rebase { step: Some(step) });
            self.far_leases_at = Some(now.mono.saturating_add(duration_ms(self.config.lease)));
            self.next_due_stale = true;
            self.wanted = true;
        } else if moved > i128::from(STEP_TOLERANCE) {
            // A step forward only makes deadlines come sooner: look again.
            self.next_due_stale = true;
            self.wanted = true;
        }
    }

    /// Acts on timers that passed.
    fn timers(&mut self) {
        let mono = self.now.mono;
        if self.poll_at.is_some_and(|t| t <= mono) {
            self.poll_at = self
                .config
                .safety_poll
                .map(|p| mono.saturating_add(duration_ms(p)));
            // The poll looks for leases other processes left to expire (records it recovers
            // wake the runner) and reads the next deadline again; it claims nothing itself.
            self.recover_at = mono.saturating_add(duration_ms(self.config.lease / 3));
            self.chores.push_back(Io::RecoverExpired);
            self.next_due_stale = true;
        }
        if self.far_leases_at.is_some_and(|t| t <= mono) {
            self.far_leases_at = None;
            let ours = self.held_ids();
            self.chores.push_back(Io::RecoverFarLeases { ours });
        }
        if self.retry_io_at.is_some_and(|t| t <= mono) {
            self.retry_io_at = None;
        }
        if self.link.is_down() && self.warn_at.is_some_and(|t| t <= mono) {
            self.warn_at = Some(mono.saturating_add(duration_ms(self.config.link_down_warn_every)));
            if let LinkState::Down { since, last_error } = self.link.state() {
                self.actions.push_back(Action::Log(Notice::LinkStillDown {
                    since: *since,
                    last_error: last_error.clone(),
                }));
            }
        }
        if let Some(round) = &self.round {
            if self.renew_at.is_some_and(|t| t <= mono) && round.held() > 0 {
                self.renew_at = Some(mono.saturating_add(duration_ms(self.config.lease / 3)));
                let lease = Lease {
                    token: round.lease.token,
                    until: self.now.wall.saturating_add(duration_ms(self.config.lease)),
                };
                // Records waiting for a slot are renewed too: they are ours until released.
                let ids = round
                    .running
                    .keys()
                    .chain(round.queue.iter().map(|r| &r.id))
                    .copied()
                    .collect();
                self.chores.push_front(Io::Renew { ids, lease });
            }
            if let Some(stop) = self.stopping {
                if stop <= mono && !self.aborted && !round.running.is_empty() {
                    self.aborted = true;
                    self.actions.push_back(Action::AbortDeliveries);
                }
            }
        }
    }

    fn held_ids(&self) -> Vec<RecordId> {
        let mut ids: Vec<RecordId> = self.writes.iter().map(|w| w.transition.id).collect();
        if let Some(round) = &self.round {
            ids.extend(round.running.keys().copied());
            ids.extend(round.queue.iter().map(|r| r.id));
        }
        ids
    }

    fn set_online(&mut self, online: bool) {
        let was = self.online;
        self.online = online;
        if online && !was {
            self.link_restored(None);
            self.wanted = true;
        } else if !online {
            self.cut_round();
        }
    }

    fn resume(&mut self) {
        self.wanted = true;
        self.storm.reset();
        if self.halt.take().is_some() {
            self.chores.push_back(Io::SetHalt(None));
        }
    }

    /// No delivery of this round starts any more; the records not started go back.
    fn cut_round(&mut self) {
        if let Some(round) = &mut self.round {
            round.cut_short = true;
            let released = round.queue.drain(..).map(|r| Write::release(&r));
            self.writes.extend(released);
            if !self.writes.is_empty() {
                self.commit_soon();
            }
        }
    }

    fn halt_now(&mut self, id: RecordId, reason: String) {
        if self.halt.is_some() {
            return;
        }
        let halt = Halt {
            reason: reason.clone(),
            since: self.now.wall,
        };
        self.halt = Some(halt.clone());
        self.chores.push_back(Io::SetHalt(Some(halt)));
        // The one event of the halt is sent once it is persisted (see `done`).
        self.halted_event = Some(Event::Halted { id, reason });
        self.cut_round();
    }

    fn link_restored(&mut self, answered: Option<RecordId>) {
        if let Some(restored) = self.link.answered(answered, self.now.mono) {
            // The server answers again after a time without any answer: every device that
            // lost it finds it back within one probe window, so the backlog waits a random
            // part of that time (a twelfth, at most `relink_spread`), or the whole fleet's
            // backlog lands at once. A device whose own link came back says so (`Online`).
            let down = restored.down_for;
            let spread = (down / 12).min(duration_ms(self.config.relink_spread));
            if answered.is_some() && spread > 0 {
                let at = self.now.wall.saturating_add(self.rng.u64(0..=spread));
                self.hold_until = Some(self.hold_until.map_or(at, |h| h.max(at)));
                self.cut_round();
            }
            self.warn_at = None;
            self.actions.push_back(Action::Emit(Event::LinkUp {
                down_for: Duration::from_millis(down),
            }));
            if !restored.release.is_empty() {
                self.chores.push_back(Io::Relink {
                    ids: restored.release,
                });
            }
            self.wanted = true;
        }
    }

    fn reported(&mut self, id: RecordId, report: Report) {
        let Some(round) = &mut self.round else {
            return;
        };
        let Some(record) = round.running.remove(&id) else {
            return;
        };
        let now = self.now.wall;
        let write = match report {
            Report::Abandoned => Write::release(&record),
            Report::Panicked => {
                self.actions
                    .push_back(Action::Log(Notice::SinkPanicked { id }));
                machine::on_interrupted(&record, &self.policy, now).into()
            }
            Report::Outcome(Outcome::NoAnswer { error }) => {
                let streak = self.link.streak(record.unanswered);
                let step = machine::on_no_answer(
                    &record,
                    &error,
                    streak,
                    &self.policy,
                    now,
                    &mut self.rng,
                );
                let deadline = match &step.transition.change {
                    machine::Change::Update(p) => p.next_attempt_at.unwrap_or(now),
                    _ => now,
                };
                if self
                    .link
                    .unanswered(now, self.now.mono, id, &error, deadline)
                {
                    self.warn_at = Some(
                        self.now
                            .mono
                            .saturating_add(duration_ms(self.config.link_down_warn_every)),
                    );
                    self.actions.push_back(Action::Emit(Event::LinkDown {
                        since: now,
                        error: error.clone(),
                    }));
                }
                // The rest of the batch is not hammered: the link is probed on backoff.
                self.cut_round();
                step.into()
            }
            Report::Outcome(Outcome::Halt { reason }) => {
                // Not the record's fault: nothing is spent, and only the first refusal
                // halts (one event, one line); the others are released.
                self.halt_now(id, reason);
                Write::release(&record)
            }
            Report::Outcome(outcome) => {
                self.link_restored(Some(id));
                // Answers to requests sent before a hold began (they were in flight with the
                // one that was told to wait) do not widen the window while the hold lasts.
                let holding = self.hold_until.is_some_and(|hold| hold > now);
                if !holding
                    && !matches!(
                        outcome,
                        Outcome::Transient {
                            retry_after: Some(_),
                            ..
                        }
                    )
                {
                    self.window = self.window.saturating_mul(2).min(self.config.concurrency);
                }
                if let Outcome::Rejected { reason } = &outcome {
                    let storm = self.storm.rejected(&record.group, reason);
                    let limit = self.config.rejection_storm as usize;
                    if limit > 0 && storm >= limit {
                        let reason = format!(
                            "suspected misconfiguration: {storm} rejections in a row ({reason})"
                        );
                        self.halt_now(id, reason);
                    }
                } else {
                    self.storm.reset();
                }
                if let Outcome::Transient {
                    retry_after: Some(retry_after),
                    ..
                } = &outcome
                {
                    let asked = retry_after.asked(now);
                    if asked > self.policy.max_retry_after && !self.warned.contains(&id) {
                        if self.warned.len() == MAX_WARNED {
                            self.warned.pop_front();
                        }
                        self.warned.push_back(id);
                        self.actions
                            .push_back(Action::Log(Notice::RetryAfterCut { id, asked }));
                    }
                }
                let step = machine::on_outcome(&record, &outcome, &self.policy, now, &mut self.rng);
                if let (
                    Outcome::Transient {
                        retry_after: Some(_),
                        ..
                    },
                    machine::Change::Update(progress),
                ) = (&outcome, &step.transition.change)
                {
                    // The server asked this client to wait: the rest of the round and every
                    // claim wait too, or a device that comes back sends its whole backlog
                    // into the same refusal.
                    if let Some(at) = progress.next_attempt_at {
                        self.hold_until = Some(self.hold_until.map_or(at, |h| h.max(at)));
                        self.window = 1;
                        self.cut_round();
                    }
                }
                step.into()
            }
        };
        self.writes.push(write);
        self.commit_soon();
    }

    fn done(&mut self, result: Result<IoDone, String>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let done = match result {
            Ok(done) => {
                self.store_failures = 0;
                done
            }
            Err(error) => {
                self.store_failures = self.store_failures.saturating_add(1);
                let retry_in = self.policy.backoff.delay(self.store_failures);
                self.retry_io_at = Some(self.now.mono.saturating_add(duration_ms(retry_in)));
                self.actions
                    .push_back(Action::Log(Notice::StoreFailed { error, retry_in }));
                match pending {
                    // Nothing of it was written: the transitions wait for the next write,
                    // and nothing was claimed.
                    Pending::Write { mut writes, claim } => {
                        writes.append(&mut self.writes);
                        self.writes = writes;
                        // The claim is made again once the store is back.
                        self.wanted |= claim.is_some();
                    }
                    Pending::NextDue | Pending::Changed => {}
                    // The halt holds in memory; persisting it is tried again.
                    Pending::SetHalt(halt) => self.chores.push_front(Io::SetHalt(halt)),
                    Pending::Other => {}
                }
                return;
            }
        };
        match pending {
            Pending::Write { writes, claim } => {
                for write in writes {
                    if let Some(event) = write.event {
                        if !done.skipped.contains(&write.transition.id) {
                            self.actions.push_back(Action::Emit(event));
                        }
                    }
                }
                if let Some(lease) = claim {
                    self.start_round(lease, done.claimed);
                }
            }
            Pending::NextDue => {
                self.next_due = done.next_due;
                self.next_due_stale = false;
            }
            Pending::SetHalt(Some(_)) => {
                if let Some(event) = self.halted_event.take() {
                    self.actions.push_back(Action::Emit(event));
                }
            }
            Pending::SetHalt(None) => self.actions.push_back(Action::Emit(Event::Resumed)),
            Pending::Changed if done.changed > 0 => {
                self.wanted = true;
                self.next_due_stale = true;
            }
            Pending::Changed => {}
            Pending::Other => {}
        }
    }

    fn start_round(&mut self, lease: Lease, mut claimed: Vec<Record>) {
        // Whatever the claim found, the earliest deadline is read again before waiting.
        self.next_due = None;
        self.next_due_stale = true;
        if claimed.is_empty() {
            self.empty_claims = self.empty_claims.saturating_add(1);
            let quiet = EMPTY_CLAIM_QUIET
                .saturating_mul(1 << self.empty_claims.min(16).saturating_sub(1))
                .min(MAX_QUIET);
            self.quiet_until = self.now.mono.saturating_add(quiet);
            return;
        }
        self.empty_claims = 0;
        let limit = self.claim_limit();
        let full = claimed.len() >= limit;
        // Records older than the age policy allows are parked, not sent: a person decides.
        let (now, policy) = (self.now.wall, &self.policy);
        let mut stale = Vec::new();
        claimed.retain(|r| match machine::on_stale(r, policy, now) {
            Some(step) => {
                stale.push(Write::from(step));
                false
            }
            None => true,
        });
        if !stale.is_empty() {
            self.writes.extend(stale);
            self.commit_soon();
        }
        // A record whose delivery was interrupted goes alone, so that if it kills the process
        // again only it is charged, never the records claimed with it.
        let suspect = claimed
            .iter()
            .position(|r| r.interrupted > 0)
            .map(|at| claimed.remove(at));
        let solo = suspect.is_some();
        let queue: VecDeque<Record> = match suspect {
            Some(suspect) => {
                self.writes.extend(claimed.iter().map(Write::release));
                VecDeque::from([suspect])
            }
            None => claimed.into(),
        };
        self.link.new_round();
        self.renew_at = Some(
            self.now
                .mono
                .saturating_add(duration_ms(self.config.lease / 3)),
        );
        if !solo {
            self.commit_at = None;
        }
        self.round = Some(RoundState {
            lease,
            queue,
            running: HashMap::new(),
            full,
            solo,
            cut_short: !self.may_start(),
            concurrency: if solo { 1 } else { self.config.concurrency },
        });
    }

    fn claim_limit(&self) -> usize {
        if self.link.is_down() {
            1
        } else {
            self.config.batch
        }
    }

    /// Nothing is queued and no store call is under way: what next?
    fn decide(&mut self) {
        if self.retry_io_at.is_some() {
            if self.stopping.is_some() && self.round.is_none() {
                // The store keeps failing at shutdown: give up; leases will expire.
                self.finished = true;
            }
            return;
        }
        if let Some(chore) = self.chores.pop_front() {
            self.io(chore);
            return;
        }
        if self.round.is_some() {
            self.drive_round();
            return;
        }
        if self.stopping.is_some() {
            if self.writes.is_empty() {
                self.finished = true;
            } else {
                self.write(None);
            }
            return;
        }
        if self.may_start() && self.due_now() {
            if self.recover_at <= self.now.mono {
                self.recover_at = self
                    .now
                    .mono
                    .saturating_add(duration_ms(self.config.lease / 3));
                self.io(Io::RecoverExpired);
                return;
            }
            self.wanted = false;
            let lease = Lease {
                token: self.tokens.u64(..),
                until: self.now.wall.saturating_add(duration_ms(self.config.lease)),
            };
            self.write(Some(lease));
            return;
        }
        if !self.writes.is_empty() {
            self.write(None);
        } else if self.next_due_stale {
            self.pending = Some(Pending::NextDue);
            self.actions.push_back(Action::Io(Io::NextDue));
        }
    }

    /// Whether a claim may find work now.
    fn due_now(&self) -> bool {
        if self
            .link
            .probe_at()
            .is_some_and(|probe| probe > self.now.wall)
            || self.hold_until.is_some_and(|hold| hold > self.now.wall)
        {
            return false;
        }
        self.wanted
            || (self.quiet_until <= self.now.mono
                && self.next_due.is_some_and(|due| due <= self.now.wall))
    }

    fn drive_round(&mut self) {
        let may_start = self.may_start();
        if !may_start {
            self.cut_round();
        }
        let Some(round) = &mut self.round else {
            return;
        };
        if round.solo
            && round.running.is_empty()
            && !round.queue.is_empty()
            && !self.writes.is_empty()
        {
            // The records claimed with a suspect are released before it is delivered: if it
            // kills the process again, they must not be charged with it.
            self.commit_at = None;
            self.write(None);
            return;
        }
        while !round.cut_short && round.running.len() < round.concurrency.min(self.window) {
            let Some(record) = round.queue.pop_front() else {
                break;
            };
            self.actions.push_back(Action::Emit(Event::Attempted {
                id: record.id,
                attempts: record.attempts,
            }));
            // The payload travels with the delivery only: the scheduler decides on the
            // record's schedule and counters, never on its bytes.
            let mut held = record;
            let payload = std::mem::take(&mut held.payload);
            self.actions.push_back(Action::Deliver(Record {
                payload,
                ..held.clone()
            }));
            round.running.insert(held.id, held);
        }
        if !self.actions.is_empty() {
            return;
        }
        if round.running.is_empty() && round.queue.is_empty() {
            let again = !round.cut_short && (round.full || round.solo) && may_start;
            self.round = None;
            self.renew_at = None;
            self.commit_at = None;
            if again {
                // The round's outcomes travel with the next claim: one commit.
                self.wanted = true;
                self.decide();
            } else if !self.writes.is_empty() {
                self.write(None);
            }
            return;
        }
        if !self.writes.is_empty() && self.commit_at.is_some_and(|t| t <= self.now.mono) {
            // Deliveries are still running: record what is known so far.
            self.commit_at = None;
            self.write(None);
        }
    }

    /// Writes what is waiting within the commit delay, unless a commit is due already.
    fn commit_soon(&mut self) {
        if self.commit_at.is_none() {
            self.commit_at = Some(self.now.mono.saturating_add(COMMIT_DELAY));
        }
    }

    fn write(&mut self, claim: Option<Lease>) {
        let writes = std::mem::take(&mut self.writes);
        let transitions = writes.iter().map(|w| w.transition.clone()).collect();
        let claim_request = claim.map(|lease| Claim {
            now: self.now.wall,
            limit: self.claim_limit(),
            lease,
        });
        self.pending = Some(Pending::Write { writes, claim });
        self.actions.push_back(Action::Io(Io::Write {
            transitions,
            claim: claim_request,
        }));
    }

    fn io(&mut self, io: Io) {
        self.pending = Some(match &io {
            Io::SetHalt(halt) => Pending::SetHalt(halt.clone()),
            Io::NextDue => Pending::NextDue,
            Io::Renew { .. } | Io::Write { .. } => Pending::Other,
            _ => Pending::Changed,
        });
        self.actions.push_back(Action::Io(io));
    }
}

fn offset(now: Now) -> i128 {
    i128::from(now.wall) - i128::from(now.mono)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Backoff, Jitter};
    use crate::state::State;

    const WALL: Millis = 1_700_000_000_000;

    fn at(mono: Millis) -> Now {
        Now {
            wall: WALL + mono,
            mono,
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
            .with_backoff(Backoff::exponential(
                Duration::from_secs(1),
                2.0,
                Duration::from_secs(60),
            ))
            .with_jitter(Jitter::None)
    }

    fn scheduler(config: RunnerConfig) -> Scheduler {
        Scheduler::new(config, policy(), 1, 2, at(0), None)
    }

    fn record(id: u64, group: Option<&str>) -> Record {
        let mut r = Record::fresh(
            RecordId(id),
            group.map(str::to_owned),
            vec![],
            format!("k{id}"),
            WALL,
        );
        r.state = State::InFlight;
        r
    }

    /// Every action until the scheduler waits.
    fn drain(s: &mut Scheduler) -> Vec<Action> {
        std::iter::from_fn(|| s.poll_action()).collect()
    }

    /// Answers the store call the last actions asked for, claiming `records` if it claimed.
    fn answer(s: &mut Scheduler, now: Now, actions: &[Action], records: Vec<Record>) {
        let Some(Action::Io(io)) = actions.last() else {
            panic!("no store call in {actions:?}");
        };
        let done = match io {
            Io::Write { claim, .. } => IoDone {
                claimed: claim
                    .map(|c| {
                        records
                            .into_iter()
                            .map(|mut r| {
                                r.lease = Some(c.lease);
                                r
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                ..IoDone::default()
            },
            _ => IoDone::default(),
        };
        s.handle(now, Input::Done(Ok(done)));
    }

    /// Drains and answers every store call (nothing claimed, `due` as the next deadline)
    /// until the scheduler waits; returns every action.
    fn settle(s: &mut Scheduler, now: Now, due: Option<Millis>) -> Vec<Action> {
        let mut all = Vec::new();
        loop {
            let actions = drain(s);
            if actions.is_empty() {
                return all;
            }
            let io = matches!(actions.last(), Some(Action::Io(_)));
            let next_due = matches!(actions.last(), Some(Action::Io(Io::NextDue)));
            all.extend(actions);
            if !io {
                return all;
            }
            let done = IoDone {
                next_due: if next_due { due } else { None },
                ..IoDone::default()
            };
            s.handle(now, Input::Done(Ok(done)));
        }
    }

    fn delivered(actions: &[Action]) -> Vec<RecordId> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Deliver(r) => Some(r.id),
                _ => None,
            })
            .collect()
    }

    fn writes(actions: &[Action]) -> Vec<(usize, bool)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Io(Io::Write { transitions, claim }) => {
                    Some((transitions.len(), claim.is_some()))
                }
                _ => None,
            })
            .collect()
    }

    /// Starts a round that claims `records`; returns the actions after the claim.
    fn claimed(s: &mut Scheduler, now: Now, records: Vec<Record>) -> Vec<Action> {
        let first = drain(s);
        assert_eq!(writes(&first), [(0, true)], "{first:?}");
        answer(s, now, &first, records);
        drain(s)
    }

    #[test]
    fn a_round_starts_concurrency_deliveries_and_writes_outcomes_with_the_next_claim() {
        let config = RunnerConfig::default().with_batch(3).with_concurrency(2);
        let mut s = scheduler(config);
        let actions = claimed(&mut s, at(0), (1..=3).map(|i| record(i, None)).collect());
        assert_eq!(delivered(&actions), [RecordId(1), RecordId(2)]);
        assert_eq!(s.holding(), 3);
        s.handle(
            at(5),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::Delivered),
            },
        );
        let actions = drain(&mut s);
        assert_eq!(delivered(&actions), [RecordId(3)]);
        assert!(writes(&actions).is_empty(), "outcomes wait for the round");
        for id in [2, 3] {
            s.handle(
                at(6),
                Input::Reported {
                    id: RecordId(id),
                    report: Report::Outcome(Outcome::Delivered),
                },
            );
        }
        // The claim was full: the three outcomes travel with the next claim, in one write.
        let actions = drain(&mut s);
        assert_eq!(writes(&actions), [(3, true)]);
        assert_eq!(s.holding(), 4, "three outcomes and a claim under way");
        answer(&mut s, at(7), &actions, vec![]);
        let after = drain(&mut s);
        let events = after
            .iter()
            .filter(|a| matches!(a, Action::Emit(Event::Delivered { .. })))
            .count();
        assert_eq!(events, 3, "events only once written: {after:?}");
        assert_eq!(s.holding(), 0);
        assert!(matches!(after.last(), Some(Action::Io(Io::NextDue))));
    }

    #[test]
    fn slow_deliveries_let_the_finished_ones_be_written_after_the_commit_delay() {
        let mut s = scheduler(RunnerConfig::default().with_concurrency(2));
        claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
        s.handle(
            at(1),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::Delivered),
            },
        );
        assert!(writes(&drain(&mut s)).is_empty());
        assert_eq!(s.poll_timeout(), Some(1 + COMMIT_DELAY));
        s.handle(at(1 + COMMIT_DELAY), Input::Timer);
        assert_eq!(writes(&drain(&mut s)), [(1, false)]);
    }

    #[test]
    fn leases_are_renewed_every_third_of_a_lease_for_running_and_waiting_records() {
        let config = RunnerConfig::default().with_concurrency(1);
        let mut s = scheduler(config);
        claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
        assert_eq!(s.poll_timeout(), Some(10_000));
        s.handle(at(10_000), Input::Timer);
        let actions = drain(&mut s);
        let Some(Action::Io(Io::Renew { ids, lease })) = actions.first() else {
            panic!("{actions:?}");
        };
        assert_eq!(ids.len(), 2);
        assert_eq!(lease.until, WALL + 40_000);
    }

    #[test]
    fn shutdown_aborts_deliveries_at_the_grace_deadline_and_releases_them() {
        let mut s = scheduler(RunnerConfig::default());
        claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
        s.handle(at(100), Input::Shutdown { grace: 500 });
        assert!(drain(&mut s).is_empty());
        assert_eq!(s.poll_timeout(), Some(500));
        s.handle(at(500), Input::Timer);
        assert_eq!(drain(&mut s), [Action::AbortDeliveries]);
        for id in [1, 2] {
            s.handle(
                at(501),
                Input::Reported {
                    id: RecordId(id),
                    report: Report::Abandoned,
                },
            );
        }
        let actions = drain(&mut s);
        assert_eq!(writes(&actions), [(2, false)], "released, nothing claimed");
        answer(&mut s, at(502), &actions, vec![]);
        assert!(drain(&mut s).is_empty());
        assert!(s.is_finished());
    }

    #[test]
    fn a_no_answer_takes_the_link_down_and_the_probe_waits_for_the_records_own_deadline() {
        let mut s = scheduler(RunnerConfig::default().with_concurrency(1));
        claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
        s.handle(
            at(10),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::no_answer("refused")),
            },
        );
        let actions = drain(&mut s);
        assert!(actions.contains(&Action::Emit(Event::LinkDown {
            since: WALL + 10,
            error: "refused".into()
        })));
        // Record 2 is not hammered: released with record 1's outcome.
        assert!(delivered(&actions).is_empty());
        let Some(Action::Io(Io::Write { transitions, claim })) = actions.last() else {
            panic!("{actions:?}");
        };
        assert_eq!((transitions.len(), claim.is_none()), (2, true));
        let Some(machine::Change::Update(p)) = transitions
            .iter()
            .find(|t| t.id == RecordId(1))
            .map(|t| &t.change)
        else {
            panic!()
        };
        // No jitter: the first no-answer waits the backoff's 1 s, and so does the probe.
        assert_eq!(p.next_attempt_at, Some(WALL + 1_010));
        answer(&mut s, at(11), &actions, vec![]);
        // Record 2 is due now, but the link waits for the probe.
        settle(&mut s, at(11), Some(WALL));
        s.handle(at(12), Input::Wake);
        assert!(drain(&mut s).is_empty(), "an enqueue does not probe early");
        assert_eq!(s.poll_timeout(), Some(1_010));
        s.handle(at(1_010), Input::Timer);
        let probe = drain(&mut s);
        let Some(Action::Io(Io::Write {
            claim: Some(claim), ..
        })) = probe.last()
        else {
            panic!("{probe:?}");
        };
        assert_eq!(claim.limit, 1, "one record probes the link");
    }

    /// The link goes down at 10 ms; the probe claims record 2 at 1 s and the server's answer
    /// to it (`outcome`) comes back at `answered_at`. Returns the actions right after it.
    fn probe_answered(s: &mut Scheduler, answered_at: Now, outcome: Outcome) -> Vec<Action> {
        claimed(s, at(0), vec![record(1, None)]);
        s.handle(
            at(10),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::no_answer("refused")),
            },
        );
        settle(s, at(10), Some(WALL + 1_010));
        assert_eq!(s.poll_timeout(), Some(1_010));
        // The probe, 1 s later, is another record; the server answers.
        s.handle(at(1_010), Input::Timer);
        let probe = drain(s);
        answer(s, at(1_010), &probe, vec![record(2, None)]);
        drain(s);
        s.handle(
            answered_at,
            Input::Reported {
                id: RecordId(2),
                report: Report::Outcome(outcome),
            },
        );
        drain(s)
    }

    #[test]
    fn an_answer_brings_the_link_up_and_releases_the_no_answer_waits() {
        let mut s = scheduler(RunnerConfig::default().with_concurrency(1));
        let actions = probe_answered(&mut s, at(1_020), Outcome::transient("HTTP 503", None));
        assert!(actions.contains(&Action::Emit(Event::LinkUp {
            down_for: Duration::from_millis(1_010)
        })));
        assert!(
            actions.contains(&Action::Io(Io::Relink {
                ids: vec![RecordId(1)]
            })),
            "{actions:?}"
        );
        assert!(s.link().is_up());
    }

    /// [`probe_answered`] with a delivery at `answered_at`, then every store call answered
    /// with record 1 and more due: the claims made by then, and the scheduler.
    fn answered_after(
        config: RunnerConfig,
        answered_at: Millis,
    ) -> (Scheduler, Vec<(usize, bool)>) {
        let mut s = scheduler(config.with_concurrency(1).with_safety_poll(None));
        let mut actions = probe_answered(&mut s, at(answered_at), Outcome::Delivered);
        let Some(Action::Io(_)) = actions.last() else {
            return (s, writes(&actions));
        };
        let done = IoDone::default();
        s.handle(at(answered_at), Input::Done(Ok(done)));
        actions.extend(settle(&mut s, at(answered_at), Some(WALL)));
        let claims = writes(&actions);
        (s, claims)
    }

    #[test]
    fn after_an_hour_without_an_answer_the_backlog_waits_a_random_twelfth_at_most_relink_spread() {
        let hour = 3_600_010;
        let (mut s, claims) = answered_after(RunnerConfig::default(), hour);
        assert!(claims.iter().all(|(_, claim)| !claim), "{claims:?}");
        assert!(s.link().is_up());
        let hold = s.poll_timeout().expect("a timer for the end of the wait");
        // Down for an hour: a twelfth is 5 min, which is also the default `relink_spread`.
        assert!((hour..=hour + 300_000).contains(&hold), "{hold}");
        // A write during the wait waits too.
        s.handle(at(hold - 1), Input::Wake);
        let early = writes(&settle(&mut s, at(hold - 1), Some(WALL)));
        assert!(early.iter().all(|(_, claim)| !claim), "{early:?}");
        s.handle(at(hold), Input::Timer);
        let claims = writes(&settle(&mut s, at(hold), Some(WALL)));
        assert!(
            claims.iter().any(|(_, claim)| *claim),
            "claims once it passed"
        );

        // A minute without an answer: at most 5 s. A shorter cap wins over the twelfth.
        let (s, _) = answered_after(RunnerConfig::default(), 60_010);
        let hold = s.poll_timeout().expect("a timer");
        assert!((60_010..=65_010).contains(&hold), "{hold}");
        let capped = RunnerConfig::default().with_relink_spread(Duration::from_secs(2));
        let (s, _) = answered_after(capped, hour);
        let hold = s.poll_timeout().expect("a timer");
        assert!((hour..=hour + 2_000).contains(&hold), "{hold}");
    }

    #[test]
    fn the_outage_is_measured_on_the_monotonic_clock_not_the_wall() {
        // A minute without an answer, during which the wall clock jumped a day ahead: the wait
        // after it is a minute's (at most 5 s), not the whole `relink_spread`.
        let mut s = scheduler(
            RunnerConfig::default()
                .with_concurrency(1)
                .with_safety_poll(None),
        );
        let stepped = Now {
            wall: WALL + 60_010 + 86_400_000,
            mono: 60_010,
        };
        let actions = probe_answered(&mut s, stepped, Outcome::Delivered);
        assert!(
            actions.contains(&Action::Emit(Event::LinkUp {
                down_for: Duration::from_millis(60_000)
            })),
            "{actions:?}"
        );
        let hold = s.hold_until.expect("a wait after the outage");
        assert!(
            (stepped.wall..=stepped.wall + 5_000).contains(&hold),
            "{}",
            hold - stepped.wall
        );
    }

    #[test]
    fn with_no_relink_spread_the_backlog_goes_as_soon_as_the_server_answers() {
        let off = RunnerConfig::default().with_relink_spread(Duration::ZERO);
        let (_, claims) = answered_after(off, 3_600_010);
        assert!(claims.iter().any(|(_, claim)| *claim), "{claims:?}");
    }

    #[test]
    fn going_online_releases_the_waits_and_claims_at_once() {
        let mut s = scheduler(RunnerConfig::default());
        claimed(&mut s, at(0), vec![record(1, None)]);
        s.handle(
            at(10),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::no_answer("no route")),
            },
        );
        let actions = drain(&mut s);
        answer(&mut s, at(10), &actions, vec![]);
        let next = drain(&mut s);
        answer(&mut s, at(10), &next, vec![]);
        s.handle(at(20), Input::Online(false));
        assert!(drain(&mut s).is_empty());
        s.handle(at(30), Input::Online(true));
        let actions = drain(&mut s);
        assert_eq!(
            actions.last(),
            Some(&Action::Io(Io::Relink {
                ids: vec![RecordId(1)]
            }))
        );
        s.handle(
            at(31),
            Input::Done(Ok(IoDone {
                changed: 1,
                ..IoDone::default()
            })),
        );
        let claim = drain(&mut s);
        assert_eq!(writes(&claim), [(0, true)], "claimed at once: {claim:?}");
    }

    #[test]
    fn a_step_back_rebases_by_the_measured_step_and_shifts_the_probe() {
        let mut s = scheduler(RunnerConfig::default());
        drain(&mut s);
        s.handle(at(0), Input::Done(Ok(IoDone::default())));
        drain(&mut s);
        s.handle(at(0), Input::Done(Ok(IoDone::default())));
        // The wall clock is set back a day between two wakes one second apart.
        let day = 86_400_000;
        s.handle(
            Now {
                wall: WALL + 1_000 - day,
                mono: 1_000,
            },
            Input::Timer,
        );
        let actions = drain(&mut s);
        assert_eq!(
            actions.first(),
            Some(&Action::Io(Io::Rebase { step: Some(day) }))
        );
        // A forward step or a small drift re-bases nothing.
        let mut s = scheduler(RunnerConfig::default());
        s.handle(
            Now {
                wall: WALL + 1_500 + day,
                mono: 1_000,
            },
            Input::Timer,
        );
        assert!(!drain(&mut s)
            .iter()
            .any(|a| matches!(a, Action::Io(Io::Rebase { .. }))));
    }

    #[test]
    fn a_hold_set_before_a_step_back_keeps_its_wait() {
        // Told to wait 30 s (spread to at most 45 s), then the wall clock is set back a day:
        // the runner claims again within the wait it was given, not a day later.
        let mut s = scheduler(
            RunnerConfig::default()
                .with_concurrency(1)
                .with_safety_poll(None),
        );
        claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
        let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(30)));
        s.handle(
            at(10),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::transient("HTTP 429", retry_after)),
            },
        );
        settle(&mut s, at(10), Some(WALL));
        let day = 86_400_000;
        let stepped = Now {
            wall: WALL + 1_000 - day,
            mono: 1_000,
        };
        s.handle(stepped, Input::Timer);
        settle(&mut s, stepped, Some(WALL - day));
        let hold = s.hold_until.expect("still held");
        assert!(
            (stepped.wall + 29_000..=stepped.wall + 45_000).contains(&hold),
            "held {} ms past the stepped clock",
            hold as i64 - stepped.wall as i64
        );
    }

    #[test]
    fn concurrent_refusals_halt_once_and_release_the_rest() {
        let mut s = scheduler(RunnerConfig::default());
        claimed(&mut s, at(0), (1..=4).map(|i| record(i, None)).collect());
        let mut actions = Vec::new();
        for id in 1..=4 {
            s.handle(
                at(5),
                Input::Reported {
                    id: RecordId(id),
                    report: Report::Outcome(Outcome::halt("HTTP 401")),
                },
            );
            actions.extend(settle(&mut s, at(5), None));
        }
        let set_halts: Vec<_> = actions
            .iter()
            .filter(|a| matches!(a, Action::Io(Io::SetHalt(Some(_)))))
            .collect();
        assert_eq!(set_halts.len(), 1, "{actions:?}");
        let halted = actions
            .iter()
            .filter(|a| matches!(a, Action::Emit(Event::Halted { .. })))
            .count();
        assert_eq!(halted, 1, "{actions:?}");
        assert_eq!(s.halt().map(|h| h.reason.as_str()), Some("HTTP 401"));
        // Every record was released: nothing spent.
        for a in &actions {
            if let Action::Io(Io::Write { transitions, .. }) = a {
                for t in transitions {
                    let machine::Change::Update(p) = &t.change else {
                        panic!()
                    };
                    assert_eq!(p.attempts, 0);
                }
            }
        }
        // Halted: a wake claims nothing; resume clears the persisted halt, then claims.
        s.handle(at(6), Input::Wake);
        assert!(writes(&settle(&mut s, at(6), None))
            .iter()
            .all(|(_, claim)| !claim));
        s.handle(at(7), Input::Resume);
        let resume = drain(&mut s);
        assert_eq!(resume, [Action::Io(Io::SetHalt(None))]);
        answer(&mut s, at(7), &resume, vec![]);
        let after = drain(&mut s);
        assert_eq!(after.first(), Some(&Action::Emit(Event::Resumed)));
        assert_eq!(writes(&after), [(0, true)]);
    }

    #[test]
    fn a_persisted_halt_holds_from_the_start() {
        let halt = Halt {
            reason: "HTTP 401".into(),
            since: WALL - 5,
        };
        let mut s = Scheduler::new(RunnerConfig::default(), policy(), 1, 2, at(0), Some(halt));
        let actions = drain(&mut s);
        assert!(writes(&actions).is_empty(), "{actions:?}");
    }

    #[test]
    fn rejections_of_different_groups_in_a_row_halt_as_a_misconfiguration() {
        let mut s = scheduler(RunnerConfig::default().with_rejection_storm(3));
        let records = vec![
            record(1, Some("a")),
            record(2, Some("a")),
            record(3, Some("b")),
            record(4, None),
        ];
        claimed(&mut s, at(0), records);
        for id in 1..=4 {
            s.handle(
                at(5),
                Input::Reported {
                    id: RecordId(id),
                    report: Report::Outcome(Outcome::rejected("HTTP 404")),
                },
            );
        }
        assert_eq!(
            s.halt().map(|h| h.reason.as_str()),
            Some("suspected misconfiguration: 3 rejections in a row (HTTP 404)")
        );
        // One delivery answered otherwise resets the count.
        let mut s = scheduler(RunnerConfig::default().with_rejection_storm(3));
        claimed(&mut s, at(0), (1..=4).map(|i| record(i, None)).collect());
        for (id, outcome) in [
            (1, Outcome::rejected("HTTP 404")),
            (2, Outcome::rejected("HTTP 404")),
            (3, Outcome::Delivered),
            (4, Outcome::rejected("HTTP 404")),
        ] {
            s.handle(
                at(5),
                Input::Reported {
                    id: RecordId(id),
                    report: Report::Outcome(outcome),
                },
            );
        }
        assert!(s.halt().is_none());
    }

    #[test]
    fn a_store_failure_keeps_the_outcomes_and_backs_off() {
        let mut s = scheduler(RunnerConfig::default().with_batch(1));
        claimed(&mut s, at(0), vec![record(1, None)]);
        s.handle(
            at(5),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::Delivered),
            },
        );
        assert_eq!(writes(&drain(&mut s)), [(1, true)]);
        s.handle(at(6), Input::Done(Err("disk full".into())));
        let actions = drain(&mut s);
        assert!(matches!(
            actions.as_slice(),
            [Action::Log(Notice::StoreFailed { .. })]
        ));
        assert_eq!(s.holding(), 1, "the outcome is kept");
        assert_eq!(s.poll_timeout(), Some(1_006));
        s.handle(at(1_006), Input::Timer);
        assert_eq!(
            writes(&drain(&mut s)),
            [(1, true)],
            "written with the claim"
        );
    }

    #[test]
    fn a_suspect_goes_alone_and_the_others_are_released_at_once() {
        let mut s = scheduler(RunnerConfig::default());
        let mut suspect = record(2, None);
        suspect.interrupted = 1;
        let actions = claimed(
            &mut s,
            at(0),
            vec![record(1, None), suspect, record(3, None)],
        );
        // The others are released first, and only then is the suspect delivered.
        assert_eq!(writes(&actions), [(2, false)]);
        assert!(delivered(&actions).is_empty());
        answer(&mut s, at(1), &actions, vec![]);
        assert_eq!(delivered(&drain(&mut s)), [RecordId(2)]);
    }

    #[test]
    fn a_store_that_says_due_but_claims_nothing_does_not_spin_the_runner() {
        let mut s = scheduler(RunnerConfig::default());
        let mut claims = Vec::new();
        let mut mono = 0;
        // The store's next_due always says "due now" and its claim always finds nothing.
        while mono < 1_000 {
            let actions = settle(&mut s, at(mono), Some(WALL + mono));
            claims.extend(
                writes(&actions)
                    .into_iter()
                    .filter(|(_, claim)| *claim)
                    .map(|_| mono),
            );
            mono = s.poll_timeout().unwrap_or(mono + 1).max(mono + 1);
            s.handle(at(mono), Input::Timer);
        }
        // 0, then 50, 150, 350, 750 ms: backing off, not thousands of claims.
        assert_eq!(claims, [0, 50, 150, 350, 750], "{claims:?}");
        // An enqueue is served at once whatever the quiet period.
        s.handle(at(mono), Input::Wake);
        let actions = drain(&mut s);
        assert_eq!(writes(&actions), [(0, true)]);
    }

    #[test]
    fn a_retry_after_holds_the_whole_runner_until_it_passes() {
        let mut s = scheduler(RunnerConfig::default().with_concurrency(1));
        claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
        let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(30)));
        s.handle(
            at(10),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::transient("HTTP 429", retry_after)),
            },
        );
        let actions = settle(&mut s, at(10), Some(WALL));
        assert!(
            delivered(&actions).is_empty(),
            "record 2 waits too: {actions:?}"
        );
        // An enqueue waits for the server's word as well.
        s.handle(at(20), Input::Wake);
        let actions = settle(&mut s, at(20), Some(WALL));
        assert!(
            writes(&actions).iter().all(|(_, claim)| !claim),
            "{actions:?}"
        );
        // (At 30 s, one lease after the start, the runner looks for leases from the future.)
        s.handle(at(30_000), Input::Timer);
        settle(&mut s, at(30_000), Some(WALL));
        // The server's 30 s, spread by up to half of it.
        let hold = s.poll_timeout().expect("a timer for the end of the hold");
        assert!((30_010..=45_010).contains(&hold), "{hold}");
        s.handle(at(hold - 1), Input::Timer);
        let early = writes(&settle(&mut s, at(hold - 1), Some(WALL)));
        assert!(early.iter().all(|(_, claim)| !claim), "{early:?}");
        s.handle(at(hold), Input::Timer);
        let claims = writes(&settle(&mut s, at(hold), Some(WALL)));
        assert_eq!(claims, [(0, true)], "claims once it passed");
    }

    #[test]
    fn after_a_retry_after_one_delivery_goes_first_and_the_window_doubles_on_answers() {
        let mut s = scheduler(RunnerConfig::default().with_concurrency(4));
        let first = claimed(&mut s, at(0), (1..=4).map(|i| record(i, None)).collect());
        assert_eq!(delivered(&first).len(), 4, "the full window at start");
        let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(10)));
        // The server sheds load: one request is told to wait, the three sent with it pass.
        s.handle(
            at(10),
            Input::Reported {
                id: RecordId(1),
                report: Report::Outcome(Outcome::transient("HTTP 429", retry_after)),
            },
        );
        for id in 2..=4 {
            s.handle(
                at(11),
                Input::Reported {
                    id: RecordId(id),
                    report: Report::Outcome(Outcome::Delivered),
                },
            );
        }
        settle(&mut s, at(10), Some(WALL));
        let hold = s.poll_timeout().expect("a timer for the end of the hold");
        s.handle(at(hold), Input::Timer);
        let mut batch: Vec<Record> = (1..=8).map(|i| record(i, None)).collect();
        let mut actions = drain(&mut s);
        while delivered(&actions).is_empty() {
            let claims = matches!(
                actions.last(),
                Some(Action::Io(Io::Write { claim: Some(_), .. }))
            );
            let records = if claims {
                std::mem::take(&mut batch)
            } else {
                Vec::new()
            };
            answer(&mut s, at(hold), &actions, records);
            actions = drain(&mut s);
        }
        assert!(batch.is_empty(), "the eight were claimed");
        let mut now = hold;
        let mut windows = Vec::new();
        let mut next = 1;
        loop {
            let started = delivered(&actions);
            if started.is_empty() {
                break;
            }
            windows.push(started.len());
            now += 10;
            for id in started {
                s.handle(
                    at(now),
                    Input::Reported {
                        id,
                        report: Report::Outcome(Outcome::Delivered),
                    },
                );
                next += 1;
            }
            actions = drain(&mut s);
        }
        assert_eq!(next, 9, "all eight delivered");
        // One request first; each answer that does not ask to wait doubles the window.
        assert_eq!(windows, [1, 2, 4, 1], "deliveries started at each step");
    }
}
