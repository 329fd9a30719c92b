//! [`RedbStore`]: the [`Store`] on one redb file, and how a file is created and opened.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{
    Applied, Claim, Enqueued, Error, ErrorCount, Halt, Lease, ListQuery, Millis, NewRecord, Record,
    RecordId, Result, Round, Stats, Store, Tombstone, Transition, Unreadable,
};
use redb::backends::FileBackend;
use redb::{Database, ReadOnlyDatabase, ReadableDatabase, StorageBackend, WriteTransaction};

use crate::config::RedbConfig;
use crate::error::{from_io, from_join, from_redb};
use crate::pending::PendingEnqueue;
use crate::queue::{ReadTables, Tables};
use crate::schema;
use crate::writer::Writer;

mod open;

use open::{check_header, converge, create_file, empty_file, initialize, not_redb, open_file};

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// An outbox [`Store`] on one redb file.
///
/// redb lets one process at a time open a file for writing, so this store is not shared
/// between processes: a second process gets [`Error::Locked`]. Because of that, every record
/// found in flight when the file is opened belonged to a process that died, and its lease is
/// made to expire at once so the runner's start-up recovery counts the interruption.
///
/// Reads run on tokio's blocking pool; writes go to one writer thread that commits every
/// request waiting at that moment in one transaction (group commit, see [`RedbConfig`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_core::{NewRecord, Store};
/// use outbox_redb::{RedbConfig, RedbStore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("outbox.redb");
/// let store = RedbStore::create(&path, RedbConfig::default()).await?;
/// let ids = store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
/// drop(store);
///
/// let store = RedbStore::open(&path, RedbConfig::default()).await?;
/// assert_eq!(store.get(ids[0]).await?.unwrap().payload, b"hello");
/// # Ok(())
/// # }
/// ```
pub struct RedbStore {
    db: Db,
    writer: Option<Writer>,
    config: RedbConfig,
    path: Option<PathBuf>,
}

#[derive(Clone)]
enum Db {
    Write(Arc<Database>),
    Read(Arc<ReadOnlyDatabase>),
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .field("read_only", &self.writer.is_none())
            .field("config", &self.config)
            .finish()
    }
}

