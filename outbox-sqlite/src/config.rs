//! How a store is opened: durability, limits and waits, as data with documented defaults.

use std::time::Duration;

use outbox_core::{Cap, DEFAULT_MAX_PAYLOAD};

/// What a committed write survives. Every level runs SQLite in WAL mode; they differ in when
/// SQLite calls `fsync` (the `synchronous` pragma).
///
/// A process crash (SIGKILL, panic, OOM kill) never loses a committed write at any level: the
/// operating system still holds the written pages. The levels differ only when the machine
/// itself stops (power cut, kernel panic, a VM killed from outside).
///
/// ```
/// use outbox_sqlite::Durability;
/// assert_eq!(Durability::default(), Durability::Full);
/// assert_eq!(Durability::Normal.synchronous(), "NORMAL");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// `synchronous = FULL`: the WAL is synced at every commit, so every write whose call has
    /// returned survives a power cut. The default: an outbox exists to not lose writes. On
    /// Apple platforms also `fullfsync` (see [`Durability::pragmas`]), where `fsync` alone
    /// leaves the commit in the drive's cache.
    /// Commits that only take or move leases (a claim without outcomes, a renewal) do not wait
    /// for the sync: a power cut may undo one, which means a re-delivery, never a lost record.
    #[default]
    Full,
    /// `synchronous = NORMAL`: the WAL is synced only at checkpoints. After a power cut the
    /// file is consistent, but the writes of the last moments before it (those committed since
    /// the last checkpoint) may be missing. Several times faster per commit.
    Normal,
    /// `synchronous = OFF`: SQLite never syncs. A power cut may lose recent writes and may
    /// leave the file corrupted. For tests and caches only.
    Off,
}

impl Durability {
    /// The value of SQLite's `synchronous` pragma at this level.
    pub const fn synchronous(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
            Durability::Off => "OFF",
        }
    }

    /// Every per-connection pragma this level sets on this platform, as `(name, value)`, in
    /// order: `synchronous`, and at [`Durability::Full`] on Apple platforms also `fullfsync`
    /// and `checkpoint_fullfsync`. There `fsync` hands the data to the drive without flushing
    /// the drive's cache, so a power cut can still lose a commit it acknowledged; `F_FULLFSYNC`
    /// flushes it, for commits and for checkpoints.
    ///
    /// ```
    /// use outbox_sqlite::Durability;
    /// assert_eq!(Durability::Normal.pragmas(), [("synchronous", "NORMAL")]);
    /// let full = Durability::Full.pragmas();
    /// assert_eq!(full[0], ("synchronous", "FULL"));
    /// assert_eq!(full.contains(&("fullfsync", "ON")), cfg!(target_vendor = "apple"));
    /// ```
    pub const fn pragmas(self) -> &'static [(&'static str, &'static str)] {
        self.pragmas_on(cfg!(target_vendor = "apple"))
    }

    /// [`Durability::pragmas`] on an Apple platform (`apple`) or any other.
    const fn pragmas_on(self, apple: bool) -> &'static [(&'static str, &'static str)] {
        match (self, apple) {
            (Durability::Full, true) => &[
                ("synchronous", "FULL"),
                ("fullfsync", "ON"),
                ("checkpoint_fullfsync", "ON"),
            ],
            (Durability::Full, false) => &[("synchronous", "FULL")],
            (Durability::Normal, _) => &[("synchronous", "NORMAL")],
            (Durability::Off, _) => &[("synchronous", "OFF")],
        }
    }

    /// The number SQLite reports when `PRAGMA synchronous` is read back.
    pub const fn synchronous_code(self) -> i64 {
        match self {
            Durability::Off => 0,
            Durability::Normal => 1,
            Durability::Full => 2,
        }
    }
}

/// Settings for [`SqliteStore::create`](crate::SqliteStore::create) and
/// [`SqliteStore::open`](crate::SqliteStore::open).
///
/// ## Defaults
/// - `durability`: [`Durability::Full`], every acknowledged write survives a power cut.
/// - `max_payload`: [`DEFAULT_MAX_PAYLOAD`] (1 MiB), the same limit as every backend.
/// - `busy_timeout`: 5 s, how long a write waits for another handle or process holding the
///   write lock before it fails with a temporary [`Error::Unavailable`](outbox_core::Error).
/// - `read_only`: false. When true the file is opened with SQLite's read-only flag: reads work,
///   every write fails with [`Error::ReadOnly`](outbox_core::Error) and the file is not touched.
/// - `size_limit`: none. When set, the file may not grow past this many bytes (SQLite's
///   `max_page_count`) by an enqueue: one that would fails with
///   [`Error::StorageFull`](outbox_core::Error) and nothing of it is kept. Writes that add no
///   record (claims, outcomes, discards, prunes) may go past it by the pages of one largest
///   payload (`max_payload`) and 16 more, so a full file can still be drained: SQLite gives a
///   rewritten row its new overflow pages before it frees the old ones.
/// - `check_on_open`: true, `PRAGMA quick_check` at open, so a damaged file is reported as
///   [`Error::Corrupted`](outbox_core::Error) before anything is written to it. It reads the
///   whole file once: turn it off for very large files that are opened often.
/// - `max_group_commit`: 1024, the most writes that share one transaction.
/// - `cap`: [`Cap::none()`], no limit on the records or payload bytes held (see
///   [`SqliteConfig::with_cap`]).
///
/// ```
/// use std::time::Duration;
/// use outbox_sqlite::{Durability, SqliteConfig};
///
/// let config = SqliteConfig::default()
///     .durability(Durability::Normal)
///     .busy_timeout(Duration::from_secs(1));
/// assert_eq!(config.max_payload, outbox_core::DEFAULT_MAX_PAYLOAD);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteConfig {
    /// What a committed write survives.
    pub durability: Durability,
    /// The largest payload `enqueue` accepts, in bytes.
    pub max_payload: usize,
    /// How long a write waits for the write lock held by another connection.
    pub busy_timeout: Duration,
    /// Open with SQLite's read-only flag.
    pub read_only: bool,
    /// The most bytes the file may grow to.
    pub size_limit: Option<u64>,
    /// Run `PRAGMA quick_check` when opening.
    pub check_on_open: bool,
    /// The most writes committed together in one transaction.
    pub max_group_commit: usize,
    /// The most records and payload bytes the store holds (see [`SqliteConfig::with_cap`]).
    pub cap: Cap,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        SqliteConfig {
            durability: Durability::Full,
            max_payload: DEFAULT_MAX_PAYLOAD,
            busy_timeout: Duration::from_secs(5),
            read_only: false,
            size_limit: None,
            check_on_open: true,
            max_group_commit: 1024,
            cap: Cap::none(),
        }
    }
}

