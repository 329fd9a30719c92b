//! Where the store's two connections run, so no SQLite call ever runs on an async executor's
//! threads.
//!
//! The *writer* commits in groups: it takes every write waiting in its queue (up to
//! `max_group_commit`), runs each in its own savepoint inside one `BEGIN IMMEDIATE`
//! transaction, commits once, and only then answers each caller. Writes that arrive while a
//! commit is running or syncing wait in the queue, and the next transaction takes them all:
//! sixty-four producers thus share one fsync instead of paying one each, and every answer still
//! comes after the write is durable. A write that fails is rolled back to its savepoint and
//! fails alone. A caller hands its write over once (a channel send) and is woken by the answer.
//!
//! The *reader* answers queries on a second connection, on tokio's blocking pool; in WAL mode
//! it reads the last committed state without waiting for the writer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread;

use outbox_core::{Cap, Enqueued, Error, Millis, NewRecord, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{db, echo};
use crate::ops;

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
    /// Starts the thread; `closed` fires once it has closed its connection. With `relax`
    /// (the connection syncs at every commit), a transaction of lease-only writes commits
    /// without waiting for its sync. With `room`, a transaction that may add records is held
    /// to its limit and one of draining writes may use its headroom.
    pub(crate) fn start(
        conn: Connection,
        max_group_commit: usize,
        relax: bool,
        room: Option<Room>,
        closed: oneshot::Sender<()>,
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
                while let Some(work) = next.take().or_else(|| jobs.recv().ok()) {
                    let first = match work {
                        Work::Write(job) => job,
                        Work::Outside(job) => {
                            job(&mut conn);
                            continue;
                        }
                    };
                    let mut batch = vec![first];
                    let mut yielded = false;
                    while batch.len() < max_group_commit.max(1) {
                        match jobs.try_recv() {
                            Ok(Work::Write(job)) => batch.push(job),
                            Ok(outside) => {
                                next = Some(outside);
                                break;
                            }
                            // A burst's first write arrives alone: let the producers
                            // that woke with it queue theirs before committing it.
                            Err(mpsc::TryRecvError::Empty) if !yielded => {
                                yielded = true;
                                thread::yield_now();
                            }
                            Err(_) => break,
                        }
                    }
                    if let Some(room) = room {
                        size(&conn, &batch, room, &mut pages);
                    }
                    commit_batch(&mut conn, batch, &counter, relax);
                }
                close(conn);
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

/// Runs a batch of writes in one transaction and answers each after the commit, which it
/// counts in `commits` first. With `relax`, a batch of lease-only writes commits at
/// `synchronous = NORMAL`: in WAL mode that commit is written but not synced, and it becomes
/// durable with the next synced commit.
fn commit_batch(conn: &mut Connection, batch: Vec<Box<dyn Job>>, commits: &AtomicU64, relax: bool) {
    let relaxed = relax && batch.iter().all(|job| job.kind() == Kind::LeaseOnly);
    if relaxed {
        if let Err(err) = control(conn, "PRAGMA synchronous = NORMAL") {
            tracing::warn!(error = %err, "could not relax a lease-only commit; it syncs");
        }
    }
    commit_jobs(conn, batch, commits);
    if relaxed {
        if let Err(err) = control(conn, "PRAGMA synchronous = FULL") {
            tracing::error!(error = %err, "could not restore synchronous = FULL after a lease-only commit");
        }
    }
}

/// One step of a batch's transaction: a write in its own savepoint, or enqueues that arrived
/// one after another, run as one.
enum Step {
    One(Box<dyn Job>),
    Merged(Vec<Enqueue>),
}

/// The batch as steps, in arrival order: each run of two or more enqueues becomes one step.
fn steps(batch: Vec<Box<dyn Job>>) -> VecDeque<Step> {
    let mut steps = VecDeque::with_capacity(batch.len());
    let mut run: Vec<Box<dyn Job>> = Vec::new();
    let flush = |run: &mut Vec<Box<dyn Job>>, steps: &mut VecDeque<Step>| {
        if run.len() == 1 {
            steps.extend(run.drain(..).map(Step::One));
        } else if !run.is_empty() {
            let merged = run
                .iter_mut()
                .filter_map(|job| job.take_enqueue())
                .collect();
            run.clear();
            steps.push_back(Step::Merged(merged));
        }
    };
    for job in batch {
        if job.is_enqueue() {
            run.push(job);
        } else {
            flush(&mut run, &mut steps);
            steps.push_back(Step::One(job));
        }
    }
    flush(&mut run, &mut steps);
    steps
}

fn commit_jobs(conn: &mut Connection, mut batch: Vec<Box<dyn Job>>, commits: &AtomicU64) {
    if batch.len() == 1 {
        if let Some(job) = batch.pop() {
            commit_alone(conn, job, commits);
        }
        return;
    }
    let mut ran: Vec<Box<dyn Ran>> = Vec::with_capacity(batch.len());
    let mut steps = steps(batch);
    'transaction: loop {
        if let Err(err) = control(conn, "BEGIN IMMEDIATE") {
            for step in steps {
                match step {
                    Step::One(job) => job.abort(echo(&err)),
                    Step::Merged(group) => group.into_iter().for_each(|e| e.abort(echo(&err))),
                }
            }
            return;
        }
        while let Some(step) = steps.pop_front() {
            let kept = match step {
                Step::One(job) => run_one(conn, job, &mut ran),
                Step::Merged(group) => run_merged(conn, group, &mut ran, &mut steps),
            };
            if !kept {
                continue 'transaction;
            }
        }
        break;
    }
    match control(conn, "COMMIT") {
        Ok(()) => {
            commits.fetch_add(1, Ordering::Relaxed);
            for done in ran {
                done.settle(Ok(()));
            }
        }
        Err(err) => lose_transaction(conn, &mut ran, &err),
    }
}

/// Runs one write in its own savepoint. False when the transaction was lost (the writes that
/// ran in it have been failed) and the batch must go on in a new one.
fn run_one(conn: &Connection, job: Box<dyn Job>, ran: &mut Vec<Box<dyn Ran>>) -> bool {
    if let Err(err) = control(conn, "SAVEPOINT job") {
        lose_transaction(conn, ran, &err);
        job.abort(err);
        return false;
    }
    let done = job.run(conn);
    let failure = match done.error() {
        Some(own) => Some(echo(own)),
        None => control(conn, "RELEASE job").err(),
    };
    let Some(failure) = failure else {
        ran.push(done);
        return true;
    };
    // Undo this write alone and go on with the others, unless SQLite already rolled back the
    // whole transaction (a full disk or an I/O error can) or cannot undo it.
    let undone =
        !conn.is_autocommit() && conn.execute_batch("ROLLBACK TO job; RELEASE job").is_ok();
    let answer = match done.error() {
        Some(_) => Ok(()),
        None => Err(echo(&failure)),
    };
    done.settle(answer);
    if !undone {
        lose_transaction(conn, ran, &failure);
        return false;
    }
    true
}

/// Runs enqueues that waited together as one insert in one savepoint: their ids taken in one
/// step, the pending counter moved once, one savepoint instead of one each. If it fails, it
/// is undone and each enqueue goes back to the front of the batch to run alone, so the one
/// that failed fails alone. False when the transaction was lost.
fn run_merged(
    conn: &Connection,
    group: Vec<Enqueue>,
    ran: &mut Vec<Box<dyn Ran>>,
    steps: &mut VecDeque<Step>,
) -> bool {
    if let Err(err) = control(conn, "SAVEPOINT job") {
        lose_transaction(conn, ran, &err);
        group.into_iter().for_each(|e| e.abort(echo(&err)));
        return false;
    }
    let batches: Vec<(&[NewRecord], Millis)> = group
        .iter()
        .map(|e| (e.records.as_slice(), e.now))
        .collect();
    let cap = group.first().map_or_else(Cap::none, |e| e.cap);
    let merged = ops::insert_many(conn, &batches, cap)
        .and_then(|answers| control(conn, "RELEASE job").map(|()| answers));
    drop(batches);
    match merged {
        Ok(answers) => {
            for (enqueue, answer) in group.into_iter().zip(answers) {
                ran.push(Box::new(Done {
                    result: Ok(answer),
                    reply: enqueue.reply,
                }));
            }
            true
        }
        Err(err) => {
            if conn.is_autocommit() || conn.execute_batch("ROLLBACK TO job; RELEASE job").is_err() {
                lose_transaction(conn, ran, &err);
                group.into_iter().for_each(|e| e.abort(echo(&err)));
                return false;
            }
            for enqueue in group.into_iter().rev() {
                steps.push_front(Step::One(Box::new(EnqueueJob(Some(enqueue)))));
            }
            true
        }
    }
}

/// A write with no others waiting: its transaction is its savepoint, so it runs without one
/// (two statements fewer); if it fails, the transaction is rolled back and nothing committed.
fn commit_alone(conn: &mut Connection, job: Box<dyn Job>, commits: &AtomicU64) {
    if let Err(err) = control(conn, "BEGIN IMMEDIATE") {
        job.abort(err);
        return;
    }
    let done = job.run(conn);
    if done.error().is_some() {
        lose_transaction(conn, &mut Vec::new(), &Error::Stopped);
        // Answers with the write's own error.
        done.settle(Ok(()));
        return;
    }
    match control(conn, "COMMIT") {
        Ok(()) => {
            commits.fetch_add(1, Ordering::Relaxed);
            done.settle(Ok(()));
        }
        Err(err) => lose_transaction(conn, &mut vec![done], &err),
    }
}

/// Rolls back the batch's transaction (if SQLite has not already) and fails the writes that
/// ran in it: none of them is durable.
fn lose_transaction(conn: &Connection, ran: &mut Vec<Box<dyn Ran>>, cause: &Error) {
    if !conn.is_autocommit() {
        if let Err(err) = conn.execute_batch("ROLLBACK") {
            tracing::error!(error = %err, "rolling back a failed outbox transaction failed");
        }
    }
    for done in ran.drain(..) {
        done.settle(Err(echo(cause)));
    }
}

type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

/// The store's read connection. Each query runs on it inside tokio's blocking pool, so a read
/// costs one hop off the executor and back (no thread of its own to wake and answer).
#[derive(Debug)]
pub(crate) struct Reader {
    conn: Arc<Mutex<Option<Connection>>>,
}

impl Reader {
    /// Takes the read connection.
    pub(crate) fn new(conn: Connection) -> Self {
        Reader {
            conn: Arc::new(Mutex::new(Some(conn))),
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
        if let Some(conn) = conn {
            let closing = thread::Builder::new()
                .name("outbox-sqlite-close".into())
                .spawn(move || {
                    close(conn);
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
mod tests {
    use super::*;

    type Reply = oneshot::Receiver<Result<i64>>;

    /// A write that inserts `value` into `t`, then fails if `fail` says so.
    fn insert(value: i64, fail: Option<&'static str>) -> (Box<dyn Job>, Reply) {
        let (reply, answer) = oneshot::channel();
        let work = move |conn: &Connection| -> Result<i64> {
            conn.execute("INSERT INTO t VALUES (?1)", [value])
                .map_err(db)?;
            match fail {
                None => Ok(value),
                Some(sql) => {
                    // Let the test decide what the failure leaves behind.
                    let _ = conn.execute_batch(sql);
                    Err(Error::InvalidConfig(format!("write {value} failed")))
                }
            }
        };
        (
            Box::new(Task {
                work,
                reply,
                kind: Kind::Grows,
            }),
            answer,
        )
    }

    fn table() -> Connection {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch("CREATE TABLE t (v INTEGER)")
            .expect("table");
        conn
    }

    fn values(conn: &Connection) -> Vec<i64> {
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").expect("prepare");
        stmt.query_map([], |row| row.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    fn answer(reply: &mut Reply) -> Result<i64> {
        reply.try_recv().expect("answered")
    }

    #[test]
    fn writes_waiting_together_share_one_commit() {
        let (closed, _) = oneshot::channel();
        let writer = Writer::start(table(), 1024, false, None, closed).expect("writer");
        // Hold the writer thread in a first write until fifty others are queued.
        let (release, held) = mpsc::channel::<()>();
        let (entered, inside) = mpsc::channel::<()>();
        let (reply, first) = oneshot::channel();
        let work = move |_: &Connection| -> Result<i64> {
            let _ = entered.send(());
            let _ = held.recv();
            Ok(0)
        };
        let send = |job: Box<dyn Job>| writer.queue.send(Work::Write(job)).expect("queued");
        send(Box::new(Task {
            work,
            reply,
            kind: Kind::Grows,
        }));
        inside.recv().expect("the writer runs the first write");
        let replies: Vec<Reply> = (1..=50)
            .map(|v| {
                let (job, reply) = insert(v, None);
                send(job);
                reply
            })
            .collect();
        release.send(()).expect("release");
        assert_eq!(first.blocking_recv().expect("answer").expect("first"), 0);
        for (v, reply) in (1..=50).zip(replies) {
            assert_eq!(reply.blocking_recv().expect("answer").expect("write"), v);
        }
        assert_eq!(
            writer.commits(),
            2,
            "the held write, then the fifty together"
        );
    }

    /// A job that reports the `synchronous` level its transaction commits at.
    fn sync_level(lease_only: bool) -> (Box<dyn Job>, Reply) {
        let (reply, answer) = oneshot::channel();
        let work = |conn: &Connection| -> Result<i64> {
            conn.execute("INSERT INTO t VALUES (1)", []).map_err(db)?;
            conn.pragma_query_value(None, "synchronous", |row| row.get(0))
                .map_err(db)
        };
        let kind = if lease_only {
            Kind::LeaseOnly
        } else {
            Kind::Grows
        };
        let task = Task { work, reply, kind };
        (Box::new(task), answer)
    }

    /// A job of `kind` that reports the page limit its transaction runs under.
    fn page_limit(kind: Kind) -> (Box<dyn Job>, Reply) {
        let (reply, answer) = oneshot::channel();
        let work = |conn: &Connection| -> Result<i64> {
            conn.pragma_query_value(None, "max_page_count", |row| row.get(0))
                .map_err(db)
        };
        (Box::new(Task { work, reply, kind }), answer)
    }

    /// An enqueue of `records` at `now`, with the receiver of its answer.
    fn enqueue(records: Vec<NewRecord>) -> (Box<dyn Job>, oneshot::Receiver<Result<Enqueued>>) {
        capped(records, Cap::none())
    }

    /// An enqueue of `records` at `now` held to `cap`, with the receiver of its answer.
    fn capped(
        records: Vec<NewRecord>,
        cap: Cap,
    ) -> (Box<dyn Job>, oneshot::Receiver<Result<Enqueued>>) {
        let (reply, answer) = oneshot::channel();
        let job = EnqueueJob(Some(Enqueue {
            records,
            now: 1_000,
            cap,
            reply,
        }));
        (Box::new(job), answer)
    }

    fn outbox() -> Connection {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::schema::migrate(&mut conn, 0).expect("schema");
        conn
    }

    fn pending(conn: &Connection) -> (i64, i64) {
        let counted = conn
            .query_row("SELECT value FROM meta WHERE name = 'state 0'", [], |row| {
                row.get(0)
            })
            .expect("counter");
        let rows = conn
            .query_row("SELECT count(*) FROM records WHERE state = 0", [], |row| {
                row.get(0)
            })
            .expect("rows");
        (counted, rows)
    }

    #[test]
    fn enqueues_waiting_together_run_as_one_insert_with_one_answer_each() {
        let mut conn = outbox();
        let (a, mut ra) = enqueue(vec![NewRecord::new(b"a".to_vec())]);
        let (b, mut rb) = enqueue(vec![
            NewRecord::new(b"b1".to_vec()).in_group("g"),
            NewRecord::new(b"b2".to_vec()).in_group("g"),
        ]);
        let (c, mut rc) = enqueue(vec![NewRecord::new(b"c".to_vec()).in_group("g")]);
        let batch = vec![a, b, c];
        let commits = AtomicU64::new(0);
        commit_batch(&mut conn, batch, &commits, false);
        let ids = |r: &mut oneshot::Receiver<Result<Enqueued>>| -> Vec<u64> {
            r.try_recv()
                .expect("answered")
                .expect("enqueued")
                .ids
                .iter()
                .map(|id| id.0)
                .collect()
        };
        assert_eq!(
            (ids(&mut ra), ids(&mut rb), ids(&mut rc)),
            (vec![1], vec![2, 3], vec![4])
        );
        assert_eq!(commits.load(Ordering::Relaxed), 1);
        assert_eq!(pending(&conn), (4, 4));
        // Only the group's first record is its head.
        let claimable: Vec<i64> = conn
            .prepare("SELECT id FROM records WHERE claimable = 1 ORDER BY id")
            .expect("prepare")
            .query_map([], |row| row.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(claimable, [1, 2]);
    }

    #[test]
    fn enqueues_waiting_together_past_the_cap_are_refused_alone() {
        let mut conn = outbox();
        let cap = Cap::none().with_max_records(3);
        let one = |body: &[u8]| NewRecord::new(body.to_vec());
        let (a, mut ra) = capped(vec![one(b"a")], cap);
        let (b, mut rb) = capped(vec![one(b"b1"), one(b"b2")], cap);
        let (c, mut rc) = capped(vec![one(b"c")], cap);
        commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
        assert!(ra.try_recv().expect("answered").is_ok());
        assert!(rb.try_recv().expect("answered").is_ok());
        let refused = rc.try_recv().expect("answered");
        assert!(
            matches!(
                refused,
                Err(Error::QueueFull {
                    limit: outbox_core::CapLimit::Records,
                    max: 3,
                    used: 3,
                    adding: 1
                })
            ),
            "{refused:?}"
        );
        assert_eq!(pending(&conn), (3, 3));
    }

    #[test]
    fn only_enqueues_that_arrived_one_after_another_are_merged() {
        let shapes = |batch: Vec<Box<dyn Job>>| -> Vec<usize> {
            steps(batch)
                .iter()
                .map(|step| match step {
                    Step::One(_) => 1,
                    Step::Merged(group) => group.len(),
                })
                .collect()
        };
        let one = || enqueue(vec![NewRecord::new(b"x".to_vec())]).0;
        let other = || insert(1, None).0;
        assert_eq!(shapes(vec![one(), one(), one(), other(), one()]), [3, 1, 1]);
        assert_eq!(shapes(vec![other(), one(), other()]), [1, 1, 1]);
        assert_eq!(shapes(vec![one(), one()]), [2]);
    }

    #[test]
    fn an_enqueue_that_fails_in_a_merged_run_fails_alone() {
        let mut conn = outbox();
        // A row the coalescing lookup of key `k` meets and cannot read: an unknown state.
        conn.execute_batch(
            "INSERT INTO records (id, payload, key, created_at, state, replaces) \
             VALUES (100, x'00', 'bad', 1, 99, 'k')",
        )
        .expect("plant");
        let (a, mut ra) = enqueue(vec![NewRecord::new(b"a".to_vec())]);
        let (b, mut rb) = enqueue(vec![NewRecord::new(b"b".to_vec()).replacing("k")]);
        let (c, mut rc) = enqueue(vec![NewRecord::new(b"c".to_vec())]);
        commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
        assert!(ra.try_recv().expect("answered").is_ok());
        assert!(rb.try_recv().expect("answered").is_err());
        assert!(rc.try_recv().expect("answered").is_ok());
        assert_eq!(pending(&conn), (2, 2), "the failed one left nothing");
    }

    #[test]
    fn draining_writes_alone_may_use_the_headroom_and_a_growing_one_may_not() {
        let mut conn = table();
        let room = Room {
            limit: 100,
            headroom: 20,
        };
        let mut pages = None;
        let mut run = |batch: Vec<Box<dyn Job>>, pages: &mut Option<u64>| {
            size(&conn, &batch, room, pages);
            commit_batch(&mut conn, batch, &AtomicU64::new(0), false);
        };
        let (a, mut ra) = page_limit(Kind::Drains);
        let (b, mut rb) = page_limit(Kind::LeaseOnly);
        run(vec![a, b], &mut pages);
        assert_eq!(answer(&mut ra).expect("a"), 120);
        assert_eq!(answer(&mut rb).expect("b"), 120);
        assert_eq!(pages, Some(120));

        let (a, mut ra) = page_limit(Kind::Drains);
        let (b, mut rb) = page_limit(Kind::Grows);
        run(vec![a, b], &mut pages);
        assert_eq!(
            answer(&mut ra).expect("a"),
            100,
            "held by the growing write"
        );
        assert_eq!(answer(&mut rb).expect("b"), 100);
        assert_eq!(pages, Some(100));
    }

    #[test]
    fn only_a_transaction_of_lease_only_writes_commits_without_a_sync() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut conn = Connection::open(dir.path().join("sync.db")).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE t (v INTEGER)",
        )
        .expect("setup");
        let commits = AtomicU64::new(0);
        let level = |conn: &Connection| -> i64 {
            conn.pragma_query_value(None, "synchronous", |row| row.get(0))
                .expect("synchronous")
        };

        let (a, mut ra) = sync_level(true);
        let (b, mut rb) = sync_level(true);
        commit_batch(&mut conn, vec![a, b], &commits, true);
        assert_eq!(answer(&mut ra).expect("a"), 1, "NORMAL for leases alone");
        assert_eq!(answer(&mut rb).expect("b"), 1);
        assert_eq!(level(&conn), 2, "FULL again after the commit");

        let (a, mut ra) = sync_level(true);
        let (b, mut rb) = sync_level(false);
        commit_batch(&mut conn, vec![a, b], &commits, true);
        assert_eq!(
            answer(&mut ra).expect("a"),
            2,
            "a lease shares a synced commit"
        );
        assert_eq!(answer(&mut rb).expect("b"), 2);

        let (a, mut ra) = sync_level(true);
        commit_batch(&mut conn, vec![a], &commits, false);
        assert_eq!(answer(&mut ra).expect("a"), 2, "not relaxed unless asked");
        assert_eq!(commits.load(Ordering::Relaxed), 3);
        assert_eq!(values(&conn), vec![1; 5]);
    }

    #[test]
    fn a_failing_write_is_undone_alone_and_the_others_commit() {
        let mut conn = table();
        let (a, mut ra) = insert(1, None);
        let (b, mut rb) = insert(2, Some("SELECT 1"));
        let (c, mut rc) = insert(3, None);
        commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
        assert_eq!(answer(&mut ra).expect("first"), 1);
        assert!(matches!(answer(&mut rb), Err(Error::InvalidConfig(_))));
        assert_eq!(answer(&mut rc).expect("third"), 3);
        assert_eq!(values(&conn), vec![1, 3]);
        assert!(conn.is_autocommit(), "no transaction left open");
    }

    #[test]
    fn a_write_alone_commits_or_leaves_nothing() {
        let mut conn = table();
        let commits = AtomicU64::new(0);
        let (a, mut ra) = insert(1, None);
        commit_batch(&mut conn, vec![a], &commits, false);
        assert_eq!(answer(&mut ra).expect("committed"), 1);
        assert_eq!(commits.load(Ordering::Relaxed), 1);

        let (b, mut rb) = insert(2, Some("SELECT 1"));
        commit_batch(&mut conn, vec![b], &commits, false);
        assert!(matches!(answer(&mut rb), Err(Error::InvalidConfig(_))));
        assert_eq!(values(&conn), vec![1], "the failed write left nothing");
        assert_eq!(commits.load(Ordering::Relaxed), 1, "and committed nothing");
        assert!(conn.is_autocommit(), "no transaction left open");
    }

    #[test]
    fn writes_of_a_transaction_lost_to_another_write_fail_too() {
        let mut conn = table();
        let (a, mut ra) = insert(1, None);
        // The failure takes the whole transaction with it, as a full disk may.
        let (b, mut rb) = insert(2, Some("ROLLBACK"));
        let (c, mut rc) = insert(3, None);
        commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
        assert!(answer(&mut ra).is_err(), "its transaction was rolled back");
        assert!(answer(&mut rb).is_err());
        assert_eq!(answer(&mut rc).expect("third, in a new transaction"), 3);
        assert_eq!(values(&conn), vec![3]);
    }

    #[test]
    fn a_failed_commit_fails_every_write_of_the_batch() {
        let mut conn = table();
        // A deferred foreign key that is broken at commit time makes COMMIT fail.
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .expect("tables");
        let (a, mut ra) = insert(1, None);
        let (reply, mut rb) = oneshot::channel();
        let broken = Task {
            work: |conn: &Connection| -> Result<i64> {
                conn.execute("INSERT INTO child VALUES (42)", [])
                    .map_err(db)?;
                Ok(42)
            },
            reply,
            kind: Kind::Grows,
        };
        commit_batch(
            &mut conn,
            vec![a, Box::new(broken)],
            &AtomicU64::new(0),
            false,
        );
        assert!(answer(&mut ra).is_err());
        assert!(answer(&mut rb).is_err());
        assert_eq!(values(&conn), Vec::<i64>::new());
        assert!(
            conn.is_autocommit(),
            "the failed transaction was rolled back"
        );
    }
}
