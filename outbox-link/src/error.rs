//! What can go wrong when a signal is set up.

use std::time::Duration;

/// Why a connectivity signal could not be started.
///
/// Once started, a signal does not fail towards its receivers: if the operating system's
/// notifications stop working, it logs a warning and ends, and the runner then treats the
/// device as online and learns of outages from its own deliveries.
///
/// ```
/// use std::time::Duration;
/// use outbox_link::Error;
///
/// let err = outbox_link::watch_debounced(Duration::from_secs(3600)).unwrap_err();
/// assert!(matches!(err, Error::InvalidWindow { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Called outside a tokio runtime: the signal's task needs one to run on.
    #[error(
        "outbox-link needs a tokio runtime: call it from within one (e.g. under #[tokio::main])"
    )]
    NoRuntime,
    /// The debounce window is longer than the crate accepts.
    #[error("a debounce window of {window:?} is longer than the {max:?} accepted")]
    InvalidWindow {
        /// The window asked for.
        window: Duration,
        /// The longest accepted, [`MAX_WINDOW`](crate::MAX_WINDOW).
        max: Duration,
    },
    /// The operating system's network notifications could not be opened (a sandbox that
    /// forbids netlink sockets, for instance). A [`Link`](crate::Link) fed by the platform's
    /// own callback works there.
    #[error("the operating system's network notifications are unavailable: {detail}")]
    Unavailable {
        /// What failed.
        detail: String,
        /// The system's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

impl Error {
    /// An [`Error::Unavailable`] for `what`, keeping the system's error.
    pub(crate) fn os(what: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Unavailable {
            detail: format!("{what}: {source}"),
            source: Some(Box::new(source)),
        }
    }
}