impl SqliteConfig {
    /// Sets the durability level.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the largest payload `enqueue` accepts.
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Sets how long a write waits for another connection's write lock.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Opens the file read-only.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Caps the file size in bytes.
    pub fn size_limit(mut self, bytes: Option<u64>) -> Self {
        self.size_limit = bytes;
        self
    }

    /// Turns the integrity check at open on or off.
    pub fn check_on_open(mut self, check: bool) -> Self {
        self.check_on_open = check;
        self
    }

    /// Sets the most writes that share one transaction (at least 1).
    pub fn max_group_commit(mut self, writes: usize) -> Self {
        self.max_group_commit = writes;
        self
    }

    /// Holds the store to a size cap ([`Cap`]): at most so many records (every one the file
    /// holds, rejected ones included, until pruned) and so many payload bytes. An enqueue that
    /// would pass it is refused with [`Error::QueueFull`](outbox_core::Error::QueueFull),
    /// naming the limit, the usage and what it would have added; none of its records is
    /// written and nothing already queued is touched. A write that replaces a waiting one
    /// ([`NewRecord::replacing`](outbox_core::NewRecord::replacing)) counts only what it adds.
    ///
    /// The check runs inside the enqueue's own write transaction on every path, so it is exact
    /// with several stores or processes on one file; in a caller's transaction
    /// ([`SqliteStore::enqueue_in`](crate::SqliteStore::enqueue_in) and the sqlx and diesel
    /// drivers) the refused enqueue leaves that transaction usable, and the caller's own
    /// writes in it can still commit. Every handle writing to a file should be opened with the
    /// same cap. Deliveries, discards and prunes make room; `stats()` shows the usage
    /// ([`Stats::usage`](outbox_core::Stats::usage)). Without a cap the store counts nothing
    /// extra per enqueue.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{Cap, CapLimit, Error, NewRecord, Store};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let config = SqliteConfig::default().with_cap(Cap::none().with_max_records(2));
    /// let store = SqliteStore::create(dir.path().join("outbox.db"), config).await?;
    /// let two = vec![NewRecord::new(b"a".to_vec()), NewRecord::new(b"b".to_vec())];
    /// store.enqueue(two, 1_000).await?;
    ///
    /// let refused = store.enqueue(vec![NewRecord::new(b"c".to_vec())], 1_000).await;
    /// assert!(matches!(
    ///     refused,
    ///     Err(Error::QueueFull { limit: CapLimit::Records, max: 2, used: 2, adding: 1 })
    /// ));
    /// let stats = store.stats().await?;
    /// assert_eq!((stats.pending, stats.payload_bytes), (2, 2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_cap(mut self, cap: Cap) -> Self {
        self.cap = cap;
        self
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::Durability;

    /// Sets `pragmas` on a fresh connection and reads each back as a number.
    fn applied(pragmas: &[(&str, &str)]) -> Vec<(String, i64)> {
        let conn = Connection::open_in_memory().unwrap();
        pragmas
            .iter()
            .map(|(name, value)| {
                conn.pragma_update(None, name, value).unwrap();
                let read: i64 = conn.pragma_query_value(None, name, |r| r.get(0)).unwrap();
                ((*name).to_owned(), read)
            })
            .collect()
    }

    #[test]
    fn full_durability_on_apple_also_flushes_the_drive_cache() {
        let apple = Durability::Full.pragmas_on(true);
        // SQLite keeps the flags on every platform (it acts on them only on Apple's), so
        // reading them back here proves the names are ones it knows: an unknown pragma is
        // silently ignored and reads back as nothing.
        assert_eq!(
            applied(apple),
            [
                ("synchronous".to_owned(), 2),
                ("fullfsync".to_owned(), 1),
                ("checkpoint_fullfsync".to_owned(), 1),
            ]
        );
        assert_eq!(
            Durability::Full.pragmas_on(false),
            [("synchronous", "FULL")]
        );
        for level in [Durability::Normal, Durability::Off] {
            assert_eq!(level.pragmas_on(true), level.pragmas_on(false));
            assert!(level
                .pragmas_on(true)
                .iter()
                .all(|(name, _)| *name == "synchronous"));
            assert_eq!(
                applied(level.pragmas_on(true))[0].1,
                level.synchronous_code()
            );
        }
        assert_eq!(
            Durability::Full.pragmas(),
            Durability::Full.pragmas_on(cfg!(target_vendor = "apple"))
        );
    }
}
