//! The pure transition function: record + outcome + policy + now + RNG → the new persisted
//! state.
//!
//! Nothing here reads a clock, sleeps, logs or touches storage. The runner asks this module what
//! a report means and hands the resulting [`Transition`] to the store.

use std::time::Duration;

use fastrand::Rng;

use crate::event::Event;
use crate::outcome::{duration_ms, Outcome};
use crate::policy::{Ceiling, RetryPolicy};
use crate::record::{Millis, Progress, Record, RecordId};
use crate::state::State;

/// What a transition requires of the record before it applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The record is in flight under a lease with this token: a runner reporting on its own
    /// claim. A stale report after the lease was taken over is skipped.
    Lease(u64),
    /// The record is not in flight: a person's verb or a recovery clamp.
    Idle,
}

/// How a transition changes the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Remove the record and add one to the delivered counter.
    Delivered,
    /// Rewrite the schedule and counters (and drop any lease).
    Update(Progress),
    /// Remove the record, leaving a tombstone with this reason, time and spent budget.
    Discard {
        /// Why, and by whom.
        reason: String,
        /// When.
        at: Millis,
        /// Answered failures the record had spent, counting the one that reached the ceiling.
        attempts: u32,
    },
}

/// One change to one record, applied by [`Store::apply`](crate::Store::apply) if its guard holds.
///
/// ```
/// use outbox_core::{Change, Guard, RecordId, Transition};
/// let t = Transition { id: RecordId(1), guard: Guard::Lease(9), change: Change::Delivered };
/// assert_eq!(t.id, RecordId(1));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The record.
    pub id: RecordId,
    /// What must hold for the change to apply.
    pub guard: Guard,
    /// The change.
    pub change: Change,
}

/// A transition with what it means for the runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// What to persist.
    pub transition: Transition,
    /// What to tell observers once persisted.
    pub event: Event,
    /// True when the runner must pause until resumed (a refused credential).
    pub halt: bool,
}

impl Step {
    fn new(transition: Transition, event: Event) -> Self {
        Step {
            transition,
            event,
            halt: false,
        }
    }
}

fn lease_guard(record: &Record) -> Guard {
    record
        .lease
        .map_or(Guard::Idle, |lease| Guard::Lease(lease.token))
}

/// The delay that produced the record's current deadline, for decorrelated jitter.
fn previous_delay(record: &Record) -> Option<Duration> {
    match (record.last_attempt_at, record.next_attempt_at) {
        (Some(last), Some(next)) if next >= last => Some(Duration::from_millis(next - last)),
        _ => None,
    }
}

