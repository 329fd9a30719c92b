//! Mapping of redb's errors into [`outbox_core::Error`], keeping redb's error as the source.

use std::io::ErrorKind;
use std::sync::Arc;

use outbox_core::Error;

/// Maps any redb error into the variant a caller can act on.
pub(crate) fn from_redb(err: impl Into<redb::Error>) -> Error {
    from_shared(Arc::new(err.into()))
}

/// Maps one redb error that several callers share (a failed group commit answers every request
/// of the batch); each caller's error keeps the same source.
pub(crate) fn from_shared(err: Arc<redb::Error>) -> Error {
    let source = Some(Box::new(Arc::clone(&err)) as outbox_core::BoxError);
    match &*err {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
            Error::Locked { source }
        }
        redb::Error::Corrupted(detail) => Error::Corrupted {
            detail: detail.clone(),
            source,
        },
        redb::Error::UpgradeRequired(version) => Error::NotAnOutbox {
            detail: format!("a redb file of format {version}, which this redb cannot read"),
            source,
        },
        redb::Error::Io(io) => from_io_kind(io.kind(), err.to_string(), source),
        redb::Error::TransactionInProgress | redb::Error::WouldBlock => Error::Unavailable {
            detail: err.to_string(),
            source,
        },
        _ => Error::Backend {
            detail: err.to_string(),
            source,
        },
    }
}

/// Maps an I/O error met outside redb (reading the file header, creating the file).
pub(crate) fn from_io(err: std::io::Error) -> Error {
    let detail = err.to_string();
    let kind = err.kind();
    from_io_kind(kind, detail, Some(Box::new(err)))
}

fn from_io_kind(kind: ErrorKind, detail: String, source: Option<outbox_core::BoxError>) -> Error {
    match kind {
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => Error::ReadOnly { source },
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
            Error::StorageFull { source }
        }
        ErrorKind::WouldBlock | ErrorKind::Interrupted | ErrorKind::TimedOut => {
            Error::Unavailable { detail, source }
        }
        ErrorKind::UnexpectedEof | ErrorKind::InvalidData => Error::Corrupted { detail, source },
        _ => Error::Backend { detail, source },
    }
}

/// A panic inside redb while it read a damaged file becomes a typed error, not a crash.
pub(crate) fn from_join(err: tokio::task::JoinError) -> Error {
    if err.is_panic() {
        Error::Corrupted {
            detail: "the storage engine panicked while reading the file".into(),
            source: Some(Box::new(err)),
        }
    } else {
        Error::Stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_become_actionable_variants_with_their_source() {
        let locked = from_redb(redb::DatabaseError::DatabaseAlreadyOpen);
        assert!(matches!(locked, Error::Locked { source: Some(_) }));
        let full = from_redb(redb::StorageError::Io(std::io::Error::from(
            ErrorKind::StorageFull,
        )));
        assert!(matches!(full, Error::StorageFull { .. }));
        let ro = from_io(std::io::Error::from(ErrorKind::PermissionDenied));
        assert!(matches!(ro, Error::ReadOnly { .. }));
        let corrupted = from_redb(redb::StorageError::Corrupted("bad page".into()));
        assert!(
            matches!(&corrupted, Error::Corrupted { detail, .. } if detail == "bad page"),
            "{corrupted:?}"
        );
        assert!(std::error::Error::source(&corrupted).is_some());
    }
}
