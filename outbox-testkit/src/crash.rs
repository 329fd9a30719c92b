//! Crashes with a real child process: the test binary re-executes itself in a *worker* role
//! that runs an outbox on the store and prints a ledger line after each commit returns; the
//! parent kills it with SIGKILL at seeded random points and checks the ledger against the
//! reopened store.
//!
//! The `conformance!` macro generates the worker's entry test (`__outbox_testkit_worker`); it
//! returns at once unless [`ROLE_ENV`] is set, so in a normal run it is an empty test.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    async_trait, Backoff, Event, Jitter, Millis, NewRecord, Outbox, Outcome, Record, RecordId,
    RetryPolicy, RunnerConfig, Sink, TokioClock,
};

use crate::backend::Backend;
use crate::harness::Verdict;
use crate::harness::{ensure, ensure_eq, skip_unless, Capability, Failure, ScenarioResult};

/// Selects the worker role in a re-executed test binary.
pub const ROLE_ENV: &str = "OUTBOX_TESTKIT_WORKER";
const LOCATION_ENV: &str = "OUTBOX_TESTKIT_LOCATION";
const BASE_ENV: &str = "OUTBOX_TESTKIT_CLOCK_BASE";
const ROUND_ENV: &str = "OUTBOX_TESTKIT_ROUND";
const ENQUEUE_ENV: &str = "OUTBOX_TESTKIT_ENQUEUE";

/// Every ledger line starts with this, so libtest's own output is ignored.
const LEDGER: &str = "outbox-ledger";

/// The worker role that enqueues and drains.
const DRAIN: &str = "drain";
/// The worker role whose one record aborts the process on every delivery.
const CRASH_LOOP: &str = "crash-loop";

/// Where the worker entry test sits in the test binary, so the parent can run it alone.
///
/// ```
/// use outbox_testkit::crash::Worker;
/// let worker = Worker::at(module_path!(), "__outbox_testkit_worker");
/// assert_eq!(worker.test_path(), "__outbox_testkit_worker");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worker {
    test_path: String,
}

impl Worker {
    /// The worker test named `name` in the module `module_path` (as `module_path!()` gives it,
    /// crate name first).
    pub fn at(module_path: &str, name: &str) -> Self {
        let test_path = match module_path.split_once("::") {
            Some((_, module)) => format!("{module}::{name}"),
            None => name.to_owned(),
        };
        Worker { test_path }
    }

    /// The test's path inside the binary, as `--exact` wants it.
    pub fn test_path(&self) -> &str {
        &self.test_path
    }

    fn spawn(
        &self,
        role: &str,
        location: &str,
        round: u64,
        enqueue: bool,
    ) -> Result<Child, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(format!("cannot find the test binary: {e}")))?;
        Command::new(exe)
            .args([
                self.test_path.as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, role)
            .env(LOCATION_ENV, location)
            .env(BASE_ENV, child_base(round).to_string())
            .env(ROUND_ENV, round.to_string())
            .env(ENQUEUE_ENV, if enqueue { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start the worker: {e}")))
    }
}

/// Each child's clock starts an hour after the previous one's, so the leases a killed child
/// held have expired for the next, with no waiting.
fn child_base(round: u64) -> Millis {
    crate::scenarios::T0 + round * 3_600_000
}

/// What one child printed.
#[derive(Debug, Default)]
struct Run {
    lines: Vec<Vec<String>>,
    stderr: String,
    killed: bool,
}

impl Run {
    fn finished(&self) -> bool {
        self.lines
            .iter()
            .any(|l| l.first().map(String::as_str) == Some("done"))
    }
}

/// Runs one child; kills it with SIGKILL after `kill_after` ledger lines when given, and
/// collects every line it printed (the ones still in the pipe after the kill included).
fn run_child(
    worker: &Worker,
    role: &str,
    location: &str,
    round: u64,
    enqueue: bool,
    kill_after: Option<usize>,
) -> Result<Run, Failure> {
    let mut child = worker.spawn(role, location, round, enqueue)?;
    let mut run = Run::default();
    let stderr = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });
    if kill_after == Some(0) {
        let _ = child.kill();
        run.killed = true;
    }
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may print "test <name> ... " without a newline before the first line.
            let Some(at) = line.find(LEDGER) else {
                continue;
            };
            let rest = &line[at + LEDGER.len()..];
            run.lines
                .push(rest.split_whitespace().map(str::to_owned).collect());
            if !run.killed && kill_after == Some(run.lines.len()) {
                // `Child::kill` sends SIGKILL on Unix: no destructor, no flush, no goodbye.
                let _ = child.kill();
                run.killed = true;
            }
        }
    }
    let _ = child.wait();
    run.stderr = stderr_reader.join().unwrap_or_default();
    Ok(run)
}

