//! `paired-ratios`: the target ratios of issue 7 measured in alternating blocks (see
//! `outbox_benches::paired`), one line per target and store, `key=value` fields tab-separated:
//! `target store ratio low high blocks`.
//!
//! ```text
//! paired-ratios [--quick] [--only TARGET]
//! ```
//!
//! Targets: `enqueue-one` (store, one record per call, over bare one insert per transaction),
//! `enqueue-concurrent` (64 producers over bare 100 inserts per transaction), `drain`
//! (runner drain over bare claim + delete 100 per transaction), each a ratio of rates; and
//! `due`, the time of the due query over the large backlog divided by its time over the small
//! one, on the same store (so there the target is at most 1.3). Bare engine calls run on the
//! main thread, store calls on a tokio runtime. With a PostgreSQL server (see
//! `outbox_benches::pg`), `drain` also pairs 1, 2 and 4 runners with as many bare connections
//! (stores `postgres-1-runner` and so on); without one those lines are skipped.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_benches::bare::{BareEngine, BareKind, BarePg};
use outbox_benches::paired::{ratio, Paired};
use outbox_benches::pg::{self, PgServer};
use outbox_benches::plan::Plan;
use outbox_benches::subject::{StoreKind, Subject};
use outbox_benches::workload;
use outbox_core::clock::system_now;
use outbox_core::{Error, Result, Store};
use tokio::runtime::Runtime;

/// Sizes of one run.
struct Sizes {
    blocks: usize,
    ops_per_block: usize,
    drain_blocks: usize,
    drain_records: usize,
    due_backlogs: [usize; 2],
}

const PRODUCERS: usize = 64;
const BARE_BATCH: usize = 100;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let sizes = if quick {
        Sizes {
            blocks: 5,
            ops_per_block: 5,
            drain_blocks: 3,
            drain_records: 500,
            due_backlogs: Plan::quick().due_backlogs,
        }
    } else {
        Sizes {
            blocks: 41,
            ops_per_block: 20,
            drain_blocks: 9,
            drain_records: 2_000,
            due_backlogs: Plan::full().due_backlogs,
        }
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::backend)
        .and_then(|runtime| measure(&runtime, &sizes, only.as_deref()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("paired-ratios: {err}");
            ExitCode::FAILURE
        }
    }
}

fn measure(runtime: &Runtime, sizes: &Sizes, only: Option<&str>) -> Result<()> {
    let wanted = |target: &str| only.is_none_or(|o| o == target);
    let pairs = StoreKind::ALL
        .into_iter()
        .filter_map(|store| Some((store, store.bare()?)));
    for (store, bare) in pairs {
        if wanted("enqueue-one") {
            print(
                "enqueue-one",
                store,
                enqueue_one(runtime, store, bare, sizes)?,
            )?;
        }
        if wanted("enqueue-concurrent") {
            let paired = concurrent(runtime, store, bare, sizes)?;
            print("enqueue-concurrent", store, paired)?;
        }
        if wanted("drain") {
            print("drain", store, drain(runtime, store, bare, sizes)?)?;
        }
    }
    if wanted("drain") {
        if let Some(server) = runtime.block_on(PgServer::find())? {
            for runners in pg::RUNNERS {
                let paired = pg_drain(runtime, &server, runners, sizes)?;
                print_row("drain", &pg::row_name(runners), paired)?;
            }
        }
    }
    for store in StoreKind::local().filter(|_| wanted("due")) {
        print("due", store, due(runtime, store, sizes)?)?;
    }
    Ok(())
}

fn print(target: &str, store: StoreKind, paired: Option<Paired>) -> Result<()> {
    print_row(target, store.name(), paired)
}

fn print_row(target: &str, store: &str, paired: Option<Paired>) -> Result<()> {
    let paired = paired.ok_or_else(|| Error::Backend {
        detail: format!("{target}: no block was measured"),
        source: None,
    })?;
    writeln!(
        std::io::stdout().lock(),
        "target={target}\tstore={store}\tratio={:.3}\tlow={:.3}\thigh={:.3}\tblocks={}",
        paired.ratio,
        paired.low,
        paired.high,
        paired.blocks
    )
    .map_err(Error::backend)
}

/// The due query over the large backlog and over the small one, in alternating blocks: the
/// ratio is the large backlog's time over the small one's.
fn due(runtime: &Runtime, store: StoreKind, sizes: &Sizes) -> Result<Option<Paired>> {
    let [small, large] = sizes.due_backlogs;
    let open = |backlog: usize| -> Result<Subject> {
        let subject = runtime.block_on(store.open())?;
        runtime.block_on(workload::fill_not_due(&subject.store, backlog))?;
        Ok(subject)
    };
    let (small, large) = (open(small)?, open(large)?);
    let queries = 200;
    let query = |subject: &Subject| {
        timed(|| {
            runtime.block_on(async {
                for _ in 0..queries {
                    let claimed = workload::what_is_due(&subject.store).await?;
                    if claimed != 0 {
                        return Err(Error::Backend {
                            detail: format!(
                                "{claimed} records were due in a backlog of later ones"
                            ),
                            source: None,
                        });
                    }
                }
                Ok(())
            })
        })
    };
    let (small_times, large_times) = alternate(sizes.blocks, || query(&small), || query(&large))?;
    Ok(ratio(&small_times, queries, &large_times, queries))
}

