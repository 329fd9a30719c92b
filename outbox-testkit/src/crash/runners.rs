//! The child roles of the shared-store scenarios: runner processes on one store at once
//! (`shared-runner`), one that hangs in its deliveries until it is killed (`stuck`), and the
//! one that takes its records over (`taker`).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use outbox_core::{
    async_trait, Event, Millis, Outbox, Outcome, Record, RunnerConfig, Sink, Store, TokioClock,
};
use tokio::sync::{broadcast::error::RecvError, watch};

use super::worker::{drain, ledger, worker_policy};
use super::{GO, LOG_ENV, STOP};
use crate::harness::Failure;

/// The word a log or ledger line uses for a record without a group.
pub(super) const NO_GROUP: &str = "-";

fn group_word(record: &Record) -> &str {
    record.group.as_deref().unwrap_or(NO_GROUP)
}

/// What the parent has said to a shared runner on its stdin; later signals win.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Signal {
    /// Deliveries wait at the gate.
    Wait,
    /// Deliveries go on.
    Go,
    /// Shut down.
    Stop,
}

/// Reads the parent's signals from stdin on a thread of its own. A closed stdin means stop:
/// the parent is done with this worker, or gone.
fn signals() -> watch::Receiver<Signal> {
    let (tx, rx) = watch::channel(Signal::Wait);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let signal = match line.as_deref().map(str::trim) {
                Ok(GO) => Signal::Go,
                Ok(STOP) | Err(_) => break,
                Ok(_) => continue,
            };
            tx.send_modify(|s| *s = (*s).max(signal));
        }
        tx.send_modify(|s| *s = Signal::Stop);
    });
    rx
}

/// The sink of the shared runners: appends `start <id> <group> <worker>` to the shared log,
/// waits at the parent's gate, then appends `end ...` and reports success. Each line is one
/// `write` to a file opened for appending, so the log holds the lines of every process in the
/// order they were written: a delivery's `end` comes before the commit of its outcome, and its
/// `start` after the commit of its claim.
struct LogSink {
    log: Mutex<File>,
    worker: u64,
    gate: watch::Receiver<Signal>,
}

impl LogSink {
    fn append(&self, phase: &str, record: &Record) -> std::io::Result<()> {
        let line = format!(
            "{phase} {} {} {}\n",
            record.id.0,
            group_word(record),
            self.worker
        );
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.write_all(line.as_bytes())
    }
}

#[async_trait]
impl Sink for LogSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        if let Err(err) = self.append("start", record) {
            return Outcome::no_answer(format!("delivery log: {err}"));
        }
        ledger(format_args!("sink {} start", record.id.0));
        // Until the parent has seen two processes holding records, nothing is delivered:
        // so the work is shared however the processes are scheduled.
        let mut gate = self.gate.clone();
        let _ = gate.wait_for(|s| *s >= Signal::Go).await;
        // Let the other tasks of this process, and so its other deliveries, run meanwhile.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        match self.append("end", record) {
            Ok(()) => Outcome::Delivered,
            Err(err) => Outcome::no_answer(format!("delivery log: {err}")),
        }
    }
}

/// A runner process among several on one store: delivers through [`LogSink`] until the parent
/// says stop, printing `delivered <id>` after each delivery's commit.
pub(super) async fn shared_runner(
    store: Arc<dyn Store>,
    base: Millis,
    worker: u64,
) -> Result<(), Failure> {
    let path = std::env::var(LOG_ENV)
        .map_err(|_| Failure::new(format!("worker: {LOG_ENV} is not set")))?;
    let log = OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(|e| Failure::new(format!("worker: cannot open the delivery log {path}: {e}")))?;
    let mut signal = signals();
    let sink = LogSink {
        log: Mutex::new(log),
        worker,
        gate: signal.clone(),
    };
    let config = RunnerConfig {
        batch: 4,
        concurrency: 2,
        // Another process's commit frees the next record of a group; a short poll finds it.
        safety_poll: Some(Duration::from_millis(50)),
        seed: Some(worker),
        ..RunnerConfig::default()
    };
    let outbox = Outbox::builder(store, sink)
        .policy(worker_policy())
        .config(config)
        .clock(Arc::new(TokioClock::starting_at(base)))
        .start()
        .await?;
    let mut events = outbox.events();
    ledger(format_args!("started"));
    let listener = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(Event::Delivered { id }) => ledger(format_args!("delivered {}", id.0)),
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => ledger(format_args!("lagged {n}")),
                Err(RecvError::Closed) => break,
            }
        }
    });
    let _ = signal.wait_for(|s| *s == Signal::Stop).await;
    outbox.shutdown(Duration::from_secs(60)).await?;
    // The event stream ends when the last handle goes (shutdown takes `&self`).
    drop(outbox);
    let _ = listener.await;
    ledger(format_args!("done"));
    Ok(())
}

/// The sink of the runner that is killed: prints `sink <id> start` and never answers.
struct StuckSink;

#[async_trait]
impl Sink for StuckSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        ledger(format_args!("sink {} start", record.id.0));
        std::future::pending().await
    }
}

/// A runner whose deliveries hang until the parent kills the process (or closes its stdin,
/// when the parent fails first).
pub(super) async fn stuck_runner(store: Arc<dyn Store>, base: Millis) -> Result<(), Failure> {
    let config = RunnerConfig {
        batch: 8,
        concurrency: 4,
        seed: Some(0),
        ..RunnerConfig::default()
    };
    let outbox = Outbox::builder(store, StuckSink)
        .policy(worker_policy())
        .config(config)
        .clock(Arc::new(TokioClock::starting_at(base)))
        .start()
        .await?;
    ledger(format_args!("started"));
    let _ = signals().wait_for(|s| *s == Signal::Stop).await;
    drop(outbox);
    Err(Failure::new(
        "worker: the parent let the stuck runner go unkilled",
    ))
}

/// The sink of the runner that takes over: prints `sink <id> <group> <interrupted>` and
/// reports success.
struct TakerSink;

#[async_trait]
impl Sink for TakerSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        ledger(format_args!(
            "sink {} {} {}",
            record.id.0,
            group_word(record),
            record.interrupted
        ));
        Outcome::Delivered
    }
}

/// A runner that starts after a dead one and drains the store.
pub(super) async fn taker_runner(store: Arc<dyn Store>, base: Millis) -> Result<(), Failure> {
    let config = RunnerConfig {
        batch: 8,
        concurrency: 4,
        seed: Some(1),
        ..RunnerConfig::default()
    };
    let outbox = Outbox::builder(store, TakerSink)
        .policy(worker_policy())
        .config(config)
        .clock(Arc::new(TokioClock::starting_at(base)))
        .start()
        .await?;
    ledger(format_args!("started"));
    drain(&outbox).await?;
    outbox.shutdown(Duration::from_secs(60)).await?;
    ledger(format_args!("done"));
    Ok(())
}