/// Writes one ledger line and flushes it before returning.
fn ledger(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // A worker whose stdout is gone has lost its parent; nothing useful is left to do.
    let _ = writeln!(out, "{LEDGER} {line}");
    let _ = out.flush();
}

/// The policy of the workers: tiny real-time backoffs so a drain takes milliseconds.
fn worker_policy() -> RetryPolicy {
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

/// Records per drain worker.
const RECORDS: usize = 24;

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
    if let Err(failure) = runtime.block_on(worker_main(&role, backend())) {
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
        if record.payload.starts_with(b"poison") || (id % 5 == 0 && record.attempts == 0) {
            ledger(format_args!("sink {id} 503"));
            return outbox_core::http::classify(503, None);
        }
        ledger(format_args!("sink {id} ok"));
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
    let config = RunnerConfig {
        batch: 4,
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
            // The healthy record goes first: a record claimed in the same batch as the
            // crashing one but not yet attempted is charged each interruption too.
            CRASH_LOOP => vec![
                NewRecord::new(b"healthy".to_vec()).with_key("healthy"),
                NewRecord::new(b"abort".to_vec()).with_key("abort"),
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
    // Drain everything the worker can: flush covers what is due now, and the retries the
    // tiny backoffs schedule a few milliseconds out are awaited through the runner's events.
    let mut progress = outbox.events();
    loop {
        outbox.flush(Duration::from_secs(60)).await?;
        let stats = outbox.stats().await?;
        if stats.pending + stats.retrying + stats.in_flight == 0 {
            break;
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
    outbox.shutdown(Duration::from_secs(60)).await?;
    let _ = listener.await;
    ledger(format_args!("done"));
    Ok(())
}

fn number(line: &[String], at: usize) -> Option<u64> {
    line.get(at).and_then(|s| s.parse().ok())
}

/// SIGKILL at random points: several workers enqueue and drain on one store and are killed
/// at seeded random ledger lines (the first one during opening and start-up recovery), then one
/// runs to the end. After every worker, against the reopened store: no acknowledged enqueue is
/// lost, nothing acknowledged as delivered is still queued, every record's attempts lie between
/// the attempts acknowledged and the 503s the sink gave, no deadline is earlier than the last
/// one acknowledged, parked records are still parked. At the end: only records that spent their
/// budget or crash-looped remain, the delivered counter counts each delivered record once, and
/// duplicates at the sink are bounded by the number of kills.
pub async fn crash_sigkill(backend: &dyn Backend, worker: &Worker) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "crash_sigkill", Capability::Persistent) {
        return Ok(skip);
    }
    let seed = crate::scenarios::seed_from_env()?;
    crash_sigkill_seeded(backend, worker, seed)
        .await
        .map_err(|f| {
            f.context(format!(
                "seed {seed} (replay with {}={seed})",
                crate::scenarios::SEED_ENV
            ))
        })?;
    Ok(Verdict::Passed)
}

/// [`crash_sigkill`] with a given seed for the kill points.
pub async fn crash_sigkill_seeded(
    backend: &dyn Backend,
    worker: &Worker,
    seed: u64,
) -> Result<(), Failure> {
    const KILLED: u64 = 5;
    let location = backend.create().await?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ledger = Ledger::default();
    let mut kills = 0;
    for round in 0..=KILLED {
        let kill_after = (round < KILLED).then(|| match round {
            0 => 1, // right after "opening": during open and start-up recovery
            _ => rng.usize(0..RECORDS * 4),
        });
        let (w, l) = (worker.clone(), location.clone());
        let run =
            tokio::task::spawn_blocking(move || run_child(&w, DRAIN, &l, round, true, kill_after))
                .await
                .map_err(|e| Failure::new(format!("worker thread: {e}")))??;
        kills += usize::from(run.killed);
        ledger.read(&run);
        if round == KILLED {
            ensure(run.finished(), || {
                format!(
                    "the last worker did not finish; its stderr:\n{}",
                    run.stderr
                )
            })?;
        }
        // Between workers nothing runs, so the store must agree with everything the ledger
        // acknowledged so far.
        let store = backend.open(&location).await?;
        ledger
            .check(&*store)
            .await
            .map_err(|f| f.context(format!("after worker {round} (killed: {})", run.killed)))?;
    }
    ensure(!ledger.enqueued.is_empty(), || {
        "the workers acknowledged no enqueue".into()
    })?;
    let store = backend.open(&location).await?;
    ledger.check_drained(&*store, kills).await
}

/// What the workers acknowledged, from their ledger lines.
#[derive(Debug, Default)]
struct Ledger {
    /// Acknowledged enqueues: id to key.
    enqueued: BTreeMap<u64, String>,
    /// Records acknowledged as delivered.
    delivered: BTreeSet<u64>,
    /// Records acknowledged as parked.
    parked: BTreeSet<u64>,
    /// Times the sink answered success, per record.
    sink_ok: BTreeMap<u64, usize>,
    /// Times the sink answered 503, per record: an upper bound of its attempts.
    sink_503: BTreeMap<u64, u32>,
    /// Acknowledged retries that spent an attempt, per record: a lower bound of its attempts.
    spent: BTreeMap<u64, u32>,
    /// The latest acknowledged deadline, per record.
    deadline: BTreeMap<u64, Millis>,
}

impl Ledger {
    fn read(&mut self, run: &Run) {
        for line in &run.lines {
            let word = |i: usize| line.get(i).map(String::as_str);
            let Some(id) = number(line, 1) else { continue };
            match (word(0), word(2)) {
                (Some("enqueued"), key) => {
                    self.enqueued.insert(id, key.unwrap_or_default().to_owned());
                }
                (Some("delivered"), _) => {
                    self.delivered.insert(id);
                }
                (Some("parked"), _) => {
                    self.parked.insert(id);
                }
                (Some("sink"), Some("ok")) => *self.sink_ok.entry(id).or_default() += 1,
                (Some("sink"), Some("503")) => *self.sink_503.entry(id).or_default() += 1,
                (Some("scheduled"), Some(at)) => {
                    if let Ok(at) = at.parse::<Millis>() {
                        let latest = self.deadline.entry(id).or_default();
                        *latest = (*latest).max(at);
                    }
                    if word(3) == Some("true") {
                        *self.spent.entry(id).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
    }

    /// Checks the store against every acknowledged fact.
    async fn check(&self, store: &dyn outbox_core::Store) -> Result<(), Failure> {
        for (&id, key) in &self.enqueued {
            match store.get(RecordId(id)).await? {
                Some(record) => ensure_eq(&record.key, key, format!("record {id}'s key"))?,
                None => {
                    ensure(self.sink_ok.contains_key(&id), || {
                        format!("acknowledged enqueue {id} ({key}) is lost: not queued, never delivered")
                    })?
                }
            }
        }
        for &id in &self.delivered {
            ensure_eq(
                store.get(RecordId(id)).await?,
                None,
                format!("record {id} was acknowledged as delivered"),
            )?;
        }
        for record in crate::scenarios::all_records(store).await? {
            let id = record.id.0;
            let (low, high) = (
                self.spent.get(&id).copied().unwrap_or(0),
                self.sink_503.get(&id).copied().unwrap_or(0),
            );
            ensure(record.attempts >= low && record.attempts <= high, || {
                format!(
                    "record {id} has {} attempts; the ledger acknowledged {low} and the sink \
                     answered 503 {high} times: {record:?}",
                    record.attempts
                )
            })?;
            if let (Some(acknowledged), Some(at)) = (self.deadline.get(&id), record.next_attempt_at)
            {
                ensure(at >= *acknowledged, || {
                    format!(
                        "record {id} is due at {at}, before its acknowledged deadline {acknowledged}"
                    )
                })?;
            }
            if self.parked.contains(&id) {
                ensure(record.state == outbox_core::State::NeedsAttention, || {
                    format!("record {id} was acknowledged as parked: {record:?}")
                })?;
            }
        }
        Ok(())
    }

    /// The checks after the last worker drained the queue: only parked records remain, the
    /// delivered counter counts each delivered record once, and duplicates at the sink are
    /// bounded by the kills (one delivery in flight per worker).
    async fn check_drained(
        &self,
        store: &dyn outbox_core::Store,
        kills: usize,
    ) -> Result<(), Failure> {
        let remaining = crate::scenarios::all_records(store).await?;
        for record in &remaining {
            let poison = record.payload.starts_with(b"poison");
            ensure(
                record.state == outbox_core::State::NeedsAttention
                    && ((poison && record.attempts == 3) || record.interrupted >= 3),
                || {
                    format!(
                        "after the last worker drained, only records that spent their budget \
                         or crash-looped remain: {record:?}"
                    )
                },
            )?;
        }
        let delivered = self
            .sink_ok
            .keys()
            .filter(|id| !remaining.iter().any(|r| r.id.0 == **id))
            .count();
        ensure_eq(
            store.stats().await?.delivered,
            delivered as u64,
            "the delivered counter counts each delivered record once",
        )?;
        let duplicates: usize = self.sink_ok.values().map(|n| n - 1).sum();
        ensure(duplicates <= kills, || {
            format!("{duplicates} duplicate deliveries at the sink after {kills} kills")
        })
    }
}

/// The crash-loop guard across processes: a record whose delivery aborts the process every
/// time ends in needs-attention after `max_interruptions` restarts, and the healthy record
/// enqueued with it is delivered.
pub async fn crash_loop_parks_record(backend: &dyn Backend, worker: &Worker) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "crash_loop_parks_record", Capability::Persistent) {
        return Ok(skip);
    }
    let location = backend.create().await?;
    let max = worker_policy().max_interruptions;
    let mut aborts = 0;
    let mut finished = false;
    let mut runs = Vec::new();
    for round in 0..u64::from(max) + 3 {
        let (worker, location) = (worker.clone(), location.clone());
        let run = tokio::task::spawn_blocking(move || {
            run_child(&worker, CRASH_LOOP, &location, round, round == 0, None)
        })
        .await
        .map_err(|e| Failure::new(format!("worker thread: {e}")))??;
        aborts += run
            .lines
            .iter()
            .filter(|l| l.first().map(String::as_str) == Some("sink"))
            .filter(|l| l.get(2).map(String::as_str) == Some("abort"))
            .count();
        finished = run.finished();
        runs.push(run);
        if finished {
            break;
        }
    }
    ensure(finished, || {
        let stderr = runs.last().map(|r| r.stderr.as_str()).unwrap_or_default();
        format!("the worker never stopped crashing; last stderr:\n{stderr}")
    })?;
    let ledgers: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| format!("worker {i}: {:?}", r.lines))
        .collect();
    ensure_eq(
        aborts,
        max as usize,
        "the record aborted the process max_interruptions times",
    )
    .map_err(|f| f.context(ledgers.join("\n")))?;
    let store = backend.open(&location).await?;
    let records = crate::scenarios::all_records(&*store).await?;
    ensure_eq(records.len(), 1, "only the crash-looping record remains")?;
    let record = &records[0];
    ensure_eq(
        (
            record.key.as_str(),
            record.state,
            record.interrupted,
            record.attempts,
        ),
        ("abort", outbox_core::State::NeedsAttention, max, 0),
        "the crash-looping record is parked",
    )?;
    ensure_eq(
        store.stats().await?.delivered,
        1,
        "the healthy record was delivered",
    )?;
    Ok(Verdict::Passed)
}
