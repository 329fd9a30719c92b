//! The store a run opens: fresh and empty, at the level the command line chose, in a
//! directory of its own under `--dir` (or a schema of its own on the server), with a handle
//! on its engine for what the program reads besides the [`Store`]; closed after the run.

use std::sync::Arc;

use outbox_core::{Error, Result, Store};
use outbox_memory::MemoryStore;
use outbox_postgres::PgStore;
use outbox_redb::RedbStore;
use outbox_sqlite::{SqliteConfig, SqliteStore};
use tempfile::TempDir;

use super::{failed, Bench};
use crate::error::engine;
use crate::measure::Level;
use crate::pg::PgSchema;
use crate::subject::StoreKind;

/// A store opened for one measurement, with what the program reads besides the [`Store`].
pub(super) struct Opened {
    pub(super) store: Arc<dyn Store>,
    pub(super) engine: Engine,
    // Removed after the store is closed (fields drop in order; `close` keeps that order too).
    _dir: Option<TempDir>,
}

/// The store's engine, as the program reads it directly.
pub(super) enum Engine {
    Memory,
    Sqlite(Arc<SqliteStore>),
    Redb(Arc<RedbStore>),
    Postgres(PgSchema),
}

impl Opened {
    /// The write transactions the store has committed, where it counts them.
    pub(super) fn commits(&self) -> Option<u64> {
        match &self.engine {
            Engine::Sqlite(store) => Some(store.write_transactions()),
            Engine::Redb(store) => Some(store.write_transactions()),
            Engine::Memory | Engine::Postgres(_) => None,
        }
    }

    /// The write transactions committed since [`Opened::commits`] said `before`.
    pub(super) fn commits_since(&self, before: Option<u64>) -> Option<u64> {
        self.commits()
            .zip(before)
            .map(|(after, before)| after - before)
    }

    /// One more store on the same queue, as a runner in another process opens it: a SQLite
    /// handle on the same file, a PostgreSQL store with a pool of its own.
    pub(super) async fn another(&self) -> Result<Arc<dyn Store>> {
        Ok(match &self.engine {
            Engine::Sqlite(store) => {
                Arc::new(SqliteStore::open(store.path(), store.config().clone()).await?)
            }
            Engine::Postgres(schema) => Arc::new(PgStore::connect(schema.config()).await?),
            Engine::Memory | Engine::Redb(_) => {
                return Err(failed("this store has one handle on its queue".into()))
            }
        })
    }

    /// Closes the store and waits until it is closed, then removes its directory; a
    /// PostgreSQL schema is dropped.
    async fn close(self) -> Result<()> {
        let Opened {
            store,
            engine,
            _dir: dir,
        } = self;
        drop(store);
        let closed = match engine {
            Engine::Sqlite(store) => {
                if let Ok(store) = Arc::try_unwrap(store) {
                    store.close().await;
                }
                Ok(())
            }
            Engine::Redb(store) => {
                if let Ok(store) = Arc::try_unwrap(store) {
                    store.close().await;
                }
                Ok(())
            }
            Engine::Postgres(schema) => schema.drop().await,
            Engine::Memory => Ok(()),
        };
        drop(dir);
        closed
    }
}

impl Bench<'_> {
    /// Opens a store, runs `work` on it and closes it, whatever `work` returned.
    pub(super) async fn with_store<T>(
        &self,
        work: impl AsyncFnOnce(&Opened) -> Result<T>,
    ) -> Result<T> {
        let opened = self.open().await?;
        let result = work(&opened).await;
        let closed = opened.close().await;
        let value = result?;
        closed?;
        Ok(value)
    }

    /// What the report says when the store does not count its commits ([`Opened::commits`]).
    pub(super) fn uncounted(&self) -> String {
        match self.kind() {
            StoreKind::Memory => "the memory store commits nothing".into(),
            StoreKind::Postgres => "PostgreSQL commits on the server: see xact_commit in \
                 pg_stat_database"
                .into(),
            StoreKind::Sqlite | StoreKind::Redb => String::new(),
        }
    }

    /// A fresh, empty store at the chosen level.
    async fn open(&self) -> Result<Opened> {
        let (kind, level) = (self.kind(), self.args.level);
        if kind == StoreKind::Postgres {
            let schema = self.server()?.schema();
            let store: Arc<dyn Store> = Arc::new(PgStore::connect(schema.config()).await?);
            return Ok(Opened {
                store,
                engine: Engine::Postgres(schema),
                _dir: None,
            });
        }
        let dir = tempfile::tempdir_in(&self.args.dir)
            .map_err(engine("creating a temporary directory under --dir"))?;
        let path = dir.path().join(kind.file());
        let (store, engine): (Arc<dyn Store>, Engine) = match (kind, level) {
            (StoreKind::Memory, Level::Memory) => (Arc::new(MemoryStore::new()), Engine::Memory),
            (StoreKind::Sqlite, Level::Sqlite(durability)) => {
                let config = SqliteConfig::default().durability(durability);
                let store = Arc::new(SqliteStore::create(path, config).await?);
                (store.clone(), Engine::Sqlite(store))
            }
            (StoreKind::Redb, Level::Redb(level)) => {
                let store = Arc::new(RedbStore::create(path, level.config()).await?);
                (store.clone(), Engine::Redb(store))
            }
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "{kind} has no durability {}",
                    level.name()
                )))
            }
        };
        Ok(Opened {
            store,
            engine,
            _dir: Some(dir),
        })
    }
}
