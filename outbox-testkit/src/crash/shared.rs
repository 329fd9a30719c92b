//! Runner processes sharing one store: several at once ([`shared_runners`]), and one killed in
//! the middle of its deliveries whose records another takes over ([`killed_runner_taken_over`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fastrand::Rng;
use outbox_core::{ListQuery, NewRecord, Record, State, Store};

use super::runners::NO_GROUP;
use super::{
    ledger_words, number, read_stderr, run_child, run_child_until, Worker, GO, LOG_ENV,
    SHARED_RUNNER, STOP, STUCK, TAKER, WORKER_NO_ENV,
};
use crate::backend::Backend;
use crate::harness::{
    ensure, ensure_eq, skip_unless, Capability, Failure, ScenarioResult, Verdict,
};
use crate::scenarios::{all_records, seed_from_env, SEED_ENV, T0};

/// Runner processes of [`shared_runners`].
const RUNNERS: usize = 3;

/// The longest the parent waits for the next line of any runner before it gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// The records of one scenario, enqueued in one batch: groups of records and records without a
/// group, their numbers drawn from the given ranges, in a seeded shuffled order.
struct Workload {
    records: Vec<NewRecord>,
}

impl Workload {
    fn new(rng: &mut Rng, groups: Range, per_group: Range, loose: Range) -> Self {
        let (groups, per_group, loose) =
            (rng.usize(groups), rng.usize(per_group), rng.usize(loose));
        let mut slots: Vec<Option<usize>> = (0..groups)
            .flat_map(|g| std::iter::repeat_n(Some(g), per_group))
            .chain(std::iter::repeat_n(None, loose))
            .collect();
        rng.shuffle(&mut slots);
        let records = slots
            .iter()
            .enumerate()
            .map(|(i, slot)| match slot {
                Some(g) => {
                    NewRecord::new(format!("g{g}-{i}").into_bytes()).in_group(format!("g{g}"))
                }
                None => NewRecord::new(format!("loose-{i}").into_bytes()),
            })
            .collect();
        Workload { records }
    }

    /// Enqueues the records; returns their ids and, per group, its ids in enqueue order.
    async fn enqueue(self, store: &dyn Store) -> Result<Enqueued, Failure> {
        let groups: Vec<Option<String>> = self.records.iter().map(|r| r.group.clone()).collect();
        let ids = store.enqueue(self.records, T0).await?;
        ensure_eq(ids.len(), groups.len(), "ids returned by enqueue")?;
        let mut order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (id, group) in ids.iter().zip(groups) {
            if let Some(group) = group {
                order.entry(group).or_default().push(id.0);
            }
        }
        Ok(Enqueued {
            ids: ids.iter().map(|id| id.0).collect(),
            order,
        })
    }
}

type Range = std::ops::RangeInclusive<usize>;

/// What a workload became in the store.
struct Enqueued {
    ids: BTreeSet<u64>,
    order: BTreeMap<String, Vec<u64>>,
}

/// Runs a seeded scenario with a fresh seed, or the one in [`SEED_ENV`], and names the seed in
/// a failure.
async fn with_seed<F>(run: impl FnOnce(u64) -> F) -> ScenarioResult
where
    F: std::future::Future<Output = Result<(), Failure>>,
{
    let seed = seed_from_env()?;
    run(seed)
        .await
        .map_err(|f| f.context(format!("seed {seed} (replay with {SEED_ENV}={seed})")))?;
    Ok(Verdict::Passed)
}

/// Several runner processes on one store: three child processes each run a real
/// [`Outbox`](outbox_core::Outbox) on the same store and drain a seeded mix of grouped and
/// loose records. Every delivery appends a `start` and an `end` line to one log file, in the
/// order the processes wrote them. From that log: every record was delivered exactly once (no
/// lease was taken while it held), no group ever had two deliveries under way at once, each
/// group went in id order, and at least two processes delivered; the store counts every record
/// delivered and nothing left.
///
/// So that the work is shared however the processes are scheduled, the runners' sinks hold
/// their deliveries until two processes have claimed records.
pub async fn shared_runners(backend: &dyn Backend, worker: &Worker) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "shared_runners", Capability::Shared) {
        return Ok(skip);
    }
    with_seed(|seed| shared_runners_seeded(backend, worker, seed)).await
}

