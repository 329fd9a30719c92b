//! Re-basing after the wall clock stepped back: waits keep their length, counted from the
//! clock's new reading; an absolute not-before time stays where it is.

use super::{Change, Guard, Transition};
use crate::record::{Millis, Progress, Record};

/// Re-basing after the wall clock stepped back: a due-kind record scheduled from a time
/// after `now` keeps the wait it was given (`next_attempt_at - last_attempt_at`), counted from
/// `now`; a record never reported whose deadline lies after `now` becomes due at `now`.
/// `None` for a record that needs no re-basing (see
/// [`Store::stepped_back`](crate::Store::stepped_back)).
///
/// A not-before time ([`NewRecord::not_before`](crate::NewRecord::not_before)) is absolute,
/// not a wait: no re-base moves a deadline before it. A record never reported whose deadline
/// is its not-before time is left alone (`None`), so the store's query leaves it out too
/// ([`Record::needs_rebase`]).
///
/// ```
/// use outbox_core::{machine, Change, NewRecord, Record, RecordId, State};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// record.state = State::Retrying;
/// record.last_attempt_at = Some(86_400_000); // a day ahead of the clock now
/// record.next_attempt_at = Some(86_401_000); // a 1 s wait
/// let t = machine::rebase(&record, 5_000).unwrap();
/// let Change::Update(p) = t.change else { unreachable!() };
/// assert_eq!((p.last_attempt_at, p.next_attempt_at), (Some(5_000), Some(6_000)));
///
/// // Held until an absolute time: the step does not bring it forward.
/// let held = Record::enqueued(RecordId(2), NewRecord::new(vec![]).not_before(90_000_000), 86_400_000);
/// assert!(machine::rebase(&held, 5_000).is_none());
/// ```
pub fn rebase(record: &Record, now: Millis) -> Option<Transition> {
    if !record.needs_rebase(now) {
        return None;
    }
    let next = record.next_attempt_at?;
    let floor = record.not_before.unwrap_or(0);
    let (last_attempt_at, next_attempt_at) = match record.last_attempt_at {
        Some(last) => (
            Some(now),
            now.saturating_add(next.saturating_sub(last)).max(floor),
        ),
        None => (None, now.max(floor)),
    };
    Some(Transition {
        id: record.id,
        guard: Guard::Idle,
        change: Change::Update(Progress {
            last_attempt_at,
            next_attempt_at: Some(next_attempt_at),
            ..record.progress()
        }),
    })
}

/// Re-basing while running, when the runner measured the step: a record scheduled before the
/// wall clock stepped back by `step` keeps both its wait and the time it had already waited
/// (its times move back by `step`). A record that does not fit (scheduled from further ahead
/// than the step explains, e.g. by another host) is re-based from `now` as [`rebase`] does.
///
/// ```
/// use outbox_core::{machine, Change, Record, RecordId, State};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// record.state = State::Retrying;
/// record.last_attempt_at = Some(86_400_000);
/// record.next_attempt_at = Some(86_401_000);
/// // The clock stepped back a day, 300 ms after the attempt.
/// let t = machine::rebase_by(&record, 300, 86_400_000).unwrap();
/// let Change::Update(p) = t.change else { unreachable!() };
/// assert_eq!((p.last_attempt_at, p.next_attempt_at), (Some(0), Some(1_000)));
/// ```
pub fn rebase_by(record: &Record, now: Millis, step: Millis) -> Option<Transition> {
    let fallback = rebase(record, now)?;
    let shifted = record.last_attempt_at.map(|t| t.saturating_sub(step));
    if shifted.is_some_and(|t| t > now) {
        return Some(fallback);
    }
    let next = record
        .next_attempt_at?
        .saturating_sub(step)
        .max(record.not_before.unwrap_or(0));
    Some(Transition {
        change: Change::Update(Progress {
            last_attempt_at: shifted,
            next_attempt_at: Some(next),
            ..record.progress()
        }),
        ..fallback
    })
}
