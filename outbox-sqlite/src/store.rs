//! [`SqliteStore`]: the [`Store`] on one SQLite file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{
    Applied, Claim, Enqueued, Error, ErrorCount, Halt, Lease, ListQuery, Millis, NewRecord, Record,
    RecordId, Result, Round, Stats, Store, Tombstone, Transition, Unreadable,
};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::apply;
use crate::common_errors;
use crate::config::SqliteConfig;
use crate::error::db;
use crate::ops;
use crate::schema::{self, SCHEMA_VERSION};
use crate::unreadable;
use crate::worker::{wait, Keep, Reader, Writer};

/// An outbox [`Store`] on one SQLite file in WAL mode.
///
/// Writes go to a dedicated writer thread that commits concurrent writes together (group
/// commit) and answers each only after its transaction is durable at the configured
/// [`Durability`](crate::Durability); queries go to a second thread with its own connection.
/// Several stores, in one process or many, may open the same file: claims run in immediate
/// transactions, so no record is claimed twice while its lease holds, and an in-flight record
/// whose process died is recovered when its lease expires.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_core::{Claim, Lease, NewRecord, Store};
/// use outbox_sqlite::{SqliteConfig, SqliteStore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("outbox.db");
/// let store = SqliteStore::create(&path, SqliteConfig::default()).await?;
/// let ids = store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
/// store.close().await;
///
/// // The record is still there when the file is opened again.
/// let store = SqliteStore::open(&path, SqliteConfig::default()).await?;
/// let lease = Lease { token: 1, until: 31_000 };
/// let claimed = store.claim(Claim { now: 1_000, limit: 10, lease }).await?;
/// assert_eq!(claimed[0].id, ids[0]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    config: SqliteConfig,
    writer: Writer,
    reader: Reader,
    closed: oneshot::Receiver<()>,
}

/// Prepared statements kept per connection: every statement the store runs, with room to spare.
const STATEMENT_CACHE: usize = 48;

/// Runs blocking work on a thread of its own, so `create` and `open` never block an executor.
async fn off_executor<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (reply, answer) = oneshot::channel();
    std::thread::Builder::new()
        .name("outbox-sqlite-open".into())
        .spawn(move || {
            let _ = reply.send(work());
        })
        .map_err(Error::backend)?;
    wait(answer).await
}

impl SqliteStore {
    /// Creates a new outbox file at `path` and opens it.
    ///
    /// Fails with [`Error::AlreadyExists`] if anything is at `path`: an existing file is never
    /// overwritten or taken over. The file is built under a temporary name and linked into
    /// place complete, so a crash during `create` leaves no half-made outbox behind.
    /// [`SqliteStore::open_or_create`] opens the file if it is there and creates it if not.
    pub async fn create(path: impl AsRef<Path>, config: SqliteConfig) -> Result<Self> {
        if config.read_only {
            return Err(Error::InvalidConfig(
                "a read-only store cannot be created".into(),
            ));
        }
        let path = path.as_ref().to_path_buf();
        off_executor(move || {
            create_file(&path, &config)?;
            Self::open_now(path, config)
        })
        .await
    }

