//! The exceptions the bindings raise: one variant per variant of the core's error enum.

use outbox_core::Error;

/// Everything an outbox call can fail with, raised as a typed exception in Kotlin, Swift and
/// Python (`OutboxException.InvalidGroup` in Kotlin, `OutboxError.InvalidGroup` in Swift and
/// Python).
///
/// Each variant mirrors one of [`outbox_core::Error`], with the engine's error reduced to its
/// text (an exception cannot carry a Rust error across the boundary). A variant the core may
/// add later arrives as [`OutboxError::Backend`] with its text, never as a crash.
///
/// ```
/// use outbox_ffi::OutboxError;
///
/// let err = OutboxError::from(outbox_core::Error::SchemaTooNew { found: 9, supported: 4 });
/// assert_eq!(err, OutboxError::SchemaTooNew { found: 9, supported: 4 });
/// assert!(err.to_string().contains("newer"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, uniffi::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The file was written by a newer version of the library; it was not touched.
    #[error("the outbox schema version {found} is newer than this build supports ({supported}); upgrade the library")]
    SchemaTooNew {
        /// Version found in the file.
        found: u32,
        /// Newest version this build understands.
        supported: u32,
    },
    /// The file exists but is not an outbox.
    #[error("not an outbox: {detail}")]
    NotAnOutbox {
        /// What was found instead.
        detail: String,
    },
    /// The file is damaged.
    #[error("the outbox storage is corrupted: {detail}")]
    Corrupted {
        /// What the engine reported.
        detail: String,
    },
    /// No outbox exists at the path.
    #[error("no outbox exists at {path}")]
    NotFound {
        /// The path.
        path: String,
    },
    /// A file already exists at the path.
    #[error("a file already exists at {path}")]
    AlreadyExists {
        /// The path.
        path: String,
    },
    /// Another process holds the file exclusively.
    #[error("the outbox is locked by another process: {detail}")]
    Locked {
        /// What the engine reported.
        detail: String,
    },
    /// A payload is larger than the store's maximum; nothing was enqueued.
    #[error("payload of {size} bytes exceeds the maximum of {max} bytes")]
    PayloadTooLarge {
        /// Size of the refused payload.
        size: u64,
        /// Configured maximum.
        max: u64,
    },
    /// The file was opened read-only, or the medium refuses writes.
    #[error("the outbox storage is read-only: {detail}")]
    ReadOnly {
        /// What the engine reported.
        detail: String,
    },
    /// The disk (or the configured size limit) is full; the write was not made.
    #[error("the outbox storage is full: {detail}")]
    StorageFull {
        /// What the engine reported.
        detail: String,
    },
    /// A policy, configuration or option value is out of range.
    #[error("invalid configuration: {detail}")]
    InvalidConfig {
        /// Which value, and why.
        detail: String,
    },
    /// No record with this id is in the queue.
    #[error("no record {id} in the outbox")]
    NoSuchRecord {
        /// The record id.
        id: u64,
    },
    /// The outbox holds as much as its size cap allows: nothing of the write was queued.
    #[error("the outbox is full: {used} of at most {max} {limit} held, {adding} more refused")]
    QueueFull {
        /// `records` or `payload bytes`: the limit the write would pass.
        limit: String,
        /// Its configured maximum.
        max: u64,
        /// What the outbox holds now.
        used: u64,
        /// What the refused write would have added.
        adding: u64,
    },
    /// The record is being delivered right now.
    #[error("record {id} is in flight")]
    RecordInFlight {
        /// The record id.
        id: u64,
    },
    /// The record was rejected by the server: it can be requeued, not retried.
    #[error("record {id} was rejected by the server")]
    RecordRejected {
        /// The record id.
        id: u64,
    },
    /// A group key, replacing key or expected version the queue cannot hold.
    #[error("invalid key: {reason}")]
    InvalidGroup {
        /// What is wrong with it.
        reason: String,
    },
    /// An idempotency key a server cannot receive in a header.
    #[error("invalid idempotency key: {reason}")]
    InvalidIdempotencyKey {
        /// What is wrong with it.
        reason: String,
    },
    /// The record is not rejected, so there is nothing to requeue.
    #[error("record {id} is not rejected")]
    NotRejected {
        /// The record id.
        id: u64,
    },
    /// A bounded wait ran out.
    #[error("timed out after {after_ms} ms")]
    Timeout {
        /// The wait, in milliseconds.
        after_ms: u64,
    },
    /// The runner has stopped (after `shutdown`).
    #[error("the runner has stopped")]
    Stopped,
    /// The storage is busy; the same call may succeed later.
    #[error("the storage is temporarily unavailable: {detail}")]
    Unavailable {
        /// What the engine reported.
        detail: String,
    },
    /// Any other engine failure, or an error this build of the bindings does not know by name.
    #[error("storage error: {detail}")]
    Backend {
        /// What was reported.
        detail: String,
    },
    /// A call of the bindings failed inside Rust (a task that panicked): a bug to report. The
    /// queue is unchanged by the call that raised it.
    #[error("internal error in the outbox bindings: {detail}")]
    Internal {
        /// What failed.
        detail: String,
    },
}

