//! Where the store's two connections run, so no SQLite call ever runs on an async executor's
//! threads.
//!
//! The *writer* commits in groups: it takes every write waiting in its queue (up to
//! `max_group_commit`; after a batch of several, it waits briefly for the rest of a burst:
//! [`outbox_core::group_commit`]), runs each in its own savepoint inside one `BEGIN IMMEDIATE`
//! transaction, commits once, and only then answers each caller. Writes that arrive while a
//! commit is running or syncing wait in the queue, and the next transaction takes them all:
//! sixty-four producers thus share one fsync instead of paying one each, and every answer still
//! comes after the write is durable. A write that fails is rolled back to its savepoint and
//! fails alone, unless SQLite has undone the whole transaction (a full disk or file, an I/O
//! error): then the writes that ran before it in the transaction fail with it, and the rest
//! go on in a new one. A caller hands its write over once (a channel send) and is woken by
//! the answer.
//!
//! **No statement journal.** Since each write is undone whole, by its savepoint or its
//! transaction, when any of its statements fails, a statement's own undo is never needed.
//! SQLite would keep one all the same for a statement that changes many rows and may stop
//! part-way (a `NOT NULL` column it sets, a `RETURNING` on a `DELETE`): a copy of every page
//! the statement changes, written to a temporary file once past 64 KiB. A drain's claims and
//! deletes wrote a hundred such files per 100,000 records, and the file writes were a tenth of
//! the writer's time. So the writes that change many rows are stated so that SQLite keeps
//! none: `UPDATE OR FAIL` (a failure leaves the rows changed before it, which the write's undo
//! takes back), a `DELETE` without `RETURNING` (what it removes is read first), and rows
//! rewritten and tombstones inserted one by one (an `UPDATE … FROM`, or an `INSERT … SELECT`
//! that sets the key, keeps a journal whatever its conflict clause). A write that shares its
//! transaction runs in a savepoint, which SQLite journals the same way; a write alone, as a
//! draining runner's rounds are, keeps none. The one difference: a statement that finds the
//! file full (the size cap or the disk) now loses the transaction, not only itself, as an I/O
//! error already did.
//!
//! The *reader* answers queries on a second connection, on tokio's blocking pool; in WAL mode
//! it reads the last committed state without waiting for the writer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread;

use outbox_core::group_commit::GroupCommit;
use outbox_core::{Cap, Enqueued, Error, Millis, NewRecord, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{db, echo};
use crate::ops;

mod commit;

use commit::commit_batch;

/// What a write does to the file, which decides how it commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// It may add records: held to the size limit.
    Grows,
    /// It records outcomes, takes records out or rewrites them (a round, a discard, a prune):
    /// it may use the headroom above the size limit, so a full file can still be drained.
    Drains,
    /// It only takes or moves leases (a claim with no outcomes, a renewal): losing it to a
    /// power cut costs a re-delivery, never a record. It drains too.
    LeaseOnly,
}

/// The size limit of the file, in pages, and the headroom above it that draining writes may
/// use. A claim rewrites each claimed row; a row whose payload overflows its page gets a new
/// overflow chain before the old one is freed, so even a write that frees space needs a few
/// free pages for a moment, which a full file does not have.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Room {
    /// `max_page_count` for a transaction that may add records.
    pub(crate) limit: u64,
    /// The extra pages a transaction of draining writes may take.
    pub(crate) headroom: u64,
}

/// A write waiting for the writer thread.
trait Job: Send {
    /// What the write does to the file.
    fn kind(&self) -> Kind;
    /// Runs the write on the connection, inside the batch's transaction.
    fn run(self: Box<Self>, conn: &Connection) -> Box<dyn Ran>;
    /// Answers without running: the batch could not start.
    fn abort(self: Box<Self>, err: Error);
    /// Whether this write is an enqueue, which the writer may merge with the enqueues
    /// waiting next to it.
    fn is_enqueue(&self) -> bool {
        false
    }
    /// Takes the enqueue out of this write, to run it merged with others.
    fn take_enqueue(&mut self) -> Option<Enqueue> {
        None
    }
}

