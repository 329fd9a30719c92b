//! The one error type of the crate family.

use std::time::Duration;

use crate::record::RecordId;

/// A boxed error from a storage engine, kept as the `source` of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`Error`] as its default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in an outbox, as variants a caller can act on.
///
/// Backends map their engine's errors into these variants and keep the engine's error as the
/// source, so `std::error::Error::source` still reaches the original cause.
///
/// ```
/// use outbox_core::Error;
///
/// let err = Error::PayloadTooLarge { size: 10, max: 4 };
/// assert!(err.to_string().contains("10 bytes"));
/// assert!(!err.is_temporary());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file was written by a newer version of this crate; it was not touched.
    #[error("the outbox schema version {found} is newer than this build supports ({supported}); upgrade the crate")]
    SchemaTooNew {
        /// Version found in the file.
        found: u32,
        /// Newest version this build understands.
        supported: u32,
    },
    /// The file or database exists but is not an outbox (foreign, empty, or not a database).
    #[error("not an outbox: {detail}")]
    NotAnOutbox {
        /// What was found instead.
        detail: String,
        /// The engine's error, when there was one.
        #[source]
        source: Option<BoxError>,
    },
    /// The storage is damaged (truncated or corrupted file).
    #[error("the outbox storage is corrupted: {detail}")]
    Corrupted {
        /// What the engine reported.
        detail: String,
        /// The engine's error.
        #[source]
        source: Option<BoxError>,
    },
    /// `open` was called on a path that holds no outbox; use `create`.
    #[error("no outbox exists at {path}; create one first")]
    NotFound {
        /// The path that was opened.
        path: String,
    },
    /// `create` was called on a path that already holds a file; use `open`.
    #[error("a file already exists at {path}; open it instead of creating one")]
    AlreadyExists {
        /// The path that was created.
        path: String,
    },
    /// Another process holds the storage exclusively.
    #[error("the outbox is locked by another process")]
    Locked {
        /// The engine's error.
        #[source]
        source: Option<BoxError>,
    },
    /// A payload is larger than the store's configured maximum; nothing was enqueued.
    #[error("payload of {size} bytes exceeds the maximum of {max} bytes")]
    PayloadTooLarge {
        /// Size of the refused payload.
        size: usize,
        /// Configured maximum.
        max: usize,
    },
    /// The store holds as much as its [`Cap`](crate::Cap) allows: nothing of the batch was
    /// enqueued and nothing queued was touched. Deliveries, discards and prunes free room.
    #[error("the outbox is full: {used} of at most {max} {limit} held, {adding} more refused")]
    QueueFull {
        /// The limit the enqueue would pass.
        limit: crate::CapLimit,
        /// Its configured maximum.
        max: u64,
        /// What the store holds now.
        used: u64,
        /// What the refused enqueue would have added.
        adding: u64,
    },
    /// A trace context that is not a valid W3C `traceparent`/`tracestate`.
    #[error("invalid trace context: {reason}")]
    InvalidTraceContext {
        /// What is wrong with it.
        reason: String,
    },
    /// The storage was opened read-only, or the medium refuses writes.
    #[error("the outbox storage is read-only")]
    ReadOnly {
        /// The engine's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The disk (or the configured size limit) is full; the write was not made.
    #[error("the outbox storage is full")]
    StorageFull {
        /// The engine's error.
        #[source]
        source: Option<BoxError>,
    },
    /// A policy or configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// No record with this id is in the queue.
    #[error("no record {0} in the outbox")]
    NoSuchRecord(RecordId),
    /// The record is being delivered right now; try again when its delivery has reported.
    #[error("record {0} is in flight")]
    RecordInFlight(RecordId),
    /// The record was rejected by the server; its verdict is final, so it cannot be retried.
    #[error("record {0} was rejected by the server; enqueue the write again to resend it")]
    RecordRejected(RecordId),
    /// A group key or coalescing key the queue cannot hold (empty, containing NUL, or longer
    /// than [`MAX_GROUP_LEN`](crate::record::MAX_GROUP_LEN) bytes), or an expected version that
    /// cannot travel as an entity tag. The reason names which. Every backend refuses the same
    /// keys.
    #[error("invalid key: {reason}")]
    InvalidGroup {
        /// What is wrong with it.
        reason: String,
    },
    /// An idempotency key given by the application ([`NewRecord::with_key`]) that a server
    /// cannot receive in a header: empty, longer than
    /// [`key::MAX_LEN`](crate::key::MAX_LEN) bytes, or holding anything but visible
    /// ASCII. Nothing of the batch was enqueued; every backend refuses the same keys.
    ///
    /// [`NewRecord::with_key`]: crate::NewRecord::with_key
    #[error("invalid idempotency key: {reason}")]
    InvalidIdempotencyKey {
        /// What is wrong with it.
        reason: String,
    },
    /// The record is not rejected, so there is nothing to requeue (use `retry` for a
    /// needs-attention record).
    #[error("record {0} is not rejected; only a rejected record can be requeued")]
    NotRejected(RecordId),
    /// A bounded wait ran out.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The runner has stopped; the handle can no longer deliver.
    #[error("the runner has stopped")]
    Stopped,
    /// The storage engine is busy or unreachable; the same call may succeed later.
    #[error("the storage is temporarily unavailable: {detail}")]
    Unavailable {
        /// What the engine reported.
        detail: String,
        /// The engine's error.
        #[source]
        source: Option<BoxError>,
    },
    /// A payload could not be written as JSON, or read as the JSON of the type asked for
    /// (`NewRecord::json`, `Record::json`; feature `serde`). The payload itself is kept: the
    /// record is not changed by a failed read.
    #[cfg(feature = "serde")]
    #[error("JSON payload: {0}")]
    Json(#[source] serde_json::Error),
    /// Any other engine failure.
    #[error("storage error: {detail}")]
    Backend {
        /// What the engine reported.
        detail: String,
        /// The engine's error.
        #[source]
        source: Option<BoxError>,
    },
}

impl Error {
    /// Wraps any engine error as [`Error::Backend`], keeping it as the source.
    pub fn backend(err: impl Into<BoxError>) -> Self {
        let source = err.into();
        Error::Backend {
            detail: source.to_string(),
            source: Some(source),
        }
    }

    /// Wraps an engine error as [`Error::Unavailable`]: busy, locked for a moment, or
    /// disconnected.
    pub fn unavailable(err: impl Into<BoxError>) -> Self {
        let source = err.into();
        Error::Unavailable {
            detail: source.to_string(),
            source: Some(source),
        }
    }

    /// True when retrying the same call later may succeed without anyone changing anything.
    pub fn is_temporary(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::Timeout(_))
    }
}
