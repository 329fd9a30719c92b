//! Runners in separate processes sharing one outbox, as runners on separate hosts do.
//!
//! The test binary re-executes itself (`__outbox_pg_worker`, selected by `OUTBOX_PG_ROLE`) as
//! a runner process. Every delivery writes a `start` and an `end` row to a log table in the
//! test's schema, so the parent can check afterwards, in commit order, that no record was
//! delivered twice and that no group ever had two deliveries under way at once.
//!
//! Environment read by the workers: `OUTBOX_PG_ROLE` (`runner` or `stuck`), `OUTBOX_PG_SCHEMA`,
//! `OUTBOX_PG_WORKER` (a number for the log), plus `OUTBOX_PG_URL` like every test.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{admin, config, listen, server_ready, Scratch};
use outbox_core::{
    async_trait, Event, ListQuery, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig,
    Sink, State, Store, TokioClock,
};
use outbox_postgres::PgStore;
use tokio::sync::mpsc::UnboundedReceiver;

const ROLE_ENV: &str = "OUTBOX_PG_ROLE";
const SCHEMA_ENV: &str = "OUTBOX_PG_SCHEMA";
const WORKER_ENV: &str = "OUTBOX_PG_WORKER";

/// Bounds every wait: generous for a loaded machine, and a hang fails instead of blocking.
const PATIENCE: Duration = Duration::from_secs(60);

/// Not a test of its own: the entry of the worker processes. Returns at once in a normal run.
#[test]
fn __outbox_pg_worker() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let schema = std::env::var(SCHEMA_ENV).expect("the parent names the schema");
    let worker: i32 = std::env::var(WORKER_ENV)
        .ok()
        .and_then(|w| w.parse().ok())
        .expect("the parent numbers the worker");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the worker");
    runtime.block_on(run_worker(&role, &schema, worker));
}

/// A runner process: delivers until the parent says stop (or, as `stuck`, hangs in its first
/// deliveries until the parent kills it).
async fn run_worker(role: &str, schema: &str, worker: i32) {
    let stuck = role == "stuck";
    let store = PgStore::connect(config(schema)).await.expect("store opens");
    let wakeups = store.listen().await.expect("listener starts");
    let (log, mut stop) = listen(&[channel(schema, "stop")]).await;
    let sink = LogSink {
        log: Arc::new(log),
        schema: schema.to_owned(),
        worker,
        stuck,
    };
    let outbox = Outbox::builder(Arc::new(store), sink)
        .config(RunnerConfig {
            batch: if stuck { 8 } else { 4 },
            concurrency: if stuck { 4 } else { 2 },
            // A slow backstop; enqueues wake the runner through LISTEN.
            safety_poll: Some(Duration::from_millis(500)),
            ..RunnerConfig::default()
        })
        .start()
        .await
        .expect("runner starts");
    let admin = admin().await;
    admin
        .execute("SELECT pg_notify($1, '')", &[&channel(schema, "ready")])
        .await
        .expect("ready is sent");
    loop {
        tokio::select! {
            _ = wakeups.notified() => outbox.notify(),
            _ = stop.recv() => break,
        }
    }
    outbox
        .shutdown(Duration::from_secs(20))
        .await
        .expect("the runner stops cleanly");
}

fn channel(schema: &str, what: &str) -> String {
    format!("{schema}_{what}")
}

/// Logs each delivery's start and end with the worker's number, then reports it delivered.
struct LogSink {
    log: Arc<tokio_postgres::Client>,
    schema: String,
    worker: i32,
    stuck: bool,
}

impl LogSink {
    async fn write(&self, record: &Record, phase: &str) -> Result<(), tokio_postgres::Error> {
        let id = i64::try_from(record.id.0).unwrap_or(i64::MAX);
        let interrupted = i64::from(record.interrupted);
        self.log
            .execute(
                &format!(
                    "INSERT INTO \"{}\".deliveries (record, grp, worker, phase, interrupted) \
                     VALUES ($1, $2, $3, $4, $5)",
                    self.schema
                ),
                &[&id, &record.group, &self.worker, &phase, &interrupted],
            )
            .await?;
        self.log
            .execute(
                "SELECT pg_notify($1, '')",
                &[&channel(&self.schema, "progress")],
            )
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Sink for LogSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        if let Err(err) = self.write(record, "start").await {
            return Outcome::no_answer(err.to_string());
        }
        if self.stuck {
            // The delivery never reports: the parent kills this process mid-delivery.
            std::future::pending::<()>().await;
        }
        // Let the other runners claim while this delivery is under way.
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        match self.write(record, "end").await {
            Ok(()) => Outcome::Delivered,
            Err(err) => Outcome::no_answer(err.to_string()),
        }
    }
}