    /// Opens the existing outbox file at `path`, migrating it to the current schema if it is
    /// older.
    ///
    /// Before anything is written the file is checked: [`Error::NotFound`] if nothing is at
    /// `path`, [`Error::NotAnOutbox`] for an empty, foreign or non-database file,
    /// [`Error::SchemaTooNew`] for a file from a newer build, [`Error::Corrupted`] for a
    /// damaged one; in each case the file's bytes are left as they were.
    pub async fn open(path: impl AsRef<Path>, config: SqliteConfig) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        off_executor(move || Self::open_now(path, config)).await
    }

    /// Opens the outbox file at `path`, or creates it if nothing is there: the call for an app
    /// that starts on the same file every time.
    ///
    /// An existing file is opened exactly as by [`SqliteStore::open`]: checked before anything
    /// is written, migrated if it is older, and refused with the same typed error (and its
    /// bytes unchanged) if it is not a usable outbox. An empty, foreign or non-database file is
    /// never turned into an outbox: only a path with nothing at it is created, as by
    /// [`SqliteStore::create`].
    ///
    /// Several callers, in one process or many, may race on a missing path: the file is built
    /// under a temporary name and linked into place complete, so one creates it and the others,
    /// finding it there ([`Error::AlreadyExists`] from the create), open it. All of them end up
    /// on the same outbox.
    ///
    /// With a [read-only](SqliteConfig::read_only) configuration nothing is ever created: the
    /// call is [`SqliteStore::open`], and a missing file is [`Error::NotFound`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{NewRecord, Store};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("outbox.db");
    ///
    /// // The first start creates the file...
    /// let store = SqliteStore::open_or_create(&path, SqliteConfig::default()).await?;
    /// let ids = store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
    /// store.close().await;
    ///
    /// // ...and every later one opens it, with what it holds.
    /// let store = SqliteStore::open_or_create(&path, SqliteConfig::default()).await?;
    /// assert_eq!(store.get(ids[0]).await?.unwrap().payload, b"hello");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_or_create(path: impl AsRef<Path>, config: SqliteConfig) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        off_executor(move || {
            if config.read_only {
                return Self::open_now(path, config);
            }
            outbox_core::file::open_or_create(
                || Self::open_now(path.clone(), config.clone()),
                || {
                    create_file(&path, &config)
                        .and_then(|()| Self::open_now(path.clone(), config.clone()))
                },
            )
        })
        .await
    }

    /// Opens a copy of the outbox file at `path`, brought to this build's schema: for the
    /// reads that a [read-only](SqliteConfig::read_only) open refuses with [`Error::ReadOnly`]
    /// on a file an older build wrote (its schema must be migrated first, and a read-only open
    /// writes nothing), such as a support engineer's look at a file from a device.
    ///
    /// The file is checked as [`SqliteStore::open`] checks it ([`Error::NotFound`],
    /// [`Error::NotAnOutbox`], [`Error::SchemaTooNew`], [`Error::Corrupted`]), then copied
    /// with SQLite's `VACUUM INTO` (a consistent snapshot, also while an application writes
    /// the file, and with the writes still in its WAL) into a directory of its own under the
    /// system's temporary directory, removed once the store's connections have closed (at
    /// [`SqliteStore::close`], or after a drop). The file itself is never changed; the copy
    /// does not follow
    /// its later writes, and the store's own writes go to the copy. `config.read_only` is
    /// ignored: the copy must be migrated.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_core::{NewRecord, Store};
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("outbox.db");
    /// let store = SqliteStore::create(&path, SqliteConfig::default()).await?;
    /// store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
    /// store.close().await;
    ///
    /// let copy = SqliteStore::open_copy(&path, SqliteConfig::default()).await?;
    /// assert_eq!(copy.stats().await?.pending, 1);
    /// assert_ne!(copy.path(), path);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_copy(path: impl AsRef<Path>, config: SqliteConfig) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        off_executor(move || {
            schema::check_file(&path)?;
            let source = schema::connect(&path, true)?;
            // An application writing the file may hold its lock for a moment.
            source.busy_timeout(config.busy_timeout).map_err(db)?;
            schema::inspect(&source, config.check_on_open)?;
            let dir = tempfile::Builder::new()
                .prefix("outbox-copy-")
                .tempdir()
                .map_err(Error::backend)?;
            let copy = dir.path().join("outbox.db");
            let target = copy.to_str().ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "the temporary directory {} is not a UTF-8 path",
                    dir.path().display()
                ))
            })?;
            source.execute("VACUUM INTO ?1", [target]).map_err(db)?;
            drop(source);
            // The copy was read whole just now: no second check of it.
            let config = SqliteConfig {
                check_on_open: false,
                ..config.read_only(false)
            };
            Self::open_keeping(copy, config, Some(Arc::new(dir)))
        })
        .await
    }

    fn open_now(path: PathBuf, config: SqliteConfig) -> Result<Self> {
        Self::open_keeping(path, config, None)
    }

    /// [`SqliteStore::open_now`], its connections keeping `keep` until each has closed.
    fn open_keeping(path: PathBuf, config: SqliteConfig, keep: Keep) -> Result<Self> {
        schema::check_file(&path)?;
        let mut conn = schema::connect(&path, config.read_only)?;
        // Inspect before anything (even the journal mode) is written to the file.
        let version = schema::inspect(&conn, config.check_on_open)?;
        if version < SCHEMA_VERSION && config.read_only {
            return Err(Error::ReadOnly { source: None });
        }
        schema::configure(&conn, &config)?;
        if version < SCHEMA_VERSION {
            schema::migrate(&mut conn, version)?;
        }
        let reader = schema::connect(&path, config.read_only)?;
        // Each connection runs a few more distinct statements than rusqlite caches by default
        // (16); past that, the least recently used one would be parsed again and again.
        for c in [&conn, &reader] {
            c.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        }
        reader.busy_timeout(config.busy_timeout).map_err(db)?;
        reader.pragma_update(None, "query_only", true).map_err(db)?;
        let (writer_closed, writer_done) = oneshot::channel();
        let relax = config.durability == crate::Durability::Full;
        let room = schema::room(&conn, &config)?;
        let writer = Writer::start(
            conn,
            config.max_group_commit,
            relax,
            room,
            writer_closed,
            keep.clone(),
        )?;
        let reader = Reader::new(reader, keep);
        Ok(SqliteStore {
            path,
            config,
            writer,
            reader,
            closed: writer_done,
        })
    }

    /// The file this store is on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many write transactions this store has committed since it was opened. With group
    /// commit, concurrent writes share transactions, so under load this grows more slowly than
    /// the number of writes: the ratio is the average group size.
    pub fn write_transactions(&self) -> u64 {
        self.writer.commits()
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &SqliteConfig {
        &self.config
    }

    /// Closes the store and waits until its connections are closed (and the WAL checkpointed
    /// into the file, when this was the file's last connection). Dropping the store closes it
    /// too, without waiting.
    pub async fn close(self) {
        let SqliteStore {
            writer,
            reader,
            closed,
            ..
        } = self;
        drop(writer);
        let reader_closed = reader.close();
        let _ = reader_closed.await;
        let _ = closed.await;
    }

    /// The settings SQLite actually applies on the store's write connection, read back from
    /// it: the proof of the durability level, since a crash test that only kills the process
    /// passes even with syncing off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_sqlite::{SqliteConfig, SqliteStore};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = SqliteStore::create(dir.path().join("o.db"), SqliteConfig::default()).await?;
    /// let settings = store.effective_settings().await?;
    /// assert_eq!(settings.journal_mode, "wal");
    /// assert_eq!(settings.synchronous, 2); // FULL
    /// # Ok(())
    /// # }
    /// ```
    pub async fn effective_settings(&self) -> Result<EffectiveSettings> {
        self.writer
            .outside(|conn| {
                let text = |name: &str| -> Result<String> {
                    conn.pragma_query_value(None, name, |row| row.get(0))
                        .map_err(db)
                };
                let number = |name: &str| -> Result<i64> {
                    conn.pragma_query_value(None, name, |row| row.get(0))
                        .map_err(db)
                };
                Ok(EffectiveSettings {
                    journal_mode: text("journal_mode")?.to_ascii_lowercase(),
                    synchronous: number("synchronous")?,
                    busy_timeout_ms: number("busy_timeout")?,
                    max_page_count: number("max_page_count")?,
                    schema_version: u32::try_from(number("user_version")?).unwrap_or(0),
                })
            })
            .await
    }

    /// True when a claim at `now` may find something: an idle runner's claims find nothing,
    /// so they look on the read connection first and do not queue behind the writer's commits
    /// or take the file's write lock. The writer looks again inside its transaction, which
    /// alone decides what is claimed. A read-only store goes straight to the writer, whose
    /// refusal is the answer.
    async fn may_claim(&self, claim: &Claim) -> Result<bool> {
        if self.config.read_only {
            return Ok(true);
        }
        if claim.limit == 0 {
            return Ok(false);
        }
        let now = claim.now;
        Ok(self
            .reader
            .read(move |conn| ops::next_due(conn))
            .await?
            .is_some_and(|at| at <= now))
    }
}

