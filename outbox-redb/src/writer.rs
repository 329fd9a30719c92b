//! Group commit: one dedicated thread owns every write transaction the store commits.
//!
//! Requests (enqueue, claim, renew, apply, prune) arrive over a channel. The thread takes every
//! request queued at that moment (up to [`RedbConfig::max_batch`]), runs them in arrival order in
//! one write transaction, commits once, and only then answers each request. Many concurrent
//! enqueues therefore share one sync to the disk, and no blocking redb call ever runs on an
//! async executor's worker thread.
//!
//! Each request stays atomic on its own: if one request of a batch fails, the transaction is
//! aborted and every request of the batch is run again in a transaction of its own, so a failed
//! request writes nothing and does not take the others down with it.
//!
//! A batch that changed nothing (a claim with nothing due, an apply whose guards all failed, a
//! renew of leases no longer held, a prune with nothing old) is aborted rather than committed:
//! a durable redb commit costs two syncs even when it carries no change.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use outbox_core::{
    Applied, Claim, Error, Lease, Millis, NewRecord, Record, RecordId, Result, Transition,
};
use redb::Database;
use tokio::sync::oneshot;

use crate::config::RedbConfig;
use crate::error::from_redb;
use crate::queue::Tables;

/// A write request.
#[derive(Debug)]
pub(crate) enum Op {
    Enqueue(Vec<NewRecord>, Millis),
    Claim(Claim),
    Renew(Vec<RecordId>, Lease),
    Apply(Vec<Transition>),
    Prune(Millis),
}

/// The answer to a write request.
#[derive(Debug)]
pub(crate) enum Reply {
    Ids(Vec<RecordId>),
    Records(Vec<Record>),
    Done,
    Applied(Applied),
    Count(u64),
}

impl Op {
    /// Runs the request in `tables`; also says whether it wrote anything. Takes `&self` so a
    /// failed batch can run it again alone.
    fn run(&self, tables: &mut Tables<'_>) -> Result<(Reply, bool)> {
        Ok(match self {
            Op::Enqueue(records, now) => {
                let ids = tables.enqueue(records.clone(), *now)?;
                // Even an empty batch has rewritten the last id: treat it as a change.
                (Reply::Ids(ids), true)
            }
            Op::Claim(claim) => {
                let claimed = tables.claim(*claim)?;
                let changed = !claimed.is_empty();
                (Reply::Records(claimed), changed)
            }
            Op::Renew(ids, lease) => {
                let renewed = tables.renew(ids, *lease)?;
                (Reply::Done, renewed > 0)
            }
            Op::Apply(transitions) => {
                let applied = tables.apply(transitions.clone())?;
                let changed = applied.skipped.len() < transitions.len();
                (Reply::Applied(applied), changed)
            }
            Op::Prune(older_than) => {
                let pruned = tables.prune(*older_than)?;
                (Reply::Count(pruned), pruned > 0)
            }
        })
    }
}

struct Job {
    op: Op,
    reply: oneshot::Sender<Result<Reply>>,
}

/// The handle on the writer thread. Dropping it lets the thread finish what is queued, then
/// waits for it, so the file is closed when the store is gone.
#[derive(Debug)]
pub(crate) struct Writer {
    sender: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer thread over `db`.
    pub(crate) fn start(db: Arc<Database>, config: RedbConfig) -> Result<Writer> {
        let (sender, receiver) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("outbox-redb-writer".into())
            .spawn(move || run(&db, &config, &receiver))
            .map_err(Error::backend)?;
        Ok(Writer {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Queues a request and waits for its answer, which comes after its commit.
    pub(crate) async fn submit(&self, op: Op) -> Result<Reply> {
        let (reply, answer) = oneshot::channel();
        let sender = self.sender.as_ref().ok_or(Error::Stopped)?;
        sender.send(Job { op, reply }).map_err(|_| Error::Stopped)?;
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

fn run(db: &Database, config: &RedbConfig, receiver: &mpsc::Receiver<Job>) {
    let max_batch = config.max_batch.max(1);
    while let Ok(first) = receiver.recv() {
        let mut jobs = vec![first];
        let mut yielded = false;
        while jobs.len() < max_batch {
            match receiver.try_recv() {
                Ok(job) => jobs.push(job),
                // A burst's first request arrives alone: let the callers that woke with it
                // queue theirs before committing it.
                Err(mpsc::TryRecvError::Empty) if !yielded => {
                    yielded = true;
                    std::thread::yield_now();
                }
                Err(_) => break,
            }
        }
        let ops: Vec<&Op> = jobs.iter().map(|job| &job.op).collect();
        match commit(db, config, &ops) {
            Ok(replies) => {
                for (job, reply) in jobs.into_iter().zip(replies) {
                    let _ = job.reply.send(Ok(reply));
                }
            }
            Err(err) if jobs.len() == 1 => {
                if let Some(job) = jobs.pop() {
                    let _ = job.reply.send(Err(err));
                }
            }
            Err(_) => {
                for job in jobs {
                    let answer = commit(db, config, &[&job.op]).and_then(|mut replies| {
                        replies.pop().ok_or_else(|| Error::Backend {
                            detail: "a committed request had no answer".into(),
                            source: None,
                        })
                    });
                    let _ = job.reply.send(answer);
                }
            }
        }
    }
}

/// Runs `ops` in one write transaction and commits it; nothing is written if any fails, and
/// the transaction is aborted, not committed (no sync), when none of them changed anything.
fn commit(db: &Database, config: &RedbConfig, ops: &[&Op]) -> Result<Vec<Reply>> {
    let mut txn = db.begin_write().map_err(from_redb)?;
    config.prepare(&mut txn)?;
    let mut changed = false;
    let replies = {
        let mut tables = Tables::open(&txn)?;
        let mut replies = Vec::with_capacity(ops.len());
        for op in ops {
            match op.run(&mut tables) {
                Ok((reply, wrote)) => {
                    changed |= wrote;
                    replies.push(reply);
                }
                Err(err) => {
                    drop(tables);
                    // The error of the request is the one to report; an abort error adds
                    // nothing a caller can act on.
                    let _ = txn.abort();
                    return Err(err);
                }
            }
        }
        replies
    };
    if changed {
        txn.commit().map_err(from_redb)?;
    } else {
        // Every answer was read from the state the transaction saw, which it leaves as it was.
        txn.abort().map_err(from_redb)?;
    }
    Ok(replies)
}
