//! What the answer of a store call means, and what a failed call does.
//!
//! Each [`Io`](super::Io) comes back as its own [`Answer`] variant; a failure comes back as a
//! [`StoreFailure`] of a kind the scheduler acts on: a transient one is tried again on
//! backoff, a read-only or full store pauses deliveries and says so once, until a write
//! succeeds. Outcomes are never lost to a failure: they wait for the next write.

use super::chore::{Chore, Context, Next};
use super::round::written_events;
use super::timer::Timer;
use super::{Action, Answer, FailureKind, Gauges, Io, Notice, Pending, Scheduler, StoreFailure};
use crate::event::Event;
use crate::outcome::duration_ms;

impl Scheduler {
    pub(super) fn answered(&mut self, result: Result<Answer, StoreFailure>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let answer = match result {
            Ok(answer) => answer,
            Err(failure) => return self.failed(pending, failure),
        };
        match (pending, answer) {
            (
                Pending::Round {
                    writes,
                    claim,
                    on_deadline,
                    ahead,
                },
                Answer::Round { skipped, claimed },
            ) => {
                self.store_answered(true);
                let events: Vec<Event> = written_events(writes, &skipped).collect();
                self.actions.extend(events.into_iter().map(Action::Emit));
                match claim {
                    Some(claim) if ahead => self.claimed_ahead(claim, claimed),
                    Some(claim) => self.start_round(claim, claimed, on_deadline, false),
                    None => {}
                }
            }
            (Pending::NextDue, Answer::NextDue(next_due)) => {
                self.store_answered(false);
                self.next_due = next_due;
                self.next_due_stale = false;
            }
            (Pending::Stats, Answer::Stats(stats)) => {
                if let Some(gauges) = &mut self.gauges {
                    gauges.read(self.now.mono);
                }
                self.actions.push_back(Action::Gauges(Gauges {
                    stats,
                    link_up: self.link.state().is_up(),
                    halted: self.halting.is_halted(),
                    now: self.now.wall,
                }));
            }
            (
                Pending::Chore {
                    mut chore,
                    writing: None,
                },
                answer,
            ) => {
                self.store_answered(false);
                let cx = Context {
                    now: self.now.wall,
                    lease_ms: self.lease_ms(),
                    policy: &self.policy,
                };
                let next = chore.found(answer, cx);
                self.chore_next(chore, next);
            }
            (
                Pending::Chore {
                    mut chore,
                    writing: Some(writes),
                },
                Answer::Applied { skipped },
            ) => {
                self.store_answered(true);
                let skipped_here = writes
                    .iter()
                    .filter(|w| skipped.contains(&w.transition.id))
                    .count();
                let written = writes.len() - skipped_here;
                let events: Vec<Event> = written_events(writes, &skipped).collect();
                self.actions.extend(events.into_iter().map(Action::Emit));
                let next = chore.written(written);
                self.chore_next(chore, next);
            }
            (pending, answer) => {
                let error = format!("the store call was answered with {answer:?}");
                self.failed(
                    pending,
                    StoreFailure {
                        kind: FailureKind::Transient,
                        error,
                    },
                );
            }
        }
    }

    pub(super) fn store_answered(&mut self, wrote: bool) {
        self.store.failures = 0;
        // A read-only or full store is back only once a write succeeds; a silent one, once
        // it answers at all.
        let back = wrote || self.store.paused == Some(FailureKind::Timeout);
        if back && self.store.paused.take().is_some() {
            self.actions.push_back(Action::Log(Notice::StoreBack));
        }
    }

