//! One time for the fleet: runners on hosts whose clocks disagree by hours share one schema,
//! each built with nothing but `Outbox::builder(store, sink)`: the store names the server's
//! clock (`Store::shared_clock`) and the runner uses it. Each runner's host clock is the system
//! clock plus an offset, handed to the store as its host clock, so the store measures that
//! host against the server exactly as it would on a badly set machine.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{config, server_ready, Scratch};
use outbox_core::{
    sink_fn, Clock, Millis, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig, Store,
};
use outbox_postgres::PgStore;

const HOUR: i64 = 3_600_000;
const PATIENCE: Duration = Duration::from_secs(120);
const ROLE: &str = "OUTBOX_PG_FLEET_CHILD";

/// The system clock set `by` milliseconds off, as on a host without NTP.
#[derive(Debug)]
struct Skewed {
    by: i64,
}

impl Clock for Skewed {
    fn now(&self) -> Millis {
        let now = outbox_core::clock::system_now() as i64;
        (now + self.by).max(0) as Millis
    }
}

async fn skewed_store(schema: &str, by: i64) -> PgStore {
    PgStore::connect_with_clock(config(schema), Arc::new(Skewed { by }))
        .await
        .expect("the store opens")
}

fn runner_config(lease: Duration) -> RunnerConfig {
    RunnerConfig {
        batch: 8,
        concurrency: 8,
        lease,
        safety_poll: Some(Duration::from_millis(100)),
        ..RunnerConfig::default()
    }
}

/// What the parent's sinks saw: each delivery's record and the server time it happened at.
#[derive(Default)]
struct Sightings {
    list: Mutex<Vec<(Record, Millis, usize)>>,
    more: tokio::sync::Notify,
}

type Seen = Arc<Sightings>;

impl Sightings {
    fn len(&self) -> usize {
        self.list.lock().unwrap().len()
    }

    fn all(&self) -> Vec<(Record, Millis, usize)> {
        self.list.lock().unwrap().clone()
    }
}

/// Starts runner number `me` on `store` with the plain builder (no clock given), its sink
/// taking `delivery` per record.
async fn start_runner_taking(
    store: PgStore,
    seen: &Seen,
    lease: Duration,
    me: usize,
    delivery: Duration,
) -> Outbox {
    let (seen, at) = (Arc::clone(seen), store.clock());
    let sink = sink_fn(move |record: Record| {
        let (seen, at) = (Arc::clone(&seen), Arc::clone(&at));
        async move {
            seen.list.lock().unwrap().push((record, at.now(), me));
            seen.more.notify_waiters();
            // A slow server: the delivery outlasts a short lease unless the lease is renewed.
            tokio::time::sleep(delivery).await;
            Outcome::Delivered
        }
    });
    Outbox::builder(Arc::new(store), sink)
        .config(runner_config(lease))
        .start()
        .await
        .expect("the runner starts")
}

/// Starts runner number `me` on `store` with the plain builder, delivering at once.
async fn start_runner(store: PgStore, seen: &Seen, lease: Duration, me: usize) -> Outbox {
    start_runner_taking(store, seen, lease, me, Duration::ZERO).await
}

fn records(n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| {
            let r = NewRecord::new(format!("r{i}").into_bytes());
            if i % 3 == 0 {
                r.in_group(format!("g{}", i % 20))
            } else {
                r
            }
        })
        .collect()
}

/// Waits until the sinks saw `n` deliveries.
async fn until_seen(seen: &Seen, n: usize) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let more = seen.more.notified();
            if seen.len() >= n {
                return;
            }
            more.await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {} of {n} delivered", seen.len()));
}

