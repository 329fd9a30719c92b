//! A write to enqueue ([`NewRecord`]), its builder and the checks every store relies on.

use super::Millis;
use crate::trace::TraceContext;

/// The trace context a new write starts with: the current span's with the `opentelemetry`
/// feature, none without it.
fn current_trace() -> Option<TraceContext> {
    #[cfg(feature = "opentelemetry")]
    {
        TraceContext::current()
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        None
    }
}

/// A write to enqueue: the payload, an optional ordering group and a stable idempotency key;
/// optionally the entity version it was written against ([`NewRecord::expecting`]) and a key
/// under which a later write replaces it while it waits ([`NewRecord::replacing`]).
///
/// ```
/// use outbox_core::NewRecord;
///
/// let record = NewRecord::new(b"{\"op\":\"rename\"}".to_vec()).in_group("doc-42");
/// assert_eq!(record.group.as_deref(), Some("doc-42"));
/// assert_eq!(record.key.len(), 36); // a version-4 UUID: see `outbox_core::key`
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRecord {
    /// Records of one group are delivered strictly in order, one at a time.
    pub group: Option<String>,
    /// Opaque bytes handed to the sink.
    pub payload: Vec<u8>,
    /// Sent with every delivery of this record so the server can drop a duplicate after a
    /// crash. By default a fresh version-4 UUID from the operating system's secure random
    /// source ([`key::fresh`](crate::key::fresh)); set your own with [`NewRecord::with_key`].
    pub key: String,
    /// The version of the entity this write was made against: a sink sends it as a
    /// precondition (`HttpSink` as `If-Match`) so the server can refuse a write made stale by
    /// a change elsewhere. Set with [`NewRecord::expecting`].
    pub expected_version: Option<String>,
    /// The coalescing key: a later write with the same key replaces this one while it waits.
    /// Set with [`NewRecord::replacing`].
    pub replaces: Option<String>,
    /// Wall-clock time before which the record is not delivered. Set with
    /// [`NewRecord::not_before`].
    pub not_before: Option<Millis>,
    /// The trace context of the span the write was made in (see [`crate::trace`]). Set with
    /// [`NewRecord::trace_context`]; with the `opentelemetry` feature, [`NewRecord::new`]
    /// takes the current span's.
    pub trace: Option<TraceContext>,
}

