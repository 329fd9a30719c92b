//! The conformance suite on the redb store: persistent, not shared (redb lets one process open a
//! file for writing), so the scenarios that need several processes on one store are skipped.

use std::path::Path;
use std::sync::Arc;

use outbox_core::{Cap, Error, RecordId, Result, Store};
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
        unreadable_rows: true,
        size_cap: true,
    };

    async fn create(path: &Path) -> Result<()> {
        // Closing releases the file, so `open` (here or in a child) can take it.
        RedbStore::create(path, RedbConfig::default())
            .await?
            .close()
            .await;
        Ok(())
    }

    /// The record's bytes cut short, as a torn write or an old layout would leave them.
    async fn plant_unreadable(path: &Path, id: RecordId) -> Result<String> {
        const RECORDS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("records");
        use redb::ReadableTable;
        let db = redb::Database::open(path).map_err(Error::backend)?;
        let txn = db.begin_write().map_err(Error::backend)?;
        {
            let mut records = txn.open_table(RECORDS).map_err(Error::backend)?;
            let bytes = records
                .get(id.0)
                .map_err(Error::backend)?
                .map(|b| b.value().to_vec())
                .unwrap_or_else(|| panic!("record {id} to plant on"));
            records
                .insert(id.0, &bytes[..bytes.len() / 2])
                .map_err(Error::backend)?;
        }
        txn.commit().map_err(Error::backend)?;
        Ok("truncated value".into())
    }

    async fn open(path: &Path) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            RedbStore::open(path, RedbConfig::default()).await?,
        ))
    }

    async fn open_capped(path: &Path, cap: Cap) -> Result<Arc<dyn Store>> {
        let config = RedbConfig::default().with_cap(cap);
        Ok(Arc::new(RedbStore::open(path, config).await?))
    }
}

outbox_testkit::conformance!(Files::<Redb>::new());
