//! One queued write and the values that describe it.

use std::fmt;

use crate::history::History;
use crate::state::State;
use crate::trace::TraceContext;

mod new;

pub use new::{validate_group, NewRecord, MAX_GROUP_LEN};

/// Wall-clock milliseconds since the Unix epoch.
///
/// Deadlines are persisted and must survive a restart, so they are never `Instant`s.
pub type Millis = u64;

/// A store-assigned id, strictly increasing in enqueue order: the FIFO order.
///
/// ```
/// use outbox_core::RecordId;
/// assert!(RecordId(1) < RecordId(2));
/// assert_eq!(RecordId(7).to_string(), "#7");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(pub u64);

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The lease under which a runner holds an in-flight record.
///
/// ```
/// use outbox_core::Lease;
/// let lease = Lease { token: 7, until: 1_000 };
/// assert!(lease.expired_at(1_000));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Chosen by the claiming runner; a transition guarded by it applies only while it holds.
    pub token: u64,
    /// Wall-clock expiry; after it, the record may be recovered.
    pub until: Millis,
}

impl Lease {
    /// True once `now` has reached the lease's expiry.
    pub fn expired_at(&self, now: Millis) -> bool {
        now >= self.until
    }
}

/// One queued write as the store holds it.
///
/// ```
/// use outbox_core::{Record, RecordId, State};
///
/// let record = Record::fresh(RecordId(1), None, b"x".to_vec(), "k".into(), 500);
/// assert_eq!(record.state, State::Pending);
/// assert_eq!(record.next_attempt_at, Some(500));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Store-assigned, increasing in enqueue order.
    pub id: RecordId,
    /// Optional ordering group.
    pub group: Option<String>,
    /// Opaque payload.
    pub payload: Vec<u8>,
    /// Stable idempotency key, the same on every delivery of this record.
    pub key: String,
    /// When the record was enqueued; for a record that a later write replaced
    /// ([`NewRecord::replacing`]), when that write was.
    pub created_at: Millis,
    /// Current state.
    pub state: State,
    /// Answered failures: the spent budget.
    pub attempts: u32,
    /// Failures where no server answered; they spend no budget.
    pub unanswered: u32,
    /// Claims that never reported an outcome (the process died mid-delivery).
    pub interrupted: u32,
    /// When the last delivery reported.
    pub last_attempt_at: Option<Millis>,
    /// When the record is next due; `None` means never on its own (needs-attention, rejected).
    pub next_attempt_at: Option<Millis>,
    /// Text of the last failure, for humans.
    pub last_error: Option<String>,
    /// Present while in flight.
    pub lease: Option<Lease>,
    /// The entity version the write was made against (see [`NewRecord::expecting`]).
    pub expected_version: Option<String>,
    /// The coalescing key (see [`NewRecord::replacing`]).
    pub replaces: Option<String>,
    /// The wall-clock time before which the record is not delivered (see
    /// [`NewRecord::not_before`]); absolute, so a re-base after a clock step never moves the
    /// record's deadline before it.
    pub not_before: Option<Millis>,
    /// The last attempts, oldest first (see [`History`]).
    pub history: History,
    /// The trace context of the span the write was made in (see [`crate::trace`]).
    pub trace: Option<TraceContext>,
}

impl Record {
    /// A never-attempted record as `enqueue` creates it: pending, due at its enqueue time.
    pub fn fresh(
        id: RecordId,
        group: Option<String>,
        payload: Vec<u8>,
        key: String,
        now: Millis,
    ) -> Self {
        Record {
            id,
            group,
            payload,
            key,
            created_at: now,
            state: State::Pending,
            attempts: 0,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: None,
            next_attempt_at: Some(now),
            last_error: None,
            lease: None,
            expected_version: None,
            replaces: None,
            not_before: None,
            history: History::default(),
            trace: None,
        }
    }