async fn drain_with_skews(skews: &[i64]) {
    let scratch = Scratch::new();
    let seen: Seen = Arc::default();
    // Short enough that every runner looks for expired leases several times during the
    // drain (every third of a lease), where a runner ahead would take over live leases if it
    // judged them by its own clock.
    let lease = Duration::from_secs(2);
    let mut outboxes = Vec::new();
    for (me, &by) in skews.iter().enumerate() {
        let store = skewed_store(&scratch.schema, by).await;
        outboxes.push(start_runner(store, &seen, lease, me).await);
    }
    // Enqueued in the server's time, as an outbox handle does with its clock.
    let writer = skewed_store(&scratch.schema, skews[0]).await;
    let ids = writer
        .enqueue(records(1_000), writer.clock().now())
        .await
        .unwrap();
    for outbox in &outboxes {
        outbox.notify();
    }
    until_seen(&seen, ids.len()).await;
    for outbox in &outboxes {
        outbox.flush(PATIENCE).await.unwrap();
    }
    let seen = seen.all();
    let mut times: HashMap<RecordId, usize> = HashMap::new();
    let mut shares = vec![0; skews.len()];
    for (record, _, runner) in &seen {
        *times.entry(record.id).or_default() += 1;
        shares[*runner] += 1;
        assert_eq!(
            record.interrupted, 0,
            "{} was charged an interruption",
            record.id
        );
    }
    // Every runner took part: one judging deadlines by a clock an hour behind would find
    // every record due an hour from now and deliver none.
    assert!(
        shares.iter().all(|&n| n > 0),
        "deliveries per runner: {shares:?}"
    );
    assert_eq!(times.len(), ids.len(), "every record delivered");
    assert!(
        times.values().all(|&n| n == 1),
        "a record was delivered twice"
    );
    let stats = writer.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.undelivered()), (1_000, 0));
    for outbox in outboxes {
        outbox.shutdown(PATIENCE).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_an_hour_apart_deliver_each_record_once() {
    if !server_ready() {
        return;
    }
    drain_with_skews(&[0, HOUR]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runners_at_minus_one_zero_and_plus_one_hour_deliver_each_record_once() {
    if !server_ready() {
        return;
    }
    drain_with_skews(&[-HOUR, 0, HOUR]).await;
}

/// Hosts `skews` apart, each with the plain builder, share 40 records whose deliveries take
/// 1.5 s under a 2 s lease (renewed while a delivery runs): a runner judging leases by its
/// own clock an hour ahead would take over every live lease of the others at once. Returns
/// how many times each record reached a sink, and how many it reached in all.
async fn slow_drain(skews: &[i64], runner_clock: bool) -> (HashMap<RecordId, usize>, usize) {
    let scratch = Scratch::new();
    let seen: Seen = Arc::default();
    let lease = Duration::from_secs(2);
    let delivery = Duration::from_millis(1_500);
    let mut outboxes = Vec::new();
    for (me, &by) in skews.iter().enumerate() {
        let outbox = if runner_clock {
            // The control: each host's runner on its host's own clock, as the builder gave
            // before a store could name its clock.
            let host = Arc::new(Skewed { by });
            let store = PgStore::connect_with_clock(
                config(&scratch.schema).with_runner_clock(),
                host.clone(),
            )
            .await
            .unwrap();
            let seen = Arc::clone(&seen);
            let sink = sink_fn(move |record: Record| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.list.lock().unwrap().push((record, 0, me));
                    seen.more.notify_waiters();
                    tokio::time::sleep(delivery).await;
                    Outcome::Delivered
                }
            });
            Outbox::builder(Arc::new(store), sink)
                .clock(host)
                .config(runner_config(lease))
                .start()
                .await
                .unwrap()
        } else {
            let store = skewed_store(&scratch.schema, by).await;
            start_runner_taking(store, &seen, lease, me, delivery).await
        };
        outboxes.push(outbox);
    }
    let writer = skewed_store(&scratch.schema, 0).await;
    let ids = writer
        .enqueue(records(40), writer.clock().now())
        .await
        .unwrap();
    for outbox in &outboxes {
        outbox.notify();
    }
    until_seen(&seen, ids.len()).await;
    for outbox in &outboxes {
        outbox.flush(PATIENCE).await.unwrap();
    }
    let stats = writer.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.undelivered()), (40, 0));
    for outbox in outboxes {
        outbox.shutdown(PATIENCE).await.unwrap();
    }
    let seen = seen.all();
    let mut times: HashMap<RecordId, usize> = HashMap::new();
    for (record, _, _) in &seen {
        *times.entry(record.id).or_default() += 1;
    }
    assert_eq!(times.len(), 40, "every record reached a sink");
    (times, seen.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_plain_builders_an_hour_apart_with_a_slow_sink_send_each_record_once() {
    if !server_ready() {
        return;
    }
    let (times, requests) = slow_drain(&[0, HOUR], false).await;
    let twice = times.values().filter(|&&n| n > 1).count();
    assert_eq!((requests, twice), (40, 0), "requests, records sent twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_plain_builders_hours_apart_with_a_slow_sink_send_each_record_once() {
    if !server_ready() {
        return;
    }
    let (times, requests) = slow_drain(&[-HOUR, 0, HOUR], false).await;
    let twice = times.values().filter(|&&n| n > 1).count();
    assert_eq!((requests, twice), (40, 0), "requests, records sent twice");
}

/// The control that shows the two tests above can fail: the same fleet with each runner on
/// its host's clock (what the plain builder did before) sends records twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_fleet_on_its_hosts_own_clocks_sends_records_twice() {
    if !server_ready() {
        return;
    }
    let (times, requests) = slow_drain(&[0, HOUR], true).await;
    let twice = times.values().filter(|&&n| n > 1).count();
    eprintln!("on the hosts' clocks: {requests} requests, {twice} records sent twice");
    assert!(twice > 0, "{requests} requests, none twice");
}

/// A runner given its host's clock on a store that judges by the server's is refused, typed:
/// it would run in a time of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_clock_given_to_the_builder_is_refused() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = skewed_store(&scratch.schema, HOUR).await;
    let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    let started = Outbox::builder(Arc::new(store.clone()), sink)
        .clock(Arc::new(Skewed { by: HOUR }))
        .start()
        .await;
    assert!(
        matches!(started, Err(outbox_core::Error::InvalidConfig(_))),
        "{:?}",
        started.map(|_| ())
    );
    // The store's own clock, given by hand as the README once said, is still accepted.
    let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    let outbox = Outbox::builder(Arc::new(store.clone()), sink)
        .clock(store.clock())
        .start()
        .await
        .unwrap();
    let off = outbox.now() as i64 - outbox_core::clock::system_now() as i64;
    assert!(
        off.abs() < 60_000,
        "the runner is in the server's time ({off} ms off)"
    );
    outbox.shutdown(PATIENCE).await.unwrap();
}

