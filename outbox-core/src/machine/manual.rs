//! The transitions a person asks for: retry with a fresh budget, requeue a rejected record,
//! discard one (a tombstone stays).

use super::{Change, Guard, Step, Transition};
use crate::event::Event;
use crate::record::{Millis, Progress, Record};
use crate::state::State;

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

/// A person's requeue of a rejected record (see [`Change::Requeue`]). `None` for a record
/// that is not rejected.
///
/// ```
/// use outbox_core::{machine, Change, Record, RecordId, State};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// assert!(machine::requeue(&record, 5).is_none());
/// record.state = State::Rejected;
/// let t = machine::requeue(&record, 5).unwrap();
/// assert_eq!(t.change, Change::Requeue { at: 5 });
/// ```
pub fn requeue(record: &Record, now: Millis) -> Option<Transition> {
    (record.state == State::Rejected).then_some(Transition {
        id: record.id,
        guard: Guard::Idle,
        change: Change::Requeue { at: now },
    })
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
