//! The conformance suite on the SQLite store: every scenario, persistent and shared.

use std::path::Path;
use std::sync::Arc;

use outbox_core::{Cap, Error, RecordId, Result, Store};
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
        unreadable_rows: true,
        size_cap: true,
    };

    async fn create(path: &Path) -> Result<()> {
        SqliteStore::create(path, SqliteConfig::default())
            .await?
            .close()
            .await;
        Ok(())
    }

    /// A `last_error` of bytes that are not UTF-8, as a hand edit or a bit flip leaves it.
    async fn plant_unreadable(path: &Path, id: RecordId) -> Result<String> {
        let conn = rusqlite::Connection::open(path).map_err(Error::backend)?;
        let changed = conn
            .execute(
                "UPDATE records SET last_error = CAST(x'c328ff' AS TEXT) WHERE id = ?1",
                [i64::try_from(id.0).map_err(Error::backend)?],
            )
            .map_err(Error::backend)?;
        assert_eq!(changed, 1, "record {id} to plant on");
        Ok("last_error is not UTF-8".into())
    }

    async fn open(path: &Path) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(
            SqliteStore::open(path, SqliteConfig::default()).await?,
        ))
    }

    async fn open_capped(path: &Path, cap: Cap) -> Result<Arc<dyn Store>> {
        let config = SqliteConfig::default().with_cap(cap);
        Ok(Arc::new(SqliteStore::open(path, config).await?))
    }
}

outbox_testkit::conformance!(Files::<Sqlite>::new());
