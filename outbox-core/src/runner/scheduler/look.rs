//! The look for rows the store cannot decode, and putting it off.
//!
//! The look ([`Chore::Unreadable`]) is made once, before the first claim. It reads every row,
//! so over a large backlog it may outgrow the store's deadline, and it would outgrow it at
//! every try: made again ahead of each claim, it would stop deliveries for as long as the
//! backlog lasts. A look that timed out is put off instead, until the queue is idle and the
//! policy's backoff after as many time outs has passed ([`Timer::Look`]): then no round is in
//! flight and the last claim came back short of its limit. As the backlog drains the look fits
//! the deadline, and the rows it finds are still said once. Claims pass such rows by
//! meanwhile, and the application's own look (`Outbox::unreadable`) lists them.

use std::time::Duration;

use super::chore::Chore;
use super::timer::Timer;
use super::{Action, Notice, Pending, Scheduler};
use crate::outcome::duration_ms;

/// A look that timed out `timeouts` times, waiting for an idle queue; `due` once its backoff
/// has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PutOff {
    timeouts: u32,
    due: bool,
}

impl Scheduler {
    /// The look outgrew the store's deadline: put off for the backoff after one more time out.
    pub(super) fn look_timed_out(&mut self, error: String) {
        let timeouts = self
            .look_put_off
            .map_or(0, |p| p.timeouts)
            .saturating_add(1);
        self.look_put_off = Some(PutOff {
            timeouts,
            due: false,
        });
        let retry_in: Duration = self.policy.backoff.delay(timeouts);
        let at = self.now.mono.saturating_add(duration_ms(retry_in));
        self.timers.set(Timer::Look, at);
        self.actions
            .push_back(Action::Log(Notice::UnreadableLookPutOff {
                error,
                retry_in,
            }));
    }

    /// The look's backoff passed: made now if the queue is idle, else when it is.
    pub(super) fn look_backoff_over(&mut self) {
        self.timers.stop(Timer::Look);
        if let Some(put_off) = &mut self.look_put_off {
            put_off.due = true;
        }
        let claiming = matches!(self.pending, Some(Pending::Round { claim: Some(_), .. }));
        if self.round.is_none() && !claiming {
            self.look_when_idle();
        }
    }

    /// The queue is idle (a claim found nothing, or a round that was not full is over): the
    /// time for a look that was put off, once its backoff has passed.
    pub(super) fn look_when_idle(&mut self) {
        if self.stopping.is_some() {
            // Not worth holding up a shutdown for: the next start looks again.
            return;
        }
        if let Some(put_off) = &mut self.look_put_off {
            if put_off.due {
                put_off.due = false;
                self.chores
                    .push_back(Chore::Unreadable { found: Vec::new() });
            }
        }
    }

    /// The look ended: nothing is put off any more.
    pub(super) fn look_done(&mut self) {
        self.look_put_off = None;
        self.timers.stop(Timer::Look);
    }
}
