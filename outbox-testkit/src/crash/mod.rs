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
mod runners;
mod shared;
mod worker;

use ledger::Ledger;
pub use shared::{
    killed_runner_taken_over, killed_runner_taken_over_seeded, shared_runners,
    shared_runners_seeded,
};
pub use worker::worker_entry;

use worker::{worker_policy, RECORDS};

/// Selects the worker role in a re-executed test binary.
pub const ROLE_ENV: &str = "OUTBOX_TESTKIT_WORKER";
pub(crate) const LOCATION_ENV: &str = "OUTBOX_TESTKIT_LOCATION";
pub(crate) const BASE_ENV: &str = "OUTBOX_TESTKIT_CLOCK_BASE";
pub(crate) const ROUND_ENV: &str = "OUTBOX_TESTKIT_ROUND";
pub(crate) const ENQUEUE_ENV: &str = "OUTBOX_TESTKIT_ENQUEUE";
/// The delivery log the shared runners append to.
pub(crate) const LOG_ENV: &str = "OUTBOX_TESTKIT_DELIVERY_LOG";
/// The number a shared runner writes in its log lines.
pub(crate) const WORKER_NO_ENV: &str = "OUTBOX_TESTKIT_WORKER_NO";

/// Every ledger line starts with this, so libtest's own output is ignored.
pub(crate) const LEDGER: &str = "outbox-ledger";

/// The worker role that enqueues and drains.
pub(crate) const DRAIN: &str = "drain";
/// The worker role whose one record aborts the process on every delivery.
pub(crate) const CRASH_LOOP: &str = "crash-loop";
/// The worker role of the runner processes sharing one store.
pub(crate) const SHARED_RUNNER: &str = "shared-runner";
/// The worker role whose deliveries hang until it is killed.
pub(crate) const STUCK: &str = "stuck";
/// The worker role that takes a killed runner's records over.
pub(crate) const TAKER: &str = "taker";

/// What the parent writes on a shared runner's stdin to open the delivery gate.
pub(crate) const GO: &str = "go";
/// What the parent writes on a shared runner's stdin to stop it.
pub(crate) const STOP: &str = "stop";

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

    /// The command that runs the worker test in `role`, its stdio piped; a caller may set more
    /// variables before spawning it. A worker that waits for its parent reads its stdin, which
    /// closes when the parent goes, so no worker outlives its test.
    fn command(
        &self,
        role: &str,
        location: &str,
        round: u64,
        enqueue: bool,
    ) -> Result<Command, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(format!("cannot find the test binary: {e}")))?;
        let mut command = Command::new(exe);
        command
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
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(command)
    }

    fn spawn(
        &self,
        role: &str,
        location: &str,
        round: u64,
        enqueue: bool,
    ) -> Result<Child, Failure> {
        self.command(role, location, round, enqueue)?
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
    run_child_until(worker, role, location, round, enqueue, |lines| {
        kill_after == Some(lines.len())
    })
}

/// Runs one child and kills it with SIGKILL as soon as `kill` holds for the ledger lines read
/// so far (it is asked once before the first line too); collects every line it printed.
fn run_child_until(
    worker: &Worker,
    role: &str,
    location: &str,
    round: u64,
    enqueue: bool,
    mut kill: impl FnMut(&[Vec<String>]) -> bool,
) -> Result<Run, Failure> {
    let mut child = worker.spawn(role, location, round, enqueue)?;
    // Held until the child has exited: closing it tells a waiting worker to stop.
    let _stdin = child.stdin.take();
    let mut run = Run::default();
    let stderr_reader = read_stderr(&mut child);
    let stdout = child.stdout.take();
    let child = std::sync::Arc::new(std::sync::Mutex::new(child));
    let (watchdog, timed_out) = watch_child(&child, role);
    let kill_now = || {
        // `Child::kill` sends SIGKILL on Unix: no destructor, no flush, no goodbye.
        let _ = child.lock().unwrap_or_else(|e| e.into_inner()).kill();
    };
    if kill(&run.lines) {
        kill_now();
        run.killed = true;
    }
    if let Some(stdout) = stdout {
        crate::harness::waiting_for(format!("the {role} worker's ledger"));
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some(words) = ledger_words(&line) else {
                continue;
            };
            run.lines.push(words);
            if !run.killed && kill(&run.lines) {
                kill_now();
                run.killed = true;
            }
        }
    }
    let _ = child.lock().unwrap_or_else(|e| e.into_inner()).wait();
    drop(watchdog);
    run.stderr = stderr_reader.join().unwrap_or_default();
    if timed_out.join().unwrap_or(false) {
        return Err(Failure::new(format!(
            "the {role} worker did not finish within {CHILD_LIMIT:?} (wall clock); it printed {} \
             ledger lines; its stderr:\n{}",
            run.lines.len(),
            run.stderr
        )));
    }
    Ok(run)
}

/// The longest one worker process may run before it is killed and the scenario fails.
const CHILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Kills `child` if it still runs after [`CHILD_LIMIT`]; dropping the returned sender ends
/// the watch, and the thread says whether it had to kill.
fn watch_child(
    child: &std::sync::Arc<std::sync::Mutex<Child>>,
    role: &str,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<bool>) {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let child = std::sync::Arc::clone(child);
    let role = role.to_owned();
    let thread = std::thread::spawn(move || match wait.recv_timeout(CHILD_LIMIT) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            eprintln!("the {role} worker ran past {CHILD_LIMIT:?}: killing it");
            let _ = child.lock().unwrap_or_else(|e| e.into_inner()).kill();
            true
        }
        _ => false,
    });
    (done, thread)
}