/// One line per held record, flushed at once: the parent reads it before killing the child.
fn report_holding(id: RecordId) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "holding {}", id.0).expect("stdout");
    out.flush().expect("flush");
}

/// The child: a runner on a host an hour ahead whose sink never answers, so it holds every
/// record it claims; it prints each one's id and waits to be killed.
fn hold_until_killed(role: &str) {
    let (schema, lease_ms) = role.split_once('|').expect("schema|lease");
    let lease = Duration::from_millis(lease_ms.parse().expect("lease ms"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = skewed_store(schema, HOUR).await;
        let sink = sink_fn(|record: Record| async move {
            report_holding(record.id);
            std::future::pending::<Outcome>().await
        });
        let _outbox = Outbox::builder(Arc::new(store), sink)
            .config(runner_config(lease))
            .start()
            .await
            .expect("the child's runner starts");
        std::future::pending::<()>().await;
    });
}

/// Three runners at -1 h, 0 and +1 h; the one at +1 h is a child process, killed with SIGKILL
/// while it holds a batch. Its records are taken over once their lease has run out in the
/// server's time (a few seconds), not after the hour its host is ahead, and no other record
/// is interrupted.
#[test]
fn a_killed_runner_an_hour_ahead_is_taken_over_after_one_lease() {
    const TEST: &str = "a_killed_runner_an_hour_ahead_is_taken_over_after_one_lease";
    if let Ok(role) = std::env::var(ROLE) {
        hold_until_killed(&role);
        return;
    }
    if !server_ready() {
        return;
    }
    let lease = Duration::from_secs(3);
    let scratch = Scratch::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let writer = runtime.block_on(skewed_store(&scratch.schema, 0));
    let ids = runtime
        .block_on(writer.enqueue(records(1_000), writer.clock().now()))
        .unwrap();

    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, format!("{}|{}", scratch.schema, lease.as_millis()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child runner");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("child stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if let Some(id) = line.find("holding ").map(|at| &line[at + 8..]) {
                if tx
                    .send(RecordId(id.trim().parse().expect("an id")))
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    // The child claims a full batch and holds all of it.
    let mut held = Vec::new();
    let started = Instant::now();
    while held.len() < 8 {
        let left = PATIENCE.saturating_sub(started.elapsed());
        held.push(rx.recv_timeout(left).expect("the child claims a batch"));
    }

    let seen: Seen = Arc::default();
    let outboxes = runtime.block_on(async {
        let a = start_runner(skewed_store(&scratch.schema, -HOUR).await, &seen, lease, 0).await;
        let b = start_runner(skewed_store(&scratch.schema, 0).await, &seen, lease, 1).await;
        [a, b]
    });
    // Mid-drain: the others are delivering when the child dies.
    runtime.block_on(until_seen(&seen, 100));
    let leases: HashMap<RecordId, Millis> = runtime.block_on(async {
        let mut leases = HashMap::new();
        for id in &held {
            let record = writer.get(*id).await.unwrap().expect("held record");
            let lease = record
                .lease
                .expect("still in flight under the child's lease");
            leases.insert(*id, lease.until);
        }
        leases
    });
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    let killed = Instant::now();

    runtime.block_on(until_seen(&seen, ids.len()));
    let took = killed.elapsed();
    let seen = seen.all();
    let mut times: HashMap<RecordId, usize> = HashMap::new();
    for (record, at, _) in &seen {
        *times.entry(record.id).or_default() += 1;
        match leases.get(&record.id) {
            Some(until) => {
                assert_eq!(
                    record.interrupted, 1,
                    "{} counts the child's claim",
                    record.id
                );
                assert!(
                    at >= until,
                    "{} taken over at {at}, before its lease ran out at {until}",
                    record.id
                );
            }
            None => assert_eq!(record.interrupted, 0, "{} interrupted", record.id),
        }
    }
    assert_eq!(times.len(), ids.len(), "every record delivered");
    assert!(
        times.values().all(|&n| n == 1),
        "a record was delivered twice"
    );
    // One lease, plus a recovery check (a third of a lease) and slack for a loaded machine:
    // not the hour the child's host was ahead.
    assert!(
        took < lease * 4,
        "the child's records took {took:?} to be taken over (lease {lease:?})"
    );
    runtime.block_on(async {
        for outbox in outboxes {
            outbox.shutdown(PATIENCE).await.unwrap();
        }
    });
}