/// An enqueue waiting for the writer, kept as data (not a closure) so that enqueues waiting
/// together can run as one insert, and again one by one if that failed.
pub(crate) struct Enqueue {
    records: Vec<NewRecord>,
    now: Millis,
    /// The store's size cap, the same for every enqueue of a store.
    cap: Cap,
    reply: oneshot::Sender<Result<Enqueued>>,
}

impl Enqueue {
    fn abort(self, err: Error) {
        let _ = self.reply.send(Err(err));
    }
}

/// An [`Enqueue`] as a write of its own.
struct EnqueueJob(Option<Enqueue>);

impl Job for EnqueueJob {
    fn kind(&self) -> Kind {
        Kind::Grows
    }

    fn run(mut self: Box<Self>, conn: &Connection) -> Box<dyn Ran> {
        let Some(enqueue) = self.0.take() else {
            // Only a merged run takes the enqueue out, and then this write is never run.
            let (reply, _) = oneshot::channel();
            return Box::new(Done::<Enqueued> {
                result: Err(Error::Stopped),
                reply,
            });
        };
        Box::new(Done {
            result: ops::enqueue(conn, enqueue.records, enqueue.now, enqueue.cap),
            reply: enqueue.reply,
        })
    }

    fn abort(mut self: Box<Self>, err: Error) {
        if let Some(enqueue) = self.0.take() {
            enqueue.abort(err);
        }
    }

    fn is_enqueue(&self) -> bool {
        self.0.is_some()
    }

    fn take_enqueue(&mut self) -> Option<Enqueue> {
        self.0.take()
    }
}

/// A write that ran, waiting for its transaction's fate.
trait Ran: Send {
    /// The write's own error, if it failed.
    fn error(&self) -> Option<&Error>;
    /// Answers the caller: with its result if the commit succeeded, else with `err`.
    fn settle(self: Box<Self>, commit: Result<(), Error>);
}

struct Task<F, T> {
    work: F,
    reply: oneshot::Sender<Result<T>>,
    kind: Kind,
}

struct Done<T> {
    result: Result<T>,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Job for Task<F, T>
where
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    fn kind(&self) -> Kind {
        self.kind
    }

    fn run(self: Box<Self>, conn: &Connection) -> Box<dyn Ran> {
        let result = (self.work)(conn);
        Box::new(Done {
            result,
            reply: self.reply,
        })
    }

    fn abort(self: Box<Self>, err: Error) {
        // The caller may have stopped waiting; nothing is owed to it then.
        let _ = self.reply.send(Err(err));
    }
}

impl<T: Send + 'static> Ran for Done<T> {
    fn error(&self) -> Option<&Error> {
        self.result.as_ref().err()
    }

    fn settle(self: Box<Self>, commit: Result<(), Error>) {
        let answer = match (self.result, commit) {
            (Err(own), _) => Err(own),
            (Ok(_), Err(err)) => Err(err),
            (Ok(value), Ok(())) => Ok(value),
        };
        let _ = self.reply.send(answer);
    }
}

/// What the writer thread is asked to do.
enum Work {
    /// A write, committed with the others waiting.
    Write(Box<dyn Job>),
    /// A look at the connection outside any transaction, between two group commits.
    Outside(ReadJob),
}

