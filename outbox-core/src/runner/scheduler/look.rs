//! The look for rows the store cannot decode, and when it is made.
//!
//! The look ([`Chore::Unreadable`]) reads every row, so it costs in proportion to the backlog
//! (SQLite checks about two million rows a second): made before the first claim, a runner
//! started over a large backlog would deliver nothing until it had read all of it. So the look
//! asked for at start waits for the runner's first idle moment (nothing left to claim, or
//! nothing it may claim; nothing to write, no store call under way), which comes once a backlog
//! is drained; a runner that never idles makes it before the first claim it would make
//! [`LOOK_WAIT`] after its start (no claim is made ahead once that time has come). `flush`
//! waits for it ([`Scheduler::owes_look`]). A look that fails other than by timing out waits
//! for an idle runner in the same way again, after the store's backoff: claims go on
//! meanwhile, so a look that keeps failing never stops deliveries. Until the look is made,
//! claims pass unreadable rows by without a word, and the application's own look
//! (`Outbox::unreadable`) lists them at any time.
//!
//! Over a large backlog the look may also outgrow the store's deadline, and it would outgrow it
//! at every try: made again ahead of each claim, it would stop deliveries for as long as the
//! backlog lasts. A look that timed out is put off instead ([`PutOff`]), and made again only
//! when the runner has nothing else to do: no round in flight, nothing due, nothing to write,
//! no wake waiting, and the last claim came back short of its limit (`decide` asks last). As
//! the backlog drains the look fits the deadline, and the rows it finds are still said once.
//!
//! While a look runs, nothing else does (one store call at a time): a wake-up waits for it, up
//! to the store's deadline. So the wait after the `n`-th time out is [`PUT_OFF_FACTOR`] times
//! that deadline, doubled with each further time out ([`put_off_for`]): a look that keeps
//! timing out takes at most a tenth of the runner's idle time, less with each try. A shutdown
//! does not wait for it (the shell cuts it short; the next start looks again).

use std::time::Duration;

use super::chore::Chore;
use super::timer::Timer;
use super::{Action, Notice, Scheduler};
use crate::outcome::duration_ms;

/// How long the look asked for at start waits for an idle runner before it is made ahead of
/// the next claim.
pub const LOOK_WAIT: Duration = Duration::from_secs(60);

/// How many store deadlines the first wait after a timed-out look lasts.
pub const PUT_OFF_FACTOR: u32 = 10;

/// The longest wait between two looks.
const LONGEST_PUT_OFF: Duration = Duration::from_secs(24 * 60 * 60);

/// The wait after the `timeouts`-th time out of the look (1-based) under `store_timeout`:
/// [`PUT_OFF_FACTOR`] deadlines, doubled with each further time out, at most a day.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::runner::scheduler::put_off_for;
/// let deadline = Duration::from_secs(30);
/// assert_eq!(put_off_for(1, deadline), Duration::from_secs(300));
/// assert_eq!(put_off_for(2, deadline), Duration::from_secs(600));
/// assert_eq!(put_off_for(99, deadline), Duration::from_secs(24 * 60 * 60));
/// ```
pub fn put_off_for(timeouts: u32, store_timeout: Duration) -> Duration {
    let doublings = timeouts.saturating_sub(1).min(31);
    store_timeout
        .saturating_mul(PUT_OFF_FACTOR)
        .saturating_mul(1 << doublings)
        .min(LONGEST_PUT_OFF)
}

impl Scheduler {
    /// Reads the rows the store cannot decode once, when the runner is first idle or at the
    /// latest before the first claim it would make [`LOOK_WAIT`] from now (see the module
    /// docs), and emits an [`Event::Unreadable`](crate::Event::Unreadable) for each; the shell
    /// says each row once per process. [`Scheduler::owes_look`] is true until it has ended.
    pub fn look_for_unreadable(&mut self) {
        self.look_owed = true;
        self.look_when_idle();
    }

    /// The look waits for an idle runner, [`LOOK_WAIT`] at most.
    fn look_when_idle(&mut self) {
        let by = self.now.mono.saturating_add(duration_ms(LOOK_WAIT));
        self.look_by = Some(by);
        // Wakes a runner that waits with work due (a `Retry-After` hold, a link probe): at the
        // wait's end the look goes before its next claim.
        self.timers.set(Timer::Look, by);
    }

    /// True while the look asked for at start is still to be made, or under way and not put
    /// off: `flush` waits for it, so a program that starts, flushes and stops hears of the
    /// rows it finds. False once the runner is stopping.
    pub fn owes_look(&self) -> bool {
        self.look_owed && self.stopping.is_none()
    }

    /// True once the wait of the look asked for at start is over: it goes before any claim,
    /// one made ahead included.
    pub(super) fn look_is_due(&self) -> bool {
        self.look_by.is_some_and(|by| by <= self.now.mono)
    }

    /// Makes the look asked for at start if its wait for an idle runner is over: true when
    /// it did (the claim waits for it).
    pub(super) fn look_before_claim(&mut self) -> bool {
        if !self.look_is_due() {
            return false;
        }
        self.start_look();
        true
    }

    /// Makes the look asked for at start.
    fn start_look(&mut self) {
        self.look_by = None;
        self.timers.stop(Timer::Look);
        self.run_chore(Chore::Unreadable { found: Vec::new() });
    }

    /// The look did not end within the store's deadline: put off (see the module docs). Said
    /// at `warn` the first time (the shell's choice, by `timeouts`); nothing is said, and
    /// nothing put off, when the runner is shutting down.
    pub(super) fn look_timed_out(&mut self, error: String) {
        if self.stopping.is_some() {
            return;
        }
        // `flush` does not wait for a look that was put off.
        self.look_owed = false;
        let timeouts = self.look_timeouts.unwrap_or(0).saturating_add(1);
        self.look_timeouts = Some(timeouts);
        let retry_in = put_off_for(timeouts, self.config.store_timeout);
        let at = self.now.mono.saturating_add(duration_ms(retry_in));
        self.timers.set(Timer::Look, at);
        self.actions
            .push_back(Action::Log(Notice::UnreadableLookPutOff {
                error,
                retry_in,
                timeouts,
            }));
    }

    /// The look failed other than by timing out: asked for again as at start (made when the
    /// runner is next idle, or before the first claim a [`LOOK_WAIT`] on), after the store's
    /// backoff; `flush` does not wait for it any more.
    pub(super) fn look_failed(&mut self) {
        self.look_owed = false;
        self.look_when_idle();
    }

    /// Asked by `decide` when nothing else is to be done. The look asked for at start is made
    /// if nothing is left to claim (the last claim came back short and no wake waits) or
    /// nothing may be claimed (halted, offline). The look that was put off is made once its
    /// wait is over (its timer fired, or a try failed otherwise and set none), if the last
    /// claim found no more than it asked for, no wake waits and claims may be made.
    pub(super) fn look_if_idle(&mut self) {
        if self.look_by.is_some() {
            if !self.backlog && (!self.wanted || !self.may_start()) {
                self.start_look();
            }
            return;
        }
        let due = self.look_timeouts.is_some() && !self.timers.is_set(Timer::Look);
        if due && !self.backlog && !self.wanted && self.may_start() {
            self.run_chore(Chore::Unreadable { found: Vec::new() });
        }
    }

    /// The look ended: nothing is put off any more.
    pub(super) fn look_done(&mut self) {
        self.look_owed = false;
        self.look_timeouts = None;
        self.timers.stop(Timer::Look);
    }
}