/// SQLite's settings as read back from a store's write connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EffectiveSettings {
    /// `PRAGMA journal_mode`, lowercase: `wal` for every writable store.
    pub journal_mode: String,
    /// `PRAGMA synchronous`: 0 off, 1 normal, 2 full, 3 extra.
    pub synchronous: i64,
    /// `PRAGMA busy_timeout`, in milliseconds.
    pub busy_timeout_ms: i64,
    /// `PRAGMA max_page_count`: the size limit in pages.
    pub max_page_count: i64,
    /// `PRAGMA user_version`: the schema version of the file.
    pub schema_version: u32,
}

/// Builds a new outbox file under a temporary name, then links it into place only if `path`
/// is still free ([`outbox_core::file::create_new`]).
fn create_file(path: &Path, config: &SqliteConfig) -> Result<()> {
    let sync_dir = config.durability == crate::Durability::Full;
    outbox_core::file::create_new(path, sync_dir, Error::backend, |temp| build(temp, config))
}

fn build(temp: &Path, config: &SqliteConfig) -> Result<()> {
    let mut conn = Connection::open_with_flags(
        temp,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db)?;
    schema::configure(&conn, &config.clone().size_limit(None))?;
    schema::migrate(&mut conn, 0)?;
    // Closing the only connection checkpoints the WAL into the file, so the file is complete
    // on its own before it is linked into place.
    conn.close().map_err(|(_, err)| db(err))
}