/// Milliseconds of a duration, saturating.
pub(crate) fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// An error's text followed by its sources, so the engine's cause is not lost at the boundary.
fn with_source(detail: &str, source: Option<&outbox_core::BoxError>) -> String {
    match source {
        Some(source) if !detail.contains(&source.to_string()) => format!("{detail}: {source}"),
        _ => detail.to_owned(),
    }
}

impl From<Error> for OutboxError {
    fn from(err: Error) -> Self {
        match err {
            Error::SchemaTooNew { found, supported } => {
                OutboxError::SchemaTooNew { found, supported }
            }
            Error::NotAnOutbox { detail, source } => OutboxError::NotAnOutbox {
                detail: with_source(&detail, source.as_ref()),
            },
            Error::Corrupted { detail, source } => OutboxError::Corrupted {
                detail: with_source(&detail, source.as_ref()),
            },
            Error::NotFound { path } => OutboxError::NotFound { path },
            Error::AlreadyExists { path } => OutboxError::AlreadyExists { path },
            Error::Locked { source } => OutboxError::Locked {
                detail: with_source("locked", source.as_ref()),
            },
            Error::PayloadTooLarge { size, max } => OutboxError::PayloadTooLarge {
                size: size as u64,
                max: max as u64,
            },
            Error::ReadOnly { source } => OutboxError::ReadOnly {
                detail: with_source("read-only", source.as_ref()),
            },
            Error::StorageFull { source } => OutboxError::StorageFull {
                detail: with_source("full", source.as_ref()),
            },
            Error::InvalidConfig(detail) => OutboxError::InvalidConfig { detail },
            Error::QueueFull {
                limit,
                max,
                used,
                adding,
            } => OutboxError::QueueFull {
                limit: limit.to_string(),
                max,
                used,
                adding,
            },
            Error::NoSuchRecord(id) => OutboxError::NoSuchRecord { id: id.0 },
            Error::RecordInFlight(id) => OutboxError::RecordInFlight { id: id.0 },
            Error::RecordRejected(id) => OutboxError::RecordRejected { id: id.0 },
            Error::InvalidGroup { reason } => OutboxError::InvalidGroup { reason },
            Error::InvalidIdempotencyKey { reason } => {
                OutboxError::InvalidIdempotencyKey { reason }
            }
            Error::NotRejected(id) => OutboxError::NotRejected { id: id.0 },
            Error::Timeout(after) => OutboxError::Timeout {
                after_ms: millis(after),
            },
            Error::Stopped => OutboxError::Stopped,
            Error::Unavailable { detail, source } => OutboxError::Unavailable {
                detail: with_source(&detail, source.as_ref()),
            },
            Error::Backend { detail, source } => OutboxError::Backend {
                detail: with_source(&detail, source.as_ref()),
            },
            // The core's enum is non-exhaustive: a variant added later keeps its text.
            other => OutboxError::Backend {
                detail: other.to_string(),
            },
        }
    }
}
