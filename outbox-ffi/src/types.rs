//! What crosses the boundary: a write to enqueue, a record, the stats, a tombstone and the
//! events, as plain values with ids as integers and times as wall-clock milliseconds.

use outbox_core::{
    Attempt, Event, LinkState, NewRecord, Record, RecordId, State, Stats, Tombstone,
};

use crate::error::millis;

/// Where a record stands (see [`outbox_core::State`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum RecordState {
    /// Never attempted.
    Pending,
    /// Failed, scheduled again at `next_attempt_at`.
    Retrying,
    /// Being delivered under a lease.
    InFlight,
    /// Waiting for a person: `retry` or `discard` it.
    NeedsAttention,
    /// Refused by the server: `requeue` or `discard` it.
    Rejected,
}

impl From<State> for RecordState {
    fn from(state: State) -> Self {
        match state {
            State::Pending => RecordState::Pending,
            State::Retrying => RecordState::Retrying,
            State::InFlight => RecordState::InFlight,
            State::NeedsAttention => RecordState::NeedsAttention,
            State::Rejected => RecordState::Rejected,
        }
    }
}

impl From<RecordState> for State {
    fn from(state: RecordState) -> Self {
        match state {
            RecordState::Pending => State::Pending,
            RecordState::Retrying => State::Retrying,
            RecordState::InFlight => State::InFlight,
            RecordState::NeedsAttention => State::NeedsAttention,
            RecordState::Rejected => State::Rejected,
        }
    }
}

/// One write to enqueue (see [`outbox_core::NewRecord`]).
///
/// ```
/// use outbox_ffi::Write;
///
/// let write = Write::new(b"{\"title\":\"hi\"}".to_vec());
/// assert!(write.group.is_none() && write.key.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct Write {
    /// The bytes to deliver.
    pub payload: Vec<u8>,
    /// The ordering group (an entity id): its records go one at a time, in order.
    #[uniffi(default = None)]
    pub group: Option<String>,
    /// The idempotency key; `None` draws 128 random bits.
    #[uniffi(default = None)]
    pub key: Option<String>,
    /// A coalescing key: a later write with the same key replaces this one's payload while
    /// it still waits.
    #[uniffi(default = None)]
    pub replacing: Option<String>,
    /// The entity version the write was made against (sent as `If-Match` by the HTTP sink).
    #[uniffi(default = None)]
    pub expecting: Option<String>,
    /// Not delivered before this wall-clock time (milliseconds since the Unix epoch).
    #[uniffi(default = None)]
    pub not_before: Option<u64>,
}

impl Write {
    /// A write of `payload` with no group, a random key and no controls.
    pub fn new(payload: Vec<u8>) -> Self {
        Write {
            payload,
            group: None,
            key: None,
            replacing: None,
            expecting: None,
            not_before: None,
        }
    }

    /// The core's record to enqueue; every field is checked by the store at enqueue.
    pub(crate) fn into_core(self) -> NewRecord {
        let mut record = NewRecord::new(self.payload);
        if let Some(group) = self.group {
            record = record.in_group(group);
        }
        if let Some(key) = self.key {
            record = record.with_key(key);
        }
        if let Some(replacing) = self.replacing {
            record = record.replacing(replacing);
        }
        if let Some(version) = self.expecting {
            record = record.expecting(version);
        }
        if let Some(at) = self.not_before {
            record = record.not_before(at);
        }
        record
    }
}

