//! PostgreSQL's and the pool's errors mapped into [`outbox_core::Error`], keeping the engine's
//! error as the source.

use deadpool_postgres::{HookError, PoolError};
use outbox_core::Error;
use tokio_postgres::error::SqlState;

/// Maps a server or connection error to the variant a caller can act on, with the server's
/// own message and SQLSTATE in the text (`Display`), and the driver's error as the source.
///
/// Everything that a later call may get past on its own (a dropped connection, a server
/// restarting, a deadlock or serialization victim, too many connections) is
/// [`Error::Unavailable`], which the runner retries with backoff.
pub(crate) fn pg(err: tokio_postgres::Error) -> Error {
    let detail = describe(&err);
    let Some(code) = err.code() else {
        // No SQLSTATE: the connection broke, or a value did not convert.
        return if !is_tls_refusal(&err) && (err.is_closed() || is_io(&err)) {
            Error::Unavailable {
                detail,
                source: Some(Box::new(err)),
            }
        } else {
            Error::Backend {
                detail,
                source: Some(Box::new(err)),
            }
        };
    };
    let code = code.code().to_owned();
    by_sqlstate(&code, detail, Box::new(err))
}

/// The variant for a server error with SQLSTATE `code`, whichever driver received it: the one
/// classification every driver's errors go through.
pub(crate) fn by_sqlstate(
    code: &str,
    detail: String,
    source: Box<dyn std::error::Error + Send + Sync>,
) -> Error {
    if code == SqlState::DISK_FULL.code() {
        return Error::StorageFull {
            source: Some(source),
        };
    }
    if code == SqlState::READ_ONLY_SQL_TRANSACTION.code() {
        return Error::ReadOnly {
            source: Some(source),
        };
    }
    if is_temporary(code) {
        return Error::Unavailable {
            detail,
            source: Some(source),
        };
    }
    Error::Backend {
        detail,
        source: Some(source),
    }
}

/// What the server said, as one line: its message, SQLSTATE, and its detail and hint when it
/// gave them; for an error without a server message (a lost connection), the driver's text
/// with its causes.
pub(crate) fn describe(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str("; detail: ");
            text.push_str(detail);
        }
        if let Some(hint) = db.hint() {
            text.push_str("; hint: ");
            text.push_str(hint);
        }
        return text;
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// SQLSTATE classes and codes that mean "try the same call again later".
fn is_temporary(text: &str) -> bool {
    // 08: connection exception; 40: transaction rollback (serialization, deadlock);
    // 53: insufficient resources (except disk full, handled before); 57P: operator
    // intervention (admin shutdown, crash shutdown, cannot connect now).
    text.starts_with("08")
        || text.starts_with("40")
        || text.starts_with("53")
        || text.starts_with("57P")
        || text == SqlState::LOCK_NOT_AVAILABLE.code()
}

/// The TLS handshake refused the server (its certificate does not verify, no common
/// protocol): trying again changes nothing, unlike a connection that broke.
#[cfg(feature = "tls")]
fn is_tls_refusal(err: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        // tokio-rustls carries rustls's verdict inside an `io::Error`, whose own `source`
        // skips it.
        let inner = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        if cause.is::<rustls::Error>() || inner.is_some_and(|e| e.is::<rustls::Error>()) {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(not(feature = "tls"))]
fn is_tls_refusal(_: &tokio_postgres::Error) -> bool {
    false
}

fn is_io(err: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Maps a pool error: no connection could be had in time, or connecting failed.
pub(crate) fn pool(err: PoolError) -> Error {
    match err {
        // A new session's set-up statement (`codec::TEXT_AS_STORED`) failed: mapped as any
        // statement's failure, so a server that went away is unavailable, not corrupt.
        PoolError::Backend(err) | PoolError::PostCreateHook(HookError::Backend(err)) => pg(err),
        // The set-up did not answer within the connect timeout: as a connection that did not.
        PoolError::PostCreateHook(HookError::Message(message))
            if message == crate::store::SET_UP_TIMED_OUT =>
        {
            Error::Unavailable {
                detail: message.into_owned(),
                source: None,
            }
        }
        PoolError::Timeout(_) | PoolError::Closed => Error::unavailable(err),
        other => Error::backend(other),
    }
}

/// A value read from the database is out of range for its field: the table was altered by hand.
pub(crate) fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupted {
        detail: detail.into(),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deadpool_postgres::TimeoutType;

    #[test]
    fn temporary_codes_are_the_retryable_ones() {
        for code in [
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::CONNECTION_FAILURE,
            SqlState::LOCK_NOT_AVAILABLE,
        ] {
            assert!(is_temporary(code.code()), "{code:?}");
        }
        for code in [
            SqlState::UNDEFINED_TABLE,
            SqlState::SYNTAX_ERROR,
            SqlState::UNIQUE_VIOLATION,
        ] {
            assert!(!is_temporary(code.code()), "{code:?}");
        }
    }

    #[test]
    fn pool_exhaustion_is_temporary() {
        let err = pool(PoolError::Timeout(TimeoutType::Wait));
        assert!(err.is_temporary());
        assert!(std::error::Error::source(&err).is_some());
        assert!(pool(PoolError::Closed).is_temporary());
    }

    #[test]
    fn a_session_set_up_that_timed_out_is_temporary_and_other_hook_messages_are_not() {
        let timed_out =
            PoolError::PostCreateHook(HookError::message(crate::store::SET_UP_TIMED_OUT));
        assert!(matches!(pool(timed_out), Error::Unavailable { .. }));
        let other = PoolError::PostCreateHook(HookError::message("something else"));
        assert!(!pool(other).is_temporary());
    }
}
