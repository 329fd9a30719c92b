//! Crashes with a real child process: the test binary re-executes itself in a *worker* role
//! that runs an outbox on the store and prints a ledger line after each commit returns; the
//! parent kills it with SIGKILL at seeded random points and checks the ledger against the
//! reopened store.
//!
//! The `conformance!` macro generates the worker's entry test (`__outbox_testkit_worker`); it
//! returns at once unless [`ROLE_ENV`] is set, so in a normal run it is an empty test.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

use outbox_core::Millis;

use crate::backend::Backend;
use crate::harness::Verdict;
use crate::harness::{ensure, ensure_eq, skip_unless, Capability, Failure, ScenarioResult};

mod ledger;
mod worker;

use ledger::Ledger;
pub use worker::worker_entry;
use worker::{worker_policy, RECORDS};

/// Selects the worker role in a re-executed test binary.
pub const ROLE_ENV: &str = "OUTBOX_TESTKIT_WORKER";
pub(crate) const LOCATION_ENV: &str = "OUTBOX_TESTKIT_LOCATION";
pub(crate) const BASE_ENV: &str = "OUTBOX_TESTKIT_CLOCK_BASE";
pub(crate) const ROUND_ENV: &str = "OUTBOX_TESTKIT_ROUND";
pub(crate) const ENQUEUE_ENV: &str = "OUTBOX_TESTKIT_ENQUEUE";

/// Every ledger line starts with this, so libtest's own output is ignored.
pub(crate) const LEDGER: &str = "outbox-ledger";

/// The worker role that enqueues and drains.
pub(crate) const DRAIN: &str = "drain";
/// The worker role whose one record aborts the process on every delivery.
pub(crate) const CRASH_LOOP: &str = "crash-loop";

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
pub(crate) struct Run {
    lines: Vec<Vec<String>>,
    stderr: String,
    killed: bool,
}

impl Run {
    pub(crate) fn finished(&self) -> bool {
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

pub(crate) fn number(line: &[String], at: usize) -> Option<u64> {
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

/// The crash-loop guard across processes: a record whose delivery aborts the process every
/// time ends in needs-attention after `max_interruptions` restarts, and the healthy record
/// enqueued (and claimed) right behind it is delivered, not parked with it.
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
