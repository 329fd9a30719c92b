//! Group commit: one dedicated thread owns every write transaction the store commits.
//!
//! A write is a typed closure over the [`Tables`] of one transaction (enqueue, a round, renew,
//! prune, the halt). The thread takes every write queued at that moment (up to
//! [`RedbConfig::max_batch`]; after a batch of several, it waits briefly for the rest of a
//! burst: [`outbox_core::group_commit`]), running each in one write transaction as it takes
//! it, in arrival order (a burst's first writes run while the rest are still arriving), then
//! commits once, and only then answers each caller with its own typed result. Many concurrent
//! enqueues therefore share one sync to the disk, and no blocking redb call ever runs on an
//! async executor's worker thread.
//!
//! Each write stays atomic on its own: if one write of a batch fails, it ends the batch, the
//! transaction is aborted and every write that ran in it runs again in a transaction of its
//! own, so a failed write leaves nothing and does not take the others down with it (the
//! writes still queued start the next batch). A write may therefore run
//! more than once; it borrows what it writes from its closure instead of consuming it. An
//! enqueue refused by the size cap ([`Error::QueueFull`]) is not a failure of the batch: it
//! has taken back its own writes, so the others commit as they ran.
//!
//! A batch that changed nothing (a claim with nothing due, an apply whose guards all failed, a
//! renew of leases no longer held, a prune with nothing old) is aborted rather than committed:
//! a durable commit costs a sync even when it carries no change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use outbox_core::group_commit::GroupCommit;
use outbox_core::{Error, Result};
use redb::{Database, WriteTransaction};
use tokio::sync::oneshot;

use crate::config::RedbConfig;
use crate::error::from_redb;
use crate::queue::Tables;

/// A write waiting for the writer thread, with the caller's answer channel.
trait Job: Send {
    /// Runs the write in `tables`, keeping its result (replacing that of an earlier run);
    /// false when it failed and left writes the transaction must not commit.
    fn run(&mut self, tables: &mut Tables<'_>) -> bool;
    /// Answers the caller: its own error if its last run failed, else `commit`'s error if the
    /// transaction did not commit, else its result.
    fn settle(self: Box<Self>, commit: Result<()>);
}

struct Task<F, T> {
    work: F,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Job for Task<F, T>
where
    F: FnMut(&mut Tables<'_>) -> Result<T> + Send,
    T: Send,
{
    fn run(&mut self, tables: &mut Tables<'_>) -> bool {
        let result = (self.work)(tables);
        // An enqueue refused by the size cap took its writes back: the others may commit.
        let ok = matches!(result, Ok(_) | Err(Error::QueueFull { .. }));
        self.result = Some(result);
        ok
    }

    fn settle(self: Box<Self>, commit: Result<()>) {
        let answer = match (self.result, commit) {
            (Some(Err(own)), _) => Err(own),
            (_, Err(err)) => Err(err),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (None, Ok(())) => Err(Error::Backend {
                detail: "a committed write never ran".into(),
                source: None,
            }),
        };
        // The caller may have stopped waiting; nothing is owed to it then.
        let _ = self.reply.send(answer);
    }
}

/// Why a transaction did not commit.
enum Failed {
    /// A write failed; its own error is its answer.
    Write,
    /// The engine failed to begin, prepare or commit the transaction, or to open or close its
    /// tables.
    Engine(Error),
}

impl Failed {
    /// What a write that ran in the failed transaction answers, through [`Job::settle`].
    fn into_commit(self) -> Result<()> {
        match self {
            Failed::Write => Ok(()),
            Failed::Engine(err) => Err(err),
        }
    }
}

/// The handle on the writer thread. Dropping it lets the thread finish what is queued, then
/// waits for it, so the file is closed when the store is gone.
#[derive(Debug)]
pub(crate) struct Writer {
    sender: Option<mpsc::Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
    /// Transactions committed (a batch that changed nothing is aborted and not counted).
    commits: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the writer thread over `db`.
    pub(crate) fn start(db: Arc<Database>, config: RedbConfig) -> Result<Writer> {
        let (sender, receiver) = mpsc::channel::<Box<dyn Job>>();
        let commits = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&commits);
        let thread = std::thread::Builder::new()
            .name("outbox-redb-writer".into())
            .spawn(move || run(&db, &config, &receiver, &counter))
            .map_err(Error::backend)?;
        Ok(Writer {
            sender: Some(sender),
            thread: Some(thread),
            commits,
        })
    }

    /// How many transactions the thread has committed.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Runs `work` in the next group commit and returns its result once committed.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        F: FnMut(&mut Tables<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let sender = self.sender.as_ref().ok_or(Error::Stopped)?;
        let job = Box::new(Task {
            work,
            result: None,
            reply,
        });
        sender.send(job).map_err(|_| Error::Stopped)?;
        answer.await.map_err(|_| Error::Backend {
            detail: "the redb writer thread stopped before answering".into(),
            source: None,
        })?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            // A panic on the writer thread already answered its callers with an error.
            let _ = thread.join();
        }
    }
}