impl RedbStore {
    /// Creates a new outbox file at `path`.
    ///
    /// Fails with [`Error::AlreadyExists`] if anything is at `path` (use
    /// [`RedbStore::open`], or [`RedbStore::open_or_create`]), leaving it untouched. The file is
    /// built under a temporary name and linked into place complete, so no one opening `path`
    /// meanwhile finds a half-made file, and a crash during `create` leaves nothing at `path`.
    pub async fn create(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbStore> {
        let path = path.as_ref().to_path_buf();
        blocking(move || create_file(path, config)).await
    }

    /// Opens the existing outbox file at `path`, migrating it from an earlier schema version.
    ///
    /// The file is inspected read-only before anything is written, so each refusal leaves its
    /// bytes unchanged: [`Error::NotFound`] (nothing there; use [`RedbStore::create`]),
    /// [`Error::NotAnOutbox`] (an empty file, a file that is not redb, a redb database without
    /// an outbox), [`Error::SchemaTooNew`], [`Error::Locked`] (another process has it open),
    /// [`Error::ReadOnly`] (the file or medium refuses writes), [`Error::Corrupted`].
    pub async fn open(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbStore> {
        let path = path.as_ref().to_path_buf();
        blocking(move || open_file(path, config)).await
    }

    /// Opens the outbox file at `path`, or creates it if nothing is there: the call for an app
    /// that starts on the same file every time.
    ///
    /// An existing file is opened exactly as by [`RedbStore::open`]: inspected before anything
    /// is written, converged from an earlier schema version, and refused with the same typed
    /// error (its bytes unchanged) if it is not a usable outbox. An empty file, a file that is
    /// not redb or a redb database without an outbox is never turned into an outbox: only a
    /// path with nothing at it is created, as by [`RedbStore::create`].
    ///
    /// Callers racing on a missing path never see a half-made file: the new outbox is built
    /// under a temporary name and linked into place complete, with redb's lock already held.
    /// One caller creates it; another finds it there ([`Error::AlreadyExists`] from its
    /// create) and opens it. Since redb lets one handle at a time have the file, that open
    /// fails with [`Error::Locked`] for as long as the creator keeps its store, exactly as
    /// [`RedbStore::open`] would, and succeeds once the creator has closed it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{NewRecord, Store};
    /// use outbox_redb::{RedbConfig, RedbStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("outbox.redb");
    ///
    /// // The first start creates the file...
    /// let store = RedbStore::open_or_create(&path, RedbConfig::default()).await?;
    /// let ids = store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
    /// store.close().await;
    ///
    /// // ...and every later one opens it, with what it holds.
    /// let store = RedbStore::open_or_create(&path, RedbConfig::default()).await?;
    /// assert_eq!(store.get(ids[0]).await?.unwrap().payload, b"hello");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_or_create(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbStore> {
        let path = path.as_ref().to_path_buf();
        blocking(move || {
            outbox_core::file::open_or_create(
                || open_file(path.clone(), config.clone()),
                || create_file(path.clone(), config.clone()),
            )
        })
        .await
    }

    /// Opens the existing outbox file at `path` for reading only: every read works, and every
    /// write fails with [`Error::ReadOnly`]. The file is never written. While this handle is
    /// open, no process can open the file for writing (and it cannot be opened while a writer
    /// has it).
    pub async fn open_read_only(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbStore> {
        let path = path.as_ref().to_path_buf();
        blocking(move || {
            check_header(&path)?;
            match config.builder().open_read_only(&path) {
                Ok(db) => {
                    let version = schema::check(schema::inspect(&db)?)?;
                    if version < schema::SCHEMA_VERSION {
                        return Err(Error::Backend {
                            detail: format!(
                                "the file is at schema version {version} and needs a \
                                 migration, which a read-only handle cannot make; open it \
                                 for writing once"
                            ),
                            source: None,
                        });
                    }
                    Ok(RedbStore {
                        db: Db::Read(Arc::new(db)),
                        writer: None,
                        config,
                        path: Some(path),
                    })
                }
                Err(redb::DatabaseError::RepairAborted) => Err(Error::Backend {
                    detail: "the file was not closed cleanly and needs a repair, which a \
                             read-only handle cannot make; open it for writing once"
                        .into(),
                    source: None,
                }),
                Err(err) => Err(from_redb(err)),
            }
        })
        .await
    }

    /// Creates a new outbox on a storage backend of the caller's (an in-memory buffer, a
    /// fault-injecting wrapper). Fails with [`Error::AlreadyExists`] if the backend is not
    /// empty.
    pub async fn create_with_backend(
        backend: impl StorageBackend,
        config: RedbConfig,
    ) -> Result<RedbStore> {
        blocking(move || {
            if backend.len().map_err(from_io)? != 0 {
                return Err(Error::AlreadyExists {
                    path: format!("{backend:?}"),
                });
            }
            let db = config
                .builder()
                .create_with_backend(backend)
                .map_err(from_redb)?;
            initialize(db, config, None)
        })
        .await
    }

    /// Opens an existing outbox on a storage backend of the caller's. Unlike
    /// [`RedbStore::open`], a backend holding a redb database without an outbox may be written
    /// (redb's own open) before [`Error::NotAnOutbox`] is returned.
    pub async fn open_with_backend(
        backend: impl StorageBackend,
        config: RedbConfig,
    ) -> Result<RedbStore> {
        blocking(move || {
            let len = backend.len().map_err(from_io)?;
            let mut head = [0; REDB_MAGIC.len()];
            if len == 0 {
                return Err(empty_file());
            }
            if len < head.len() as u64 {
                return Err(not_redb());
            }
            backend.read(0, &mut head).map_err(from_io)?;
            if head != REDB_MAGIC {
                return Err(not_redb());
            }
            let db = config
                .builder()
                .create_with_backend(backend)
                .map_err(from_redb)?;
            let version = schema::check(schema::inspect(&db)?)?;
            converge(db, config, version, None)
        })
        .await
    }

    /// Enqueues records inside the caller's own redb write transaction, so they commit (or
    /// abort) together with the caller's writes: the path to use with a running
    /// [`Outbox`](outbox_core::Outbox). Begin the transaction on [`RedbStore::database`] and
    /// commit it with the returned [`PendingEnqueue`]'s
    /// [`commit(txn, &outbox)`](PendingEnqueue::commit): once it is committed, the records'
    /// `Enqueued` events (`Superseded` for a replacement) go out and the runner wakes and
    /// delivers them, with no call to `Outbox::notify`. A transaction aborted, dropped or
    /// failing to commit announces nothing.
    ///
    /// Everything [`RedbStore::enqueue_in`] says holds here: checks, coalescing in your
    /// transaction, durability, and that this is blocking work.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
    /// use outbox_redb::{RedbConfig, RedbStore};
    /// use redb::TableDefinition;
    ///
    /// const NOTES: TableDefinition<u64, &str> = TableDefinition::new("notes");
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Arc::new(RedbStore::create(dir.path().join("app.redb"), RedbConfig::default()).await?);
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(store.clone(), sink).start().await?;
    ///
    /// let txn = store.database().expect("opened for writing").begin_write()?;
    /// txn.open_table(NOTES)?.insert(1, "renamed")?;
    /// let record = NewRecord::new(b"rename #1".to_vec()).in_group("note-1");
    /// let pending = store.enqueue_pending(&txn, vec![record], outbox.now())?;
    /// // Commits, then sends `Enqueued` and wakes the runner: no `notify()`.
    /// pending.commit(txn, &outbox)?;
    ///
    /// outbox.flush(Duration::from_secs(10)).await?;
    /// assert_eq!(outbox.stats().await?.delivered, 1);
    /// outbox.shutdown(Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue_pending(
        &self,
        txn: &WriteTransaction,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<PendingEnqueue> {
        let groups = records.iter().map(|r| r.group.clone()).collect();
        let enqueued = self.enqueue_in(txn, records, now)?;
        Ok(PendingEnqueue::new(enqueued, groups))
    }

    /// Enqueues records inside the caller's own redb write transaction, so they commit (or
    /// abort) together with the caller's writes. Begin the transaction on
    /// [`RedbStore::database`]; the records become durable when the caller commits, with the
    /// durability the caller set on it. Nothing tells the runner, which cannot see a commit it
    /// did not make: with a running [`Outbox`](outbox_core::Outbox), use
    /// [`RedbStore::enqueue_pending`] instead, whose commit announces the records and wakes the
    /// runner. After this call, wake it yourself with `Outbox::notify()` (no `Enqueued` event
    /// is sent) or announce the records with `Outbox::committed`.
    ///
    /// Records with a coalescing key ([`NewRecord::replacing`]) coalesce as in
    /// [`Store::enqueue`], inside your transaction: a replaced record is rewritten (and the
    /// `superseded` counter raised) only if your transaction commits. The returned
    /// [`Enqueued`] says which records replaced an earlier write.
    ///
    /// Refuses a payload over the configured maximum with [`Error::PayloadTooLarge`] and a
    /// bad group key, coalescing key or expected version with [`Error::InvalidGroup`], having
    /// written nothing of the batch. Under a size cap ([`RedbConfig::cap`]), a batch that
    /// would pass it is refused with [`Error::QueueFull`]: nothing of it is written and your
    /// transaction stays usable, so your own writes in it can still commit.
    ///
    /// Like the rest of your transaction, this is blocking redb work: call it where you run
    /// that transaction (a blocking thread or `spawn_blocking`), not on an async worker.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use outbox_core::{NewRecord, Store};
    /// use outbox_redb::{RedbConfig, RedbStore};
    /// use redb::TableDefinition;
    ///
    /// const NOTES: TableDefinition<u64, &str> = TableDefinition::new("notes");
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = RedbStore::create(dir.path().join("app.redb"), RedbConfig::default()).await?;
    /// let db = store.database().expect("opened for writing");
    /// let txn = db.begin_write()?;
    /// txn.open_table(NOTES)?.insert(1, "renamed")?;
    /// let ids = store.enqueue_in(&txn, vec![NewRecord::new(b"rename #1".to_vec())], 1_000)?;
    /// txn.commit()?;
    ///
    /// assert!(store.get(ids[0]).await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue_in(
        &self,
        txn: &WriteTransaction,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        if self.writer.is_none() {
            return Err(Error::ReadOnly { source: None });
        }
        NewRecord::validate_all(&records, self.config.max_payload)?;
        // The counters are written whatever the answer: an enqueue that failed after taking
        // its ids has left its records in the caller's transaction, which may still commit.
        Tables::with(txn, |t| t.enqueue(&records, now, self.config.cap))
            .map(|(enqueued, _)| enqueued)
    }

    /// The redb database, for the caller's own transactions ([`RedbStore::enqueue_in`]);
    /// `None` for a read-only store.
    ///
    /// redb runs one write transaction at a time: while yours is open, the store's own writes
    /// (enqueue, claim, apply) wait for it. Commit or abort it before awaiting one of them, or
    /// the two wait for each other.
    pub fn database(&self) -> Option<&Database> {
        match &self.db {
            Db::Write(db) => Some(db),
            Db::Read(_) => None,
        }
    }

    /// Closes the file, waiting off the async executor for the writer thread to finish what is
    /// queued. Dropping the store does the same, but blocks the dropping thread while it waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_redb::{RedbConfig, RedbStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("outbox.redb");
    /// RedbStore::create(&path, RedbConfig::default()).await?.close().await;
    /// let again = RedbStore::open(&path, RedbConfig::default()).await?; // the file is free
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(self) {
        let RedbStore { db, writer, .. } = self;
        let closing = tokio::task::spawn_blocking(move || {
            drop(writer);
            drop(db);
        });
        // A panic while closing has nothing left to report to: the file is released either way.
        let _ = closing.await;
    }

    /// How many write transactions this store has committed since it was opened (none when
    /// opened read-only). With group commit, concurrent writes share transactions, so under
    /// load this grows more slowly than the number of writes: the ratio is the average group
    /// size. A batch that changed nothing (a claim that found nothing) is not committed and
    /// not counted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{NewRecord, Store};
    /// use outbox_redb::{RedbConfig, RedbStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = RedbStore::create(dir.path().join("outbox.redb"), RedbConfig::default()).await?;
    /// let before = store.write_transactions();
    /// store.enqueue(vec![NewRecord::new(b"{}".to_vec())], 1_000).await?;
    /// assert_eq!(store.write_transactions(), before + 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_transactions(&self) -> u64 {
        self.writer.as_ref().map_or(0, Writer::commits)
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &RedbConfig {
        &self.config
    }

    /// Runs `work` in the writer's next group commit.
    async fn write<T, F>(&self, work: F) -> Result<T>
    where
        F: FnMut(&mut Tables<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        match &self.writer {
            Some(writer) => writer.write(work).await,
            None => Err(Error::ReadOnly { source: None }),
        }
    }

    /// Whether a claim would find anything, read from a snapshot: an idle runner's claims
    /// then neither queue behind the writer's commits nor open a write transaction. The
    /// writer looks again inside its transaction, which alone decides what is claimed.
    async fn worth_claiming(&self, claim: &Claim) -> Result<bool> {
        if self.writer.is_none() {
            return Err(Error::ReadOnly { source: None });
        }
        let now = claim.now;
        Ok(claim.limit > 0 && self.read(move |t| t.any_due(now)).await?)
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTables) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        blocking(move || {
            let txn = match &db {
                Db::Write(db) => db.begin_read(),
                Db::Read(db) => db.begin_read(),
            }
            .map_err(from_redb)?;
            f(&ReadTables::open(&txn)?)
        })
        .await
    }
}