    /// The record `enqueue` creates from `new` under `id` at `now`: [`Record::fresh`] with the
    /// precondition, coalescing key and not-before time as well; a record held until a later
    /// time is due then (`max(now, not_before)`).
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId};
    /// let new = NewRecord::new(b"x".to_vec()).expecting("7").replacing("doc-1");
    /// let record = Record::enqueued(RecordId(1), new, 500);
    /// assert_eq!((record.expected_version.as_deref(), record.replaces.as_deref()), (Some("7"), Some("doc-1")));
    /// ```
    pub fn enqueued(id: RecordId, new: NewRecord, now: Millis) -> Self {
        let due = now.max(new.not_before.unwrap_or(0));
        Record {
            expected_version: new.expected_version,
            replaces: new.replaces,
            not_before: new.not_before,
            trace: new.trace,
            next_attempt_at: Some(due),
            ..Record::fresh(id, new.group, new.payload, new.key, now)
        }
    }

    /// Whether the record is pending with the deadline it was enqueued with for a later time:
    /// [`NewRecord::not_before`] no earlier than its enqueue, and not attempted since (a claim
    /// given back unattempted leaves its deadline as it was). Whether that time has come is
    /// not part of it: see [`Record::next_attempt_at`]. Stats count these as
    /// [`Stats::scheduled`](crate::Stats::scheduled). A store that counts with a query applies
    /// the same rule: state pending and the deadline equal to the not-before time.
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId};
    /// let later = Record::enqueued(RecordId(1), NewRecord::new(vec![]).not_before(9_000), 1_000);
    /// assert!(later.is_scheduled());
    /// let past = Record::enqueued(RecordId(2), NewRecord::new(vec![]).not_before(500), 1_000);
    /// assert!(!past.is_scheduled()); // already due at its enqueue
    /// ```
    pub fn is_scheduled(&self) -> bool {
        self.state == State::Pending
            && self.not_before.is_some()
            && self.not_before == self.next_attempt_at
    }

    /// Whether a write `new` with this record's coalescing key may replace this record in
    /// place: the one rule of coalescing, applied by every store. `last_of_group` says whether
    /// no later record holds this record's group (rejected ones aside). The store looks only at
    /// the latest record with the key.
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId};
    /// let waiting = Record::enqueued(RecordId(1), NewRecord::new(vec![]).in_group("n").replacing("k"), 0);
    /// let next = NewRecord::new(vec![]).in_group("n").replacing("k");
    /// assert!(waiting.replaceable_by(&next, true));
    /// assert!(!waiting.replaceable_by(&next, false)); // a later write of the group follows it
    /// assert!(!waiting.replaceable_by(&next.clone().in_group("m"), true));
    /// ```
    pub fn replaceable_by(&self, new: &NewRecord, last_of_group: bool) -> bool {
        new.replaces.is_some()
            && self.replaces == new.replaces
            && self.group == new.group
            && matches!(self.state, State::Pending | State::Retrying)
            && last_of_group
    }

    /// Rewrites this record with the write `new` that replaces it, enqueued at `now`: its
    /// payload, idempotency key (the server must not take the new payload for a duplicate of
    /// the old one), expected version and creation time (the record now carries a write made
    /// at `now`: the age policy and a sink's enqueue-time header speak of it). Id, group and
    /// state stay, and so does its place in its group.
    ///
    /// The schedule stays too, except where the new write's not-before time says otherwise:
    /// the new write's [`not_before`](NewRecord::not_before) replaces the old one (the new
    /// payload is what must wait, or not). A pending record is then due at the later of its
    /// place (its deadline, or `now` if that lay ahead because of the old not-before time)
    /// and the new not-before time; a retrying record keeps its backoff deadline unless the
    /// new not-before time is later.
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId};
    /// let mut record = Record::enqueued(RecordId(1), NewRecord::new(b"v1".to_vec()).replacing("k"), 1_000);
    /// record.supersede(NewRecord::new(b"v2".to_vec()).replacing("k").with_key("k2"), 5_000);
    /// assert_eq!((record.payload.as_slice(), record.key.as_str(), record.created_at), (&b"v2"[..], "k2", 5_000));
    /// assert_eq!(record.next_attempt_at, Some(1_000));
    /// // A later write held until 9 000 holds the record until then.
    /// record.supersede(NewRecord::new(b"v3".to_vec()).replacing("k").not_before(9_000), 6_000);
    /// assert_eq!((record.next_attempt_at, record.not_before), (Some(9_000), Some(9_000)));
    /// // One that may go at once releases it, due at the time of that write.
    /// record.supersede(NewRecord::new(b"v4".to_vec()).replacing("k"), 7_000);
    /// assert_eq!((record.next_attempt_at, record.not_before), (Some(7_000), None));
    /// ```
    pub fn supersede(&mut self, new: NewRecord, now: Millis) {
        let floor = new.not_before.unwrap_or(0);
        self.next_attempt_at = self.next_attempt_at.map(|next| match self.state {
            State::Pending => next.min(now).max(floor),
            _ => next.max(floor),
        });
        self.payload = new.payload;
        self.key = new.key;
        self.expected_version = new.expected_version;
        self.not_before = new.not_before;
        self.trace = new.trace;
        self.created_at = now;
    }

    /// Whether a re-base after the wall clock stepped back to `now` moves this record: the one
    /// selection rule of [`Store::stepped_back`](crate::Store::stepped_back). A pending or
    /// retrying record whose deadline lies after `now`, and either was last reported after
    /// `now`, or was never reported and waits for more than its not-before time (a record
    /// whose deadline is its not-before time waits for an absolute time, which a step does
    /// not change). In SQL: `state IN (pending, retrying) AND next_attempt_at > now AND
    /// (last_attempt_at > now OR (last_attempt_at IS NULL AND (not_before IS NULL OR
    /// next_attempt_at > not_before)))`.
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId};
    /// // Enqueued a day ahead of the clock now: it waits for nothing but the wrong clock.
    /// assert!(Record::enqueued(RecordId(1), NewRecord::new(vec![]), 86_400_000).needs_rebase(5_000));
    /// let held = NewRecord::new(vec![]).not_before(90_000_000);
    /// assert!(!Record::enqueued(RecordId(2), held, 86_400_000).needs_rebase(5_000));
    /// ```
    pub fn needs_rebase(&self, now: Millis) -> bool {
        let Some(next) = self.next_attempt_at else {
            return false;
        };
        self.state.is_due_kind()
            && next > now
            && match self.last_attempt_at {
                Some(last) => last > now,
                None => self.not_before.is_none_or(|at| next > at),
            }
    }

    /// The mutable part of the record: what a transition rewrites.
    pub fn progress(&self) -> Progress {
        Progress {
            state: self.state,
            attempts: self.attempts,
            unanswered: self.unanswered,
            interrupted: self.interrupted,
            last_attempt_at: self.last_attempt_at,
            next_attempt_at: self.next_attempt_at,
            last_error: self.last_error.clone(),
            history: self.history.clone(),
        }
    }

    /// Writes a [`Progress`] onto the record and drops its lease (no transition leaves a
    /// record in flight).
    pub fn set_progress(&mut self, progress: Progress) {
        self.state = progress.state;
        self.attempts = progress.attempts;
        self.unanswered = progress.unanswered;
        self.interrupted = progress.interrupted;
        self.last_attempt_at = progress.last_attempt_at;
        self.next_attempt_at = progress.next_attempt_at;
        self.last_error = progress.last_error;
        self.history = progress.history;
        self.lease = None;
    }

    /// Applies a requeue ([`Change::Requeue`](crate::Change::Requeue)) to the record:
    /// [`Progress::requeued`] with its history kept, so the person who requeued it still sees
    /// why it had been rejected. The one rule every store that rewrites whole records applies.
    ///
    /// ```
    /// use outbox_core::{Attempt, AttemptClass, Record, RecordId, State};
    /// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
    /// record.state = State::Rejected;
    /// record.attempts = 1;
    /// record.history.push(Attempt::new(5, AttemptClass::Rejected, "HTTP 422"));
    /// record.requeue(9);
    /// assert_eq!((record.state, record.attempts, record.next_attempt_at), (State::Pending, 0, Some(9)));
    /// assert_eq!(record.history.len(), 1);
    /// ```
    pub fn requeue(&mut self, at: Millis) {
        let history = std::mem::take(&mut self.history);
        self.set_progress(Progress {
            history,
            ..Progress::requeued(at)
        });
    }
}