fn run(
    db: &Database,
    config: &RedbConfig,
    receiver: &mpsc::Receiver<Box<dyn Job>>,
    commits: &AtomicU64,
) {
    let mut group = GroupCommit::new();
    // A write taken after one of its batch failed, which starts the next batch.
    let mut next = None;
    while let Some(first) = next.take().or_else(|| receiver.recv().ok()) {
        let (mut jobs, committed) = match begin(db, config) {
            Ok(txn) => {
                let batch = gather_running(txn, first, receiver, &mut group, config, commits);
                next = batch.ended_by;
                (batch.jobs, batch.committed)
            }
            Err(err) => {
                let (jobs, _) = group.batch(first, receiver, config.max_batch, Ok, |_| true);
                (jobs, Err(Failed::Engine(err)))
            }
        };
        match committed {
            Ok(()) => jobs.into_iter().for_each(|job| job.settle(Ok(()))),
            Err(failed) if jobs.len() == 1 => {
                if let Some(job) = jobs.pop() {
                    job.settle(failed.into_commit());
                }
            }
            Err(_) => {
                for job in jobs {
                    let mut alone = [job];
                    let commit =
                        commit(db, config, &mut alone, commits).or_else(Failed::into_commit);
                    let [job] = alone;
                    job.settle(commit);
                }
            }
        }
    }
}

/// A write transaction as the store's configuration sets it up.
fn begin(db: &Database, config: &RedbConfig) -> Result<WriteTransaction> {
    let mut txn = db.begin_write().map_err(from_redb)?;
    config.prepare(&mut txn)?;
    Ok(txn)
}

/// Takes the batch that starts with `first` ([`GroupCommit::batch`]), running each write in
/// `txn` as it is taken, so a burst's writes run while the rest of it is still arriving rather
/// than after; then ends the transaction ([`finish`]). A write that fails ends the batch: the
/// transaction will not commit, the writes that ran in it run again alone, and the next write
/// taken (returned beside them) starts the next batch. When the tables cannot open, no write
/// runs and only `first` is taken, to be answered with that error.
fn gather_running(
    txn: WriteTransaction,
    first: Box<dyn Job>,
    receiver: &mpsc::Receiver<Box<dyn Job>>,
    group: &mut GroupCommit,
    config: &RedbConfig,
    commits: &AtomicU64,
) -> Gathered {
    let mut first = Some(first);
    let mut jobs = Vec::new();
    let mut ended_by = None;
    let ran = Tables::with(&txn, |tables| {
        let Some(mut first) = first.take() else {
            return Ok(true);
        };
        let mut ok = first.run(tables);
        let admit = |mut job: Box<dyn Job>| {
            if !ok {
                return Err(job);
            }
            ok = job.run(tables);
            Ok(job)
        };
        (jobs, ended_by) = group.batch(first, receiver, config.max_batch, admit, |_| true);
        Ok(ok)
    });
    jobs.extend(first);
    Gathered {
        jobs,
        ended_by,
        committed: finish(txn, ran, commits),
    }
}

/// A batch [`gather_running`] took and ended.
struct Gathered {
    /// Its writes, in arrival order.
    jobs: Vec<Box<dyn Job>>,
    /// The write taken after one of them failed, which starts the next batch.
    ended_by: Option<Box<dyn Job>>,
    /// How its transaction ended.
    committed: Result<(), Failed>,
}

/// Runs `jobs` in one write transaction and ends it ([`finish`]).
fn commit(
    db: &Database,
    config: &RedbConfig,
    jobs: &mut [Box<dyn Job>],
    commits: &AtomicU64,
) -> Result<(), Failed> {
    let txn = begin(db, config).map_err(Failed::Engine)?;
    let ran = Tables::with(&txn, |tables| {
        Ok(jobs.iter_mut().all(|job| job.run(tables)))
    });
    finish(txn, ran, commits)
}

/// Ends a transaction whose writes ran (`ran`: whether every one succeeded, and whether any
/// changed something; an error when the tables failed to open or close): nothing is written if
/// one failed, and the transaction is aborted, not committed (no sync), when none of them
/// changed anything.
fn finish(
    txn: WriteTransaction,
    ran: Result<(bool, bool)>,
    commits: &AtomicU64,
) -> Result<(), Failed> {
    let changed = match ran {
        Ok((true, changed)) => changed,
        Ok((false, _)) => {
            // The write's own error is the one to report; an abort error adds nothing a
            // caller can act on.
            let _ = txn.abort();
            return Err(Failed::Write);
        }
        Err(err) => {
            let _ = txn.abort();
            return Err(Failed::Engine(err));
        }
    };
    if changed {
        txn.commit().map_err(|e| Failed::Engine(from_redb(e)))?;
        commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    } else {
        // Every answer was read from the state the transaction saw, which it leaves as it was.
        txn.abort().map_err(|e| Failed::Engine(from_redb(e)))
    }
}
