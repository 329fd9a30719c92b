//! What the scheduler takes in and what it asks for: inputs, store calls and their answers,
//! log lines and actions. Plain values, so a test or a simulator can play the shell's part.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::event::Event;
use crate::machine::Transition;
use crate::outcome::Outcome;
use crate::record::{Lease, Millis, Record, RecordId};
use crate::store::{Claim, Halt, Stats};
use crate::unreadable::Unreadable;

/// One reading of both clocks: wall-clock milliseconds (persisted deadlines) and milliseconds
/// of the monotonic clock since the runner started (timers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Wall-clock milliseconds since the Unix epoch.
    pub wall: Millis,
    /// Milliseconds of a monotonic clock since the runner started.
    pub mono: Millis,
}

/// How one delivery ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Report {
    /// The sink reported (a conflict already through the resolver).
    Outcome(Outcome),
    /// The sink panicked: counted as an interruption.
    Panicked,
    /// Aborted at shutdown: it never reported.
    Abandoned,
}

/// What happened, as the shell tells it.
#[derive(Debug)]
#[non_exhaustive]
// An input is moved once into the scheduler and never kept in bulk: boxing the store's answer
// (a record, at its largest) would cost an allocation on every store call for no saving.
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// An enqueue, `notify` or a manual verb: look for due work (halted: read the persisted
    /// halt, which another process may have cleared).
    Wake,
    /// A timeout the scheduler asked for passed (or nothing but the clock changed).
    Timer,
    /// The connectivity signal changed.
    Online(bool),
    /// The application resumed the runner.
    Resume,
    /// Shutdown: deliveries under way may report until `grace` (monotonic).
    Shutdown {
        /// Monotonic milliseconds.
        grace: Millis,
    },
    /// A delivery ended.
    Reported {
        /// The record.
        id: RecordId,
        /// How the delivery ended.
        report: Report,
    },
    /// The store call of the last [`Io`] returned.
    Answer(Result<Answer, StoreFailure>),
}

/// One store call for the shell to make, then report with [`Input::Answer`]. Each variant is
/// exactly one call of [`Store`](crate::Store); [`perform`](crate::runner::perform) makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Io {
    /// `Store::round`: the transitions, then the claim if any, in one commit.
    /// Answered by [`Answer::Round`].
    Round {
        /// Outcomes and releases to apply first.
        transitions: Vec<Transition>,
        /// The claim to make after them, if any.
        claim: Option<Claim>,
    },
    /// `Store::renew` for the records of the round. Answered by [`Answer::Renewed`].
    Renew {
        /// The records.
        ids: Vec<RecordId>,
        /// The lease with its new expiry.
        lease: Lease,
    },
    /// `Store::next_due`. Answered by [`Answer::NextDue`].
    NextDue,
    /// `Store::expired`: in-flight records whose lease ended at or before `now`. Answered by
    /// [`Answer::Records`].
    Expired {
        /// Wall-clock milliseconds.
        now: Millis,
        /// At most this many.
        limit: usize,
    },
    /// `Store::stepped_back`: records with a time after `now` (set before a step back).
    /// Answered by [`Answer::Records`].
    SteppedBack {
        /// Wall-clock milliseconds.
        now: Millis,
        /// At most this many.
        limit: usize,
    },
    /// `Store::get`. Answered by [`Answer::Record`].
    Get(RecordId),
    /// `Store::apply`. Answered by [`Answer::Applied`].
    Apply(Vec<Transition>),
    /// `Store::set_halt`: persist the halt, or clear it. Answered by [`Answer::HaltSet`].
    SetHalt(Option<Halt>),
    /// `Store::clear_halt_if`: clear the persisted halt only if it is this one (the halt the
    /// runner holds when resumed), in one step. Answered by [`Answer::Halt`] with the halt
    /// the store held.
    ClearHaltIf(Halt),
    /// `Store::halt`: the persisted halt, read by a halted runner when it is woken or polls,
    /// to learn whether another process (or a person) cleared it. Answered by
    /// [`Answer::Halt`].
    Halt,
    /// `Store::stats`, for the gauges. Answered by [`Answer::Stats`].
    Stats,
    /// `Store::unreadable`: rows the store cannot decode, to be reported. Answered by
    /// [`Answer::Unreadable`].
    Unreadable {
        /// At most this many.
        limit: usize,
    },
}

/// What a store call returned, one variant per kind of [`Io`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// [`Io::Round`] committed.
    Round {
        /// Ids of the written transitions whose guard did not hold.
        skipped: Vec<RecordId>,
        /// Records claimed.
        claimed: Vec<Record>,
    },
    /// [`Io::Renew`] done.
    Renewed,
    /// [`Io::NextDue`]: the earliest deadline.
    NextDue(Option<Millis>),
    /// [`Io::Expired`] or [`Io::SteppedBack`]: the records found.
    Records(Vec<Record>),
    /// [`Io::Get`]: the record, if it is still there.
    Record(Option<Record>),
    /// [`Io::Apply`] committed.
    Applied {
        /// Ids whose guard did not hold.
        skipped: Vec<RecordId>,
    },
    /// [`Io::SetHalt`] done.
    HaltSet,
    /// [`Io::Halt`]: the halt the store holds, if any; [`Io::ClearHaltIf`]: the halt it held
    /// (cleared when it was the one given).
    Halt(Option<Halt>),
    /// [`Io::Stats`].
    Stats(Stats),
    /// [`Io::Unreadable`]: the rows found.
    Unreadable(Vec<Unreadable>),
}