/// The meaning of one delivery report for a record that was claimed (in flight).
///
/// `outcome` should already have been through a conflict resolver; a remaining
/// [`Outcome::Conflict`] parks the record.
///
/// ```
/// use outbox_core::{machine, Change, Outcome, Record, RecordId, RetryPolicy, State};
///
/// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// let mut rng = fastrand::Rng::with_seed(1);
/// let step = machine::on_outcome(&record, &Outcome::no_answer("refused"), &RetryPolicy::default(), 10, &mut rng);
/// let Change::Update(progress) = step.transition.change else { unreachable!() };
/// assert_eq!((progress.state, progress.attempts, progress.unanswered), (State::Retrying, 0, 1));
/// ```
pub fn on_outcome(
    record: &Record,
    outcome: &Outcome,
    policy: &RetryPolicy,
    now: Millis,
    rng: &mut Rng,
) -> Step {
    let id = record.id;
    let guard = lease_guard(record);
    // A reported outcome proves the record does not kill the process: the crash-loop guard
    // counts interruptions in a row only.
    let reported = Progress {
        interrupted: 0,
        last_attempt_at: Some(now),
        ..record.progress()
    };
    let update = |progress: Progress| Transition {
        id,
        guard,
        change: Change::Update(progress),
    };
    match outcome {
        Outcome::Delivered => Step::new(
            Transition {
                id,
                guard,
                change: Change::Delivered,
            },
            Event::Delivered { id },
        ),
        Outcome::NoAnswer { error } => {
            let unanswered = record.unanswered.saturating_add(1);
            let delay = policy.delay(unanswered, previous_delay(record), rng);
            let at = now.saturating_add(duration_ms(delay));
            Step::new(
                update(Progress {
                    state: State::Retrying,
                    unanswered,
                    next_attempt_at: Some(at),
                    last_error: Some(error.clone()),
                    ..reported
                }),
                Event::Retrying {
                    id,
                    at,
                    spent: false,
                },
            )
        }
        Outcome::Transient { error, retry_after } => {
            let attempts = record.attempts.saturating_add(1);
            if attempts >= policy.max_attempts {
                let reason = format!("gave up after {attempts} attempts; last error: {error}");
                return ceiling(record, policy, reported, attempts, reason, now);
            }
            // The server's word wins over the local schedule, up to the policy's horizon that
            // bounds every deadline (so a restart's clock-jump clamp never rewrites it).
            let at = match retry_after {
                Some(retry_after) => retry_after
                    .deadline(now)
                    .min(now.saturating_add(duration_ms(policy.horizon()))),
                None => {
                    let delay = policy.delay(attempts, previous_delay(record), rng);
                    now.saturating_add(duration_ms(delay))
                }
            };
            Step::new(
                update(Progress {
                    state: State::Retrying,
                    attempts,
                    next_attempt_at: Some(at),
                    last_error: Some(error.clone()),
                    ..reported
                }),
                Event::Retrying {
                    id,
                    at,
                    spent: true,
                },
            )
        }
        Outcome::Rejected { reason } => Step::new(
            update(Progress {
                state: State::Rejected,
                attempts: record.attempts.saturating_add(1),
                next_attempt_at: None,
                last_error: Some(reason.clone()),
                ..reported
            }),
            Event::Rejected {
                id,
                reason: reason.clone(),
            },
        ),
        // Not the record's fault: nothing is spent and it stays due. It did report, so the
        // crash-loop count starts over like after any other answer.
        Outcome::Halt { reason } => Step {
            transition: update(Progress {
                state: State::Retrying,
                last_error: Some(reason.clone()),
                ..reported
            }),
            event: Event::Halted {
                id,
                reason: reason.clone(),
            },
            halt: true,
        },
        Outcome::Conflict { detail } => {
            let reason = format!("conflict: {detail}");
            Step::new(
                update(Progress {
                    state: State::NeedsAttention,
                    attempts: record.attempts.saturating_add(1),
                    next_attempt_at: None,
                    last_error: Some(reason.clone()),
                    ..reported
                }),
                Event::Parked { id, reason },
            )
        }
    }
}

fn ceiling(
    record: &Record,
    policy: &RetryPolicy,
    reported: Progress,
    attempts: u32,
    reason: String,
    now: Millis,
) -> Step {
    let id = record.id;
    let guard = lease_guard(record);
    match policy.at_ceiling {
        Ceiling::NeedsAttention => Step::new(
            Transition {
                id,
                guard,
                change: Change::Update(Progress {
                    state: State::NeedsAttention,
                    attempts,
                    next_attempt_at: None,
                    last_error: Some(reason.clone()),
                    ..reported
                }),
            },
            Event::Parked { id, reason },
        ),
        Ceiling::Discard => Step::new(
            Transition {
                id,
                guard,
                change: Change::Discard {
                    reason: reason.clone(),
                    at: now,
                    attempts,
                },
            },
            Event::Discarded { id, reason },
        ),
    }
}

/// The record's progress as it was before its claim: counters and deadline untouched, state
/// back to pending (never attempted) or retrying.
pub fn released(record: &Record) -> Progress {
    let never_tried = record.last_attempt_at.is_none() && record.interrupted == 0;
    Progress {
        state: if never_tried {
            State::Pending
        } else {
            State::Retrying
        },
        ..record.progress()
    }
}

/// Gives a claimed record back without an attempt (the round stopped, or the runner shuts
/// down): nothing is spent and its deadline is kept.
pub fn release(record: &Record) -> Transition {
    Transition {
        id: record.id,
        guard: lease_guard(record),
        change: Change::Update(released(record)),
    }
}

