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

/// Which bare engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BareKind {
    /// rusqlite, bundled SQLite.
    Sqlite,
    /// redb.
    Redb,
}

impl BareKind {
    /// Both engines, in the order the report lists them.
    pub const ALL: [BareKind; 2] = [BareKind::Sqlite, BareKind::Redb];

    /// The row name in criterion and in `BENCHMARKS.md`.
    pub const fn name(self) -> &'static str {
        match self {
            BareKind::Sqlite => "bare-sqlite",
            BareKind::Redb => "bare-redb",
        }
    }

    /// The durability setting, as the report states it (the same as the store's default).
    pub const fn durability(self) -> &'static str {
        match self {
            BareKind::Sqlite => "WAL, synchronous=FULL (fsync per commit)",
            BareKind::Redb => {
                "Durability::Immediate, one sync per commit (redb's checksummed commit)"
            }
        }
    }

    /// A fresh, empty bare queue in a temporary directory.
    pub fn open(self) -> Result<Box<dyn BareEngine>> {
        Ok(match self {
            BareKind::Sqlite => Box::new(BareSqlite::create()?),
            BareKind::Redb => Box::new(BareRedb::create()?),
        })
    }
}
