//! The criterion harness: one `benchmark_group` per workload, one row per store and per bare
//! engine (`BenchmarkId::new(row, size)`), every store at its default durability.
//!
//! `cargo bench -p outbox-benches` runs the full plan; with `OUTBOX_BENCH_QUICK=1` the quick
//! plan; `cargo test` runs every benchmark once at smoke sizes (criterion's test mode). With
//! `OUTBOX_BENCH_META=<file>` the harness also writes each row's durability setting there, for
//! `cargo xtask bench-report`.
//!
//! Each row opens and fills its store the first time criterion runs it, so a filtered run
//! (`cargo bench -p outbox-benches -- due/redb`) pays only for the rows it measures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use outbox_benches::bare::{BareEngine, BareKind, BarePg};
use outbox_benches::pg::{self, PgSchema, PgServer};
use outbox_benches::plan::Plan;
use outbox_benches::subject::{StoreKind, Subject};
use outbox_benches::{workload, EARLY, FAR};
use outbox_core::clock::system_now;
use tokio::runtime::Runtime;

/// Rows are inserted in transactions of this many when a bare backlog is filled.
const BARE_FILL: usize = 10_000;

fn main() {
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let plan = if !benchmarking {
        Plan::smoke()
    } else if std::env::var_os("OUTBOX_BENCH_QUICK").is_some() {
        Plan::quick()
    } else {
        Plan::full()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut c = Criterion::default()
        .sample_size(plan.samples)
        .warm_up_time(Duration::from_millis(plan.warm_up_ms))
        .measurement_time(Duration::from_millis(plan.measure_ms))
        .configure_from_args();

    // Without a server the postgres rows are skipped (with a printed line), unless
    // OUTBOX_PG_REQUIRED=1, which makes that fail the run.
    let pg = must(
        runtime.block_on(PgServer::find()),
        "finding the PostgreSQL server",
    );

    enqueue_one(&mut c, &runtime);
    enqueue_concurrent(&mut c, &runtime, &plan);
    enqueue_batch(&mut c, &runtime, &plan);
    drain(&mut c, &runtime, &plan, pg.as_ref());
    due(&mut c, &runtime, &plan);

    c.final_summary();
    if benchmarking {
        write_meta(pg.as_ref());
    }
}

/// Panics with the error: a failing workload must stop the run, not be timed.
fn must<T>(result: outbox_core::Result<T>, what: &str) -> T {
    result.unwrap_or_else(|err| panic!("{what}: {err}"))
}

fn open(runtime: &Runtime, kind: StoreKind) -> Subject {
    must(runtime.block_on(kind.open()), "opening the store")
}

fn open_bare(kind: BareKind) -> Box<dyn BareEngine> {
    must(kind.open(), "opening the bare engine")
}

/// 1. Enqueue, one producer, one record at a time, each awaited until durable.
fn enqueue_one(c: &mut Criterion, runtime: &Runtime) {
    let mut group = c.benchmark_group("enqueue-one");
    group.throughput(Throughput::Elements(1));
    for kind in StoreKind::local() {
        let mut subject = None;
        group.bench_function(BenchmarkId::new(kind.name(), 1), |b| {
            let subject = subject.get_or_insert_with(|| open(runtime, kind));
            b.to_async(runtime).iter(|| async {
                must(
                    workload::enqueue_one_by_one(&subject.store, 1).await,
                    "enqueue",
                )
            })
        });
    }
    for kind in BareKind::all() {
        let mut bare = None;
        group.bench_function(BenchmarkId::new(kind.name(), 1), |b| {
            let bare = bare.get_or_insert_with(|| open_bare(kind));
            b.iter(|| must(bare.insert_each(1, system_now()), "bare insert"))
        });
    }
    group.finish();
}

/// 2. Enqueue, concurrent producers, each awaited until durable: group commit at work. The
///    bare rows insert the same number per transaction as the batch workload.
fn enqueue_concurrent(c: &mut Criterion, runtime: &Runtime, plan: &Plan) {
    let mut group = c.benchmark_group("enqueue-concurrent");
    group.throughput(Throughput::Elements(plan.producers as u64));
    for kind in StoreKind::local() {
        let mut subject = None;
        group.bench_function(BenchmarkId::new(kind.name(), plan.producers), |b| {
            let subject = subject.get_or_insert_with(|| open(runtime, kind));
            b.to_async(runtime).iter(|| async {
                must(
                    workload::enqueue_concurrently(&subject.store, plan.producers).await,
                    "concurrent enqueue",
                )
            })
        });
    }
    bare_batches(&mut group, plan.batch);
    group.finish();
}

fn bare_batches(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    batch: usize,
) {
    group.throughput(Throughput::Elements(batch as u64));
    for kind in BareKind::all() {
        let mut bare = None;
        group.bench_function(BenchmarkId::new(kind.name(), batch), |b| {
            let bare = bare.get_or_insert_with(|| open_bare(kind));
            b.iter(|| must(bare.insert_batch(batch, system_now()), "bare insert"))
        });
    }
}

/// 3. Enqueue, batches of `plan.batch` records per call.
fn enqueue_batch(c: &mut Criterion, runtime: &Runtime, plan: &Plan) {
    let mut group = c.benchmark_group("enqueue-batch");
    group.throughput(Throughput::Elements(plan.batch as u64));
    for kind in StoreKind::local() {
        let mut subject = None;
        group.bench_function(BenchmarkId::new(kind.name(), plan.batch), |b| {
            let subject = subject.get_or_insert_with(|| open(runtime, kind));
            b.to_async(runtime).iter(|| async {
                must(
                    workload::enqueue_batch(&subject.store, plan.batch).await,
                    "batch enqueue",
                )
            })
        });
    }
    bare_batches(&mut group, plan.batch);
    group.finish();
}

/// 4. End to end: `plan.drain_records` enqueued (not timed), then a runner with the default
///    batch and concurrency drains them to a no-op sink; timed from its start to an empty
///    queue. The bare rows claim and delete 100 per transaction. On PostgreSQL, 1, 2 and 4
///    runners (each with its own store, on one schema) against as many bare connections.
fn drain(c: &mut Criterion, runtime: &Runtime, plan: &Plan, pg: Option<&PgServer>) {
    let records = plan.drain_records;
    let mut group = c.benchmark_group("drain");
    group.throughput(Throughput::Elements(records as u64));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for kind in StoreKind::local() {
        let mut subject = None;
        group.bench_function(BenchmarkId::new(kind.name(), records), |b| {
            let store = Arc::clone(&subject.get_or_insert_with(|| open(runtime, kind)).store);
            b.to_async(runtime).iter_custom(|iters| {
                let store = Arc::clone(&store);
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += must(workload::drain(&store, records).await, "drain").elapsed;
                    }
                    total
                }
            })
        });
    }
    for kind in BareKind::all() {
        let mut bare = None;
        group.bench_function(BenchmarkId::new(kind.name(), records), |b| {
            let bare = bare.get_or_insert_with(|| open_bare(kind));
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let now = system_now();
                    must(bare.insert_batch(records, now), "bare fill");
                    let started = Instant::now();
                    let removed = must(bare.drain(100, now), "bare drain");
                    total += started.elapsed();
                    assert_eq!(
                        removed, records as u64,
                        "the bare drain removed every record"
                    );
                }
                total
            })
        });
    }
    if let Some(server) = pg {
        let schemas = pg_drain(&mut group, runtime, plan.pg_drain_records, server);
        for schema in schemas {
            must(runtime.block_on(schema.drop()), "dropping a schema");
        }
    }
    group.finish();
}

