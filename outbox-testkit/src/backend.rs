//! What a backend hands the conformance suite: a way to create and open stores, and what it can
//! do.

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{Result, Store, DEFAULT_MAX_PAYLOAD};

/// What a backend can do. Scenarios that need a capability the backend lacks are reported as
/// skipped, by name, with the reason.
///
/// ```
/// use outbox_testkit::Capabilities;
/// let caps = Capabilities { persistent: true, shared: false };
/// assert!(caps.persistent);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Records survive dropping the store and killing the process: `open` after either sees
    /// every acknowledged write.
    pub persistent: bool,
    /// Several handles and several processes may open one store at the same time.
    pub shared: bool,
}

/// A storage backend under test.
///
/// `create` makes a new, empty store and names it by a *location*: text (a file path, a schema
/// name) that `open` accepts, in this process or in a child process the crash scenarios start.
///
/// Scenarios that restart a store drop every handle and then `open` the location again, so a
/// store that only one handle may open must release it when its last handle is dropped. The
/// crash scenarios build the backend afresh in a child process (the same expression given to
/// `conformance!`) and call `open` there with the location alone.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// A short name for messages.
    fn name(&self) -> &'static str;

    /// What the backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Creates a new, empty store and returns its location.
    async fn create(&self) -> Result<String>;

    /// Opens the existing store at `location`. A non-persistent backend returns the store that
    /// `create` made for that location.
    async fn open(&self, location: &str) -> Result<Arc<dyn Store>>;

    /// The largest payload the stores this backend opens accept; the payload scenario checks
    /// that one byte more is refused. Defaults to [`DEFAULT_MAX_PAYLOAD`].
    fn max_payload(&self) -> usize {
        DEFAULT_MAX_PAYLOAD
    }
}
