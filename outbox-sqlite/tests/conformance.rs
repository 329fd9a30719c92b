//! The conformance suite on the SQLite store: every scenario, persistent and shared.

use std::path::Path;
use std::sync::Arc;

use outbox_core::{Result, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use outbox_testkit::{Capabilities, FileStore, Files};

struct Sqlite;

#[outbox_core::async_trait]
impl FileStore for Sqlite {
    const NAME: &'static str = "sqlite";
    const EXTENSION: &'static str = "db";
    const CAPABILITIES: Capabilities = Capabilities {
        persistent: true,
        shared: true,
    };

    async fn create(path: &Path) -> Result<()> {
        SqliteStore::create(path, SqliteConfig::default())
            .await?
            .close()
            .await;
        Ok(())
    }

    async fn open(path: &Path) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            SqliteStore::open(path, SqliteConfig::default()).await?,
        ))
    }
}

outbox_testkit::conformance!(Files::<Sqlite>::new());
