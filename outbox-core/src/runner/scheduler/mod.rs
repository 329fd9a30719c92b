//! The runner's decisions as a plain value: events in, actions and the next wake-up out.
//!
//! Nothing here reads a clock, sleeps, spawns or touches the store or the sink. The async
//! shell feeds it what happened ([`Input`], with the wall and monotonic time of the reading)
//! and performs what it asks for ([`Action`]): each [`Io`] is exactly one store call, made by
//! [`perform`](crate::runner::perform), whose [`Answer`] comes back as its own variant. Every
//! rule of the runner is therefore a unit test on plain values.
//!
//! The room, one concept a file: [`io`] (what goes in and out), `timer` (the one table of
//! wake-ups), `round` (a claim and its flight table), `chore` (store work around deliveries:
//! recovery, re-basing, relinking, renewal, the halt), `halt` (a refused credential and a
//! rejection storm), `halt_read` (a halted runner reading whether the halt was lifted
//! elsewhere), `pace` (`Retry-After` hold, window, empty-claim quiet), `sizing` (rounds
//! that grow with the backlog), `rate` (the optional rate limit), `clock_step`
//! (steps of the wall clock), `gauges` (when the metrics read the store), `look` (the look
//! for unreadable rows, put off to an idle runner when it outgrows the deadline), `ahead`
//! (the next round claimed while this one delivers), and this module, which ties them
//! together.
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
//! let Some(Action::Io(Io::Round { claim: Some(claim), .. })) = runner.poll_action() else {
//!     unreachable!()
//! };
//! assert_eq!(claim.limit, 32);
//! ```

mod ahead;
mod answer;
mod chore;
mod clock_step;
mod gauges;
mod halt;
mod halt_read;
pub mod io;
mod look;
mod pace;
mod rate;
mod report;
mod round;
mod sizing;
mod timer;
mod wake;

#[cfg(test)]
mod tests;

use fastrand::Rng;
use std::collections::VecDeque;

use self::ahead::Ahead;
use self::chore::Chore;
use self::clock_step::{Moved, StepWatch};
use self::gauges::GaugeClock;
use self::halt::Halting;
use self::pace::Pace;
use self::rate::Limiter;
use self::round::{Round, Write};
use self::sizing::Sizing;
use self::timer::{Timer, TimerTable};
use crate::config::RunnerConfig;
use crate::link::{Link, LinkState};
use crate::outcome::duration_ms;
use crate::policy::RetryPolicy;
use crate::record::{Lease, Millis, RecordId};
use crate::store::{Claim, Halt};

pub use self::clock_step::STEP_TOLERANCE;
pub use self::io::{
    Action, Answer, FailureKind, Gauges, Input, Io, Notice, Now, Report, StoreFailure,
};
pub use self::look::{put_off_for, LOOK_WAIT, PUT_OFF_FACTOR};
pub use self::sizing::KEEPING_UP;

/// How long finished deliveries wait for others of their round before their outcomes are
/// written anyway: long enough to gather a wave of quick deliveries into one write, short
/// enough that a slow neighbour does not hold them back.
pub const COMMIT_DELAY: Millis = 20;

/// Which store call is under way, and what it carried.
#[derive(Debug)]
enum Pending {
    Round {
        writes: Vec<Write>,
        claim: Option<Claim>,
        /// The claim was made on the store's word that work was due, not on a trigger.
        on_deadline: bool,
        /// A claim ahead of the round under way (`ahead`).
        ahead: bool,
    },
    NextDue,
    Stats,
    /// A chore's read (`writing: None`) or its write.
    Chore {
        chore: Chore,
        writing: Option<Vec<Write>>,
    },
}