#[cfg(feature = "serde")]
impl Record {
    /// The payload read as JSON into a `T` (feature `serde`). A payload that is not JSON, or
    /// not the JSON of a `T`, is [`Error::Json`](crate::Error::Json).
    ///
    /// ```
    /// use outbox_core::{Error, Record, RecordId};
    ///
    /// #[derive(serde::Deserialize, Debug, PartialEq)]
    /// struct Rename { doc: u64, title: String }
    ///
    /// let record = Record::fresh(RecordId(1), None, br#"{"doc":42,"title":"Plans"}"#.to_vec(), "k".into(), 0);
    /// assert_eq!(record.json::<Rename>()?, Rename { doc: 42, title: "Plans".into() });
    /// assert!(matches!(record.json::<Vec<u8>>(), Err(Error::Json(_))));
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> crate::Result<T> {
        serde_json::from_slice(&self.payload).map_err(crate::Error::Json)
    }
}

/// The persisted schedule and counters of a record, as a transition sets them.
///
/// ```
/// use outbox_core::{Progress, State};
/// use outbox_core::History;
/// let p = Progress { state: State::Retrying, attempts: 1, unanswered: 0, interrupted: 0,
///     last_attempt_at: Some(10), next_attempt_at: Some(1_010), last_error: Some("503".into()),
///     history: History::default() };
/// assert_eq!(p.state, State::Retrying);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// New state; never [`State::InFlight`] (only a claim puts a record in flight).
    pub state: State,
    /// Answered failures.
    pub attempts: u32,
    /// Unanswered failures.
    pub unanswered: u32,
    /// Interrupted claims.
    pub interrupted: u32,
    /// When the last delivery reported.
    pub last_attempt_at: Option<Millis>,
    /// Next deadline, `None` for never.
    pub next_attempt_at: Option<Millis>,
    /// Last failure text.
    pub last_error: Option<String>,
    /// The last attempts, the newest one included when the transition reports one.
    pub history: History,
}

