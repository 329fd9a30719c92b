//! Where the `Authorization` header comes from: read again for every request, so the
//! application can replace a refused credential and resume the runner.

use std::fmt;
use std::sync::{Arc, RwLock};

/// The current `Authorization` header value, read once per request.
///
/// After a 401 the runner halts; the application gets a new credential, makes the source
/// return it, and calls `Outbox::resume`: the next request carries it. Any
/// `Fn() -> Option<String>` is a source; [`Token`] is a ready-made one the application can
/// update in place. `None` sends no `Authorization` header.
///
/// ```
/// use outbox_http::{CredentialSource, HttpSink};
///
/// let sink = HttpSink::post("http://127.0.0.1:8080/notes")
///     .unwrap()
///     .credentials(|| std::env::var("NOTES_TOKEN").ok().map(|t| format!("Bearer {t}")));
/// # let _ = sink;
/// ```
pub trait CredentialSource: Send + Sync + 'static {
    /// The `Authorization` value to send now, or `None` for none.
    fn authorization(&self) -> Option<String>;
}

impl<F> CredentialSource for F
where
    F: Fn() -> Option<String> + Send + Sync + 'static,
{
    fn authorization(&self) -> Option<String> {
        self()
    }
}

/// An `Authorization` value the application can replace at any time; clones share it.
///
/// Its `Debug` output never shows the value.
///
/// ```
/// use outbox_http::{CredentialSource, Token};
///
/// let token = Token::bearer("first");
/// let source = token.clone(); // give this one to the sink
/// assert_eq!(source.authorization().as_deref(), Some("Bearer first"));
/// token.set_bearer("second"); // after a 401: log in again, then resume the outbox
/// assert_eq!(source.authorization().as_deref(), Some("Bearer second"));
/// token.clear();
/// assert_eq!(source.authorization(), None);
/// ```
#[derive(Clone, Default)]
pub struct Token {
    value: Arc<RwLock<Option<String>>>,
}

impl Token {
    /// A token that sends `value` as the whole `Authorization` header (`Basic ...`, a custom
    /// scheme).
    pub fn new(value: impl Into<String>) -> Self {
        Token {
            value: Arc::new(RwLock::new(Some(value.into()))),
        }
    }

    /// A token that sends `Bearer <token>`.
    pub fn bearer(token: &str) -> Self {
        Self::new(format!("Bearer {token}"))
    }

    /// Replaces the whole `Authorization` value.
    pub fn set(&self, value: impl Into<String>) {
        *self.value.write().unwrap_or_else(|e| e.into_inner()) = Some(value.into());
    }

    /// Replaces the value with `Bearer <token>`.
    pub fn set_bearer(&self, token: &str) {
        self.set(format!("Bearer {token}"));
    }

    /// Sends no `Authorization` header from now on.
    pub fn clear(&self) {
        *self.value.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl CredentialSource for Token {
    fn authorization(&self) -> Option<String> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = self
            .value
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        f.debug_struct("Token")
            .field("value", &if set { "<redacted>" } else { "<none>" })
            .finish()
    }
}