/// Reads the child's stderr to its end on a thread of its own, so a full pipe never stalls it.
fn read_stderr(child: &mut Child) -> std::thread::JoinHandle<String> {
    let stderr = child.stderr.take();
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    })
}

/// The words of a ledger line, or `None` for any other output.
fn ledger_words(line: &str) -> Option<Vec<String>> {
    // libtest may print "test <name> ... " without a newline before the first line.
    let at = line.find(LEDGER)?;
    Some(
        line[at + LEDGER.len()..]
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
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
/// a record reaches the sink again only after a kill lost its earlier delivery's outcome (at
/// most one round of records per kill).
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

/// Environment variable that turns the generated `__outbox_testkit_soak` test into a soak of
/// that many kills (see [`soak_entry`]); `cargo xtask soak` sets it.
pub const SOAK_KILLS_ENV: &str = "OUTBOX_TESTKIT_SOAK_KILLS";

/// The figures of a crash soak.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SoakReport {
    /// Workers killed with SIGKILL.
    pub kills: usize,
    /// Enqueues the workers acknowledged.
    pub acknowledged: usize,
    /// Deliveries the workers acknowledged (the outcome committed).
    pub delivered: usize,
    /// Deliveries the sink saw beyond the first of each record (each after a kill lost the
    /// outcome of the one before, and each with the record's key).
    pub duplicates: usize,
    /// Acknowledged enqueues neither queued nor ever delivered.
    pub lost: usize,
    /// The soak's seed.
    pub seed: u64,
}

impl std::fmt::Display for SoakReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kills {} · acknowledged {} · delivered {} · duplicates {} · lost {} (seed {})",
            self.kills, self.acknowledged, self.delivered, self.duplicates, self.lost, self.seed
        )
    }
}

/// A crash soak: `kills` drain workers (each enqueuing and delivering) killed with SIGKILL at
/// seeded random points, then one that runs to the end; after every restart the reopened store
/// is checked against everything acknowledged so far (no acknowledged enqueue lost, nothing
/// acknowledged as delivered still queued, attempts and deadlines as acknowledged, every
/// delivery with its record's key), and at the end the queue is drained with each duplicate
/// excused by a kill. Fails at the first breach, with the figures so far.
pub async fn soak(
    backend: &dyn Backend,
    worker: &Worker,
    kills: usize,
    seed: u64,
) -> Result<SoakReport, Failure> {
    let location = backend.create().await?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ledger = Ledger::default();
    let mut report = SoakReport {
        seed,
        ..SoakReport::default()
    };
    for round in 0..=kills as u64 {
        let last = round == kills as u64;
        let kill_after = (!last).then(|| rng.usize(0..RECORDS * 4));
        let (w, l) = (worker.clone(), location.clone());
        let run =
            tokio::task::spawn_blocking(move || run_child(&w, DRAIN, &l, round, true, kill_after))
                .await
                .map_err(|e| Failure::new(format!("worker thread: {e}")))??;
        report.kills += usize::from(run.killed);
        ledger.read(&run);
        let store = backend.open(&location).await?;
        let (acknowledged, delivered, duplicates, lost) = ledger.tally(&*store).await?;
        report.acknowledged = acknowledged;
        report.delivered = delivered;
        report.duplicates = duplicates;
        report.lost = lost;
        let checked = if last {
            ensure(run.finished(), || {
                format!(
                    "the last worker did not finish; its stderr:\n{}",
                    run.stderr
                )
            })
        } else {
            Ok(())
        };
        checked.and(ledger.check(&*store).await).map_err(|f| {
            f.context(format!(
                "after worker {round} (killed: {}); {report}",
                run.killed
            ))
        })?;
        if last {
            ledger
                .check_drained(&*store, report.kills)
                .await
                .map_err(|f| f.context(format!("at the end; {report}")))?;
        }
    }
    Ok(report)
}

/// The entry of the soak test the macro generates (`__outbox_testkit_soak`): returns at once
/// unless [`SOAK_KILLS_ENV`] is set, then soaks the backend with that many kills (the seed
/// from `OUTBOX_TESTKIT_SEED`, or a random one), prints the figures and fails on a breach.
pub fn soak_entry<B: Backend>(backend: impl FnOnce() -> B, worker: &Worker) {
    let Ok(kills) = std::env::var(SOAK_KILLS_ENV) else {
        return;
    };
    let kills: usize = match kills.trim().parse() {
        Ok(kills) => kills,
        Err(err) => panic!("{SOAK_KILLS_ENV}={kills:?} is not a number: {err}"),
    };
    let seed = match crate::scenarios::seed_from_env() {
        Ok(seed) => seed,
        Err(failure) => panic!("{failure}"),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => panic!("no tokio runtime for the soak: {err}"),
    };
    let backend = {
        let _context = runtime.enter();
        backend()
    };
    let started = std::time::Instant::now();
    match runtime.block_on(soak(&backend, worker, kills, seed)) {
        Ok(report) => eprintln!(
            "soak {}: {report}; {:.1} s",
            backend.name(),
            started.elapsed().as_secs_f64()
        ),
        Err(failure) => panic!("soak {} failed: {failure}", backend.name()),
    }
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
