//! The bare engines: rusqlite and redb doing the durable work of a queue with no outbox
//! around them, at the same durability as the stores' defaults. Each outbox figure in the
//! report is divided by the figure of its engine here, measured in the same run.
//!
//! The bare queue is the least an engine must do for the workload: a row per record with its
//! payload and deadline, an index on `(deadline, id)` for the due query, a lease mark for a
//! claim. No groups, states, counters or idempotency keys.
//!
//! These calls block: the harness runs them on its own thread, never on a tokio worker.

mod pg_queue;
mod redb_queue;
mod sqlite_queue;

use outbox_core::Result;

use crate::subject::StoreKind;

pub use pg_queue::BarePg;
pub use redb_queue::BareRedb;
pub use sqlite_queue::BareSqlite;

/// A bare engine queue.
///
/// ```
/// use outbox_benches::bare::{BareEngine, BareKind};
/// use outbox_benches::FAR;
///
/// let mut bare = BareKind::Sqlite.open()?;
/// bare.insert_each(3, 1_000)?;
/// bare.insert_batch(2, FAR)?;
/// assert_eq!(bare.due(1_000, 32)?, 3);
/// assert_eq!(bare.drain(100, 1_000)?, 3);
/// assert_eq!(bare.due(1_000, 32)?, 0);
/// # Ok::<(), outbox_core::Error>(())
/// ```
pub trait BareEngine: Send {
    /// Inserts `count` records due at `at`, one durable transaction each.
    fn insert_each(&mut self, count: usize, at: u64) -> Result<()>;

    /// Inserts `count` records due at `at` in one durable transaction.
    fn insert_batch(&mut self, count: usize, at: u64) -> Result<()>;

    /// Claims the records due at `now`, `per_tx` at a time (one durable transaction), and
    /// deletes each claimed batch (a second durable transaction), until none is due. Returns
    /// how many records it removed.
    fn drain(&mut self, per_tx: usize, now: u64) -> Result<u64>;

    /// The indexed due query: how many of the first `limit` records by `(deadline, id)` are
    /// due at `now` and not claimed.
    fn due(&self, now: u64, limit: usize) -> Result<usize>;
}

/// Which bare engine in this process: the one [`StoreKind::bare`] names for its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BareKind {
    /// rusqlite, bundled SQLite.
    Sqlite,
    /// redb.
    Redb,
}

impl BareKind {
    /// The engines of the stores that have one, in the order the report lists them.
    ///
    /// ```
    /// use outbox_benches::bare::BareKind;
    /// let names: Vec<String> = BareKind::all().map(BareKind::name).collect();
    /// assert_eq!(names, ["bare-sqlite", "bare-redb"]);
    /// ```
    pub fn all() -> impl Iterator<Item = BareKind> {
        StoreKind::ALL.into_iter().filter_map(StoreKind::bare)
    }

    /// The store this engine is under.
    pub const fn store(self) -> StoreKind {
        match self {
            BareKind::Sqlite => StoreKind::Sqlite,
            BareKind::Redb => StoreKind::Redb,
        }
    }

    /// The row name in criterion and in `BENCHMARKS.md`: `bare-` and its store's name.
    pub fn name(self) -> String {
        format!("bare-{}", self.store())
    }

    /// The durability setting, as the report states it: the same as its store's default.
    pub const fn durability(self) -> &'static str {
        self.store().durability()
    }

    /// A fresh, empty bare queue in a temporary directory.
    pub fn open(self) -> Result<Box<dyn BareEngine>> {
        Ok(match self {
            BareKind::Sqlite => Box::new(BareSqlite::create()?),
            BareKind::Redb => Box::new(BareRedb::create()?),
        })
    }
}
