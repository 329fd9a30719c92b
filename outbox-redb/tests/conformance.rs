//! The conformance suite on the redb store: persistent, not shared (redb lets one process open a
//! file for writing), so the scenarios that need several processes on one store are skipped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use outbox_core::{Result, Store};
use outbox_redb::{RedbConfig, RedbStore};
use outbox_testkit::{Backend, Capabilities};

/// Outbox files in one temporary directory, removed when the backend is dropped. The directory
/// is made at the first `create`: the crash scenarios' child processes only `open` their
/// parent's files.
struct RedbBackend {
    dir: OnceLock<tempfile::TempDir>,
    next: AtomicUsize,
}

impl RedbBackend {
    fn new() -> Self {
        RedbBackend {
            dir: OnceLock::new(),
            next: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Backend for RedbBackend {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            shared: false,
        }
    }

    async fn create(&self) -> Result<String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .dir
            .get_or_init(|| tempfile::tempdir().expect("temporary directory"));
        let path = dir.path().join(format!("outbox-{n}.redb"));
        // Closing releases the file, so `open` (here or in a child) can take it.
        RedbStore::create(&path, RedbConfig::default())
            .await?
            .close()
            .await;
        Ok(path.display().to_string())
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            RedbStore::open(location, RedbConfig::default()).await?,
        ))
    }
}

outbox_testkit::conformance!(RedbBackend::new());
