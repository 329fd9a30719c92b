//! What every store admits: the rules each backend applies to a transition beside its
//! [`Guard`](super::Guard), written once here.

use crate::record::{Progress, Record};
use crate::state::State;

/// Whether a store admits a [`Change::Requeue`](super::Change::Requeue) of `record`: only a
/// rejected record, and not while a record of its group is in flight (`group_in_flight`),
/// which would put two of the group in flight. The one rule every backend applies; it then
/// puts the record back in its own place in its group with
/// [`Progress::requeued`](crate::Progress::requeued).
///
/// ```
/// use outbox_core::{machine, Record, RecordId, State};
/// let mut record = Record::fresh(RecordId(1), Some("doc".into()), vec![], "k".into(), 0);
/// assert!(!machine::admits_requeue(&record, false), "only a rejected record");
/// record.state = State::Rejected;
/// assert!(machine::admits_requeue(&record, false));
/// assert!(!machine::admits_requeue(&record, true), "its group is in flight");
/// ```
pub fn admits_requeue(record: &Record, group_in_flight: bool) -> bool {
    record.state == State::Rejected && !group_in_flight
}

/// Whether a store admits a [`Change::Update`](super::Change::Update) to `progress` of
/// `record`: every update but one that takes a rejected record out of `rejected`. A rejected
/// record has left its group's order; only a requeue puts it back in its place
/// ([`admits_requeue`]), so an update that did it would leave a pending record no claim can
/// reach. Skipped, the same on every backend.
///
/// ```
/// use outbox_core::{machine, Progress, Record, RecordId, State};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// assert!(machine::admits_update(&record, &Progress::requeued(5)));
/// record.state = State::Rejected;
/// assert!(!machine::admits_update(&record, &Progress::requeued(5)));
/// assert!(machine::admits_update(&record, &record.progress()), "staying rejected is fine");
/// ```
pub fn admits_update(record: &Record, progress: &Progress) -> bool {
    record.state != State::Rejected || progress.state == State::Rejected
}
