//! The rounds of the comparison: every workload on both sides in each round, the side that
//! goes first alternating from one round to the next, and one output line per row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{Error, NewRecord, Result, RunnerConfig, Store};
use tokio::task::JoinSet;

use super::peer::Graphile;
use super::{CONCURRENCY, PAYLOAD_BYTES, PRODUCERS};
use crate::bare::BarePg;
use crate::paired::ratio;
use crate::pg::{self, PgSchema, PgServer};
use crate::workload::Drained;

/// Records the bare loop claims per transaction, as in the other PostgreSQL rows.
const BARE_BATCH: usize = 100;

/// Records per enqueue call when the outbox is filled before a drain (not timed).
const FILL_BATCH: usize = 1_000;

/// Sizes of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Records per drain, and per enqueue block of each side.
    pub records: usize,
    /// Rounds; each runs every row once on each side.
    pub rounds: usize,
}

/// What one side did in one round: how long, for how many records, and the WAL bytes the
/// server wrote meanwhile (0 where not read).
#[derive(Clone, Copy, Debug)]
struct Sample {
    elapsed: Duration,
    wal: i64,
}

/// One row: our side against the other, over the rounds.
#[derive(Debug)]
struct Row {
    name: String,
    peer: &'static str,
    records: usize,
    ours: Vec<Sample>,
    theirs: Vec<Sample>,
}

impl Row {
    fn new(name: impl Into<String>, peer: &'static str, records: usize) -> Self {
        Row {
            name: name.into(),
            peer,
            records,
            ours: Vec::new(),
            theirs: Vec::new(),
        }
    }