/// One queued record as the app sees it (see [`outbox_core::Record`]).
///
/// ```
/// use outbox_core::{Record, RecordId};
/// use outbox_ffi::{OutboxRecord, RecordState};
///
/// let record = OutboxRecord::from(Record::fresh(RecordId(7), None, b"x".to_vec(), "k".into(), 5));
/// assert_eq!((record.id, record.state), (7, RecordState::Pending));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct OutboxRecord {
    /// Store-assigned, increasing in enqueue order.
    pub id: u64,
    /// The ordering group.
    pub group: Option<String>,
    /// The bytes to deliver.
    pub payload: Vec<u8>,
    /// The idempotency key, the same on every delivery.
    pub key: String,
    /// When it was enqueued (wall-clock milliseconds).
    pub created_at: u64,
    /// Where it stands.
    pub state: RecordState,
    /// Answered failures spent.
    pub attempts: u32,
    /// Deliveries no server answered (they spend nothing).
    pub unanswered: u32,
    /// Deliveries the process died in.
    pub interrupted: u32,
    /// When the last delivery reported.
    pub last_attempt_at: Option<u64>,
    /// When it is next due; `None` for never on its own.
    pub next_attempt_at: Option<u64>,
    /// The last failure, for a person.
    pub last_error: Option<String>,
    /// The entity version it was made against.
    pub expected_version: Option<String>,
    /// Its coalescing key.
    pub replaces: Option<String>,
    /// The time it is not delivered before, if it was enqueued with one.
    pub not_before: Option<u64>,
    /// Its last attempts, oldest first (at most 10).
    pub history: Vec<OutboxAttempt>,
    /// True when the stored history could not be read (it shows as empty).
    pub history_unreadable: bool,
}

/// One delivery of a record that did not deliver it (see [`outbox_core::Attempt`]).
///
/// ```
/// use outbox_core::{Attempt, AttemptClass};
/// use outbox_ffi::OutboxAttempt;
///
/// let a = OutboxAttempt::from(&Attempt::new(9, AttemptClass::Later, "HTTP 503"));
/// assert_eq!((a.outcome_class.as_str(), a.status), ("later", Some(503)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct OutboxAttempt {
    /// When the delivery ended (wall-clock milliseconds).
    pub at: u64,
    /// `no answer`, `later`, `rejected`, `conflict`, `refused` or `interrupted`.
    pub outcome_class: String,
    /// The server's status, when it gave one.
    pub status: Option<u16>,
    /// The error text (at most 512 bytes).
    pub error: String,
    /// How long the sink took, in milliseconds, when measured.
    pub took_ms: Option<u64>,
}

impl From<&Attempt> for OutboxAttempt {
    fn from(a: &Attempt) -> Self {
        OutboxAttempt {
            at: a.at,
            outcome_class: a.class.as_str().to_owned(),
            status: a.status,
            error: a.error.clone(),
            took_ms: a.took_ms,
        }
    }
}

impl From<Record> for OutboxRecord {
    fn from(record: Record) -> Self {
        OutboxRecord {
            id: record.id.0,
            group: record.group,
            payload: record.payload,
            key: record.key,
            created_at: record.created_at,
            state: record.state.into(),
            attempts: record.attempts,
            unanswered: record.unanswered,
            interrupted: record.interrupted,
            last_attempt_at: record.last_attempt_at,
            next_attempt_at: record.next_attempt_at,
            last_error: record.last_error,
            expected_version: record.expected_version,
            replaces: record.replaces,
            not_before: record.not_before,
            history: record
                .history
                .attempts()
                .iter()
                .map(OutboxAttempt::from)
                .collect(),
            history_unreadable: record.history.is_unreadable(),
        }
    }
}

/// The link to the server as the runner sees it.
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum Link {
    /// A server answered last.
    Up,
    /// No server has answered since `since`.
    Down {
        /// When the first unanswered delivery reported.
        since: u64,
        /// The last transport error.
        last_error: String,
    },
}

