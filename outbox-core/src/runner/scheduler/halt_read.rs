//! Reading the persisted halt: how a halted runner learns that another process, another host
//! or a person lifted it (`Store::set_halt(None)`), and resumes too.
//!
//! A halted runner reads the halt when woken and at each safety poll. On PostgreSQL every
//! enqueue of the fleet wakes every runner, so the reads wakes ask for are spaced
//! ([`HALT_READ_SPACING`]), with one read after the last wake of a spell. A read answers for
//! the halt it was made for: a newer halt, set while the read was under way, is never lifted
//! by it.

use super::chore::Chore;
use super::timer::Timer;
use super::{Action, Scheduler};
use crate::event::Event;
use crate::record::Millis;
use crate::store::Halt;

/// How far apart the reads of the persisted halt that wakes ask for are, at least, while the
/// runner is halted: a read per wake would follow the fleet's enqueue rate for as long as a
/// halt lasts. A halt cleared elsewhere is seen within this time plus a read.
pub(super) const HALT_READ_SPACING: Millis = 500;

impl Scheduler {
    /// Halted, the runner reads the persisted halt when woken and at each safety poll: a
    /// halt cleared by another process or a person (`Store::set_halt(None)`) resumes it too.
    /// At most one read waits behind the one under way (a wake during a read may come from a
    /// clearing the read missed); chores run in order, so a read queued behind the halt's own
    /// write reads it back. None at shutdown.
    pub(super) fn read_halt(&mut self) {
        let Some(halt) = self.halting.halt() else {
            return;
        };
        let queued = self
            .chores
            .iter()
            .any(|c| matches!(c, Chore::ReadHalt { .. }));
        if !queued && self.stopping.is_none() {
            self.chores.push_back(Chore::ReadHalt {
                halt: halt.clone(),
                cleared: false,
            });
        }
    }

    /// A wake's read of the halt: at once when none started in the last
    /// [`HALT_READ_SPACING`], else once when that time is over, however many wakes came.
    pub(super) fn read_halt_when_woken(&mut self) {
        if self.halting.halt().is_none() || self.stopping.is_some() {
            return;
        }
        if self.timers.is_set(Timer::HaltRead) {
            self.halt_read_wanted = true;
        } else {
            self.read_halt();
            self.timers.set(
                Timer::HaltRead,
                self.now.mono.saturating_add(HALT_READ_SPACING),
            );
        }
    }

    /// The spacing of wake-driven reads is over: the read a wake asked for meanwhile, if any.
    pub(super) fn halt_read_spaced(&mut self) {
        self.timers.stop(Timer::HaltRead);
        if std::mem::take(&mut self.halt_read_wanted) {
            self.read_halt_when_woken();
        }
    }

    /// A read of the halt answered: `cleared` when the store held none. Resumed elsewhere,
    /// the runner resumes without writing (there is nothing to clear), unless its halt changed
    /// while the read was under way (resumed here, then halted again by a refusal whose write
    /// waits behind the read) or it is shutting down.
    pub(super) fn halt_read(&mut self, halt: &Halt, cleared: bool) {
        let same = self.halting.halt() == Some(halt);
        if cleared && same && self.stopping.is_none() && self.halting.lifted() {
            self.wanted = true;
            self.actions.push_back(Action::Emit(Event::Resumed));
        }
    }

    /// This runner's resume cleared the store's halt if it was `held`, the halt the runner
    /// held; `found` is what the store held. Another halt there (a refusal persisted after
    /// `held`, by another runner of the fleet) is not lifted by a resume of an older one: the
    /// runner keeps to it and says so ([`Event::StillHalted`]). The store held `held` or none:
    /// the runner is resumed, and says so. Halted again meanwhile by a refusal of its own, it
    /// says neither: its newer halt is written after this clearing, and its event follows;
    /// resumed from that one too, the later clearing answers.
    pub(super) fn halt_cleared(&mut self, held: &Halt, found: Option<Halt>) {
        if !self.halting.cleared(held) || self.halting.halt().is_some() {
            return;
        }
        match found {
            Some(other) if &other != held => {
                self.actions.push_back(Action::Emit(Event::StillHalted {
                    reason: other.reason.clone(),
                }));
                self.halting.keep(other);
            }
            _ => self.actions.push_back(Action::Emit(Event::Resumed)),
        }
    }
}