/// How the store has been answering.
#[derive(Debug, Default)]
struct StoreHealth {
    failures: u32,
    /// Read-only, full or silent: said once, until the store answers again.
    paused: Option<FailureKind>,
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
    steps: StepWatch,
    link: Link,
    online: bool,
    halting: Halting,
    /// Monotonic grace deadline once shutdown was asked for.
    stopping: Option<Millis>,
    aborted: bool,
    finished: bool,
    /// A trigger arrived: look for due work.
    wanted: bool,
    /// Halted, a wake asked for a read of the halt while reads were spaced
    /// (`halt_read::HALT_READ_SPACING`): one follows when [`Timer::HaltRead`] fires.
    halt_read_wanted: bool,
    actions: VecDeque<Action>,
    /// Store work wanted, in order, before the next claim.
    chores: VecDeque<Chore>,
    /// Start-up recovery is under way (see [`Scheduler::recover_left_over`]).
    recovering: bool,
    /// How many times the look for unreadable rows timed out, while it waits for an idle
    /// runner (`look`): due once [`Timer::Look`] is no longer set. Before, the timer is the
    /// end of the start-up look's wait (`look_by`).
    look_timeouts: Option<u32>,
    /// The look asked for at start and not made yet: it waits for the runner's first idle
    /// moment, and is made before the next claim once this time (monotonic) has come (`look`).
    look_by: Option<Millis>,
    /// The look asked for at start has not ended, and was not put off.
    look_owed: bool,
    /// The last claim came back with as many records as it asked for: more may be due.
    backlog: bool,
    /// The store call under way.
    pending: Option<Pending>,
    /// The one buffer of transitions not yet written.
    writes: Vec<Write>,
    round: Option<Round>,
    /// Rounds started so far.
    rounds: u64,
    /// Records claimed ahead of the round, waiting for it to end (`ahead`).
    ahead: Option<Ahead>,
    /// Earliest deadline as last read, and whether it must be read again.
    next_due: Option<Millis>,
    next_due_stale: bool,
    timers: TimerTable,
    /// When the next claim first looks for expired leases (monotonic).
    recover_at: Millis,
    store: StoreHealth,
    pace: Pace,
    /// How many records the next claim asks for.
    sizing: Sizing,
    /// The rate limit, if one is set.
    rate: Option<Limiter>,
    gauges: Option<GaugeClock>,
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
        let mut timers = TimerTable::default();
        if let Some(poll) = config.safety_poll {
            timers.set(Timer::Poll, now.mono.saturating_add(duration_ms(poll)));
        }
        // Leases further ahead than one lease were taken before a step back, or by a
        // process that is still renewing: after one lease, a live one has renewed.
        timers.set(Timer::FarLeases, now.mono.saturating_add(lease_ms));
        let mut scheduler = Scheduler {
            recover_at: now.mono.saturating_add(lease_ms / 3),
            pace: Pace::new(config.concurrency),
            sizing: Sizing::new(config.batch, config.max_batch),
            rate: config.rate_limit.map(Limiter::new),
            config,
            policy,
            rng: Rng::with_seed(seed),
            tokens: Rng::with_seed(token_seed),
            now,
            steps: StepWatch::new(now),
            link: Link::default(),
            online: true,
            halting: Halting::new(halt),
            stopping: None,
            aborted: false,
            finished: false,
            wanted: true,
            halt_read_wanted: false,
            actions: VecDeque::new(),
            chores: VecDeque::new(),
            recovering: false,
            look_timeouts: None,
            look_by: None,
            look_owed: false,
            backlog: false,
            pending: None,
            writes: Vec::new(),
            round: None,
            rounds: 0,
            ahead: None,
            next_due: None,
            next_due_stale: true,
            timers,
            store: StoreHealth::default(),
            gauges: None,
        };
        scheduler.arm();
        scheduler
    }

    /// Asks for [`Action::Gauges`] readings (the `metrics` feature's gauges): one
    /// [`Io::Stats`] first thing, when idle at most once a second, while busy every ten
    /// seconds, and once more at shutdown.
    pub fn with_gauges(mut self) -> Self {
        self.gauges = Some(GaugeClock::default());
        self.arm();
        self
    }

    /// Recovers what a previous process left before anything is claimed: expired leases
    /// (one interruption each) and deadlines set before the wall clock stepped back (re-based
    /// from now). [`Scheduler::is_recovering`] says when it is done.
    pub fn recover_left_over(&mut self) {
        self.recovering = true;
        self.chores
            .push_back(Chore::RecoverExpired { recovered: 0 });
        self.chores.push_back(Chore::Rebase {
            step: None,
            rebased: 0,
        });
    }

    /// True while the start-up recovery is not finished: the shell performs the actions
    /// until then, before it starts delivering.
    pub fn is_recovering(&self) -> bool {
        self.recovering
            && (self.pending.is_some() || !self.chores.is_empty() || !self.actions.is_empty())
    }

    /// Records this runner holds: claimed and not yet reported, or reported and not yet
    /// written. Derived, never counted by hand.
    pub fn holding(&self) -> usize {
        let writing = match &self.pending {
            Some(Pending::Round { writes, claim, .. }) => {
                writes.len() + usize::from(claim.is_some())
            }
            _ => 0,
        };
        let ahead = self.ahead.as_ref().map_or(0, |a| a.claimed.len());
        self.round.as_ref().map_or(0, Round::held) + ahead + self.writes.len() + writing
    }

    /// How many rounds this runner started (claims that found records). A shell that opens
    /// a span per claim switches its deliveries to the next one when this changes: a round
    /// claimed ahead starts only once the round before it is over.
    ///
    /// ```
    /// use outbox_core::runner::scheduler::{Now, Scheduler};
    /// use outbox_core::{RetryPolicy, RunnerConfig};
    ///
    /// let now = Now { wall: 1_700_000_000_000, mono: 0 };
    /// let runner = Scheduler::new(RunnerConfig::default(), RetryPolicy::default(), 1, 2, now, None);
    /// assert_eq!(runner.rounds_started(), 0);
    /// ```
    pub fn rounds_started(&self) -> u64 {
        self.rounds
    }

    /// The halt in force, if any.
    pub fn halt(&self) -> Option<&Halt> {
        self.halting.halt()
    }

    /// True while a halt holds the runner, and while a resume waits for the store to clear
    /// the halt it lifted: what `Outbox::is_halted` reports.
    pub fn is_halted(&self) -> bool {
        self.halting.is_halted()
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
        if let Some(gauges) = &mut self.gauges {
            if !matches!(input, Input::Answer(Ok(Answer::Stats(_)))) {
                gauges.touched();
            }
        }
        match input {
            Input::Wake => {
                self.wanted = true;
                self.read_halt_when_woken();
            }
            Input::Timer => {}
            Input::Online(online) => self.set_online(online),
            Input::Resume => {
                self.wanted = true;
                match self.halting.resume() {
                    held @ Some(_) => self
                        .chores
                        .push_back(Chore::ClearHalt { held, found: None }),
                    // A clearing of this runner's halt is queued or under way (a store
                    // backoff, say): it answers for this resume too. Another clearing here,
                    // of whatever the store holds, could lift a newer halt unseen.
                    None if self.halting.is_resuming() => {}
                    // Cleared in the store even when this runner is not halted: the halt may
                    // be another process's, and its runner resumes when it reads the store.
                    None => self.chores.push_back(Chore::ClearHalt {
                        held: None,
                        found: None,
                    }),
                }
            }
            Input::Shutdown { grace } => {
                self.stopping = Some(self.stopping.map_or(grace, |g| g.min(grace)));
                self.cut_round();
            }
            Input::Reported { id, report } => self.reported(id, report),
            Input::Answer(result) => self.answered(result),
        }
        self.on_timers();
        self.arm();
    }

    /// The next thing to do, or `None` to wait for an input (until [`Self::poll_timeout`]).
    ///
    /// While a store call is under way only deliveries start (and their events): the
    /// shell goes on feeding reports meanwhile, and the next store call waits for the answer.
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.actions.is_empty() && !self.finished {
            if self.pending.is_none() {
                self.decide();
                self.arm();
            } else if self.round.as_ref().is_some_and(|r| !r.solo)
                && self.may_start()
                && self.start_deliveries()
            {
                // `handle` armed the timers for the input; only a start changes them again
                // (the rate limit's next slot).
                self.arm();
            }
        }
        self.actions.pop_front()
    }

    /// When to feed [`Input::Timer`] at the latest (monotonic milliseconds).
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.timers.next_timeout()
    }

    /// [`Self::poll_timeout`] while a store call is under way: only the end of a shutdown's
    /// grace acts before the call is answered (deliveries still running are aborted then),
    /// so a shell waiting for the store need not wake for anything else.
    ///
    /// ```
    /// use outbox_core::runner::scheduler::{Now, Scheduler};
    /// use outbox_core::{RetryPolicy, RunnerConfig};
    ///
    /// let now = Now { wall: 1_700_000_000_000, mono: 0 };
    /// let mut runner = Scheduler::new(RunnerConfig::default(), RetryPolicy::default(), 1, 2, now, None);
    /// // Started, it claims: a store call is under way, and no grace runs.
    /// assert!(runner.poll_action().is_some());
    /// assert_eq!(runner.poll_timeout_during_io(), None);
    /// ```
    pub fn poll_timeout_during_io(&self) -> Option<Millis> {
        self.timers.get(Timer::Grace)
    }

    fn mono_of(&self, wall: Millis) -> Millis {
        self.now
            .mono
            .saturating_add(wall.saturating_sub(self.now.wall))
    }

    fn lease_ms(&self) -> Millis {
        duration_ms(self.config.lease)
    }

    fn may_start(&self) -> bool {
        self.stopping.is_none() && self.online && !self.halting.is_halted()
    }

    /// Reads the clocks: a wall clock that moved against the monotonic clock stepped.
    fn observe(&mut self, now: Now) {
        self.now = now;
        match self.steps.observe(now) {
            Moved::Steady => {}
            Moved::Back(step) => {
                self.link.step_back(step);
                self.pace.step_back(step);
                self.chores.push_back(Chore::Rebase {
                    step: Some(step),
                    rebased: 0,
                });
                let far = now.mono.saturating_add(self.lease_ms());
                self.timers.set(Timer::FarLeases, far);
                self.next_due_stale = true;
                self.wanted = true;
            }
            Moved::Ahead => {
                // A step forward only makes deadlines come sooner: look again.
                self.next_due_stale = true;
                self.wanted = true;
            }
        }
    }

    fn held_ids(&self) -> Vec<RecordId> {
        let mut ids: Vec<RecordId> = self.writes.iter().map(|w| w.transition.id).collect();
        ids.extend(self.leased_ids());
        ids
    }

    /// The records under the round's lease: the round's, running or waiting for a slot, and
    /// those claimed ahead of it (same token).
    fn leased_ids(&self) -> impl Iterator<Item = RecordId> + '_ {
        let ahead = self
            .ahead
            .iter()
            .flat_map(|a| a.claimed.iter().map(|r| r.id));
        self.round.iter().flat_map(Round::ids).chain(ahead)
    }

    fn claim_limit(&self) -> usize {
        if self.link.is_down() {
            1
        } else {
            self.sizing.limit()
        }
    }

    /// Nothing is queued and no store call is under way: what next?
    fn decide(&mut self) {
        if self.timers.is_set(Timer::RetryIo) {
            if self.stopping.is_some() && self.round.is_none() {
                // The store keeps failing at shutdown: give up; leases will expire.
                if self.halting.is_resuming() {
                    self.actions
                        .push_back(Action::Log(Notice::ResumeNotRecorded));
                }
                self.finish();
            }
            return;
        }
        if let Some(chore) = self.chores.pop_front() {
            self.run_chore(chore);
            return;
        }
        self.recovering = false;
        if self.timers.is_expired(Timer::Gauges, self.now.mono) {
            self.pending = Some(Pending::Stats);
            self.actions.push_back(Action::Io(Io::Stats));
            return;
        }
        if self.round.is_some() {
            self.drive_round();
            return;
        }
        if self.stopping.is_some() {
            if self.writes.is_empty() {
                self.finish();
            } else {
                self.write(None, false);
            }
            return;
        }
        if self.look_before_claim() {
            return;
        }
        if self.may_start() && self.due_now() {
            if self.recover_at <= self.now.mono {
                self.recover_at = self.now.mono.saturating_add(self.lease_ms() / 3);
                self.run_chore(Chore::RecoverExpired { recovered: 0 });
                return;
            }
            let on_deadline = !self.wanted;
            self.wanted = false;
            let lease = Lease {
                token: self.tokens.u64(..),
                until: self.now.wall.saturating_add(self.lease_ms()),
            };
            self.write(Some(lease), on_deadline);
            return;
        }
        if !self.writes.is_empty() {
            self.write(None, false);
        } else if self.next_due_stale {
            self.pending = Some(Pending::NextDue);
            self.actions.push_back(Action::Io(Io::NextDue));
        } else {
            // Nothing else to do: the time for the look asked for at start, or one that was
            // put off.
            self.look_if_idle();
        }
    }

    /// Shutdown is complete once the gauges had their last reading.
    fn finish(&mut self) {
        if self.gauges.as_mut().is_some_and(GaugeClock::last_reading) {
            self.pending = Some(Pending::Stats);
            self.actions.push_back(Action::Io(Io::Stats));
        } else {
            self.finished = true;
        }
    }

    /// Writes what is waiting within the commit delay, unless a commit is due already.
    fn commit_soon(&mut self) {
        let at = self.now.mono.saturating_add(COMMIT_DELAY);
        self.timers.set_if_unset(Timer::Commit, at);
    }

    fn write(&mut self, lease: Option<Lease>, on_deadline: bool) {
        self.write_claim(lease, on_deadline, false);
    }

    /// Writes what is waiting and, with a lease, claims after it (`ahead`: while the round
    /// under way still delivers).
    fn write_claim(&mut self, lease: Option<Lease>, on_deadline: bool, ahead: bool) {
        // A round that claims is likely to write as many next time: room for them now, not
        // grown one by one. A write that claims nothing (an idle runner's) keeps none.
        let room = if lease.is_some() {
            self.writes.len()
        } else {
            0
        };
        let writes = std::mem::replace(&mut self.writes, Vec::with_capacity(room));
        let transitions = writes.iter().map(|w| w.transition.clone()).collect();
        let claim = lease.map(|lease| Claim {
            now: self.now.wall,
            limit: if ahead {
                self.sizing.ahead_limit()
            } else {
                self.claim_limit()
            },
            lease,
        });
        self.pending = Some(Pending::Round {
            writes,
            claim,
            on_deadline,
            ahead,
        });
        self.actions
            .push_back(Action::Io(Io::Round { transitions, claim }));
    }
}