/// Counts per state and the runner's condition (see [`outbox_core::Stats`]).
///
/// ```
/// let stats = outbox_ffi::OutboxStats::from(outbox_core::Stats::default());
/// assert_eq!(stats.pending + stats.delivered, 0);
/// assert!(stats.halt_reason.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct OutboxStats {
    /// Never attempted.
    pub pending: u64,
    /// Failed, scheduled again.
    pub retrying: u64,
    /// Being delivered.
    pub in_flight: u64,
    /// Waiting for a person.
    pub needs_attention: u64,
    /// Refused by the server.
    pub rejected: u64,
    /// Tombstones not yet pruned.
    pub discarded: u64,
    /// Delivered since the file was created.
    pub delivered: u64,
    /// Writes merged into an earlier waiting write.
    pub superseded: u64,
    /// Records held behind a needs-attention record of their group.
    pub held: u64,
    /// Pending records enqueued for a later time and not attempted since (whether or not
    /// that time has come).
    pub scheduled: u64,
    /// Payload bytes of every record held (what a size cap counts).
    pub payload_bytes: u64,
    /// Enqueue time of the oldest record still owed a delivery.
    pub oldest_created_at: Option<u64>,
    /// The earliest deadline of a claimable record.
    pub next_due: Option<u64>,
    /// Why the runner is halted, while it is.
    pub halt_reason: Option<String>,
    /// Since when it is halted.
    pub halted_since: Option<u64>,
    /// The link as this runner sees it.
    pub link: Link,
}

impl From<Stats> for OutboxStats {
    fn from(stats: Stats) -> Self {
        OutboxStats {
            pending: stats.pending,
            retrying: stats.retrying,
            in_flight: stats.in_flight,
            needs_attention: stats.needs_attention,
            rejected: stats.rejected,
            discarded: stats.discarded,
            delivered: stats.delivered,
            superseded: stats.superseded,
            held: stats.held,
            scheduled: stats.scheduled,
            payload_bytes: stats.payload_bytes,
            oldest_created_at: stats.oldest_created_at,
            next_due: stats.next_due,
            halt_reason: stats.halt.as_ref().map(|halt| halt.reason.clone()),
            halted_since: stats.halt.as_ref().map(|halt| halt.since),
            link: match stats.link {
                Some(LinkState::Down { since, last_error }) => Link::Down { since, last_error },
                _ => Link::Up,
            },
        }
    }
}

/// What a discarded record leaves behind (see [`outbox_core::Tombstone`]).
///
/// ```
/// use outbox_core::{Record, RecordId, Tombstone};
///
/// let record = Record::fresh(RecordId(3), None, vec![], "k".into(), 0);
/// let stone = outbox_ffi::OutboxTombstone::from(Tombstone::of(record, "by hand".into(), 9, 0));
/// assert_eq!((stone.id, stone.reason.as_str()), (3, "by hand"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct OutboxTombstone {
    /// The record's id.
    pub id: u64,
    /// Its group.
    pub group: Option<String>,
    /// Its idempotency key.
    pub key: String,
    /// Why, and by whom.
    pub reason: String,
    /// When it was discarded.
    pub discarded_at: u64,
    /// Answered failures it had spent.
    pub attempts: u32,
}

impl From<Tombstone> for OutboxTombstone {
    fn from(stone: Tombstone) -> Self {
        OutboxTombstone {
            id: stone.id.0,
            group: stone.group,
            key: stone.key,
            reason: stone.reason,
            discarded_at: stone.discarded_at,
            attempts: stone.attempts,
        }
    }
}