/// The postgres rows of the drain group; returns the schemas they made, to be dropped.
fn pg_drain(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    runtime: &Runtime,
    records: usize,
    server: &PgServer,
) -> Vec<PgSchema> {
    let mut schemas = Vec::new();
    group.throughput(Throughput::Elements(records as u64));
    for runners in pg::RUNNERS {
        let schema = server.schema();
        let mut stores = None;
        group.bench_function(BenchmarkId::new(pg::row_name(runners), records), |b| {
            let stores = stores.get_or_insert_with(|| {
                must(runtime.block_on(pg::stores(&schema, runners)), "connecting")
            });
            b.to_async(runtime).iter_custom(|iters| {
                let stores = stores.clone();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += must(pg::drain_runners(&stores, records).await, "drain").elapsed;
                    }
                    total
                }
            })
        });
        // The stores close their pools before their schema is dropped.
        drop(stores);
        schemas.push(schema);
    }
    for workers in pg::RUNNERS {
        let schema = server.schema();
        let mut bare = None;
        group.bench_function(BenchmarkId::new(pg::bare_row_name(workers), records), |b| {
            let bare: &BarePg = bare.get_or_insert_with(|| {
                must(
                    runtime.block_on(BarePg::create(schema.clone(), workers)),
                    "creating the bare queue",
                )
            });
            b.to_async(runtime).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let now = system_now();
                    must(bare.insert_batch(records, now).await, "bare fill");
                    let started = Instant::now();
                    let removed = must(bare.drain(100, now).await, "bare drain");
                    total += started.elapsed();
                    assert_eq!(
                        removed, records as u64,
                        "the bare drain removed every record"
                    );
                }
                total
            })
        });
        drop(bare);
        schemas.push(schema);
    }
    schemas
}