/// Recovery of a record whose lease expired with no report: the process died mid-delivery.
/// It becomes due at once, or needs attention once `max_interruptions` claims in a row were
/// interrupted (the crash-loop guard).
///
/// ```
/// use outbox_core::{machine, Change, Lease, Record, RecordId, RetryPolicy, State};
///
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// record.state = State::InFlight;
/// record.lease = Some(Lease { token: 1, until: 5 });
/// record.interrupted = 2;
/// let step = machine::on_interrupted(&record, &RetryPolicy::default(), 10);
/// let Change::Update(p) = step.transition.change else { unreachable!() };
/// assert_eq!((p.state, p.interrupted), (State::NeedsAttention, 3));
/// ```
pub fn on_interrupted(record: &Record, policy: &RetryPolicy, now: Millis) -> Step {
    let id = record.id;
    let interrupted = record.interrupted.saturating_add(1);
    let transition = |progress| Transition {
        id,
        guard: lease_guard(record),
        change: Change::Update(progress),
    };
    if interrupted >= policy.max_interruptions {
        let reason = format!("delivery was interrupted {interrupted} times in a row (crash loop)");
        return Step::new(
            transition(Progress {
                state: State::NeedsAttention,
                interrupted,
                next_attempt_at: None,
                last_error: Some(reason.clone()),
                ..record.progress()
            }),
            Event::Parked { id, reason },
        );
    }
    Step::new(
        transition(Progress {
            state: State::Retrying,
            interrupted,
            next_attempt_at: Some(now),
            last_error: Some("delivery interrupted: the lease expired with no report".into()),
            ..record.progress()
        }),
        Event::Retrying {
            id,
            at: now,
            spent: false,
        },
    )
}

/// The clock-jump clamp: a due-kind record whose deadline lies beyond `now + horizon` (the
/// clock jumped back, or the file came from elsewhere) is brought to `now + horizon`, where the
/// horizon is the larger of the backoff cap and the longest honoured `Retry-After`.
///
/// ```
/// use outbox_core::{machine, Record, RecordId, RetryPolicy, State};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// record.state = State::Retrying;
/// record.next_attempt_at = Some(u64::MAX);
/// assert!(machine::clamp(&record, &RetryPolicy::default(), 0).is_some());
/// ```
pub fn clamp(record: &Record, policy: &RetryPolicy, now: Millis) -> Option<Transition> {
    let limit = now.saturating_add(duration_ms(policy.horizon()));
    match record.next_attempt_at {
        Some(at) if record.state.is_due_kind() && at > limit => Some(Transition {
            id: record.id,
            guard: Guard::Idle,
            change: Change::Update(Progress {
                next_attempt_at: Some(limit),
                ..record.progress()
            }),
        }),
        _ => None,
    }
}

/// A person's retry: a fresh budget (attempts, unanswered and interruptions back to zero) and
/// due now. `None` for a record in flight (it has not reported yet) or rejected (the server's
/// verdict is final: enqueue the write again to resend it).
pub fn retry_now(record: &Record, now: Millis) -> Option<Step> {
    if matches!(record.state, State::InFlight | State::Rejected) {
        return None;
    }
    let id = record.id;
    Some(Step::new(
        Transition {
            id,
            guard: Guard::Idle,
            change: Change::Update(Progress {
                state: if record.last_attempt_at.is_none() {
                    State::Pending
                } else {
                    State::Retrying
                },
                attempts: 0,
                unanswered: 0,
                interrupted: 0,
                next_attempt_at: Some(now),
                ..record.progress()
            }),
        },
        Event::Retrying {
            id,
            at: now,
            spent: false,
        },
    ))
}

/// A person's discard: the record leaves delivery and a tombstone stays. `None` for a record
/// in flight.
pub fn discard(record: &Record, reason: &str, now: Millis) -> Option<Step> {
    if record.state == State::InFlight {
        return None;
    }
    Some(Step::new(
        Transition {
            id: record.id,
            guard: Guard::Idle,
            change: Change::Discard {
                reason: reason.to_owned(),
                at: now,
                attempts: record.attempts,
            },
        },
        Event::Discarded {
            id: record.id,
            reason: reason.to_owned(),
        },
    ))
}