/// Something that happened to a record or to the runner: the variants of
/// [`outbox_core::Event`], plus [`OutboxEvent::Lagged`] for events a slow reader missed.
///
/// ```
/// use outbox_core::{Event, RecordId};
/// use outbox_ffi::OutboxEvent;
///
/// let event = OutboxEvent::from(Event::Delivered { id: RecordId(4) });
/// assert_eq!(event, OutboxEvent::Delivered { id: 4 });
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum OutboxEvent {
    /// A record was durably enqueued.
    Enqueued {
        /// The record.
        id: u64,
        /// Its group.
        group: Option<String>,
    },
    /// A write replaced the payload of this earlier, still waiting record.
    Superseded {
        /// The record now carrying the newer write.
        id: u64,
        /// Its group.
        group: Option<String>,
    },
    /// A delivery is starting.
    Attempted {
        /// The record.
        id: u64,
        /// Answered failures spent before this try.
        attempts: u32,
    },
    /// The server accepted the record.
    Delivered {
        /// The record.
        id: u64,
    },
    /// The record failed and is scheduled again.
    Retrying {
        /// The record.
        id: u64,
        /// Its new deadline (wall-clock milliseconds).
        at: u64,
        /// Whether a server answered (an attempt was spent).
        spent: bool,
    },
    /// The record needs a person.
    Parked {
        /// The record.
        id: u64,
        /// Why.
        reason: String,
    },
    /// The server refused the record for good.
    Rejected {
        /// The record.
        id: u64,
        /// The server's reason.
        reason: String,
    },
    /// A credential was refused: the runner pauses until `resume`.
    Halted {
        /// The record whose delivery was refused.
        id: u64,
        /// What the server said.
        reason: String,
    },
    /// The runner was resumed after a halt.
    Resumed,
    /// A `resume` did not lift the halt: the file holds a newer one (another process's
    /// refusal, after the halt this runner held); the runner keeps to it. Resume again to
    /// lift that one.
    StillHalted {
        /// The reason of the halt that holds.
        reason: String,
    },
    /// No server answered: the runner probes with one record at a time.
    LinkDown {
        /// When the first unanswered delivery reported.
        since: u64,
        /// The transport error.
        error: String,
    },
    /// A server answered again, or the device came online.
    LinkUp {
        /// How long the link was down, in milliseconds.
        down_for_ms: u64,
    },
    /// A rejected record was re-admitted with a fresh budget.
    Requeued {
        /// The record.
        id: u64,
    },
    /// The record was removed from delivery; a tombstone stays.
    Discarded {
        /// The record.
        id: u64,
        /// Why, and by whom.
        reason: String,
    },
    /// A stored row cannot be decoded; it is passed by until discarded.
    Unreadable {
        /// The row.
        id: u64,
        /// What could not be decoded.
        reason: String,
    },
    /// The reader fell behind and this many events were dropped; read `stats` to catch up.
    Lagged {
        /// Events missed.
        missed: u64,
    },
    /// An event this build of the bindings does not know by name, as text.
    Other {
        /// The event, described.
        description: String,
    },
}

impl From<Event> for OutboxEvent {
    fn from(event: Event) -> Self {
        let id = |id: RecordId| id.0;
        match event {
            Event::Enqueued { id: i, group } => OutboxEvent::Enqueued { id: id(i), group },
            Event::Superseded { id: i, group } => OutboxEvent::Superseded { id: id(i), group },
            Event::Attempted { id: i, attempts } => OutboxEvent::Attempted {
                id: id(i),
                attempts,
            },
            Event::Delivered { id: i } => OutboxEvent::Delivered { id: id(i) },
            Event::Retrying { id: i, at, spent } => OutboxEvent::Retrying {
                id: id(i),
                at,
                spent,
            },
            Event::Parked { id: i, reason } => OutboxEvent::Parked { id: id(i), reason },
            Event::Rejected { id: i, reason } => OutboxEvent::Rejected { id: id(i), reason },
            Event::Halted { id: i, reason } => OutboxEvent::Halted { id: id(i), reason },
            Event::Resumed => OutboxEvent::Resumed,
            Event::StillHalted { reason } => OutboxEvent::StillHalted { reason },
            Event::LinkDown { since, error } => OutboxEvent::LinkDown { since, error },
            Event::LinkUp { down_for } => OutboxEvent::LinkUp {
                down_for_ms: millis(down_for),
            },
            Event::Requeued { id: i } => OutboxEvent::Requeued { id: id(i) },
            Event::Discarded { id: i, reason } => OutboxEvent::Discarded { id: id(i), reason },
            Event::Unreadable { id: i, reason } => OutboxEvent::Unreadable { id: id(i), reason },
            // The core's enum is non-exhaustive: an event added later is still seen.
            other => OutboxEvent::Other {
                description: format!("{other:?}"),
            },
        }
    }
}