    pub(super) fn failed(&mut self, pending: Pending, failure: StoreFailure) {
        match pending {
            Pending::Stats => {
                // The gauges wait for their next reading; nothing else depends on them.
                if let Some(gauges) = &mut self.gauges {
                    gauges.read(self.now.mono);
                }
                return;
            }
            Pending::Chore {
                chore: Chore::Renew { .. },
                ..
            } => {
                // Deliveries go on; the next renewal tries again.
                let error = failure.error;
                self.actions
                    .push_back(Action::Log(Notice::RenewFailed { error }));
                return;
            }
            Pending::Chore {
                chore: Chore::Unreadable { .. },
                ..
            } if failure.kind == FailureKind::Timeout => {
                // Not tried again before the next claim: put off to an idle queue (`look`).
                self.look_timed_out(failure.error);
                return;
            }
            _ => {}
        }
        // Records claimed ahead wait for a round the store may not let end soon: they go
        // back (guarded, so a lease that lapsed meanwhile changes nothing).
        self.release_ahead();
        self.store.failures = self.store.failures.saturating_add(1);
        let retry_in = self.policy.backoff.delay(self.store.failures);
        let at = self.now.mono.saturating_add(duration_ms(retry_in));
        self.timers.set(Timer::RetryIo, at);
        let StoreFailure { kind, error } = failure;
        match kind {
            // Said once until the store answers again: a store that stays read-only, full or
            // silent must not fill the log with one line per try.
            FailureKind::ReadOnly | FailureKind::Full | FailureKind::Timeout => {
                if self.store.paused.replace(kind) != Some(kind) {
                    self.actions
                        .push_back(Action::Log(Notice::StorePaused { kind, error }));
                }
            }
            FailureKind::Transient => {
                self.actions
                    .push_back(Action::Log(Notice::StoreFailed { error, retry_in }));
            }
        }
        match pending {
            // Nothing of it was written: the transitions wait for the next write, and the
            // claim is made again once the store is back.
            Pending::Round {
                mut writes, claim, ..
            } => {
                writes.append(&mut self.writes);
                self.writes = writes;
                self.wanted |= claim.is_some();
            }
            // A look that was put off is not queued before the next claim: with its timer
            // stopped it is due, and waits for an idle runner again (`look`).
            Pending::Chore {
                chore: Chore::Unreadable { .. },
                ..
            } if self.look_timeouts.is_some() => {}
            // Waits for an idle runner again, a minute at most: claims go on meanwhile, so a
            // look that keeps failing (a damaged page only it reads) never stops deliveries,
            // and `flush` no longer waits for it.
            Pending::Chore {
                chore: Chore::Unreadable { .. },
                ..
            } => self.look_failed(),
            // The chore is tried again after the backoff, where it stood.
            Pending::Chore { chore, .. } => self.chores.push_front(chore),
            Pending::NextDue | Pending::Stats => {}
        }
    }

    pub(super) fn run_chore(&mut self, mut chore: Chore) {
        // The records this runner holds are listed as the check is made, not when it fell
        // due: a claim answered in between took records that are ours.
        if let Chore::FarLeases { ours } = &mut chore {
            *ours = self.held_ids();
        }
        let io = chore.io(self.now.wall);
        self.pending = Some(Pending::Chore {
            chore,
            writing: None,
        });
        self.actions.push_back(Action::Io(io));
    }

    pub(super) fn chore_next(&mut self, chore: Chore, next: Next) {
        match next {
            Next::Read => self.run_chore(chore),
            Next::Write(writes) => {
                let transitions = writes.iter().map(|w| w.transition.clone()).collect();
                self.pending = Some(Pending::Chore {
                    chore,
                    writing: Some(writes),
                });
                self.actions.push_back(Action::Io(Io::Apply(transitions)));
            }
            Next::Done(changed) => self.chore_done(chore, changed),
        }
    }

    pub(super) fn chore_done(&mut self, chore: Chore, changed: usize) {
        match chore {
            Chore::SetHalt(_) => {
                if let Some(event) = self.halting.persisted() {
                    self.actions.push_back(Action::Emit(event));
                }
            }
            Chore::ClearHalt {
                held: Some(held),
                found,
            } => self.halt_cleared(&held, found),
            Chore::ReadHalt { halt, cleared } => self.halt_read(&halt, cleared),
            Chore::Unreadable { found } => {
                self.look_done();
                for row in found {
                    self.actions.push_back(Action::Emit(Event::Unreadable {
                        id: row.id,
                        reason: row.reason,
                    }));
                }
            }
            Chore::Rebase {
                step: Some(step), ..
            } => self.actions.push_back(Action::Log(Notice::Rebased {
                rebased: changed,
                step,
            })),
            _ => {}
        }
        if changed > 0 {
            // Records were recovered, re-based or relinked: some may be due now.
            self.wanted = true;
            self.next_due_stale = true;
        }
    }
}
