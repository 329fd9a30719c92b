//! How a [`RedbStore`](crate::RedbStore) commits: durability, payload limit, size cap and redb
//! settings.

use outbox_core::{Cap, DEFAULT_MAX_PAYLOAD};

/// What a returned write promises. Applies to every write the store commits itself (enqueue,
/// claim, apply, round, renew, halt, prune); [`RedbStore::enqueue_in`](crate::RedbStore::enqueue_in)
/// commits with whatever durability the caller set on its own transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The default. A write returns only after redb's commit has synced it to the disk
    /// (`fsync`), so an acknowledged enqueue survives a crash of the process, of the operating
    /// system and a power cut (as far as the disk honours `fsync`).
    #[default]
    Immediate,
    /// Commits are visible at once but are not synced: they reach the disk with the next
    /// immediate commit of this file. A crash of the process or a power cut loses every write
    /// since the last immediate commit. For queues a test or a cache can afford to lose.
    None,
}

impl Durability {
    pub(crate) fn to_redb(self) -> redb::Durability {
        match self {
            Durability::Immediate => redb::Durability::Immediate,
            Durability::None => redb::Durability::None,
        }
    }
}

/// Configuration of a [`RedbStore`](crate::RedbStore).
///
/// ## Defaults
///
/// - `durability`: [`Durability::Immediate`]: an acknowledged write is on the disk.
/// - `max_payload`: [`DEFAULT_MAX_PAYLOAD`] (1 MiB), the limit every backend applies by default.
/// - `two_phase_commit`: `false`, redb's own default commit: one sync per commit, and after a
///   power cut redb tells a torn commit from a whole one by the checksums of the commit slot
///   and the pages it points to, falling back to the previous commit. The power-loss tests
///   check that no acknowledged write is lost this way. Turn it on
///   ([`RedbConfig::with_two_phase_commit`]) to have redb sync the new commit slot before it
///   flips the header's primary bit, so a commit is wholly there or wholly absent without
///   trusting a checksum to spot a torn one (the checksum is not cryptographic: redb documents
///   a theoretical torn commit crafted by someone who controls both the data written and the
///   order the disk flushes it); the cost is a second sync per commit.
/// - `quick_repair`: `false`, redb's default: the open after a crash walks the file to check
///   its checksums and rebuild the allocator state. An outbox file stays small while its
///   records are delivered, so the walk is short. Turn it on
///   ([`RedbConfig::with_quick_repair`]) for a file that holds a large backlog: redb then saves
///   its allocator state with each commit, so that open is almost instant and a read-only
///   handle can open a file whose writer crashed, but redb also commits in two phases, so it
///   costs the second sync per commit as well.
/// - `cache_size`: 16 MiB of redb page cache: the working set of an outbox is its due index and
///   the records at the head of the queue, not the whole file (redb's own default is 1 GiB).
/// - `max_batch`: 1024 requests per group commit, which bounds the size of one transaction.
/// - `cap`: [`Cap::none`], no size cap (see [`RedbConfig::with_cap`]).
///
/// Claims are committed as durably as every other write. A claim carries no acknowledged
/// write, but it is what counts a delivery that killed the process: a claim lost in a crash
/// would leave the record as never attempted, and a record whose delivery crashes the process
/// every time would loop forever instead of being parked after `max_interruptions` restarts.
///
/// ```
/// use outbox_redb::{Durability, RedbConfig};
///
/// let config = RedbConfig { max_payload: 64 * 1024, ..RedbConfig::default() };
/// assert_eq!(config.durability, Durability::Immediate);
/// assert!(!config.two_phase_commit && !config.quick_repair);
/// let careful = RedbConfig::default().with_two_phase_commit(true);
/// assert!(careful.two_phase_commit);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedbConfig {
    /// What a returned write promises.
    pub durability: Durability,
    /// The largest payload `enqueue` accepts, in bytes.
    pub max_payload: usize,
    /// redb's two-phase commit: a second sync per commit (see the defaults above).
    pub two_phase_commit: bool,
    /// redb's quick repair: a short open after a crash, for two syncs per commit (see the
    /// defaults above).
    pub quick_repair: bool,
    /// redb's page cache, in bytes.
    pub cache_size: usize,
    /// The most write requests one group commit takes.
    pub max_batch: usize,
    /// The most records and payload bytes the file holds: an enqueue that would pass it is
    /// refused with [`outbox_core::Error::QueueFull`] (see [`RedbConfig::with_cap`]).
    pub cap: Cap,
}

impl Default for RedbConfig {
    fn default() -> Self {
        RedbConfig {
            durability: Durability::Immediate,
            max_payload: DEFAULT_MAX_PAYLOAD,
            two_phase_commit: false,
            quick_repair: false,
            cache_size: 16 * 1024 * 1024,
            max_batch: 1024,
            cap: Cap::none(),
        }
    }
}

impl RedbConfig {
    /// Sets [`RedbConfig::two_phase_commit`]: `true` pays a second sync per commit so that a
    /// commit's integrity after a power cut does not rest on checksums (see the defaults).
    pub const fn with_two_phase_commit(mut self, on: bool) -> Self {
        self.two_phase_commit = on;
        self
    }

    /// Sets [`RedbConfig::quick_repair`]: `true` makes the open after a crash almost instant
    /// for a second sync per commit (see the defaults).
    pub const fn with_quick_repair(mut self, on: bool) -> Self {
        self.quick_repair = on;
        self
    }

    /// Sets [`RedbConfig::cap`]: the most records (rejected ones included, until pruned) and
    /// payload bytes the file holds. Each enqueue, [`RedbStore::enqueue_in`] and
    /// [`RedbStore::enqueue_pending`] included, is measured in its own write transaction
    /// against what the file holds ([`Cap::admit`]; redb runs one writer at a time, so the
    /// count is exact); one that would pass the cap is refused with
    /// [`Error::QueueFull`](outbox_core::Error::QueueFull), having written nothing and
    /// touched nothing already queued. A write that replaces a waiting record through
    /// coalescing adds no record, only the difference of the payloads. The usage is read
    /// from counters, not from the records, and no cap costs nothing. The cap is not stored
    /// in the file: each open sets its own.
    ///
    /// [`RedbStore::enqueue_in`]: crate::RedbStore::enqueue_in
    /// [`RedbStore::enqueue_pending`]: crate::RedbStore::enqueue_pending
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{Cap, CapLimit, Error, NewRecord, Store};
    /// use outbox_redb::{RedbConfig, RedbStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let config = RedbConfig::default().with_cap(Cap::none().with_max_records(2));
    /// let store = RedbStore::create(dir.path().join("outbox.redb"), config).await?;
    /// let two = vec![NewRecord::new(b"a".to_vec()), NewRecord::new(b"b".to_vec())];
    /// store.enqueue(two, 1_000).await?;
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
    pub const fn with_cap(mut self, cap: Cap) -> Self {
        self.cap = cap;
        self
    }

    pub(crate) fn builder(&self) -> redb::Builder {
        let mut builder = redb::Builder::new();
        builder.set_cache_size(self.cache_size);
        builder
    }

    /// Sets this configuration's commit settings on a transaction the store commits itself.
    pub(crate) fn prepare(&self, txn: &mut redb::WriteTransaction) -> outbox_core::Result<()> {
        txn.set_durability(self.durability.to_redb())
            .map_err(crate::error::from_redb)?;
        txn.set_two_phase_commit(self.two_phase_commit);
        txn.set_quick_repair(self.quick_repair);
        Ok(())
    }
}
