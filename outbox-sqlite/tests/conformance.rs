//! The conformance suite on the SQLite store: every scenario, persistent and shared.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use outbox_core::{Result, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use outbox_testkit::{Backend, Capabilities};

/// Stores in files of one temporary directory, removed when the backend is dropped. The
/// directory is made at the first `create`: the crash scenarios' child processes only `open`
/// their parent's files, and a killed child would leave its own directory behind.
struct SqliteBackend {
    dir: OnceLock<tempfile::TempDir>,
    next: AtomicUsize,
}

impl SqliteBackend {
    fn new() -> Self {
        SqliteBackend {
            dir: OnceLock::new(),
            next: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            shared: true,
        }
    }

    async fn create(&self) -> Result<String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .dir
            .get_or_init(|| tempfile::tempdir().expect("temporary directory"));
        let path = dir.path().join(format!("outbox-{n}.db"));
        SqliteStore::create(&path, SqliteConfig::default())
            .await?
            .close()
            .await;
        Ok(path.display().to_string())
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            SqliteStore::open(location, SqliteConfig::default()).await?,
        ))
    }
}

outbox_testkit::conformance!(SqliteBackend::new());
