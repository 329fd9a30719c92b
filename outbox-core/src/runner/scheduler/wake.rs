//! When the scheduler wakes by itself: the timers that passed are acted on, and after every
//! change the timers derived from the state (the next claim, the commit, the grace, the gauges)
//! are set again, so [`Scheduler::poll_timeout`] is one look at the table.

use super::chore::Chore;
use super::round::Round;
use super::timer::Timer;
use super::{Action, Notice, Scheduler};
use crate::link::LinkState;
use crate::outcome::duration_ms;
use crate::record::{Lease, Millis};

impl Scheduler {
    /// Acts on the timers that passed; the claim, the commit and the gauges are acted on
    /// where the scheduler decides (`decide`, `drive_round`).
    pub(super) fn on_timers(&mut self) {
        let mono = self.now.mono;
        let third = self.lease_ms() / 3;
        let expired: Vec<Timer> = self.timers.expired(mono).collect();
        for timer in expired {
            match timer {
                Timer::Poll => {
                    let next = self
                        .config
                        .safety_poll
                        .map(|p| mono.saturating_add(duration_ms(p)));
                    self.timers.set_or_stop(Timer::Poll, next);
                    // The poll looks for leases other processes left to expire (records it
                    // recovers wake the runner), reads the next deadline again and, halted,
                    // the persisted halt; it claims nothing itself (a claim follows only
                    // from what it finds).
                    self.recover_at = mono.saturating_add(third);
                    self.chores
                        .push_back(Chore::RecoverExpired { recovered: 0 });
                    self.next_due_stale = true;
                    self.read_halt();
                }
                Timer::FarLeases => {
                    self.timers.stop(Timer::FarLeases);
                    // Which records are ours is read when the check runs.
                    self.chores.push_back(Chore::FarLeases { ours: Vec::new() });
                }
                Timer::HaltRead => self.halt_read_spaced(),
                Timer::RetryIo => self.timers.stop(Timer::RetryIo),
                Timer::LinkWarn => self.link_still_down(),
                Timer::Renew => self.renew(),
                Timer::Grace => {
                    self.timers.stop(Timer::Grace);
                    if !self.aborted {
                        self.aborted = true;
                        self.actions.push_back(Action::AbortDeliveries);
                    }
                }
                // The look that was put off is due: `decide` makes it once the runner is idle.
                Timer::Look => self.timers.stop(Timer::Look),
                Timer::Commit | Timer::Claim | Timer::Gauges | Timer::Rate => {}
            }
        }
    }

    pub(super) fn link_still_down(&mut self) {
        let every = duration_ms(self.config.link_down_warn_every);
        if let LinkState::Down { since, last_error } = self.link.state() {
            self.actions.push_back(Action::Log(Notice::LinkStillDown {
                since: *since,
                last_error: last_error.clone(),
            }));
            self.timers
                .set(Timer::LinkWarn, self.now.mono.saturating_add(every));
        } else {
            self.timers.stop(Timer::LinkWarn);
        }
    }

    pub(super) fn renew(&mut self) {
        // Records waiting for a slot are renewed too: they are ours until released. So are
        // those claimed ahead, under the same token.
        let ids: Vec<_> = self.leased_ids().collect();
        let Some(round) = self.round.as_ref().filter(|_| !ids.is_empty()) else {
            self.timers.stop(Timer::Renew);
            return;
        };
        let lease = Lease {
            token: round.lease.token,
            until: self.now.wall.saturating_add(self.lease_ms()),
        };
        self.chores.push_front(Chore::Renew { ids, lease });
        let next = self.now.mono.saturating_add(self.lease_ms() / 3);
        self.timers.set(Timer::Renew, next);
    }

    /// Sets the timers derived from the state: the next claim, the commit, the grace, the
    /// gauges. Called after every change, so [`Self::poll_timeout`] is one look at the table.
    pub(super) fn arm(&mut self) {
        let claim_at = if self.round.is_none() && self.may_start() {
            self.claim_at()
        } else {
            None
        };
        self.timers.set_or_stop(Timer::Claim, claim_at);
        if self.round.is_none() || self.writes.is_empty() {
            self.timers.stop(Timer::Commit);
        }
        let grace = self
            .stopping
            .filter(|_| !self.aborted && self.round.as_ref().is_some_and(Round::is_running));
        self.timers.set_or_stop(Timer::Grace, grace);
        let mono = self.now.mono;
        let rate = match (&self.round, &self.rate) {
            (Some(round), Some(rate)) if round.is_waiting() && !round.cut_short => {
                rate.next_free(mono)
            }
            _ => None,
        };
        self.timers.set_or_stop(Timer::Rate, rate);
        if let Some(gauges) = &self.gauges {
            let idle = self.holding() == 0;
            let at = gauges
                .due_at(idle, self.now.mono)
                .filter(|_| !self.recovering);
            self.timers.set_or_stop(Timer::Gauges, at);
        }
        // While a failed store call waits to be tried again, nothing that needs the store can
        // act: a commit or a gauge reading due before then waits for it, or the runner would
        // wake for it again and again without doing it (a spin until the retry).
        if let Some(retry) = self.timers.get(Timer::RetryIo) {
            for timer in [Timer::Commit, Timer::Gauges] {
                if let Some(at) = self.timers.get(timer) {
                    self.timers.set(timer, at.max(retry));
                }
            }
        }
    }

    /// When the next claim may go (monotonic), if anything is due at all.
    pub(super) fn claim_at(&self) -> Option<Millis> {
        let not_before = match (self.link.probe_at(), self.pace.hold_until()) {
            (Some(probe), Some(hold)) => Some(probe.max(hold)),
            (probe, hold) => probe.or(hold),
        };
        // A trigger that arrived during a hold or a probe wait is served when it ends.
        let (due, quiet) = if self.wanted {
            (self.now.wall, 0)
        } else {
            (self.next_due?, self.pace.quiet_until())
        };
        let due = not_before.map_or(due, |nb| due.max(nb));
        let retry = self.timers.get(Timer::RetryIo).unwrap_or(0);
        Some(self.mono_of(due).max(quiet).max(retry))
    }

    /// Whether a claim may find work now.
    pub(super) fn due_now(&self) -> bool {
        let wall = self.now.wall;
        if self.link.probe_at().is_some_and(|probe| probe > wall) || self.pace.holds(wall) {
            return false;
        }
        self.wanted
            || (self.pace.quiet_until() <= self.now.mono
                && self.next_due.is_some_and(|due| due <= wall))
    }
}