impl NewRecord {
    /// A record with no group and a fresh random idempotency key.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        NewRecord {
            group: None,
            payload: payload.into(),
            key: crate::key::fresh(),
            expected_version: None,
            replaces: None,
            not_before: None,
            trace: current_trace(),
        }
    }

    /// Carries the trace context `cx` to the delivery (`HttpSink` sends it as the
    /// `traceparent` and `tracestate` headers; with the `opentelemetry` feature the delivery
    /// span links to it). It replaces the context [`NewRecord::new`] took, if any.
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId, TraceContext};
    /// let cx = TraceContext::new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)?;
    /// let record = Record::enqueued(RecordId(1), NewRecord::new(vec![]).trace_context(cx.clone()), 0);
    /// assert_eq!(record.trace, Some(cx));
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    pub fn trace_context(mut self, cx: TraceContext) -> Self {
        self.trace = Some(cx);
        self
    }

    /// Holds the record until the wall-clock time `at` (milliseconds since the Unix epoch): it
    /// is pending from the enqueue on, but not due before `at`, and then takes its place among
    /// the due records by that time (the due order is deadline, then id).
    ///
    /// The store writes `max(now, at)` as the record's deadline, in the same due index as every
    /// other deadline, so a backlog of records held for later costs a claim nothing: it reads
    /// only the due end of that index. The time is absolute: a wall-clock step does not move
    /// it (a backoff, which is a wait, is moved), and neither does the link coming back. It
    /// holds the first delivery only: after an attempt the record's schedule is its retry
    /// policy's, and a person's `retry` or `requeue` makes it due at once. A record of a group
    /// holds the records behind it in its group until it is delivered, as any group head does.
    /// `at` is compared with the clock the store judges time by (a PostgreSQL store: the
    /// database server's, see [`Store::shared_clock`](crate::Store::shared_clock)).
    ///
    /// ```
    /// use outbox_core::{NewRecord, Record, RecordId};
    /// let reminder = NewRecord::new(b"remind".to_vec()).not_before(3_600_000);
    /// assert_eq!(reminder.not_before, Some(3_600_000));
    /// let record = Record::enqueued(RecordId(1), reminder, 1_000);
    /// assert_eq!(record.next_attempt_at, Some(3_600_000)); // due at its time, not at enqueue
    /// assert!(record.is_scheduled());
    /// ```
    pub fn not_before(mut self, at: Millis) -> Self {
        self.not_before = Some(at);
        self
    }

    /// Marks the write as made against `version` of its entity (an ETag, a row version): the
    /// sink sends it as a precondition, and a server whose entity has moved on answers with a
    /// conflict (HTTP 412) instead of overwriting the newer data. At most 1,024 bytes of
    /// visible ASCII, quoted as a whole (`"3"`) or not at all (`3`), and not a weak entity tag
    /// (`W/"…"`), which `If-Match` never matches; `enqueue` refuses anything else.
    ///
    /// ```
    /// use outbox_core::NewRecord;
    /// let record = NewRecord::new(b"title=Plans".to_vec()).in_group("note-7").expecting("3");
    /// assert_eq!(record.expected_version.as_deref(), Some("3"));
    /// let valid = |v: &str| NewRecord::new(vec![]).expecting(v).validate(1024).is_ok();
    /// assert!(valid("3") && valid("\"3\""));
    /// assert!(!valid("a\"b") && !valid("\"3") && !valid("W/\"3\""));
    /// ```
    pub fn expecting(mut self, version: impl Into<String>) -> Self {
        self.expected_version = Some(version.into());
        self
    }

    /// Lets this write replace an earlier one with the same coalescing `key` that has not gone
    /// out yet: the store rewrites the earlier record's payload, idempotency key and expected
    /// version in place (it keeps its id, its place in its group and its schedule) instead of
    /// queueing a second request. The earlier write is replaced only while it is pending or
    /// retrying, in the same group, and the last record of that group; one in flight, waiting
    /// for a person, or followed by another write of its group is left alone, and this write
    /// queues behind it. Each replacement is counted in [`Stats::superseded`](crate::Stats)
    /// and announced with [`Event::Superseded`](crate::Event::Superseded). Put the writes of
    /// one key in one group when their order matters: records without a group have no order
    /// among themselves, coalesced or not.
    ///
    /// ```
    /// use outbox_core::NewRecord;
    /// let edit = NewRecord::new(b"body v2".to_vec()).in_group("note-7").replacing("note-7/body");
    /// assert_eq!(edit.replaces.as_deref(), Some("note-7/body"));
    /// ```
    pub fn replacing(mut self, key: impl Into<String>) -> Self {
        self.replaces = Some(key.into());
        self
    }

    /// Puts the record in an ordering group (for example an entity id).
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Replaces the random idempotency key with one of the caller's: 1 to
    /// [`key::MAX_LEN`](crate::key::MAX_LEN) (255) bytes of visible ASCII, or `enqueue`
    /// refuses the batch with [`Error::InvalidIdempotencyKey`](crate::Error::InvalidIdempotencyKey).
    ///
    /// ```
    /// use outbox_core::{Error, NewRecord};
    /// assert!(NewRecord::new(vec![]).with_key("order-42-placed").validate(1024).is_ok());
    /// let spaced = NewRecord::new(vec![]).with_key("order 42");
    /// assert!(matches!(spaced.validate(1024), Err(Error::InvalidIdempotencyKey { .. })));
    /// ```
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }
}

#[cfg(feature = "serde")]
impl NewRecord {
    /// A record whose payload is `value` as JSON (feature `serde`); no group, a fresh key.
    /// A value JSON cannot hold (a map with non-string keys, a failing `Serialize`) is
    /// [`Error::Json`](crate::Error::Json).
    ///
    /// ```
    /// use outbox_core::NewRecord;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Rename<'a> { doc: u64, title: &'a str }
    ///
    /// let record = NewRecord::json(&Rename { doc: 42, title: "Plans" })?.in_group("doc-42");
    /// assert_eq!(record.payload, br#"{"doc":42,"title":"Plans"}"#);
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> crate::Result<Self> {
        let payload = serde_json::to_vec(value).map_err(crate::Error::Json)?;
        Ok(NewRecord::new(payload))
    }
}

/// The longest group key, in bytes, that every backend can index: 1,024.
pub const MAX_GROUP_LEN: usize = 1024;