/// Times `a` and `b` in `blocks` alternating blocks (the first side alternates too).
fn alternate(
    blocks: usize,
    mut a: impl FnMut() -> Result<Duration>,
    mut b: impl FnMut() -> Result<Duration>,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let (mut a_times, mut b_times) = (Vec::new(), Vec::new());
    for block in 0..blocks {
        if block % 2 == 0 {
            a_times.push(a()?);
            b_times.push(b()?);
        } else {
            b_times.push(b()?);
            a_times.push(a()?);
        }
    }
    Ok((a_times, b_times))
}

fn timed(work: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let started = Instant::now();
    work()?;
    Ok(started.elapsed())
}

fn enqueue_one(
    runtime: &Runtime,
    store: StoreKind,
    bare: BareKind,
    sizes: &Sizes,
) -> Result<Option<Paired>> {
    let subject = runtime.block_on(store.open())?;
    let mut engine = bare.open()?;
    let n = sizes.ops_per_block;
    let (a, b) = alternate(
        sizes.blocks,
        || timed(|| runtime.block_on(workload::enqueue_one_by_one(&subject.store, n))),
        || timed(|| engine.insert_each(n, system_now())),
    )?;
    Ok(ratio(&a, n as u64, &b, n as u64))
}

fn concurrent(
    runtime: &Runtime,
    store: StoreKind,
    bare: BareKind,
    sizes: &Sizes,
) -> Result<Option<Paired>> {
    let subject = runtime.block_on(store.open())?;
    let mut engine = bare.open()?;
    let rounds = sizes.ops_per_block.div_ceil(4);
    let (a, b) = alternate(
        sizes.blocks,
        || {
            timed(|| {
                for _ in 0..rounds {
                    runtime.block_on(workload::enqueue_concurrently(&subject.store, PRODUCERS))?;
                }
                Ok(())
            })
        },
        || {
            timed(|| {
                for _ in 0..rounds {
                    engine.insert_batch(BARE_BATCH, system_now())?;
                }
                Ok(())
            })
        },
    )?;
    Ok(ratio(
        &a,
        (rounds * PRODUCERS) as u64,
        &b,
        (rounds * BARE_BATCH) as u64,
    ))
}

fn drain(
    runtime: &Runtime,
    store: StoreKind,
    bare: BareKind,
    sizes: &Sizes,
) -> Result<Option<Paired>> {
    let subject = runtime.block_on(store.open())?;
    let queue: Arc<dyn Store> = Arc::clone(&subject.store);
    let mut engine: Box<dyn BareEngine> = bare.open()?;
    let n = sizes.drain_records;
    let (a, b) = alternate(
        sizes.drain_blocks,
        || Ok(runtime.block_on(workload::drain(&queue, n))?.elapsed),
        || {
            let now = system_now();
            engine.insert_batch(n, now)?;
            let mut removed = 0;
            let elapsed = timed(|| {
                removed = engine.drain(BARE_BATCH, now)?;
                Ok(())
            })?;
            if removed != n as u64 {
                return Err(Error::Backend {
                    detail: format!("the bare drain removed {removed} of {n} records"),
                    source: None,
                });
            }
            Ok(elapsed)
        },
    )?;
    Ok(ratio(&a, n as u64, &b, n as u64))
}

/// `runners` runners on one PostgreSQL schema against as many bare connections on another, in
/// alternating blocks; both schemas are dropped at the end, whatever the outcome.
fn pg_drain(
    runtime: &Runtime,
    server: &PgServer,
    runners: usize,
    sizes: &Sizes,
) -> Result<Option<Paired>> {
    let (store_schema, bare_schema) = (server.schema(), server.schema());
    let n = sizes.drain_records;
    let measured = (|| {
        let stores = runtime.block_on(pg::stores(&store_schema, runners))?;
        let bare = runtime.block_on(BarePg::create(bare_schema.clone(), runners))?;
        alternate(
            sizes.drain_blocks,
            || Ok(runtime.block_on(pg::drain_runners(&stores, n))?.elapsed),
            || {
                runtime.block_on(async {
                    let now = system_now();
                    bare.insert_batch(n, now).await?;
                    let started = Instant::now();
                    let removed = bare.drain(BARE_BATCH, now).await?;
                    let elapsed = started.elapsed();
                    if removed != n as u64 {
                        return Err(Error::Backend {
                            detail: format!("the bare drain removed {removed} of {n} records"),
                            source: None,
                        });
                    }
                    Ok(elapsed)
                })
            },
        )
    })();
    for schema in [&store_schema, &bare_schema] {
        runtime.block_on(schema.drop())?;
    }
    let (a, b) = measured?;
    Ok(ratio(&a, n as u64, &b, n as u64))
}
