//! What the end of a delivery means: the link, the halt, the pace and the record's next step.
//!
//! A no-answer takes the link down and cuts the round (the rest is not hammered); a refused
//! credential halts once; any answer brings the link back (the backlog spread over a part of
//! the outage), teaches the pace and the storm breaker, and gives the record its transition.

use std::time::Duration;

use super::round::Write;
use super::timer::Timer;
use super::{chore::Chore, Action, Notice, Report, Scheduler};
use crate::event::Event;
use crate::machine::{self, Change};
use crate::outcome::{duration_ms, Outcome};
use crate::record::{Record, RecordId};

impl Scheduler {
    pub(super) fn set_online(&mut self, online: bool) {
        let was = self.online;
        self.online = online;
        if online && !was {
            self.link_restored(None);
            self.wanted = true;
        } else if !online {
            self.cut_round();
        }
    }

    pub(super) fn halt_now(&mut self, id: RecordId, reason: String) {
        if let Some(halt) = self.halting.halt_now(id, reason, self.now.wall) {
            // The one event of the halt is sent once it is persisted (see `chore_done`).
            self.chores.push_back(Chore::SetHalt(halt));
            self.cut_round();
        }
    }

    pub(super) fn link_restored(&mut self, answered: Option<RecordId>) {
        let Some(restored) = self.link.answered(answered, self.now.mono) else {
            return;
        };
        // The server answers again after a time without any answer: every device that lost
        // it finds it back within one probe window, so the backlog waits a random part of
        // that time (a twelfth, at most `relink_spread`), or the whole fleet's backlog lands
        // at once. A device whose own link came back says so (`Online`).
        let down = restored.down_for;
        let spread = (down / 12).min(duration_ms(self.config.relink_spread));
        if answered.is_some() && spread > 0 {
            let at = self.now.wall.saturating_add(self.rng.u64(0..=spread));
            self.pace.hold(at);
            self.cut_round();
        }
        self.timers.stop(Timer::LinkWarn);
        self.actions.push_back(Action::Emit(Event::LinkUp {
            down_for: Duration::from_millis(down),
        }));
        if !restored.release.is_empty() {
            self.chores.push_back(Chore::Relink {
                ids: restored.release.into(),
                found: Vec::new(),
            });
        }
        self.wanted = true;
    }

    pub(super) fn reported(&mut self, id: RecordId, report: Report) {
        let Some((record, started)) = self.round.as_mut().and_then(|round| round.finish(id)) else {
            return;
        };
        if matches!(report, Report::Outcome(Outcome::Delivered)) {
            self.sizing.delivered();
        } else {
            self.sizing.not_delivered();
        }
        let abandoned = matches!(report, Report::Abandoned);
        let write = match report {
            Report::Abandoned => Write::release(&record),
            Report::Panicked => {
                self.actions
                    .push_back(Action::Log(Notice::SinkPanicked { id }));
                machine::on_interrupted(&record, &self.policy, self.now.wall).into()
            }
            Report::Outcome(Outcome::NoAnswer { error }) => self.no_answer(&record, &error),
            Report::Outcome(Outcome::Halt { reason }) => {
                // Not the record's fault: nothing is spent, and only the first refusal
                // halts (one event, one line); the others are released, the refusal kept in
                // their history.
                let write = Write::silent(machine::refused(&record, &reason, self.now.wall));
                self.halt_now(id, reason);
                write
            }
            Report::Outcome(outcome) => self.server_answered(&record, outcome),
        };
        // Every end but an abandoned one added an attempt: it took this long.
        let write = if abandoned {
            write
        } else {
            write.took(self.now.mono.saturating_sub(started))
        };
        self.writes.push(write);
        self.commit_soon();
    }

    /// No server answered: the link goes down, and the rest of the batch is not hammered.
    pub(super) fn no_answer(&mut self, record: &Record, error: &str) -> Write {
        let now = self.now.wall;
        let streak = self.link.streak(record.unanswered);
        let step = machine::on_no_answer(record, error, streak, &self.policy, now, &mut self.rng);
        let deadline = match &step.transition.change {
            Change::Update(p) => p.next_attempt_at.unwrap_or(now),
            _ => now,
        };
        if self
            .link
            .unanswered(now, self.now.mono, record.id, error, deadline)
        {
            let every = duration_ms(self.config.link_down_warn_every);
            self.timers
                .set(Timer::LinkWarn, self.now.mono.saturating_add(every));
            self.actions.push_back(Action::Emit(Event::LinkDown {
                since: now,
                error: error.to_owned(),
            }));
        }
        self.sizing.start_small();
        self.cut_round();
        step.into()
    }

    /// A server answered: the link is up, the pace and the storm breaker learn of it.
    pub(super) fn server_answered(&mut self, record: &Record, outcome: Outcome) -> Write {
        let now = self.now.wall;
        self.link_restored(Some(record.id));
        let retry_after = match &outcome {
            Outcome::Transient { retry_after, .. } => *retry_after,
            _ => None,
        };
        if retry_after.is_none() {
            self.pace.answered(now);
        }
        if let Some(reason) =
            self.halting
                .answered(&outcome, &record.group, self.config.rejection_storm)
        {
            self.halt_now(record.id, reason);
        }
        if let Some(retry_after) = retry_after {
            let asked = retry_after.asked(now);
            if asked > self.policy.max_retry_after && self.pace.first_cut(record.id) {
                self.actions.push_back(Action::Log(Notice::RetryAfterCut {
                    id: record.id,
                    asked,
                }));
            }
        }
        let step = machine::on_outcome(record, &outcome, &self.policy, now, &mut self.rng);
        if let (Some(_), Change::Update(progress)) = (retry_after, &step.transition.change) {
            // The server asked this client to wait: the rest of the round and every claim
            // wait too, or a device that comes back sends its whole backlog into the same
            // refusal.
            if let Some(at) = progress.next_attempt_at {
                self.pace.told_to_wait(at);
                self.sizing.start_small();
                self.cut_round();
            }
        }
        step.into()
    }
}
