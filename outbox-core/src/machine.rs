//! The pure transition function: record + outcome + policy + now + RNG → the new persisted
//! state.
//!
//! Nothing here reads a clock, sleeps, logs or touches storage. The runner asks this module what
//! a report means and hands the resulting [`Transition`] to the store.

use std::time::Duration;

use fastrand::Rng;

use crate::event::Event;
use crate::history::{Attempt, AttemptClass, History};
use crate::outcome::{duration_ms, Outcome};
use crate::policy::{Ceiling, RetryPolicy};
use crate::record::{Millis, Progress, Record, RecordId};
use crate::seen::Seen;
use crate::state::State;

mod admit;
mod manual;
mod rebase;

pub use admit::{admits_requeue, admits_update};
pub use manual::{discard, requeue, retry_now};
pub use rebase::{rebase, rebase_by};

/// What a transition requires of the record before it applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The record is in flight under a lease with this token: a runner reporting on its own
    /// claim. A stale report after the lease was taken over is skipped.
    Lease(u64),
    /// The record is not in flight: a person's verb or a recovery clamp.
    Idle,
    /// The record is not in flight and still as a person saw it when they chose a repair
    /// ([`Seen::of`] the record now equals this): a compare-and-set, so a report, a relink or
    /// another person's repair recorded between the look and the click is never overwritten.
    Seen(Seen),
}

impl Guard {
    /// The one rule every store applies: does this guard admit a transition on `record` as
    /// it is now? A lease guard admits only the record in flight under that token; the idle
    /// guard admits any record that is not in flight; the seen guard admits a record that is
    /// not in flight and unchanged since the person looked (see [`Seen`]).
    ///
    /// ```
    /// use outbox_core::{Guard, Lease, Record, RecordId, State};
    /// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
    /// assert!(Guard::Idle.admits(&record));
    /// record.state = State::InFlight;
    /// record.lease = Some(Lease { token: 7, until: 10 });
    /// assert!(Guard::Lease(7).admits(&record));
    /// assert!(!Guard::Lease(8).admits(&record) && !Guard::Idle.admits(&record));
    /// ```
    pub fn admits(self, record: &Record) -> bool {
        match self {
            Guard::Lease(token) => {
                record.state == State::InFlight && record.lease.is_some_and(|l| l.token == token)
            }
            Guard::Idle => record.state != State::InFlight,
            Guard::Seen(seen) => record.state != State::InFlight && Seen::of(record) == seen,
        }
    }
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
    /// Re-admit a rejected record in its own place: pending and due at `at`, with a fresh
    /// budget (attempts, unanswered and interruptions at zero, no last attempt, no last
    /// error), keeping its id, so it goes before the later records of its group that are still
    /// queued, as it would have without the rejection. Stores apply it only to a rejected
    /// record whose group has no record in flight (which would put two of the group in
    /// flight); otherwise it is skipped.
    Requeue {
        /// When the record is due again.
        at: Millis,
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

/// The age policy for a claimed record: when the policy has a `max_age` and the record was
/// enqueued longer ago than that, it is not sent but parked in needs-attention with the reason
/// "stale: created N days ago"; nothing is spent. The park counts as its last report, so after
/// a person's retry the record is sent: a record whose last report came after it turned stale
/// is never parked for its age again. `None` when the record may be sent.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::{machine, Change, Event, Record, RecordId, RetryPolicy, State};
///
/// const DAY: u64 = 86_400_000;
/// let policy = RetryPolicy::default().with_max_age(Duration::from_secs(3 * 86_400));
/// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// assert!(machine::on_stale(&record, &policy, 2 * DAY).is_none());
/// let step = machine::on_stale(&record, &policy, 4 * DAY).unwrap();
/// assert_eq!(step.event, Event::Parked { id: RecordId(1), reason: "stale: created 4 days ago".into() });
/// let Change::Update(p) = step.transition.change else { unreachable!() };
/// assert_eq!((p.state, p.attempts, p.last_attempt_at), (State::NeedsAttention, 0, Some(4 * DAY)));
///
/// // A person retried it and it failed again: it is not parked for its age a second time.
/// let mut retried = record.clone();
/// retried.set_progress(p);
/// retried.state = State::Retrying;
/// assert!(machine::on_stale(&retried, &policy, 5 * DAY).is_none());
/// ```
pub fn on_stale(record: &Record, policy: &RetryPolicy, now: Millis) -> Option<Step> {
    let stale_at = record
        .created_at
        .saturating_add(duration_ms(policy.max_age?));
    let reported_since = record.last_attempt_at.is_some_and(|t| t >= stale_at);
    if now <= stale_at || reported_since {
        return None;
    }
    let reason = format!(
        "stale: created {} ago",
        age_text(now.saturating_sub(record.created_at))
    );
    Some(Step::new(
        Transition {
            id: record.id,
            guard: lease_guard(record),
            change: Change::Update(Progress {
                state: State::NeedsAttention,
                last_attempt_at: Some(now),
                next_attempt_at: None,
                last_error: Some(reason.clone()),
                ..record.progress()
            }),
        },
        Event::Parked {
            id: record.id,
            reason,
        },
    ))
}

/// An age in its largest whole unit: "4 days", "1 hour", "30 seconds".
fn age_text(ms: Millis) -> String {
    let secs = ms / 1_000;
    let (n, unit) = match secs {
        s if s >= 86_400 => (s / 86_400, "day"),
        s if s >= 3_600 => (s / 3_600, "hour"),
        s if s >= 60 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
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
    let update = |progress: Progress| Transition {
        id,
        guard,
        change: Change::Update(progress),
    };
    // A reported outcome proves the record does not kill the process: the crash-loop guard
    // counts interruptions in a row only. The attempt joins the record's history.
    let reported = |class: AttemptClass, text: &str| Progress {
        interrupted: 0,
        last_attempt_at: Some(now),
        history: attempted(record, class, text, now),
        ..record.progress()
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
        Outcome::NoAnswer { error } => on_no_answer(
            record,
            error,
            record.unanswered.saturating_add(1),
            policy,
            now,
            rng,
        ),
        Outcome::Transient { error, retry_after } => {
            let reported = reported(AttemptClass::Later, error);
            let attempts = record.attempts.saturating_add(1);
            if attempts >= policy.max_attempts {
                let reason = format!("gave up after {attempts} attempts; last error: {error}");
                return ceiling(record, policy, reported, attempts, reason, now);
            }
            // The local schedule is the floor: a server asking for less (0, or a date in the
            // past) cannot make a tight loop. Above it the server's word wins, up to
            // `max_retry_after`.
            let local = policy.delay(attempts, previous_delay(record), rng);
            let delay = match retry_after {
                Some(retry_after) => retry_after
                    .wait(now, policy.max_retry_after, rng)
                    .max(local),
                None => local,
            };
            let at = now.saturating_add(duration_ms(delay));
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
                ..reported(AttemptClass::Rejected, reason)
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
                ..reported(AttemptClass::Refused, reason)
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
                    ..reported(AttemptClass::Conflict, &reason)
                }),
                Event::Parked { id, reason },
            )
        }
    }
}