/// What kind of failure a store call met: what the runner can do about it differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// Anything that may pass by itself (a lock, a lost connection): tried again on backoff.
    Transient,
    /// The call did not return within `RunnerConfig::store_timeout`.
    Timeout,
    /// The store cannot be written: deliveries pause (said once) until a write succeeds.
    ReadOnly,
    /// The disk or the database is full: deliveries pause (said once) until a write succeeds.
    Full,
}

/// A store call that failed, as the scheduler sees it.
///
/// ```
/// use outbox_core::runner::scheduler::{FailureKind, StoreFailure};
/// use outbox_core::Error;
///
/// let full = StoreFailure::from(&Error::StorageFull { source: None });
/// assert_eq!(full.kind, FailureKind::Full);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreFailure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// What the store said.
    pub error: String,
}

impl From<&Error> for StoreFailure {
    fn from(error: &Error) -> Self {
        let kind = match error {
            Error::ReadOnly { .. } => FailureKind::ReadOnly,
            Error::StorageFull { .. } => FailureKind::Full,
            Error::Timeout(_) => FailureKind::Timeout,
            _ => FailureKind::Transient,
        };
        StoreFailure {
            kind,
            error: error.to_string(),
        }
    }
}

/// A log line that is not an event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The link is still down.
    LinkStillDown {
        /// When it went down.
        since: Millis,
        /// The last transport error.
        last_error: String,
    },
    /// A server asked to wait longer than `max_retry_after`; warned once per record.
    RetryAfterCut {
        /// The record.
        id: RecordId,
        /// What the server asked for.
        asked: Duration,
    },
    /// A sink panicked.
    SinkPanicked {
        /// The record.
        id: RecordId,
    },
    /// The runner stopped with a resume not recorded (the store did not answer its clearing):
    /// the halt holds, and is read again at the next start.
    ResumeNotRecorded,
    /// A store call failed; the runner tries again after `retry_in`.
    StoreFailed {
        /// What the store said.
        error: String,
        /// When the runner tries again.
        retry_in: Duration,
    },
    /// The store is read-only, full or does not answer within `store_timeout`: deliveries
    /// pause, tried again on backoff, said once until the store answers (a write, for a
    /// read-only or full one).
    StorePaused {
        /// Read-only, full or timed out.
        kind: FailureKind,
        /// What the store said.
        error: String,
    },
    /// The store answered again after [`Notice::StorePaused`]: deliveries go on.
    StoreBack,
    /// Leases could not be renewed; deliveries go on and the next renewal tries again.
    RenewFailed {
        /// What the store said.
        error: String,
    },
    /// The look for rows the store cannot decode did not end within `store_timeout` (it
    /// reads every row): deliveries go on, and the look is made again when the runner has
    /// nothing else to do, `retry_in` from now at the earliest (see [`put_off_for`]). Claims
    /// pass such rows by meanwhile; [`Outbox::unreadable`] lists them.
    ///
    /// [`Outbox::unreadable`]: crate::Outbox::unreadable
    /// [`put_off_for`]: super::put_off_for
    UnreadableLookPutOff {
        /// What the store said.
        error: String,
        /// The soonest the look is made again.
        retry_in: Duration,
        /// How many times the look timed out (the shell says the first at `warn`, the
        /// others at `debug`).
        timeouts: u32,
    },
    /// The wall clock stepped back: deadlines set before the step keep their waits.
    Rebased {
        /// Records re-based.
        rebased: usize,
        /// The step, in milliseconds.
        step: Millis,
    },
}

/// One reading for the gauges of the `metrics` feature: the store's stats and the runner's
/// own view of its link and halt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gauges {
    /// The store's counts.
    pub stats: Stats,
    /// Whether the link is up.
    pub link_up: bool,
    /// Whether a halt holds the runner.
    pub halted: bool,
    /// Wall-clock milliseconds of the reading.
    pub now: Millis,
}

/// What the shell must do next.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Start delivering the record. It is shared with the scheduler, which decides on its
    /// schedule once the delivery is reported, so handing it over copies nothing.
    Deliver(Arc<Record>),
    /// Abort every delivery under way (shutdown's grace ran out).
    AbortDeliveries,
    /// Tell observers (and log, for the events that are logged).
    Emit(Event),
    /// Log a line.
    Log(Notice),
    /// Make a store call and report it.
    Io(Io),
    /// Set the gauges (only when the scheduler was built [`with_gauges`](super::Scheduler::with_gauges)).
    Gauges(Gauges),
}
