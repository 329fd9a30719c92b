//! The `metrics` feature: exact values after scripted runs, read from a debugging recorder
//! scoped to the test's thread (a current-thread runtime on tokio's paused clock runs every
//! task there, so parallel tests do not mix their numbers).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use outbox_core::metrics as names;
use outbox_core::{
    sink_fn, Clock, Event, Millis, NewRecord, Outbox, Outcome, Record, RunnerConfig, Store,
    TokioClock,
};
use outbox_memory::MemoryStore;

const BASE: Millis = 1_700_000_000_000;

/// Runs `test` on a current-thread runtime with a paused clock, recording into a recorder of
/// its own; returns what it returned and what was recorded.
fn recorded<F: Future>(test: F) -> (F::Output, Recorded) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let out = metrics::with_local_recorder(&recorder, || runtime.block_on(test));
    (out, Recorded::from(&snapshotter))
}

/// One snapshot, keyed `name{label=value,...}`.
#[derive(Debug, Default)]
struct Recorded {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
}

impl Recorded {
    fn from(snapshotter: &Snapshotter) -> Self {
        let mut recorded = Recorded::default();
        for (key, _unit, _description, value) in snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = if labels.is_empty() {
                key.name().to_owned()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            };
            match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    recorded.counters.insert(name, n);
                }
                (MetricKind::Gauge, DebugValue::Gauge(g)) => {
                    recorded.gauges.insert(name, g.0);
                }
                (MetricKind::Histogram, DebugValue::Histogram(values)) => {
                    recorded
                        .histograms
                        .insert(name, values.into_iter().map(|v| v.0).collect());
                }
                (kind, value) => panic!("{name}: {kind:?} recorded as {value:?}"),
            }
        }
        recorded
    }

    fn gauge(&self, name: &str) -> f64 {
        *self
            .gauges
            .get(name)
            .unwrap_or_else(|| panic!("no gauge {name}: {:?}", self.gauges))
    }

    fn histogram(&self, name: &str) -> &[f64] {
        self.histograms.get(name).map_or(&[], Vec::as_slice)
    }
}

fn counters(expected: &[(&str, u64)]) -> BTreeMap<String, u64> {
    expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect()
}

/// A sink that answers by payload: `ok` is delivered, `flaky` fails once with a 503 and is
/// then delivered, `bad` is rejected (422), `clash` conflicts (409, parked by default),
/// `locked` is a refused credential (401).
fn scripted() -> impl outbox_core::Sink {
    let failed_once: Arc<Mutex<HashSet<String>>> = Arc::default();
    sink_fn(move |record: Record| {
        let failed_once = Arc::clone(&failed_once);
        async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            match record.payload.as_slice() {
                b"ok" => Outcome::Delivered,
                b"flaky" if failed_once.lock().unwrap().insert(record.key.clone()) => {
                    Outcome::transient("HTTP 503", None)
                }
                b"flaky" => Outcome::Delivered,
                b"bad" => Outcome::rejected("HTTP 422"),
                b"clash" => Outcome::conflict("HTTP 409"),
                b"locked" => Outcome::halt("HTTP 401"),
                other => panic!("no script for {other:?}"),
            }
        }
    })
}

async fn start(store: Arc<MemoryStore>, clock: TokioClock) -> Outbox {
    Outbox::builder(store, scripted())
        .clock(Arc::new(clock))
        .config(RunnerConfig::default().with_seed(7))
        .start()
        .await
        .unwrap()
}

fn records(payload: &str, count: usize) -> Vec<NewRecord> {
    (0..count)
        .map(|_| NewRecord::new(payload.as_bytes().to_vec()))
        .collect()
}