impl Progress {
    /// What a requeue writes ([`Change::Requeue`](crate::Change::Requeue)): pending and due
    /// at `at` with a fresh budget: no attempts, no unanswered or interrupted deliveries, no
    /// last attempt and no last error. The one definition every store applies.
    ///
    /// ```
    /// use outbox_core::{Progress, State};
    /// let p = Progress::requeued(5_000);
    /// assert_eq!((p.state, p.attempts, p.next_attempt_at, p.last_error), (State::Pending, 0, Some(5_000), None));
    /// ```
    pub fn requeued(at: Millis) -> Progress {
        Progress {
            state: State::Pending,
            attempts: 0,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: None,
            next_attempt_at: Some(at),
            last_error: None,
            history: History::default(),
        }
    }
}

/// What stays of a discarded record until it is pruned.
///
/// ```
/// use outbox_core::{RecordId, Tombstone};
/// let t = Tombstone { id: RecordId(3), group: None, key: "k".into(), reason: "user".into(),
///     discarded_at: 9, attempts: 2 };
/// assert_eq!(t.attempts, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// Id the record had.
    pub id: RecordId,
    /// Group it was in.
    pub group: Option<String>,
    /// Its idempotency key.
    pub key: String,
    /// Why it was discarded, and by whom.
    pub reason: String,
    /// When.
    pub discarded_at: Millis,
    /// Answered failures it had spent.
    pub attempts: u32,
}

impl Tombstone {
    /// The tombstone `record` leaves when a discard (`reason`, at `at`, with `attempts` spent)
    /// removes it: the one rule every backend applies to a [`Change::Discard`](crate::Change).
    ///
    /// ```
    /// use outbox_core::{Record, RecordId, Tombstone};
    /// let record = Record::fresh(RecordId(3), Some("doc".into()), b"x".to_vec(), "k".into(), 0);
    /// let t = Tombstone::of(record, "duplicate".into(), 9, 2);
    /// assert_eq!((t.id, t.group.as_deref(), t.key.as_str()), (RecordId(3), Some("doc"), "k"));
    /// assert_eq!((t.reason.as_str(), t.discarded_at, t.attempts), ("duplicate", 9, 2));
    /// ```
    pub fn of(record: Record, reason: String, at: Millis, attempts: u32) -> Tombstone {
        Tombstone {
            id: record.id,
            group: record.group,
            key: record.key,
            reason,
            discarded_at: at,
            attempts,
        }
    }
}
