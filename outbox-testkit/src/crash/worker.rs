//! The worker role of the crash scenarios: a child process that runs an outbox on the store
//! and prints a flushed ledger line after each commit returns.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    async_trait, Backoff, Event, Jitter, NewRecord, Outbox, Outcome, Record, RetryPolicy,
    RunnerConfig, Sink, TokioClock,
};

use super::{
    runners, BASE_ENV, CRASH_LOOP, ENQUEUE_ENV, LEDGER, LOCATION_ENV, ROLE_ENV, ROUND_ENV,
    SHARED_RUNNER, STUCK, TAKER, WORKER_NO_ENV,
};
use crate::backend::Backend;
use crate::harness::Failure;

/// Writes one ledger line and flushes it before returning.
pub(super) fn ledger(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // A worker whose stdout is gone has lost its parent; nothing useful is left to do.
    let _ = writeln!(out, "{LEDGER} {line}");
    let _ = out.flush();
}

/// The policy of the workers: tiny real-time backoffs so a drain takes milliseconds.
pub(super) fn worker_policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_millis(1),
            2.0,
            Duration::from_millis(16),
        ))
        .with_jitter(Jitter::None)
        .with_max_attempts(3)
        .with_max_interruptions(3)
}

/// Records a drain worker claims per round.
pub(super) const WORKER_BATCH: usize = 4;

/// Records per drain worker.
pub(super) const RECORDS: usize = 24;

/// The entry of the worker test the macro generates: returns at once unless the test binary
/// was started as a worker by a crash scenario.
pub fn worker_entry<B: Backend>(backend: impl FnOnce() -> B) {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => panic!("worker: no tokio runtime: {err}"),
    };
    let backend = {
        let _context = runtime.enter();
        backend()
    };
    if let Err(failure) = runtime.block_on(worker_main(&role, backend)) {
        panic!("worker {role}: {failure}");
    }
}

fn env(name: &str) -> Result<String, Failure> {
    std::env::var(name).map_err(|_| Failure::new(format!("worker: {name} is not set")))
}

fn env_u64(name: &str) -> Result<u64, Failure> {
    env(name)?
        .parse()
        .map_err(|e| Failure::new(format!("worker: {name} is not a number: {e}")))
}

/// The worker's sink: prints what it is about to answer before answering.
struct WorkerSink;

#[async_trait]
impl Sink for WorkerSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        let id = record.id.0;
        if record.payload.starts_with(b"abort") {
            ledger(format_args!("sink {id} abort"));
            std::process::abort();
        }
        let key = &record.key;
        if record.payload.starts_with(b"poison") || (id.is_multiple_of(5) && record.attempts == 0) {
            ledger(format_args!("sink {id} 503 {key}"));
            return outbox_core::http::classify(503, None);
        }
        ledger(format_args!("sink {id} ok {key}"));
        Outcome::Delivered
    }
}

async fn worker_main<B: Backend>(role: &str, backend: B) -> Result<(), Failure> {
    let location = env(LOCATION_ENV)?;
    let base = env_u64(BASE_ENV)?;
    let round = env_u64(ROUND_ENV)?;
    let enqueue = env(ENQUEUE_ENV)? == "1";
    ledger(format_args!("opening"));
    let store = backend.open(&location).await?;
    match role {
        SHARED_RUNNER => return runners::shared_runner(store, base, env_u64(WORKER_NO_ENV)?).await,
        STUCK => return runners::stuck_runner(store, base).await,
        TAKER => return runners::taker_runner(store, base).await,
        _ => {}
    }
    let config = RunnerConfig {
        batch: WORKER_BATCH,
        concurrency: 1,
        seed: Some(round),
        ..RunnerConfig::default()
    };
    let outbox = Outbox::builder(store, WorkerSink)
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
                Ok(Event::Attempted { id, .. }) => ledger(format_args!("claimed {}", id.0)),
                Ok(Event::Delivered { id }) => ledger(format_args!("delivered {}", id.0)),
                Ok(Event::Retrying { id, at, spent }) => {
                    ledger(format_args!("scheduled {} {at} {spent}", id.0))
                }
                Ok(Event::Parked { id, .. }) => ledger(format_args!("parked {}", id.0)),
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    ledger(format_args!("lagged {n}"))
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    if enqueue {
        let records: Vec<NewRecord> = match role {
            // The crashing record goes first, so the healthy one is claimed with it: a crash
            // charged to every record of the batch would park the healthy one as well.
            CRASH_LOOP => vec![
                NewRecord::new(b"abort".to_vec()).with_key("abort"),
                NewRecord::new(b"healthy".to_vec()).with_key("healthy"),
            ],
            _ => (0..RECORDS)
                .map(|i| {
                    let key = format!("r{round}-{i}");
                    let payload = if i % 7 == 3 {
                        format!("poison-{key}")
                    } else {
                        key.clone()
                    };
                    NewRecord::new(payload.into_bytes()).with_key(key)
                })
                .collect(),
        };
        for chunk in records.chunks(3) {
            let ids = outbox.enqueue_batch(chunk.to_vec()).await?;
            for (id, record) in ids.iter().zip(chunk) {
                ledger(format_args!("enqueued {} {}", id.0, record.key));
            }
            tokio::task::yield_now().await;
        }
    }
    drain(&outbox).await?;
    outbox.shutdown(Duration::from_secs(60)).await?;
    // The event stream ends when the last handle goes (shutdown takes `&self`).
    drop(outbox);
    let _ = listener.await;
    ledger(format_args!("done"));
    Ok(())
}

/// Drains everything the worker can: flush covers what is due now, and the retries the tiny
/// backoffs schedule a few milliseconds out are awaited through the runner's events.
pub(super) async fn drain(outbox: &Outbox) -> Result<(), Failure> {
    let mut progress = outbox.events();
    loop {
        outbox.flush(Duration::from_secs(60)).await?;
        let stats = outbox.stats().await?;
        if stats.pending + stats.retrying + stats.in_flight == 0 {
            return Ok(());
        }
        if tokio::time::timeout(Duration::from_secs(60), progress.recv())
            .await
            .is_err()
        {
            return Err(Failure::new(format!(
                "worker: the queue stopped moving: {stats:?}"
            )));
        }
    }
}
