//! The conformance suite on the redb store: persistent, not shared (redb lets one process open a
//! file for writing), so the scenarios that need several processes on one store are skipped.

use std::path::Path;
use std::sync::Arc;

use outbox_core::{Result, Store};
use outbox_redb::{RedbConfig, RedbStore};
use outbox_testkit::{Capabilities, FileStore, Files};

struct Redb;

#[outbox_core::async_trait]
impl FileStore for Redb {
    const NAME: &'static str = "redb";
    const EXTENSION: &'static str = "redb";
    const CAPABILITIES: Capabilities = Capabilities {
        persistent: true,
        shared: false,
        unreadable_rows: false,
    };

    async fn create(path: &Path) -> Result<()> {
        // Closing releases the file, so `open` (here or in a child) can take it.
        RedbStore::create(path, RedbConfig::default())
            .await?
            .close()
            .await;
        Ok(())
    }

    async fn open(path: &Path) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            RedbStore::open(path, RedbConfig::default()).await?,
        ))
    }
}

outbox_testkit::conformance!(Files::<Redb>::new());