#[test]
fn ten_delivered_two_retried_one_rejected_one_parked() {
    let (oldest_age, seen) = recorded(async {
        let store = Arc::new(MemoryStore::new());
        let clock = TokioClock::starting_at(BASE);
        let outbox = start(Arc::clone(&store), clock).await;
        let mut batch = records("ok", 10);
        batch.extend(records("flaky", 2));
        batch.extend(records("bad", 1));
        batch.extend(records("clash", 1));
        outbox.enqueue_batch(batch).await.unwrap();
        // The retries are due within seconds; a minute covers them.
        tokio::time::sleep(Duration::from_secs(60)).await;
        outbox.flush(Duration::from_secs(5)).await.unwrap();
        outbox.shutdown(Duration::from_secs(5)).await.unwrap();
        let stats = store.stats().await.unwrap();
        assert_eq!((stats.delivered, stats.rejected), (12, 1), "{stats:?}");
        clock.now() - stats.oldest_created_at.unwrap()
    });
    assert_eq!(
        seen.counters,
        counters(&[
            (names::ENQUEUED, 14),
            ("outbox_attempts_total{outcome=delivered}", 12),
            ("outbox_attempts_total{outcome=transient}", 2),
            ("outbox_attempts_total{outcome=rejected}", 1),
            ("outbox_attempts_total{outcome=conflict}", 1),
            (names::DELIVERED, 12),
            ("outbox_retries_total{spent=true}", 2),
            (names::REJECTED, 1),
            (names::PARKED, 1),
        ])
    );
    // The gauges as read when the runner stopped: one parked, one rejected, nothing owed
    // otherwise, the parked record the oldest undelivered one.
    for (state, count) in [
        ("pending", 0.0),
        ("retrying", 0.0),
        ("in_flight", 0.0),
        ("needs_attention", 1.0),
        ("rejected", 1.0),
        ("discarded", 0.0),
    ] {
        assert_eq!(
            seen.gauge(&format!("outbox_records{{state={state}}}")),
            count,
            "{state}"
        );
    }
    assert_eq!(seen.gauge(names::HELD_BACK), 0.0);
    assert_eq!(seen.gauge(names::LINK_UP), 1.0);
    assert_eq!(seen.gauge(names::HALTED), 0.0);
    assert!(oldest_age >= 60_000, "{oldest_age}");
    assert_eq!(
        seen.gauge(names::OLDEST_AGE),
        Duration::from_millis(oldest_age).as_secs_f64()
    );
    // Every attempt timed: the sink takes 5 ms of the paused clock.
    let durations: Vec<f64> = ["delivered", "transient", "rejected", "conflict"]
        .iter()
        .flat_map(|o| {
            seen.histogram(&format!("{}{{outcome={o}}}", names::DELIVERY_DURATION))
                .to_vec()
        })
        .collect();
    assert_eq!(durations.len(), 16);
    assert!(durations.iter().all(|&d| d == 0.005), "{durations:?}");
    // From enqueue to delivery: at least the sink's 5 ms for the ten delivered at first try
    // (a few batches of the default concurrency), at least two sink calls and a retry wait
    // for the two that were retried.
    let mut ages = seen.histogram(names::ENQUEUE_TO_DELIVERY).to_vec();
    ages.sort_by(f64::total_cmp);
    assert_eq!(ages.len(), 12, "{ages:?}");
    assert!(
        ages[..10].iter().all(|&a| (0.005..0.05).contains(&a)),
        "{ages:?}"
    );
    assert!(ages[10..].iter().all(|&a| a >= 0.01), "{ages:?}");
}

#[test]
fn halts_requeues_and_discards_are_counted_and_the_halt_is_a_gauge() {
    let ((), seen) = recorded(async {
        let store = Arc::new(MemoryStore::new());
        let clock = TokioClock::starting_at(BASE);
        let outbox = start(Arc::clone(&store), clock).await;
        let bad = outbox
            .enqueue(NewRecord::new(b"bad".to_vec()))
            .await
            .unwrap();
        let clash = outbox
            .enqueue(NewRecord::new(b"clash".to_vec()))
            .await
            .unwrap();
        outbox.flush(Duration::from_secs(5)).await.unwrap();
        outbox.discard(clash, "a person gave up").await.unwrap();
        outbox.requeue(bad).await.unwrap();
        outbox.flush(Duration::from_secs(5)).await.unwrap();
        let mut events = outbox.events();
        outbox
            .enqueue(NewRecord::new(b"locked".to_vec()))
            .await
            .unwrap();
        // A halted runner never settles: wait for the halt instead.
        while !matches!(events.recv().await.unwrap(), Event::Halted { .. }) {}
        assert!(outbox.is_halted());
        // Stopped while halted: the last reading of the gauges shows the halt.
        outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    });
    assert_eq!(
        seen.counters,
        counters(&[
            (names::ENQUEUED, 3),
            ("outbox_attempts_total{outcome=rejected}", 2),
            ("outbox_attempts_total{outcome=conflict}", 1),
            ("outbox_attempts_total{outcome=halt}", 1),
            (names::REJECTED, 2),
            (names::PARKED, 1),
            (names::DISCARDED, 1),
            (names::REQUEUED, 1),
            (names::HALTS, 1),
        ])
    );
    assert_eq!(seen.gauge(names::HALTED), 1.0);
    assert_eq!(seen.gauge("outbox_records{state=discarded}"), 1.0);
    assert_eq!(seen.gauge("outbox_records{state=rejected}"), 1.0);
    assert_eq!(seen.gauge("outbox_records{state=pending}"), 1.0);
}

#[test]
fn an_idle_runner_reads_the_gauges_again_within_a_second() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let parked = || Recorded::from(&snapshotter).gauge("outbox_records{state=needs_attention}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let outbox = start(Arc::clone(&store), TokioClock::starting_at(BASE)).await;
            // Read as the runner starts.
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert_eq!(parked(), 0.0);
            outbox.enqueue_batch(records("clash", 3)).await.unwrap();
            outbox.flush(Duration::from_secs(5)).await.unwrap();
            // Read at most once a second: the drain took milliseconds.
            assert_eq!(parked(), 0.0);
            // Nothing else happens, yet the idle runner wakes once more to read them.
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(parked(), 3.0);
            outbox.shutdown(Duration::from_secs(5)).await.unwrap();
        })
    });
}
