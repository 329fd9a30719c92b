//! Events the runner and the handle emit, for observers.

use crate::record::{Millis, RecordId};

/// Something that happened to a record or to the runner.
///
/// Every event is sent after the store write it describes has returned, so an observer that
/// reads the store on an event sees that write. The runner sends a record's events in order;
/// `Enqueued` (or `Superseded`) comes from the enqueuing task, so a runner that is already awake may send
/// `Attempted` (even `Delivered`) for the record before it. A record enqueued inside the
/// caller's own transaction gets its `Enqueued` (or `Superseded`) event once that transaction
/// commits through the store's commit helper (`enqueue_pending`, then `commit(tx, &outbox)`)
/// or is announced with [`Outbox::committed`](crate::Outbox::committed); one only followed by
/// `Outbox::notify` gets none.
///
/// ```
/// use outbox_core::{Event, RecordId};
/// let event = Event::Delivered { id: RecordId(1) };
/// assert_eq!(event.record(), Some(RecordId(1)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A record was durably enqueued.
    Enqueued {
        /// The record.
        id: RecordId,
        /// Its group.
        group: Option<String>,
    },
    /// A write replaced the payload of this earlier, still waiting record (see
    /// [`NewRecord::replacing`](crate::NewRecord::replacing)): merged, not lost.
    Superseded {
        /// The record that now carries the newer write.
        id: RecordId,
        /// Its group.
        group: Option<String>,
    },
    /// A delivery of the record is starting.
    Attempted {
        /// The record.
        id: RecordId,
        /// Answered failures spent before this try.
        attempts: u32,
    },
    /// The server accepted the record; it left the queue.
    Delivered {
        /// The record.
        id: RecordId,
    },
    /// The record failed and is scheduled again.
    Retrying {
        /// The record.
        id: RecordId,
        /// Its new deadline.
        at: Millis,
        /// Whether the failure spent an attempt (a server answered).
        spent: bool,
    },
    /// The record needs a person: budget exhausted, crash-looped or an unresolved conflict.
    Parked {
        /// The record.
        id: RecordId,
        /// Why.
        reason: String,
    },
    /// The server gave a final verdict on the record.
    Rejected {
        /// The record.
        id: RecordId,
        /// The server's reason.
        reason: String,
    },
    /// A credential was refused: the runner pauses until resumed.
    Halted {
        /// The record whose delivery was refused.
        id: RecordId,
        /// What the server said.
        reason: String,
    },
    /// The runner was resumed after a halt.
    Resumed,
    /// A resume did not lift the halt: the store holds a newer one (a refusal persisted after
    /// the halt this runner held, by another process of the fleet), and the runner keeps to
    /// it. Resume again to lift that one.
    StillHalted {
        /// The reason of the halt the store holds.
        reason: String,
    },
    /// No server answered: the runner probes with one record at a time until one does.
    LinkDown {
        /// When the first unanswered delivery reported.
        since: Millis,
        /// The transport error.
        error: String,
    },
    /// A server answered again (or the connectivity signal turned online).
    LinkUp {
        /// How long the link was down.
        down_for: std::time::Duration,
    },
    /// A rejected record was re-admitted with a fresh budget, in its own place.
    Requeued {
        /// The record.
        id: RecordId,
    },
    /// The record was removed from delivery; a tombstone stays.
    Discarded {
        /// The record.
        id: RecordId,
        /// Why, and by whom.
        reason: String,
    },
    /// A row the store holds cannot be decoded: claim and stats pass it by until it is
    /// discarded ([`Outbox::discard_unreadable`](crate::Outbox::discard_unreadable)). Sent
    /// once per row per process: by the runner's look, made when it is first idle after its
    /// start (at the latest before the first claim it would make a minute after it; `flush`
    /// waits for it), or when the application lists such rows.
    Unreadable {
        /// The row.
        id: RecordId,
        /// What could not be decoded.
        reason: String,
    },
}

impl Event {
    /// The record the event is about, if any.
    pub fn record(&self) -> Option<RecordId> {
        match self {
            Event::Enqueued { id, .. }
            | Event::Superseded { id, .. }
            | Event::Attempted { id, .. }
            | Event::Delivered { id }
            | Event::Retrying { id, .. }
            | Event::Parked { id, .. }
            | Event::Rejected { id, .. }
            | Event::Halted { id, .. }
            | Event::Discarded { id, .. }
            | Event::Requeued { id, .. }
            | Event::Unreadable { id, .. } => Some(*id),
            Event::Resumed
            | Event::StillHalted { .. }
            | Event::LinkDown { .. }
            | Event::LinkUp { .. } => None,
        }
    }
}
