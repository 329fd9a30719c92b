//! SQLite's errors mapped into [`outbox_core::Error`], keeping the engine's error as the source.

use outbox_core::Error;
use rusqlite::ErrorCode;

/// Maps an engine error to the variant a caller can act on.
pub(crate) fn db(err: rusqlite::Error) -> Error {
    match err.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::unavailable(err),
        Some(ErrorCode::ReadOnly) => Error::ReadOnly {
            source: Some(Box::new(err)),
        },
        Some(ErrorCode::DiskFull) => Error::StorageFull {
            source: Some(Box::new(err)),
        },
        Some(ErrorCode::DatabaseCorrupt) => Error::Corrupted {
            detail: err.to_string(),
            source: Some(Box::new(err)),
        },
        Some(ErrorCode::NotADatabase) => Error::NotAnOutbox {
            detail: "the file is not an SQLite database".into(),
            source: Some(Box::new(err)),
        },
        _ => Error::backend(err),
    }
}

/// A value read from the file is out of range for its field: the file was altered by hand or
/// damaged in a way SQLite cannot see.
pub(crate) fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupted {
        detail: detail.into(),
        source: None,
    }
}

/// The same kind of error again, for the other writes of a transaction that `err` rolled back.
/// The engine's error itself went to the write that met it.
pub(crate) fn echo(err: &Error) -> Error {
    let detail = format!("the shared transaction was rolled back: {err}");
    match err {
        Error::ReadOnly { .. } => Error::ReadOnly { source: None },
        Error::StorageFull { .. } => Error::StorageFull { source: None },
        Error::Corrupted { .. } => Error::Corrupted {
            detail,
            source: None,
        },
        Error::Unavailable { .. } => Error::Unavailable {
            detail,
            source: None,
        },
        Error::NotAnOutbox { .. } => Error::NotAnOutbox {
            detail,
            source: None,
        },
        _ => Error::Backend {
            detail,
            source: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn engine_codes_map_to_actionable_variants() {
        use rusqlite::ffi;
        assert!(matches!(
            db(failure(ffi::SQLITE_BUSY)),
            Error::Unavailable { .. }
        ));
        assert!(db(failure(ffi::SQLITE_BUSY)).is_temporary());
        assert!(matches!(
            db(failure(ffi::SQLITE_READONLY)),
            Error::ReadOnly { .. }
        ));
        assert!(matches!(
            db(failure(ffi::SQLITE_FULL)),
            Error::StorageFull { .. }
        ));
        assert!(matches!(
            db(failure(ffi::SQLITE_CORRUPT)),
            Error::Corrupted { .. }
        ));
        assert!(matches!(
            db(failure(ffi::SQLITE_NOTADB)),
            Error::NotAnOutbox { .. }
        ));
        assert!(matches!(
            db(failure(ffi::SQLITE_IOERR)),
            Error::Backend { .. }
        ));
    }

    #[test]
    fn the_engine_error_stays_reachable_as_the_source() {
        let err = db(failure(rusqlite::ffi::SQLITE_FULL));
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.downcast_ref::<rusqlite::Error>().is_some());
    }

    #[test]
    fn an_echo_keeps_the_kind() {
        let full = db(failure(rusqlite::ffi::SQLITE_FULL));
        assert!(matches!(echo(&full), Error::StorageFull { .. }));
        let busy = db(failure(rusqlite::ffi::SQLITE_BUSY));
        assert!(echo(&busy).is_temporary());
    }
}