/// The worker processes of one test; killed if the test ends early.
struct Workers {
    children: Vec<Child>,
}

impl Workers {
    fn spawn(role: &str, schema: &str, count: i32) -> Workers {
        let exe = std::env::current_exe().expect("the test binary's path");
        let children = (0..count)
            .map(|worker| {
                Command::new(&exe)
                    .args([
                        "__outbox_pg_worker",
                        "--exact",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(ROLE_ENV, role)
                    .env(SCHEMA_ENV, schema)
                    .env(WORKER_ENV, worker.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("a worker process starts")
            })
            .collect();
        Workers { children }
    }

    /// Waits for every worker to exit; true when all succeeded.
    async fn wait(mut self) -> bool {
        let children = std::mem::take(&mut self.children);
        tokio::task::spawn_blocking(move || {
            children
                .into_iter()
                .all(|mut child| child.wait().map(|status| status.success()).unwrap_or(false))
        })
        .await
        .unwrap_or(false)
    }

    /// SIGKILLs every worker and reaps it.
    fn kill(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for `n` notifications on `wanted`.
async fn expect_notifications(rx: &mut UnboundedReceiver<String>, wanted: &str, n: usize) {
    let mut seen = 0;
    while seen < n {
        let got = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{seen} of {n} {wanted} notifications arrived"))
            .expect("the listening session is open");
        if got == wanted {
            seen += 1;
        }
    }
}

/// Waits until the log holds `n` rows of `phase` for distinct records, woken by `progress`.
async fn expect_logged(
    client: &tokio_postgres::Client,
    rx: &mut UnboundedReceiver<String>,
    schema: &str,
    phase: &str,
    n: i64,
) {
    loop {
        let logged: i64 = client
            .query_one(
                &format!(
                    "SELECT count(DISTINCT record) FROM \"{schema}\".deliveries WHERE phase = $1"
                ),
                &[&phase],
            )
            .await
            .expect("the log is readable")
            .get(0);
        if logged >= n {
            return;
        }
        tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {logged} of {n} deliveries reached {phase}"))
            .expect("the listening session is open");
    }
}

async fn create_log(schema: &str) {
    admin()
        .await
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".deliveries (seq bigserial PRIMARY KEY, record bigint, \
             grp text, worker int, phase text, interrupted bigint)"
        ))
        .await
        .expect("the log table is created");
}

/// Records of `groups` groups, interleaved, and some without a group.
fn workload(groups: usize, per_group: usize, loose: usize) -> Vec<NewRecord> {
    let mut records = Vec::new();
    for i in 0..per_group {
        for g in 0..groups {
            records
                .push(NewRecord::new(format!("g{g}-{i}").into_bytes()).in_group(format!("g{g}")));
        }
        if i < loose {
            records.push(NewRecord::new(format!("loose-{i}").into_bytes()));
        }
    }
    records
}

/// Three runner processes drain one outbox: every record is delivered exactly once (leases
/// hold throughout), every group in id order with never two of its records under way at once,
/// and the work is shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_runner_processes_share_one_outbox() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let schema = scratch.schema.clone();
    let store = scratch.store().await;
    create_log(&schema).await;
    let (client, mut rx) = listen(&[channel(&schema, "ready"), channel(&schema, "progress")]).await;

    let workers = Workers::spawn("runner", &schema, 3);
    expect_notifications(&mut rx, &channel(&schema, "ready"), 3).await;
    let ids = store
        .enqueue(workload(8, 20, 40), outbox_core::clock::system_now())
        .await
        .expect("enqueue");
    let total = ids.len() as i64;
    expect_logged(&client, &mut rx, &schema, "end", total).await;
    client
        .execute("SELECT pg_notify($1, '')", &[&channel(&schema, "stop")])
        .await
        .expect("stop is sent");
    assert!(workers.wait().await, "every worker exited cleanly");

    let rows = client
        .query(
            &format!("SELECT record, grp, worker, phase FROM \"{schema}\".deliveries ORDER BY seq"),
            &[],
        )
        .await
        .expect("the log is readable");
    let mut starts: HashMap<i64, usize> = HashMap::new();
    let mut by_group: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    let mut workers_used = BTreeSet::new();
    for row in &rows {
        let record: i64 = row.get(0);
        let group: Option<String> = row.get(1);
        let worker: i32 = row.get(2);
        let phase: String = row.get(3);
        workers_used.insert(worker);
        if phase == "start" {
            *starts.entry(record).or_default() += 1;
        }
        if let Some(group) = group {
            by_group.entry(group).or_default().push((record, phase));
        }
    }
    assert_eq!(starts.len() as i64, total, "every record was delivered");
    assert!(
        starts.values().all(|n| *n == 1),
        "no record was delivered twice: {:?}",
        starts.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    for (group, events) in &by_group {
        // In commit order: start a, end a, start b, end b, ... with a < b < ...
        let mut last = 0;
        for pair in events.chunks(2) {
            let [(a, p1), (b, p2)] = pair else {
                panic!("{group}: a delivery never ended: {events:?}");
            };
            assert!(
                a == b && p1 == "start" && p2 == "end" && *a > last,
                "{group}: deliveries overlapped or went out of order: {events:?}"
            );
            last = *a;
        }
    }
    assert!(
        workers_used.len() >= 2,
        "the work was shared between processes: {workers_used:?}"
    );
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.delivered, total as u64);
    assert_eq!(stats.undelivered(), 0);
}

/// What the second runner's sink saw of one delivery: id, group, interruptions so far.
type Seen = (RecordId, Option<String>, u32);

/// A runner process is killed with SIGKILL in the middle of its deliveries; another runner
/// takes its records over once their leases expire (each counting one interruption) and
/// finishes everything, groups still in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runner_process_is_taken_over() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let schema = scratch.schema.clone();
    let store = scratch.store().await;
    create_log(&schema).await;
    let (client, mut rx) = listen(&[channel(&schema, "ready"), channel(&schema, "progress")]).await;

    let mut workers = Workers::spawn("stuck", &schema, 1);
    expect_notifications(&mut rx, &channel(&schema, "ready"), 1).await;
    let ids = store
        .enqueue(workload(4, 4, 4), outbox_core::clock::system_now())
        .await
        .expect("enqueue");
    // Four deliveries are under way (concurrency 4) when the process dies.
    expect_logged(&client, &mut rx, &schema, "start", 4).await;
    workers.kill();

    let held: BTreeSet<RecordId> = store
        .list(&ListQuery::new(100).state(State::InFlight))
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert!(
        held.len() >= 4,
        "the dead runner left records in flight: {held:?}"
    );

    // The second runner's clock is past the dead runner's 30 s leases, as it would be after
    // waiting them out.
    let later = outbox_core::clock::system_now() + 3_600_000;
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = Arc::clone(&seen);
    let sink = outbox_core::sink_fn(move |record: Record| {
        let log = Arc::clone(&log);
        async move {
            log.lock()
                .unwrap()
                .push((record.id, record.group.clone(), record.interrupted));
            Outcome::Delivered
        }
    });
    let taker = Outbox::builder(Arc::new(scratch.store().await), sink)
        .clock(Arc::new(TokioClock::starting_at(later)))
        .start()
        .await
        .expect("the second runner starts and recovers the expired leases");
    let mut events = taker.events();
    tokio::time::timeout(PATIENCE, async {
        loop {
            let stats = taker.stats().await.expect("stats");
            if stats.delivered == ids.len() as u64 {
                return stats;
            }
            let _: Result<Event, _> = events.recv().await;
        }
    })
    .await
    .expect("the second runner delivers everything");
    // Let its round finish before the shutdown (see the no-polling test in tests/store.rs).
    taker.flush(PATIENCE).await.expect("settles");
    taker
        .shutdown(Duration::from_secs(20))
        .await
        .expect("clean stop");

    let seen = seen.lock().unwrap().clone();
    let delivered: BTreeSet<RecordId> = seen.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(delivered.len(), seen.len(), "nothing delivered twice");
    assert_eq!(delivered, ids.iter().copied().collect(), "nothing lost");
    for (id, _, interrupted) in &seen {
        let expected = u32::from(held.contains(id));
        assert_eq!(
            *interrupted, expected,
            "{id}: one interruption for the dead runner's records, none for the others"
        );
    }
    let mut order: BTreeMap<&str, Vec<RecordId>> = BTreeMap::new();
    for (id, group, _) in &seen {
        if let Some(group) = group {
            order.entry(group).or_default().push(*id);
        }
    }
    for (group, ids) in order {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{group}: {ids:?}");
    }
    let stats = store.stats().await.expect("stats");
    assert_eq!((stats.in_flight, stats.undelivered()), (0, 0));
}