/// The handle on the writer thread.
#[derive(Debug)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Work>,
    commits: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the thread; `closed` fires once it has closed its connection (and dropped
    /// `keep`). With `relax`
    /// (the connection syncs at every commit), a transaction of lease-only writes commits
    /// without waiting for its sync. With `room`, a transaction that may add records is held
    /// to its limit and one of draining writes may use its headroom.
    pub(crate) fn start(
        conn: Connection,
        max_group_commit: usize,
        relax: bool,
        room: Option<Room>,
        closed: oneshot::Sender<()>,
        keep: Keep,
    ) -> Result<Self> {
        let (queue, jobs) = mpsc::channel::<Work>();
        let commits = Arc::new(AtomicU64::new(0));
        let counter = commits.clone();
        thread::Builder::new()
            .name("outbox-sqlite-writer".into())
            .spawn(move || {
                let mut conn = conn;
                let mut next = None;
                let mut pages = room.map(|room| room.limit);
                let mut group = GroupCommit::new();
                while let Some(work) = next.take().or_else(|| jobs.recv().ok()) {
                    let first = match work {
                        Work::Write(job) => job,
                        Work::Outside(job) => {
                            job(&mut conn);
                            continue;
                        }
                    };
                    // Work outside any transaction ends the batch and runs after it; only
                    // enqueues wait for the rest of a burst.
                    let (batch, outside) = group.batch(
                        first,
                        &jobs,
                        max_group_commit,
                        |work| match work {
                            Work::Write(job) => Ok(job),
                            outside => Err(outside),
                        },
                        |job| job.is_enqueue(),
                    );
                    next = outside;
                    if let Some(room) = room {
                        size(&conn, &batch, room, &mut pages);
                    }
                    commit_batch(&mut conn, batch, &counter, relax);
                }
                close(conn);
                drop(keep);
                let _ = closed.send(());
            })
            .map_err(Error::backend)?;
        Ok(Writer { queue, commits })
    }

    /// How many transactions the thread has committed.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Runs `work` in the next group commit and returns its result once committed; it is
    /// held to the size limit.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.send(work, Kind::Grows).await
    }

    /// Enqueues `records` due at `now` in the next group commit (validated by the caller),
    /// held to `cap`, and returns their ids once committed; enqueues waiting together run as
    /// one insert.
    pub(crate) async fn enqueue(
        &self,
        records: Vec<NewRecord>,
        now: Millis,
        cap: Cap,
    ) -> Result<Enqueued> {
        let (reply, answer) = oneshot::channel();
        let job = EnqueueJob(Some(Enqueue {
            records,
            now,
            cap,
            reply,
        }));
        self.queue
            .send(Work::Write(Box::new(job)))
            .map_err(|_| Error::Stopped)?;
        wait(answer).await
    }

    /// Like [`Writer::write`], for a write that adds no records (outcomes, discards, prunes):
    /// it may use the headroom above the size limit, so a full file can still be drained.
    pub(crate) async fn write_draining<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.send(work, Kind::Drains).await
    }

    /// Like [`Writer::write`], for a write that only takes or moves leases: when every write
    /// of its transaction is such a write, the commit does not wait for the disk. A power cut
    /// may then undo it, which only means a re-delivery; the next synced commit makes it
    /// durable with its own writes.
    pub(crate) async fn write_lease<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.send(work, Kind::LeaseOnly).await
    }

    async fn send<T, F>(&self, work: F, kind: Kind) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let task = Task { work, reply, kind };
        self.queue
            .send(Work::Write(Box::new(task)))
            .map_err(|_| Error::Stopped)?;
        wait(answer).await
    }

    /// Runs `work` on the write connection outside any transaction (to read its settings).
    pub(crate) async fn outside<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, answer) = read_job(work);
        self.queue
            .send(Work::Outside(job))
            .map_err(|_| Error::Stopped)?;
        wait(answer).await
    }
}

/// Boxes `work` for a thread, with the receiver of its answer.
fn read_job<T, F>(work: F) -> (ReadJob, oneshot::Receiver<Result<T>>)
where
    F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    let job: ReadJob = Box::new(move |conn: &mut Connection| {
        let _ = reply.send(work(conn));
    });
    (job, answer)
}

/// Waits for a thread's answer: the thread's send wakes the waiting task directly, so a write
/// costs one hand-off to the writer thread and one wake-up back.
///
/// Tokio's paused test clock advances whenever no task can run, and a task waiting on another
/// thread looks exactly like that; tests that pause the clock hold it still around their
/// store calls (the testkit's runner scenarios do), so production pays nothing for it.
pub(crate) async fn wait<T: Send + 'static>(answer: oneshot::Receiver<Result<T>>) -> Result<T> {
    answer.await.map_err(|_| Error::Stopped)?
}