/// 5. "What is due" over a backlog of records that are not due yet: the runner's claim at a
///    `now` before every deadline, which must cost the same whatever the backlog.
fn due(c: &mut Criterion, runtime: &Runtime, plan: &Plan) {
    let mut group = c.benchmark_group("due");
    for kind in StoreKind::local() {
        for backlog in plan.due_backlogs {
            let mut subject = None;
            group.bench_function(BenchmarkId::new(kind.name(), backlog), |b| {
                let subject = subject.get_or_insert_with(|| {
                    let subject = open(runtime, kind);
                    must(
                        runtime.block_on(workload::fill_not_due(&subject.store, backlog)),
                        "filling the backlog",
                    );
                    subject
                });
                b.to_async(runtime).iter(|| async {
                    let claimed = must(workload::what_is_due(&subject.store).await, "due");
                    assert_eq!(claimed, 0, "nothing is due yet");
                })
            });
        }
    }
    for kind in BareKind::all() {
        for backlog in plan.due_backlogs {
            let mut bare = None;
            group.bench_function(BenchmarkId::new(kind.name(), backlog), |b| {
                let bare = bare.get_or_insert_with(|| {
                    let mut bare = open_bare(kind);
                    let mut left = backlog;
                    while left > 0 {
                        let n = left.min(BARE_FILL);
                        must(bare.insert_batch(n, FAR), "bare fill");
                        left -= n;
                    }
                    bare
                });
                b.iter(|| {
                    let due = must(bare.due(EARLY, 32), "bare due");
                    assert_eq!(due, 0, "nothing is due yet");
                })
            });
        }
    }
    group.finish();
}

/// Writes `row<TAB>durability` for every row to `$OUTBOX_BENCH_META`, for the report.
fn write_meta(pg: Option<&PgServer>) {
    let Some(path) = std::env::var_os("OUTBOX_BENCH_META") else {
        return;
    };
    let mut text = String::new();
    for kind in StoreKind::local() {
        text.push_str(&format!("{}\t{}\n", kind.name(), kind.durability()));
    }
    for kind in BareKind::all() {
        text.push_str(&format!("{}\t{}\n", kind.name(), kind.durability()));
    }
    if let Some(server) = pg {
        for runners in pg::RUNNERS {
            for row in [pg::row_name(runners), pg::bare_row_name(runners)] {
                text.push_str(&format!("{row}\t{}\n", server.durability()));
            }
        }
    }
    if let Err(err) = std::fs::write(&path, text) {
        eprintln!("could not write {}: {err}", path.to_string_lossy());
    }
}
