//! The stores under test, each opened fresh at its default durability, and what each offers
//! the measurements: a bare engine to compare with, the runner counts of its drain.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use outbox_core::{Error, Result, Store};
use outbox_memory::MemoryStore;
use outbox_redb::{RedbConfig, RedbStore};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use tempfile::TempDir;

use crate::bare::BareKind;
use crate::error::engine;
use crate::pg;

/// A store the benchmarks run against: the one list of stores that the criterion harness,
/// every measuring program and their usage lines take theirs from.
///
/// ```
/// use outbox_benches::bare::BareKind;
/// use outbox_benches::subject::StoreKind;
///
/// assert_eq!(StoreKind::Sqlite.name(), "sqlite");
/// assert_eq!(StoreKind::parse("redb"), Some(StoreKind::Redb));
/// assert_eq!(StoreKind::parse("postgres"), Some(StoreKind::Postgres));
/// assert_eq!(StoreKind::parse("floppy"), None);
/// // PostgreSQL lives on a server, so the criterion groups measure it apart (see `pg`).
/// assert_eq!(StoreKind::local().count(), 3);
/// assert_eq!(StoreKind::Redb.bare(), Some(BareKind::Redb));
/// assert_eq!(StoreKind::Postgres.runners(), &[1, 2, 4]);
/// assert_eq!(StoreKind::names(StoreKind::ALL, "|"), "memory|sqlite|redb|postgres");
/// assert_eq!(StoreKind::one_of(StoreKind::local()), "memory, sqlite or redb");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// [`MemoryStore`]: the reference model; nothing is persisted.
    Memory,
    /// [`SqliteStore`] with [`SqliteConfig::default`].
    Sqlite,
    /// [`RedbStore`] with [`RedbConfig::default`].
    Redb,
    /// [`outbox_postgres::PgStore`] on the server at `OUTBOX_PG_URL` (see [`crate::pg`]), at
    /// the server's `synchronous_commit`.
    Postgres,
}

impl StoreKind {
    /// Every store, in the order the report and the usage lines list them.
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Memory,
        StoreKind::Sqlite,
        StoreKind::Redb,
        StoreKind::Postgres,
    ];

    /// The row name in criterion and in `BENCHMARKS.md`, and the name on a command line.
    pub const fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Redb => "redb",
            StoreKind::Postgres => "postgres",
        }
    }

    /// The store named `name`, if there is one.
    pub fn parse(name: &str) -> Option<StoreKind> {
        StoreKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The stores in this process (in memory or in a file, no server), in list order: the
    /// rows of every criterion group, and the stores [`StoreKind::open`] opens.
    pub fn local() -> impl Iterator<Item = StoreKind> {
        StoreKind::ALL.into_iter().filter(|k| k.is_local())
    }

    /// Whether the store lives in this process rather than on a server.
    pub const fn is_local(self) -> bool {
        !matches!(self, StoreKind::Postgres)
    }

    /// The bare engine in this process that the store is compared with, if it has one: the
    /// memory store is its own engine, and PostgreSQL's bare queue
    /// ([`BarePg`](crate::bare::BarePg)) is on the server.
    pub const fn bare(self) -> Option<BareKind> {
        match self {
            StoreKind::Sqlite => Some(BareKind::Sqlite),
            StoreKind::Redb => Some(BareKind::Redb),
            StoreKind::Memory | StoreKind::Postgres => None,
        }
    }

    /// How many runners the drain measures on this store's queue, each on a store of its own
    /// (a SQLite handle on one file, a PostgreSQL pool on one schema): [`pg::RUNNERS`], or
    /// one where the queue takes one runner only (see [`StoreKind::one_runner_only`]).
    pub const fn runners(self) -> &'static [usize] {
        match self.one_runner_only() {
            Some(_) => &[1],
            None => &pg::RUNNERS,
        }
    }

    /// Why only one runner can drain this store's queue, if that is so.
    pub const fn one_runner_only(self) -> Option<&'static str> {
        match self {
            StoreKind::Redb => Some("a redb file has one writer (redb's exclusive mode)"),
            StoreKind::Memory => Some("the memory store lives in this process only"),
            StoreKind::Sqlite | StoreKind::Postgres => None,
        }
    }

    /// The names of `kinds` joined by `separator`, for a usage line (`memory|sqlite`).
    pub fn names(kinds: impl IntoIterator<Item = StoreKind>, separator: &str) -> String {
        let names: Vec<&str> = kinds.into_iter().map(StoreKind::name).collect();
        names.join(separator)
    }

    /// The names of `kinds` as a choice in a sentence (`memory, sqlite or redb`).
    pub fn one_of(kinds: impl IntoIterator<Item = StoreKind>) -> String {
        let names: Vec<&str> = kinds.into_iter().map(StoreKind::name).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// What a returned write survives at the default settings, as the report states it.
    pub const fn durability(self) -> &'static str {
        match self {
            StoreKind::Memory => "none (process memory)",
            StoreKind::Sqlite => "WAL, synchronous=FULL (fsync per commit)",
            StoreKind::Redb => {
                "Durability::Immediate, one sync per commit (redb's checksummed commit)"
            }
            StoreKind::Postgres => "the server's synchronous_commit",
        }
    }

    /// Whether the store keeps its records outside the process (in a file or on a server).
    pub const fn persistent(self) -> bool {
        !matches!(self, StoreKind::Memory)
    }

    /// A fresh, empty store in a temporary directory, at its default durability. PostgreSQL
    /// has no directory: its stores open on a schema ([`pg::stores`]).
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
            StoreKind::Postgres => return Err(not_in_a_directory()),
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
            StoreKind::Postgres => return Err(not_in_a_directory()),
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

    /// The name of the store's file in its directory (none for memory and PostgreSQL).
    pub(crate) const fn file(self) -> &'static str {
        match self {
            StoreKind::Memory | StoreKind::Postgres => "",
            StoreKind::Sqlite => "outbox.db",
            StoreKind::Redb => "outbox.redb",
        }
    }
}

/// Why a PostgreSQL store cannot be made in a directory.
fn not_in_a_directory() -> Error {
    Error::InvalidConfig("a postgres store lives on a server, not in a directory: see pg".into())
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