/// [`shared_runners`] with a given seed for the workload.
pub async fn shared_runners_seeded(
    backend: &dyn Backend,
    worker: &Worker,
    seed: u64,
) -> Result<(), Failure> {
    let mut rng = Rng::with_seed(seed);
    let location = backend.create().await?;
    let store = backend.open(&location).await?;
    let workload = Workload::new(&mut rng, 4..=6, 5..=8, 12..=20);
    let enqueued = workload.enqueue(&*store).await?;
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::new(format!("cannot make a directory for the log: {e}")))?;
    let log = dir.path().join("deliveries.log");
    std::fs::File::create(&log)
        .map_err(|e| Failure::new(format!("cannot create the delivery log: {e}")))?;

    let (worker, total, path) = (worker.clone(), enqueued.ids.len(), log.clone());
    let runs = tokio::task::spawn_blocking(move || {
        let mut runners = Runners::spawn(&worker, &location, &path)?;
        runners.drive(total)
    })
    .await
    .map_err(|e| Failure::new(format!("runner thread: {e}")))??;
    let stderr = || {
        runs.iter()
            .enumerate()
            .map(|(i, r)| format!("runner {i} stderr:\n{}", r.stderr))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (i, run) in runs.iter().enumerate() {
        ensure(run.finished, || {
            format!("runner {i} did not stop cleanly\n{}", stderr())
        })?;
    }

    let text = std::fs::read_to_string(&log)
        .map_err(|e| Failure::new(format!("cannot read the delivery log: {e}")))?;
    check_log(&text, &enqueued).map_err(|f| f.context(format!("delivery log:\n{text}")))?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.delivered, stats.undelivered()),
        (total as u64, 0),
        "delivered and undelivered records in the store's stats",
    )
}

/// One line of the delivery log.
#[derive(Debug)]
struct Logged {
    start: bool,
    id: u64,
    group: Option<String>,
    worker: u64,
}

fn parse_log(text: &str) -> Result<Vec<Logged>, Failure> {
    text.lines()
        .map(|line| {
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            let start = match words.first().map(String::as_str) {
                Some("start") => true,
                Some("end") => false,
                _ => return Err(Failure::new(format!("a torn log line: {line:?}"))),
            };
            match (number(&words, 1), words.get(2), number(&words, 3)) {
                (Some(id), Some(group), Some(worker)) => Ok(Logged {
                    start,
                    id,
                    group: (group != NO_GROUP).then(|| group.clone()),
                    worker,
                }),
                _ => Err(Failure::new(format!("a torn log line: {line:?}"))),
            }
        })
        .collect()
}

/// The checks of [`shared_runners`] on the log.
fn check_log(text: &str, enqueued: &Enqueued) -> Result<(), Failure> {
    let lines = parse_log(text)?;
    let mut starts: BTreeMap<u64, usize> = BTreeMap::new();
    let mut ends: BTreeMap<u64, usize> = BTreeMap::new();
    let mut by_group: BTreeMap<&str, Vec<&Logged>> = BTreeMap::new();
    let mut workers: BTreeMap<u64, usize> = BTreeMap::new();
    for line in &lines {
        let count = if line.start { &mut starts } else { &mut ends };
        *count.entry(line.id).or_default() += 1;
        if line.start {
            *workers.entry(line.worker).or_default() += 1;
        }
        if let Some(group) = &line.group {
            by_group.entry(group).or_default().push(line);
        }
    }
    let twice: Vec<_> = starts.iter().filter(|(_, n)| **n > 1).collect();
    ensure(twice.is_empty(), || {
        format!(
            "records delivered more than once while their leases held (id, deliveries): {twice:?}"
        )
    })?;
    let started: BTreeSet<u64> = starts.keys().copied().collect();
    ensure_eq(
        &started,
        &enqueued.ids,
        "the records whose delivery started",
    )?;
    let ended: BTreeSet<u64> = ends.keys().copied().collect();
    ensure_eq(&ended, &enqueued.ids, "the records whose delivery ended")?;
    for (group, expected) in &enqueued.order {
        let events = by_group.get(group.as_str()).cloned().unwrap_or_default();
        // In log order the group must read: start a, end a, start b, end b, ... with a < b.
        for pair in events.chunks(2) {
            let ok = matches!(pair, [s, e] if s.start && !e.start && s.id == e.id);
            ensure(ok, || {
                format!("group {group} had two deliveries under way at once: {pair:?}")
            })?;
        }
        let order: Vec<u64> = events.iter().filter(|l| l.start).map(|l| l.id).collect();
        ensure_eq(
            &order,
            expected,
            format!("group {group}'s deliveries, in log order"),
        )?;
    }
    ensure(workers.len() >= 2, || {
        format!("only one runner process delivered (worker, deliveries): {workers:?}")
    })
}

