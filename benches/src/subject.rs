//! The stores under test, each opened fresh at its default durability.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use outbox_core::{Result, Store};
use outbox_memory::MemoryStore;
use outbox_redb::{RedbConfig, RedbStore};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use tempfile::TempDir;

use crate::error::engine;

/// A store the benchmarks run against.
///
/// ```
/// use outbox_benches::subject::StoreKind;
/// assert_eq!(StoreKind::Sqlite.name(), "sqlite");
/// assert_eq!(StoreKind::parse("redb"), Some(StoreKind::Redb));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// [`MemoryStore`]: the reference model; nothing is persisted.
    Memory,
    /// [`SqliteStore`] with [`SqliteConfig::default`].
    Sqlite,
    /// [`RedbStore`] with [`RedbConfig::default`].
    Redb,
    // Postgres: another engineer adds `outbox-postgres` here (and its bare `tokio-postgres`
    // row in `bare`) once it lands; it is not benchmarked yet.
}

impl StoreKind {
    /// Every store, in the order the report lists them.
    pub const ALL: [StoreKind; 3] = [StoreKind::Memory, StoreKind::Sqlite, StoreKind::Redb];

    /// The row name in criterion and in `BENCHMARKS.md`.
    pub const fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Redb => "redb",
        }
    }

    /// The store named `name`, if there is one.
    pub fn parse(name: &str) -> Option<StoreKind> {
        StoreKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What a returned write survives at the default settings, as the report states it.
    pub const fn durability(self) -> &'static str {
        match self {
            StoreKind::Memory => "none (process memory)",
            StoreKind::Sqlite => "WAL, synchronous=FULL (fsync per commit)",
            StoreKind::Redb => {
                "Durability::Immediate, one sync per commit (redb's checksummed commit)"
            }
        }
    }

    /// Whether the store lives in a file (and so has a bare engine to compare with).
    pub const fn persistent(self) -> bool {
        !matches!(self, StoreKind::Memory)
    }

    /// A fresh, empty store in a temporary directory, at its default durability.
    pub async fn open(self) -> Result<Subject> {
        let dir = tempfile::tempdir().map_err(engine("creating a temporary directory"))?;
        let store = self.create_in(dir.path()).await?;
        Ok(Subject {
            kind: self,
            store,
            dir,
        })
    }

    /// A fresh store in the directory `dir` (the peak-memory tool fills it in one process and
    /// reopens it in another).
    pub async fn create_in(self, dir: &Path) -> Result<Arc<dyn Store>> {
        Ok(match self {
            StoreKind::Memory => Arc::new(MemoryStore::new()),
            StoreKind::Sqlite => {
                Arc::new(SqliteStore::create(dir.join(self.file()), SqliteConfig::default()).await?)
            }
            StoreKind::Redb => {
                Arc::new(RedbStore::create(dir.join(self.file()), RedbConfig::default()).await?)
            }
        })
    }

    /// Reopens the store file in `dir` made by [`StoreKind::create_in`]; a memory store has
    /// nothing to reopen and comes back empty.
    pub async fn reopen_in(self, dir: &Path) -> Result<Arc<dyn Store>> {
        Ok(match self {
            StoreKind::Memory => Arc::new(MemoryStore::new()),
            // The integrity check reads the whole file, which would count against the
            // runner's memory and time; the file was written a moment ago by the same tool.
            StoreKind::Sqlite => Arc::new(
                SqliteStore::open(
                    dir.join(self.file()),
                    SqliteConfig::default().check_on_open(false),
                )
                .await?,
            ),
            StoreKind::Redb => {
                Arc::new(RedbStore::open(dir.join(self.file()), RedbConfig::default()).await?)
            }
        })
    }

    fn file(self) -> &'static str {
        match self {
            StoreKind::Memory => "",
            StoreKind::Sqlite => "outbox.db",
            StoreKind::Redb => "outbox.redb",
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An open store and the temporary directory that holds its file (removed on drop).
#[derive(Debug)]
pub struct Subject {
    /// Which store this is.
    pub kind: StoreKind,
    /// The store, as the runner sees it.
    pub store: Arc<dyn Store>,
    dir: TempDir,
}

impl Subject {
    /// The directory the store's file is in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