impl NewRecord {
    /// Checks what every backend must refuse, the same way on all of them: a payload over
    /// `max_payload` bytes; an idempotency key that is not 1 to
    /// [`key::MAX_LEN`](crate::key::MAX_LEN) bytes of visible ASCII
    /// ([`key::validate`](crate::key::validate)); a group key or coalescing key that is empty,
    /// holds a NUL byte or is longer than [`MAX_GROUP_LEN`] bytes; an expected version that is
    /// empty, longer than that or not visible ASCII (it travels in a header). Backends call it
    /// before they write anything, also inside a caller's transaction.
    ///
    /// ```
    /// use outbox_core::{Error, NewRecord};
    /// assert!(NewRecord::new(b"ok".to_vec()).in_group("doc-1").validate(1024).is_ok());
    /// assert!(matches!(NewRecord::new(vec![]).in_group("a\0b").validate(1024), Err(Error::InvalidGroup { .. })));
    /// assert!(matches!(NewRecord::new(vec![]).replacing("").validate(1024), Err(Error::InvalidGroup { .. })));
    /// assert!(matches!(NewRecord::new(vec![]).expecting("v 3").validate(1024), Err(Error::InvalidGroup { .. })));
    /// assert!(matches!(NewRecord::new(vec![]).expecting("W/\"3\"").validate(1024), Err(Error::InvalidGroup { .. })));
    /// assert!(matches!(NewRecord::new(vec![0; 5]).validate(4), Err(Error::PayloadTooLarge { .. })));
    /// assert!(matches!(NewRecord::new(vec![]).with_key("").validate(1024), Err(Error::InvalidIdempotencyKey { .. })));
    /// ```
    pub fn validate(&self, max_payload: usize) -> crate::Result<()> {
        if self.payload.len() > max_payload {
            return Err(crate::Error::PayloadTooLarge {
                size: self.payload.len(),
                max: max_payload,
            });
        }
        crate::key::validate(&self.key)?;
        if let Some(group) = &self.group {
            validate_group(group)?;
        }
        if let Some(key) = &self.replaces {
            validate_name("coalescing key", "coalescing", key)?;
        }
        if let Some(version) = &self.expected_version {
            validate_version(version)?;
        }
        Ok(())
    }

    /// [`NewRecord::validate`] over a batch: the first bad record refuses the whole batch.
    pub fn validate_all(records: &[NewRecord], max_payload: usize) -> crate::Result<()> {
        records.iter().try_for_each(|r| r.validate(max_payload))
    }
}

/// Checks a group key (see [`NewRecord::validate`]).
///
/// ```
/// use outbox_core::record::validate_group;
/// assert!(validate_group("note-7").is_ok());
/// assert!(validate_group("").is_err());
/// assert!(validate_group(&"x".repeat(1025)).is_err());
/// ```
pub fn validate_group(group: &str) -> crate::Result<()> {
    validate_name("group key", "group", group)
}

/// The rule for every key a backend indexes (group and coalescing keys).
fn validate_name(what: &str, instead: &str, name: &str) -> crate::Result<()> {
    let reason = if name.is_empty() {
        format!("a {what} must not be empty (use no {instead} instead)")
    } else if name.contains('\0') {
        format!("a {what} must not contain a NUL byte")
    } else if name.len() > MAX_GROUP_LEN {
        format!(
            "a {what} may be at most {MAX_GROUP_LEN} bytes, this one has {}",
            name.len()
        )
    } else {
        return Ok(());
    };
    Err(crate::Error::InvalidGroup { reason })
}

/// An expected version travels in a header: 1 to [`MAX_GROUP_LEN`] bytes of visible ASCII, and
/// not a weak entity tag (`If-Match` compares strongly, so a weak tag would never match and every
/// delivery would be refused).
fn validate_version(version: &str) -> crate::Result<()> {
    if version.starts_with("W/") {
        return Err(crate::Error::InvalidGroup {
            reason: format!(
                "an expected version must not be a weak entity tag ({version:?}): If-Match \
                 compares strongly, so it would never match"
            ),
        });
    }
    // Quoted as a whole or not at all: `a"b` or `"abc` would go out as a malformed tag.
    let inner = match version.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').unwrap_or("\""),
        None => version,
    };
    if version.is_empty()
        || version.len() > MAX_GROUP_LEN
        || !version.bytes().all(|b| b.is_ascii_graphic())
        || inner.contains('"')
    {
        return Err(crate::Error::InvalidGroup {
            reason: format!(
                "an expected version must be 1 to {MAX_GROUP_LEN} bytes of visible ASCII, quoted as \
                 a whole or not at all, not {version:?}"
            ),
        });
    }
    Ok(())
}
