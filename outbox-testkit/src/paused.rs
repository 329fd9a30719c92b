//! A store layer that keeps tokio's paused clock still while the store works.
//!
//! Under `tokio::time::pause` a current-thread runtime advances its clock by itself whenever
//! it has nothing to run. A backend that waits for its own engine thread (a writer thread, a
//! channel) looks idle to tokio, so the clock would leap to the next timer (a lease renewal, a
//! test's timeout) in the middle of a store call. Tokio holds a paused clock still while a
//! `spawn_blocking` task is pending, so [`PausedClockStore`] starts one that waits for the end
//! of each call. A store that itself sleeps on tokio's clock inside a call would wait forever
//! under this layer; none should.

use std::sync::Arc;

use outbox_core::layer::{Entered, Operation, StoreLayer};
use outbox_core::Store;

/// Wraps a store so that tokio's paused clock stands still during each of its calls: use it
/// when you test an [`Outbox`](outbox_core::Outbox) under `tokio::time::pause` on a store
/// that answers from its own thread (redb's writer, a connection pool).
///
/// Outside a tokio runtime, or on a runtime whose clock is not paused, the layer changes
/// nothing but the cost of one parked blocking-pool thread per call.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use std::sync::Arc;
/// use outbox_core::{NewRecord, Store};
/// use outbox_memory::MemoryStore;
/// use outbox_testkit::PausedClockStore;
///
/// tokio::time::pause();
/// let store = PausedClockStore::wrap(Arc::new(MemoryStore::new()));
/// let before = tokio::time::Instant::now();
/// store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 0).await?;
/// assert_eq!(before, tokio::time::Instant::now());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PausedClockStore {
    inner: Arc<dyn Store>,
}

impl PausedClockStore {
    /// `inner`, with tokio's paused clock held still during each call.
    pub fn wrap(inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(PausedClockStore { inner })
    }
}

impl StoreLayer for PausedClockStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    fn enter(&self, _op: Operation) -> Entered {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Entered::none();
        };
        // The blocking task ends when the sender is dropped with the call's scope.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        drop(runtime.spawn_blocking(move || {
            let _ = wait.recv();
        }));
        Entered::hold(done)
    }
}