/// The record's history with one more attempt, ended at `now`.
fn attempted(record: &Record, class: AttemptClass, text: &str, now: Millis) -> History {
    let mut history = record.history.clone();
    history.push(Attempt::new(now, class, text));
    history
}

/// A delivery that got no answer: nothing is spent, `unanswered` grows by one, and the record
/// waits one full draw of the policy on `streak`, the no-answers in a row it is counted in
/// (its own, or the link's when the link has been failing longer). The runner probes the link
/// at that same deadline: one draw per wait.
///
/// ```
/// use outbox_core::{machine, Change, Record, RecordId, RetryPolicy, State};
/// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// let mut rng = fastrand::Rng::with_seed(1);
/// let step = machine::on_no_answer(&record, "refused", 5, &RetryPolicy::default(), 0, &mut rng);
/// let Change::Update(p) = step.transition.change else { unreachable!() };
/// assert_eq!((p.unanswered, p.attempts), (1, 0));
/// assert!(p.next_attempt_at.unwrap() <= 16_000); // one draw within the 5th window
/// ```
pub fn on_no_answer(
    record: &Record,
    error: &str,
    streak: u32,
    policy: &RetryPolicy,
    now: Millis,
    rng: &mut Rng,
) -> Step {
    let id = record.id;
    let unanswered = record.unanswered.saturating_add(1);
    let delay = policy.delay(streak.max(unanswered), previous_delay(record), rng);
    let at = now.saturating_add(duration_ms(delay));
    Step::new(
        Transition {
            id,
            guard: lease_guard(record),
            change: Change::Update(Progress {
                state: State::Retrying,
                unanswered,
                interrupted: 0,
                last_attempt_at: Some(now),
                next_attempt_at: Some(at),
                last_error: Some(error.to_owned()),
                history: attempted(record, AttemptClass::NoAnswer, error, now),
                ..record.progress()
            }),
        },
        Event::Retrying {
            id,
            at,
            spent: false,
        },
    )
}

/// The link came back: a record waiting out a no-answer backoff is due at `now` (or at its
/// not-before time, if that is later: it is absolute) and its no-answer count starts over. `None` for any other record (an answered failure keeps its
/// deadline; a record in flight or parked is left alone).
///
/// ```
/// use outbox_core::{machine, Change, Record, RecordId, State};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// record.state = State::Retrying;
/// record.unanswered = 9;
/// record.next_attempt_at = Some(900_000);
/// let Change::Update(p) = machine::relink(&record, 5).unwrap().change else { unreachable!() };
/// assert_eq!((p.next_attempt_at, p.unanswered), (Some(5), 0));
/// ```
pub fn relink(record: &Record, now: Millis) -> Option<Transition> {
    let waiting = record.state == State::Retrying
        && record.unanswered > 0
        && record.next_attempt_at.is_some_and(|at| at > now);
    waiting.then(|| Transition {
        id: record.id,
        guard: Guard::Idle,
        change: Change::Update(Progress {
            unanswered: 0,
            next_attempt_at: Some(now.max(record.not_before.unwrap_or(0))),
            ..record.progress()
        }),
    })
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

/// Gives a claimed record back after its credential was refused: nothing is spent and its
/// deadline is kept, as in [`release`], but the refusal is one of its attempts.
///
/// ```
/// use outbox_core::{machine, AttemptClass, Change, Record, RecordId};
/// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// let Change::Update(p) = machine::refused(&record, "HTTP 401", 5).change else { unreachable!() };
/// assert_eq!((p.attempts, p.history.attempts()[0].class), (0, AttemptClass::Refused));
/// ```
pub fn refused(record: &Record, reason: &str, now: Millis) -> Transition {
    Transition {
        id: record.id,
        guard: lease_guard(record),
        change: Change::Update(Progress {
            history: attempted(record, AttemptClass::Refused, reason, now),
            ..released(record)
        }),
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

/// What an interrupted delivery leaves as its error.
const INTERRUPTED: &str = "delivery interrupted: the lease expired with no report";

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
                history: attempted(record, AttemptClass::Interrupted, INTERRUPTED, now),
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
            last_error: Some(INTERRUPTED.into()),
            history: attempted(record, AttemptClass::Interrupted, INTERRUPTED, now),
            ..record.progress()
        }),
        Event::Retrying {
            id,
            at: now,
            spent: false,
        },
    )
}