#[async_trait]
impl Store for SqliteStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        NewRecord::validate_all(&records, self.config.max_payload)?;
        if records.is_empty() {
            // Nothing to make durable: no transaction, no sync.
            return Ok(Enqueued::default());
        }
        self.writer.enqueue(records, now, self.config.cap).await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        if !self.may_claim(&claim).await? {
            return Ok(Vec::new());
        }
        self.writer
            .write_lease(move |conn| ops::claim(conn, claim))
            .await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let ids = ids.to_vec();
        self.writer
            .write_lease(move |conn| ops::renew(conn, &ids, lease))
            .await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.writer
            .write_draining(move |conn| apply::apply(conn, transitions))
            .await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        // With no outcomes to write, an idle claim need not reach the writer at all.
        let claim = match claim {
            Some(claim) if outcomes.is_empty() && !self.may_claim(&claim).await? => None,
            claim => claim,
        };
        if outcomes.is_empty() && claim.is_none() {
            return Ok(Round::default());
        }
        if outcomes.is_empty() {
            // A claim alone: nothing in it that a power cut could lose but a lease.
            return self
                .writer
                .write_lease(move |conn| apply::round(conn, outcomes, claim))
                .await;
        }
        self.writer
            .write_draining(move |conn| apply::round(conn, outcomes, claim))
            .await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.reader
            .read(move |conn| ops::expired(conn, now, limit))
            .await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.reader
            .read(move |conn| ops::stepped_back(conn, now, limit))
            .await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.reader.read(move |conn| ops::get(conn, id)).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let query = query.clone();
        self.reader.read(move |conn| ops::list(conn, &query)).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.reader
            .read(move |conn| ops::tombstones(conn, after, limit))
            .await
    }

    async fn stats(&self) -> Result<Stats> {
        self.reader
            .read(|conn| {
                // One read transaction, so the counts describe one moment.
                let tx = conn.transaction().map_err(db)?;
                let stats = ops::stats(&tx)?;
                tx.commit().map_err(db)?;
                Ok(stats)
            })
            .await
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.reader.read(|conn| ops::next_due(conn)).await
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        self.reader.read(|conn| ops::halt(conn)).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.writer
            .write(move |conn| ops::set_halt(conn, halt.as_ref()))
            .await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        let seen = seen.clone();
        self.writer
            .write(move |conn| ops::clear_halt_if(conn, &seen))
            .await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.writer
            .write_draining(move |conn| ops::prune(conn, older_than))
            .await
    }

    async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        self.reader
            .read(move |conn| unreadable::list(conn, limit))
            .await
    }

    async fn discard_unreadable(&self, id: RecordId, now: Millis) -> Result<bool> {
        self.writer
            .write_draining(move |conn| unreadable::discard(conn, id, now))
            .await
    }

    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        self.reader
            .read(move |conn| unreadable::one(conn, id))
            .await
    }

    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        self.reader
            .read(move |conn| common_errors::common_errors(conn, limit))
            .await
    }
}