#[async_trait]
impl Store for RedbStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        NewRecord::validate_all(&records, self.config.max_payload)?;
        if records.is_empty() {
            return Ok(Enqueued::default());
        }
        let cap = self.config.cap;
        self.write(move |t| t.enqueue(&records, now, cap)).await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        if !self.worth_claiming(&claim).await? {
            return Ok(Vec::new());
        }
        self.write(move |t| t.claim(claim)).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let ids = ids.to_vec();
        self.write(move |t| t.renew(&ids, lease).map(drop)).await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.write(move |t| t.apply(&transitions)).await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        let claim = match claim {
            Some(claim) if outcomes.is_empty() && !self.worth_claiming(&claim).await? => None,
            claim => claim,
        };
        if outcomes.is_empty() && claim.is_none() {
            return Ok(Round::default());
        }
        self.write(move |t| {
            let applied = t.apply(&outcomes)?;
            let claimed = match claim {
                Some(claim) => t.claim(claim)?,
                None => Vec::new(),
            };
            Ok(Round { applied, claimed })
        })
        .await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.read(move |t| t.expired(now, limit)).await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.read(move |t| t.stepped_back(now, limit)).await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.read(move |t| t.get(id)).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let query = query.clone();
        self.read(move |t| t.list(&query)).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.read(move |t| t.tombstones(after, limit)).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.read(|t| t.stats()).await
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.read(|t| t.next_due()).await
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        self.read(|t| t.halt()).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.write(move |t| t.set_halt(halt.as_ref())).await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        let seen = seen.clone();
        self.write(move |t| t.clear_halt_if(&seen)).await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.write(move |t| t.prune(older_than)).await
    }

    async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        self.read(move |t| t.unreadable(limit)).await
    }

    async fn discard_unreadable(&self, id: RecordId, now: Millis) -> Result<bool> {
        self.write(move |t| t.discard_unreadable(id, now)).await
    }

    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        self.read(move |t| t.unreadable_row(id)).await
    }

    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        self.read(move |t| t.common_errors(limit)).await
    }
}

/// Runs blocking redb work on tokio's blocking pool, never on an async worker thread.
async fn blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(from_join)?
}
