//! The group commit: one transaction for a batch of writes, each in its own savepoint (or
//! merged with its neighbours when they can share one statement), the answers sent only after
//! the commit, and a write that fails rolled back alone.

use super::*;

/// Runs a batch of writes in one transaction and answers each after the commit, which it
/// counts in `commits` first. With `relax`, a batch of lease-only writes commits at
/// `synchronous = NORMAL`: in WAL mode that commit is written but not synced, and it becomes
/// durable with the next synced commit.
pub(super) fn commit_batch(
    conn: &mut Connection,
    batch: Vec<Box<dyn Job>>,
    commits: &AtomicU64,
    relax: bool,
) {
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
pub(super) enum Step {
    One(Box<dyn Job>),
    Merged(Vec<Enqueue>),
}

/// The batch as steps, in arrival order: each run of two or more enqueues becomes one step.
pub(super) fn steps(batch: Vec<Box<dyn Job>>) -> VecDeque<Step> {
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
