//! How a [`RedbStore`](crate::RedbStore) commits: durability, payload limit and redb settings.

use outbox_core::DEFAULT_MAX_PAYLOAD;

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
/// - `two_phase_commit`: `true`. redb then syncs the new commit slot before it flips the
///   header's primary bit, so a commit is either wholly there or wholly absent after a power
///   cut even if the disk reorders writes; without it, redb relies on checksums to detect a
///   torn commit. The cost is a second sync per commit, which group commit shares among every
///   enqueue waiting at that moment.
/// - `quick_repair`: `true`. redb saves its allocator state with each commit, so opening the
///   file after a crash is almost instant instead of a walk over the whole file. An outbox is
///   reopened after every crash of its process, so recovery time matters more than the small
///   cost per commit. It also lets a read-only handle open a file whose writer crashed.
/// - `cache_size`: 16 MiB of redb page cache: the working set of an outbox is its due index and
///   the records at the head of the queue, not the whole file (redb's own default is 1 GiB).
/// - `max_batch`: 1024 requests per group commit, which bounds the size of one transaction.
///
/// ```
/// use outbox_redb::{Durability, RedbConfig};
///
/// let config = RedbConfig { max_payload: 64 * 1024, ..RedbConfig::default() };
/// assert_eq!(config.durability, Durability::Immediate);
/// assert!(config.two_phase_commit && config.quick_repair);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedbConfig {
    /// What a returned write promises.
    pub durability: Durability,
    /// The largest payload `enqueue` accepts, in bytes.
    pub max_payload: usize,
    /// redb's two-phase commit (see the defaults above).
    pub two_phase_commit: bool,
    /// redb's quick repair (see the defaults above).
    pub quick_repair: bool,
    /// redb's page cache, in bytes.
    pub cache_size: usize,
    /// The most write requests one group commit takes.
    pub max_batch: usize,
}

impl Default for RedbConfig {
    fn default() -> Self {
        RedbConfig {
            durability: Durability::Immediate,
            max_payload: DEFAULT_MAX_PAYLOAD,
            two_phase_commit: true,
            quick_repair: true,
            cache_size: 16 * 1024 * 1024,
            max_batch: 1024,
        }
    }
}

impl RedbConfig {
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
