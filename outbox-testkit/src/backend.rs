//! What a backend hands the conformance suite: a way to create and open stores, and what it can
//! do.

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{Cap, Error, RecordId, Result, Store, DEFAULT_MAX_PAYLOAD};

/// What a backend can do. Scenarios that need a capability the backend lacks are reported as
/// skipped, by name, with the reason.
///
/// ```
/// use outbox_testkit::Capabilities;
/// let caps = Capabilities { persistent: true, shared: false, unreadable_rows: false, size_cap: true };
/// assert!(caps.persistent);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Records survive dropping the store and killing the process: `open` after either sees
    /// every acknowledged write.
    pub persistent: bool,
    /// Several handles and several processes may open one store at the same time.
    pub shared: bool,
    /// [`Backend::plant_unreadable`] can make a stored record undecodable, as an old app
    /// version or a bit flip would (a store of decoded values, like memory, cannot).
    pub unreadable_rows: bool,
    /// [`Backend::open_capped`] opens a store with a size cap ([`Cap`]).
    pub size_cap: bool,
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

    /// Opens the existing store at `location` with the size cap `cap` (as `open` does
    /// otherwise). Backends that declare [`Capabilities::size_cap`] implement it; the default
    /// refuses.
    async fn open_capped(&self, location: &str, cap: Cap) -> Result<Arc<dyn Store>> {
        let _ = (location, cap);
        Err(Error::Backend {
            detail: format!(
                "backend {} cannot open a store with a size cap",
                self.name()
            ),
            source: None,
        })
    }

    /// Makes the record `id` of the store at `location` undecodable, with no handle of the
    /// store open (the scenario drops its handles first and opens the store again after);
    /// returns the reason the store will list it with. Backends that declare
    /// [`Capabilities::unreadable_rows`] implement it; the default refuses.
    async fn plant_unreadable(&self, location: &str, id: RecordId) -> Result<String> {
        let _ = (location, id);
        Err(Error::Backend {
            detail: format!("backend {} cannot plant an unreadable row", self.name()),
            source: None,
        })
    }
}