fn close(conn: Connection) {
    if let Err((_, err)) = conn.close() {
        tracing::warn!(error = %err, "closing the outbox connection failed");
    }
}

/// Runs one control statement (`BEGIN IMMEDIATE`, `COMMIT`, savepoints) from the connection's
/// statement cache, so the writer does not parse it again for every transaction.
fn control(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(drop)
        .map_err(db)
}

/// Sets the page limit for the batch's transaction: the size limit if a write of it may add
/// records, the limit plus the headroom otherwise. `pages` is the limit in force, so the
/// pragma runs only when it changes. SQLite never sets the limit below the file's size, so
/// once draining writes used the headroom, new records may fill the file to that size.
fn size(conn: &Connection, batch: &[Box<dyn Job>], room: Room, pages: &mut Option<u64>) {
    let grows = batch.iter().any(|job| job.kind() == Kind::Grows);
    let want = if grows {
        room.limit
    } else {
        room.limit.saturating_add(room.headroom)
    };
    if *pages == Some(want) {
        return;
    }
    match conn.pragma_update(
        None,
        "max_page_count",
        i64::try_from(want).unwrap_or(i64::MAX),
    ) {
        Ok(()) => *pages = Some(want),
        Err(err) => {
            *pages = None;
            tracing::warn!(error = %err, "could not set the page limit for a transaction");
        }
    }
}

type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

/// The store's read connection. Each query runs on it inside tokio's blocking pool, so a read
/// costs one hop off the executor and back (no thread of its own to wake and answer).
/// What a store's connections keep until each has closed: the directory of a copy
/// ([`SqliteStore::open_copy`](crate::SqliteStore::open_copy)), removed once the last one has
/// closed its connection, so no file of it is open when it goes.
pub(crate) type Keep = Option<Arc<tempfile::TempDir>>;

#[derive(Debug)]
pub(crate) struct Reader {
    conn: Arc<Mutex<Option<Connection>>>,
    keep: Mutex<Keep>,
}

impl Reader {
    /// Takes the read connection, and what to keep until it is closed.
    pub(crate) fn new(conn: Connection, keep: Keep) -> Self {
        Reader {
            conn: Arc::new(Mutex::new(Some(conn))),
            keep: Mutex::new(keep),
        }
    }

    /// Runs `work` on the read connection, off the async executor.
    pub(crate) async fn read<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        let run = move || {
            // A query that panicked left no transaction open (rusqlite finalizes on unwind).
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            match guard.as_mut() {
                Some(conn) => work(conn),
                None => Err(Error::Stopped),
            }
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            return tokio::task::spawn_blocking(run)
                .await
                .map_err(Error::backend)?;
        }
        // No tokio runtime: run it on a thread of its own rather than block this executor.
        let (reply, answer) = oneshot::channel();
        thread::Builder::new()
            .name("outbox-sqlite-read".into())
            .spawn(move || {
                let _ = reply.send(run());
            })
            .map_err(Error::backend)?;
        answer.await.map_err(|_| Error::Stopped)?
    }

    /// Closes the read connection on a thread of its own (closing may checkpoint the WAL);
    /// the receiver fires once it is closed. Later reads fail with [`Error::Stopped`].
    pub(crate) fn close(&self) -> oneshot::Receiver<()> {
        let (closed, done) = oneshot::channel();
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let keep = self
            .keep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(conn) = conn {
            let closing = thread::Builder::new()
                .name("outbox-sqlite-close".into())
                .spawn(move || {
                    close(conn);
                    drop(keep);
                    let _ = closed.send(());
                });
            if let Err(err) = closing {
                // The connection went down with the closure: closed, only on this thread.
                tracing::warn!(error = %err, "no thread to close the outbox read connection on");
            }
        }
        done
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        drop(self.close());
    }
}

#[cfg(test)]
mod tests;