/// What one shared runner printed.
#[derive(Debug, Default)]
struct RunnerRun {
    finished: bool,
    stderr: String,
}

/// The runner processes of [`shared_runners`]; any still running when this is dropped are
/// killed, so a failed check leaves no process behind.
struct Runners {
    children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    stderr: Vec<std::thread::JoinHandle<String>>,
    lines: mpsc::Receiver<(usize, Option<Vec<String>>)>,
}

impl Runners {
    fn spawn(worker: &Worker, location: &str, log: &std::path::Path) -> Result<Self, Failure> {
        let (tx, lines) = mpsc::channel();
        let mut runners = Runners {
            children: Vec::new(),
            stdins: Vec::new(),
            stderr: Vec::new(),
            lines,
        };
        for n in 0..RUNNERS {
            // Round 0 for all: one clock base, so no runner sees another's lease as expired.
            let mut child = worker
                .command(SHARED_RUNNER, location, 0, false)?
                .env(LOG_ENV, log)
                .env(WORKER_NO_ENV, n.to_string())
                .stdin(Stdio::piped())
                .spawn()
                .map_err(|e| Failure::new(format!("cannot start runner {n}: {e}")))?;
            runners.stderr.push(read_stderr(&mut child));
            if let Some(stdin) = child.stdin.take() {
                runners.stdins.push(stdin);
            }
            let stdout = child.stdout.take();
            runners.children.push(child);
            let tx = tx.clone();
            std::thread::spawn(move || {
                if let Some(stdout) = stdout {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if let Some(words) = ledger_words(&line) {
                            let _ = tx.send((n, Some(words)));
                        }
                    }
                }
                let _ = tx.send((n, None));
            });
        }
        Ok(runners)
    }

    /// Writes `signal` on every runner's stdin.
    fn tell(&mut self, signal: &str) {
        for stdin in &mut self.stdins {
            // A runner that is gone cannot listen; its missing `done` tells the story.
            let _ = writeln!(stdin, "{signal}");
            let _ = stdin.flush();
        }
    }

    /// Opens the gate once two runners hold records, says stop once `total` records were
    /// delivered, and returns what each runner printed once all have exited.
    fn drive(&mut self, total: usize) -> Result<Vec<RunnerRun>, Failure> {
        let mut holding = BTreeSet::new();
        let mut delivered = BTreeSet::new();
        let mut runs: Vec<RunnerRun> = (0..RUNNERS).map(|_| RunnerRun::default()).collect();
        let (mut open, mut went, mut stopped) = (RUNNERS, false, false);
        while open > 0 {
            let Ok((n, words)) = self.lines.recv_timeout(PATIENCE) else {
                return Err(Failure::new(format!(
                    "no runner printed anything for {PATIENCE:?}; {} of {total} delivered, \
                     runners holding records: {holding:?}\n{}",
                    delivered.len(),
                    self.kill_all()
                )));
            };
            let Some(words) = words else {
                open -= 1;
                continue;
            };
            match words.first().map(String::as_str) {
                Some("sink") => {
                    holding.insert(n);
                }
                Some("delivered") => {
                    delivered.extend(number(&words, 1));
                }
                Some("lagged") => {
                    return Err(Failure::new(format!(
                        "runner {n} missed events ({words:?}), so its deliveries went uncounted"
                    )));
                }
                Some("done") => runs[n].finished = true,
                _ => {}
            }
            if !went && holding.len() >= 2 {
                self.tell(GO);
                went = true;
            }
            if !stopped && delivered.len() >= total {
                self.tell(STOP);
                stopped = true;
            }
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        for (run, stderr) in runs.iter_mut().zip(self.stderr.drain(..)) {
            run.stderr = stderr.join().unwrap_or_default();
        }
        ensure(stopped, || {
            format!(
                "the runners exited with {} of {total} records delivered",
                delivered.len()
            )
        })?;
        Ok(runs)
    }

    /// Kills every runner and returns what they wrote on stderr.
    fn kill_all(&mut self) -> String {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stderr
            .drain(..)
            .enumerate()
            .map(|(i, stderr)| format!("runner {i} stderr:\n{}", stderr.join().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Runners {
    fn drop(&mut self) {
        for child in &mut self.children {
            // Already exited in a run that went well; then this does nothing.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A runner process killed with SIGKILL in the middle of its deliveries, and a second runner
/// process that takes its records over. The first runner's sink never answers; it is killed
/// after a seeded number (one to four) of its deliveries began. The second starts with its
/// clock an hour later, past the dead runner's leases: it recovers every record the dead one
/// held, each reaching its sink with `interrupted == 1` and every other record with 0, delivers
/// each record exactly once and every group in id order, and leaves nothing in the store.
pub async fn killed_runner_taken_over(backend: &dyn Backend, worker: &Worker) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "killed_runner_taken_over", Capability::Shared) {
        return Ok(skip);
    }
    with_seed(|seed| killed_runner_taken_over_seeded(backend, worker, seed)).await
}

/// [`killed_runner_taken_over`] with a given seed for the workload and the kill point.
pub async fn killed_runner_taken_over_seeded(
    backend: &dyn Backend,
    worker: &Worker,
    seed: u64,
) -> Result<(), Failure> {
    let mut rng = Rng::with_seed(seed);
    let location = backend.create().await?;
    let store = backend.open(&location).await?;
    // At least four groups: the stuck runner's first claim always has four records to start.
    let workload = Workload::new(&mut rng, 4..=6, 2..=4, 2..=6);
    let enqueued = workload.enqueue(&*store).await?;
    let started_before_kill = rng.usize(1..=4);

    let (w, l) = (worker.clone(), location.clone());
    let stuck = tokio::task::spawn_blocking(move || {
        run_child_until(&w, STUCK, &l, 0, false, |lines| {
            lines
                .iter()
                .filter(|l| l.first().map(String::as_str) == Some("sink"))
                .count()
                >= started_before_kill
        })
    })
    .await
    .map_err(|e| Failure::new(format!("worker thread: {e}")))??;
    ensure(stuck.killed, || {
        format!(
            "the stuck runner exited before {started_before_kill} deliveries began; its stderr:\n{}",
            stuck.stderr
        )
    })?;
    let started: BTreeSet<u64> = stuck
        .lines
        .iter()
        .filter(|l| l.first().map(String::as_str) == Some("sink"))
        .filter_map(|l| number(l, 1))
        .collect();

    let in_flight = store
        .list(&ListQuery::new(1_000).state(State::InFlight))
        .await?;
    let held: BTreeSet<u64> = in_flight.iter().map(|r| r.id.0).collect();
    ensure(started.is_subset(&held), || {
        format!("records whose delivery began {started:?} are not all in flight: {held:?}")
    })?;
    ensure(
        in_flight
            .iter()
            .all(|r| r.interrupted == 0 && r.lease.is_some()),
        || format!("the dead runner's records before the takeover: {in_flight:?}"),
    )?;

    let (w, l) = (worker.clone(), location.clone());
    let taker = tokio::task::spawn_blocking(move || run_child(&w, TAKER, &l, 1, false, None))
        .await
        .map_err(|e| Failure::new(format!("worker thread: {e}")))??;
    ensure(taker.finished(), || {
        format!(
            "the second runner did not finish; its stderr:\n{}",
            taker.stderr
        )
    })?;
    check_takeover(&taker.lines, &enqueued, &held).map_err(|f| {
        f.context(format!(
            "held by the dead runner: {held:?}; second runner: {:?}",
            taker.lines
        ))
    })?;

    let stats = store.stats().await?;
    ensure_eq(
        (stats.delivered, stats.in_flight, stats.undelivered()),
        (enqueued.ids.len() as u64, 0, 0),
        "delivered, in-flight and undelivered records in the store's stats",
    )?;
    let left: Vec<Record> = all_records(&*store).await?;
    ensure(left.is_empty(), || {
        format!("records left in the store: {left:?}")
    })
}

/// The checks of [`killed_runner_taken_over`] on the second runner's `sink` lines.
fn check_takeover(
    lines: &[Vec<String>],
    enqueued: &Enqueued,
    held: &BTreeSet<u64>,
) -> Result<(), Failure> {
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in lines
        .iter()
        .filter(|l| l.first().map(String::as_str) == Some("sink"))
    {
        let (Some(id), Some(group), Some(interrupted)) =
            (number(line, 1), line.get(2), number(line, 3))
        else {
            return Err(Failure::new(format!("a torn ledger line: {line:?}")));
        };
        *seen.entry(id).or_default() += 1;
        if group != NO_GROUP {
            order.entry(group.clone()).or_default().push(id);
        }
        let expected = u64::from(held.contains(&id));
        ensure_eq(
            interrupted,
            expected,
            format!("interruptions of record {id} at the second runner's sink (1 if the dead runner held it)"),
        )?;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    ensure(twice.is_empty(), || {
        format!("the second runner delivered records twice (id, deliveries): {twice:?}")
    })?;
    let delivered: BTreeSet<u64> = seen.keys().copied().collect();
    ensure_eq(
        &delivered,
        &enqueued.ids,
        "the records the second runner delivered",
    )?;
    ensure_eq(&order, &enqueued.order, "each group's deliveries, in order")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records 1 and 3 in group g, 2 loose.
    fn enqueued() -> Enqueued {
        Enqueued {
            ids: BTreeSet::from([1, 2, 3]),
            order: BTreeMap::from([("g".to_owned(), vec![1, 3])]),
        }
    }

    fn ledger(lines: &[&str]) -> Vec<Vec<String>> {
        lines
            .iter()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    }

    const GOOD: &str = "start 1 g 0\nstart 2 - 1\nend 1 g 0\nstart 3 g 1\nend 2 - 1\nend 3 g 1\n";

    #[test]
    fn a_log_of_a_correct_run_passes() {
        assert_eq!(check_log(GOOD, &enqueued()), Ok(()));
    }

    #[test]
    fn the_log_checks_catch_each_defect() {
        let cases = [
            (
                "start 1 g 0\nstart 2 - 1\nend 1 g 0\nstart 3 g 1\nend 2 - 1\nend 3 g 1\n\
                 start 2 - 0\nend 2 - 0\n",
                "delivered more than once",
            ),
            (
                "start 1 g 0\nstart 3 g 1\nend 1 g 0\nend 3 g 1\nstart 2 - 1\nend 2 - 1\n",
                "two deliveries under way at once",
            ),
            (
                "start 3 g 0\nend 3 g 0\nstart 1 g 1\nend 1 g 1\nstart 2 - 1\nend 2 - 1\n",
                "in log order",
            ),
            (
                "start 1 g 0\nend 1 g 0\nstart 2 - 0\nend 2 - 0\nstart 3 g 0\nend 3 g 0\n",
                "only one runner process",
            ),
            (
                "start 1 g 0\nend 1 g 0\nstart 3 g 1\nend 3 g 1\n",
                "whose delivery started",
            ),
            ("start 1 g 0\nend 1 g", "torn"),
        ];
        for (log, expected) in cases {
            let failure = check_log(log, &enqueued()).expect_err(expected);
            assert!(
                failure.message().contains(expected),
                "{expected}: {failure}"
            );
        }
    }

    #[test]
    fn the_takeover_checks_catch_each_defect() {
        let held = BTreeSet::from([1, 2]);
        let good = ledger(&["sink 1 g 1", "sink 2 - 1", "sink 3 g 0", "done"]);
        assert_eq!(check_takeover(&good, &enqueued(), &held), Ok(()));
        let cases = [
            (
                vec!["sink 1 g 0", "sink 2 - 1", "sink 3 g 0"],
                "interruptions of record 1",
            ),
            (
                vec!["sink 1 g 1", "sink 2 - 1", "sink 3 g 1"],
                "interruptions of record 3",
            ),
            (
                vec!["sink 1 g 1", "sink 2 - 1", "sink 2 - 1", "sink 3 g 0"],
                "twice",
            ),
            (vec!["sink 1 g 1", "sink 3 g 0"], "delivered"),
            (vec!["sink 3 g 0", "sink 1 g 1", "sink 2 - 1"], "in order"),
        ];
        for (lines, expected) in cases {
            let failure = check_takeover(&ledger(&lines), &enqueued(), &held).expect_err(expected);
            assert!(
                failure.message().contains(expected),
                "{expected}: {failure}"
            );
        }
    }

    #[test]
    fn a_workload_is_the_same_for_the_same_seed() {
        let shape = |seed| {
            let workload = Workload::new(&mut Rng::with_seed(seed), 4..=6, 2..=4, 2..=6);
            workload
                .records
                .iter()
                .map(|r| (r.group.clone(), r.payload.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(7), shape(7));
        assert!(shape(7).iter().filter(|(g, _)| g.is_none()).count() >= 2);
    }
}