    /// `key=value` fields, tab-separated: rates are medians over the rounds, the ratio the
    /// median of the rounds' ratios (ours over theirs), WAL bytes per record medians.
    fn line(&self) -> Result<String> {
        let times = |s: &[Sample]| s.iter().map(|s| s.elapsed).collect::<Vec<_>>();
        let n = self.records as u64;
        let paired = ratio(&times(&self.ours), n, &times(&self.theirs), n).ok_or_else(|| {
            Error::Backend {
                detail: format!("{}: no round was measured", self.name),
                source: None,
            }
        })?;
        let rate = |s: &[Sample]| {
            median(
                s.iter()
                    .map(|s| self.records as f64 / s.elapsed.as_secs_f64().max(1e-9))
                    .collect(),
            )
        };
        let wal = |s: &[Sample]| median(s.iter().map(|s| s.wal as f64 / n as f64).collect());
        let mut line = format!(
            "row={}\tpeer={}\trecords={}\tours_rate={:.0}\tpeer_rate={:.0}\tratio={:.3}\tlow={:.3}\thigh={:.3}\trounds={}",
            self.name,
            self.peer,
            self.records,
            rate(&self.ours),
            rate(&self.theirs),
            paired.ratio,
            paired.low,
            paired.high,
            paired.blocks
        );
        if self.ours.iter().chain(&self.theirs).any(|s| s.wal != 0) {
            line.push_str(&format!(
                "\tours_wal={:.0}\tpeer_wal={:.0}",
                wal(&self.ours),
                wal(&self.theirs)
            ));
        }
        Ok(line)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Everything each side works on: a schema per side and workload, each noted in `schemas` as
/// it is made so that the caller drops it.
struct Sides {
    enqueue: Arc<dyn Store>,
    drain: Vec<Arc<dyn Store>>,
    peer_enqueue: Graphile,
    peer_drain: Graphile,
    bare: Vec<BarePg>,
}

impl Sides {
    async fn open(server: &PgServer, schemas: &mut Vec<PgSchema>) -> Result<Sides> {
        let mut schema = || {
            let schema = server.schema();
            schemas.push(schema.clone());
            schema
        };
        let runners = pg::RUNNERS[pg::RUNNERS.len() - 1];
        let enqueue = pg::stores(&schema(), 1).await?.remove(0);
        let drain = pg::stores(&schema(), runners).await?;
        let peer_enqueue = Graphile::create(schema()).await?;
        let peer_drain = Graphile::create(schema()).await?;
        let mut bare = Vec::new();
        for workers in pg::RUNNERS {
            bare.push(BarePg::create(schema(), workers).await?);
        }
        Ok(Sides {
            enqueue,
            drain,
            peer_enqueue,
            peer_drain,
            bare,
        })
    }
}

/// Runs `sizes.rounds` rounds against `server` and returns one line per row (see the
/// `graphile` tool for their fields). Every schema it made is dropped, whatever the outcome.
pub async fn compare(server: &PgServer, sizes: Sizes) -> Result<Vec<String>> {
    let mut schemas = Vec::new();
    let measured = match Sides::open(server, &mut schemas).await {
        Ok(sides) => rounds(server, &sides, sizes).await,
        Err(err) => Err(err),
    };
    for schema in &schemas {
        schema.drop().await?;
    }
    measured
}

async fn rounds(server: &PgServer, sides: &Sides, sizes: Sizes) -> Result<Vec<String>> {
    let n = sizes.records;
    let bursts = n.div_ceil(PRODUCERS);
    let mut enqueue_one = Row::new("enqueue-one", "graphile_worker", n);
    let mut enqueue_many = Row::new(
        format!("enqueue-{PRODUCERS}"),
        "graphile_worker",
        bursts * PRODUCERS,
    );
    let mut drains: Vec<Row> = CONCURRENCY
        .iter()
        .map(|c| Row::new(format!("drain-c{c}"), "graphile_worker", n))
        .collect();
    let mut runners: Vec<Row> = pg::RUNNERS
        .iter()
        .map(|r| Row::new(format!("runners-{r}"), "bare", n))
        .collect();
    for round in 0..sizes.rounds {
        let ours_first = round % 2 == 0;
        let (ours, theirs) = pair(
            ours_first,
            timed(async {
                for _ in 0..n {
                    sides.enqueue.enqueue(vec![record()], system_now()).await?;
                }
                Ok(())
            }),
            timed(sides.peer_enqueue.enqueue_one_by_one(n)),
        )
        .await?;
        enqueue_one.ours.push(ours);
        enqueue_one.theirs.push(theirs);

        let (ours, theirs) = pair(
            ours_first,
            timed(async {
                for _ in 0..bursts {
                    enqueue_concurrently(&sides.enqueue, PRODUCERS).await?;
                }
                Ok(())
            }),
            timed(async {
                for _ in 0..bursts {
                    sides.peer_enqueue.enqueue_concurrently(PRODUCERS).await?;
                }
                Ok(())
            }),
        )
        .await?;
        enqueue_many.ours.push(ours);
        enqueue_many.theirs.push(theirs);

        for (row, concurrency) in drains.iter_mut().zip(CONCURRENCY) {
            let config = RunnerConfig::default().with_concurrency(concurrency);
            let (ours, theirs) = pair(
                ours_first,
                outbox_drain(server, &sides.drain[..1], n, &config),
                peer_drain(server, &sides.peer_drain, n, concurrency),
            )
            .await?;
            row.ours.push(ours);
            row.theirs.push(theirs);
        }

        for ((row, count), bare) in runners.iter_mut().zip(pg::RUNNERS).zip(&sides.bare) {
            let config = RunnerConfig::default();
            let (ours, theirs) = pair(
                ours_first,
                outbox_drain(server, &sides.drain[..count], n, &config),
                bare_drain(server, bare, n),
            )
            .await?;
            row.ours.push(ours);
            row.theirs.push(theirs);
        }
    }
    let mut lines = Vec::new();
    for row in [&enqueue_one, &enqueue_many]
        .into_iter()
        .chain(&drains)
        .chain(&runners)
    {
        lines.push(row.line()?);
    }
    // Runner scaling: the most runners against one, round by round.
    let mut scaling = Row::new(
        format!("scaling-{}", pg::RUNNERS[pg::RUNNERS.len() - 1]),
        "outbox-1-runner",
        n,
    );
    scaling.ours = runners[runners.len() - 1].ours.clone();
    scaling.theirs = runners[0].ours.clone();
    for sample in scaling.ours.iter_mut().chain(scaling.theirs.iter_mut()) {
        sample.wal = 0;
    }
    lines.push(scaling.line()?);
    Ok(lines)
}

/// Runs both sides one after the other, ours first or theirs first.
async fn pair<A, B>(ours_first: bool, ours: A, theirs: B) -> Result<(Sample, Sample)>
where
    A: std::future::Future<Output = Result<Sample>>,
    B: std::future::Future<Output = Result<Sample>>,
{
    if ours_first {
        let ours = ours.await?;
        Ok((ours, theirs.await?))
    } else {
        let theirs = theirs.await?;
        Ok((ours.await?, theirs))
    }
}

async fn timed(work: impl std::future::Future<Output = Result<()>>) -> Result<Sample> {
    let started = Instant::now();
    work.await?;
    Ok(Sample {
        elapsed: started.elapsed(),
        wal: 0,
    })
}

fn record() -> NewRecord {
    NewRecord::new(vec![b'x'; PAYLOAD_BYTES])
}

async fn enqueue_concurrently(store: &Arc<dyn Store>, producers: usize) -> Result<()> {
    let mut tasks = JoinSet::new();
    for _ in 0..producers {
        let store = Arc::clone(store);
        tasks.spawn(async move { store.enqueue(vec![record()], system_now()).await });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(Error::backend)??;
    }
    Ok(())
}

/// Fills the shared outbox with `n` records (not timed), then drains it with one runner per
/// store, reading the server's WAL position around the drain and the runners' shutdown.
async fn outbox_drain(
    server: &PgServer,
    stores: &[Arc<dyn Store>],
    n: usize,
    config: &RunnerConfig,
) -> Result<Sample> {
    let mut left = n;
    while left > 0 {
        let batch = left.min(FILL_BATCH);
        stores[0]
            .enqueue((0..batch).map(|_| record()).collect(), system_now())
            .await?;
        left -= batch;
    }
    let wal = pg::wal_bytes(server.url()).await?;
    let Drained { elapsed, .. } = pg::drain_filled(stores, n as u64, config).await?;
    Ok(Sample {
        elapsed,
        wal: pg::wal_bytes(server.url()).await? - wal,
    })
}

async fn peer_drain(
    server: &PgServer,
    peer: &Graphile,
    n: usize,
    concurrency: usize,
) -> Result<Sample> {
    peer.fill(n).await?;
    let wal = pg::wal_bytes(server.url()).await?;
    let Drained { elapsed, .. } = peer.drain(n as u64, concurrency).await?;
    Ok(Sample {
        elapsed,
        wal: pg::wal_bytes(server.url()).await? - wal,
    })
}

async fn bare_drain(server: &PgServer, bare: &BarePg, n: usize) -> Result<Sample> {
    let now = system_now();
    let payload = [b'x'; PAYLOAD_BYTES];
    let mut left = n;
    while left > 0 {
        let batch = left.min(FILL_BATCH * 10);
        bare.insert_payloads(batch, now, &payload).await?;
        left -= batch;
    }
    let wal = pg::wal_bytes(server.url()).await?;
    let started = Instant::now();
    let removed = bare.drain(BARE_BATCH, now).await?;
    let elapsed = started.elapsed();
    let wal = pg::wal_bytes(server.url()).await? - wal;
    if removed != n as u64 {
        return Err(Error::Backend {
            detail: format!("the bare drain removed {removed} of {n} records"),
            source: None,
        });
    }
    Ok(Sample { elapsed, wal })
}
