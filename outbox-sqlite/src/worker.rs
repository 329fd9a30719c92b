//! The two threads that own the store's connections, so no SQLite call ever runs on an async
//! executor's threads.
//!
//! The *writer* commits in groups: it takes every write waiting in its queue (up to
//! `max_group_commit`), runs each in its own savepoint inside one `BEGIN IMMEDIATE`
//! transaction, commits once, and only then answers each caller. Sixty-four producers thus
//! share one fsync instead of paying one each, and every answer still comes after the write is
//! durable. A write that fails is rolled back to its savepoint and fails alone.
//!
//! The *reader* answers queries on a second connection; in WAL mode it reads the last committed
//! state without waiting for the writer.

use std::sync::mpsc;
use std::thread;

use outbox_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{db, echo};

/// A write waiting for the writer thread.
trait Job: Send {
    /// Runs the write on the connection, inside the batch's transaction.
    fn run(self: Box<Self>, conn: &Connection) -> Box<dyn Ran>;
    /// Answers without running: the batch could not start.
    fn abort(self: Box<Self>, err: Error);
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

/// The handle on the writer thread.
#[derive(Debug)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the thread; `closed` fires once it has closed its connection.
    pub(crate) fn start(
        conn: Connection,
        max_group_commit: usize,
        closed: oneshot::Sender<()>,
    ) -> Result<Self> {
        let (queue, jobs) = mpsc::channel::<Box<dyn Job>>();
        thread::Builder::new()
            .name("outbox-sqlite-writer".into())
            .spawn(move || {
                let mut conn = conn;
                while let Ok(first) = jobs.recv() {
                    let mut batch = vec![first];
                    while batch.len() < max_group_commit.max(1) {
                        match jobs.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    commit_batch(&mut conn, batch);
                }
                close(conn);
                let _ = closed.send(());
            })
            .map_err(Error::backend)?;
        Ok(Writer { queue })
    }

    /// Runs `work` in the next group commit and returns its result once committed.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Box::new(Task { work, reply }))
            .map_err(|_| Error::Stopped)?;
        wait(answer).await
    }
}

/// Waits for a thread's answer.
///
/// On a tokio runtime the wait itself runs in the blocking pool: tokio's paused clock (the
/// way runner tests make minutes pass at once) jumps to the next timer whenever no task can
/// run, and a future waiting on another thread looks exactly like that, while a running
/// blocking task holds the clock back. Elsewhere the answer is simply awaited.
pub(crate) async fn wait<T: Send + 'static>(answer: oneshot::Receiver<Result<T>>) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return answer.await.map_err(|_| Error::Stopped)?;
    }
    tokio::task::spawn_blocking(move || answer.blocking_recv())
        .await
        .map_err(Error::backend)?
        .map_err(|_| Error::Stopped)?
}

fn close(conn: Connection) {
    if let Err((_, err)) = conn.close() {
        tracing::warn!(error = %err, "closing the outbox connection failed");
    }
}

/// Runs a batch of writes in one transaction and answers each after the commit.
fn commit_batch(conn: &mut Connection, batch: Vec<Box<dyn Job>>) {
    let mut ran: Vec<Box<dyn Ran>> = Vec::with_capacity(batch.len());
    let mut jobs = batch.into_iter();
    'transaction: loop {
        if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE").map_err(db) {
            for job in jobs {
                job.abort(echo(&err));
            }
            // Writes that ran before belong to a transaction that is gone.
            for done in ran.drain(..) {
                done.settle(Err(echo(&err)));
            }
            return;
        }
        for job in jobs.by_ref() {
            if let Err(err) = conn.execute_batch("SAVEPOINT job").map_err(db) {
                job.abort(err);
                continue;
            }
            let done = job.run(conn);
            if done.error().is_none() {
                if let Err(err) = conn.execute_batch("RELEASE job").map_err(db) {
                    done.settle(Err(err));
                } else {
                    ran.push(done);
                }
                continue;
            }
            if !conn.is_autocommit() {
                // The write failed alone: undo what it did and go on with the others.
                let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
                done.settle(Ok(()));
                continue;
            }
            // SQLite rolled back the whole transaction (a full disk or an I/O error can):
            // the writes that ran before this one are lost, so they fail too.
            let echoes: Vec<Error> = ran
                .iter()
                .map(|_| done.error().map_or(Error::Stopped, echo))
                .collect();
            for (earlier, err) in ran.drain(..).zip(echoes) {
                earlier.settle(Err(err));
            }
            done.settle(Ok(()));
            continue 'transaction;
        }
        break;
    }
    let commit = conn.execute_batch("COMMIT").map_err(db);
    match commit {
        Ok(()) => {
            for done in ran {
                done.settle(Ok(()));
            }
        }
        Err(err) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            for done in ran {
                done.settle(Err(echo(&err)));
            }
        }
    }
}

type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

/// The handle on the reader thread.
#[derive(Debug)]
pub(crate) struct Reader {
    queue: mpsc::Sender<ReadJob>,
}

impl Reader {
    /// Starts the thread; `closed` fires once it has closed its connection.
    pub(crate) fn start(conn: Connection, closed: oneshot::Sender<()>) -> Result<Self> {
        let (queue, jobs) = mpsc::channel::<ReadJob>();
        thread::Builder::new()
            .name("outbox-sqlite-reader".into())
            .spawn(move || {
                let mut conn = conn;
                while let Ok(job) = jobs.recv() {
                    job(&mut conn);
                }
                close(conn);
                let _ = closed.send(());
            })
            .map_err(Error::backend)?;
        Ok(Reader { queue })
    }

    /// Runs `work` on the reader's connection.
    pub(crate) async fn read<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Box::new(move |conn: &mut Connection| {
                let _ = reply.send(work(conn));
            }))
            .map_err(|_| Error::Stopped)?;
        wait(answer).await
    }
}
