//! The enqueue workloads: `burst` (group commit under concurrent producers), `enqueue-rate`
//! (one producer, then many) and `enqueue-vs-bare` (one producer against the bare engine's
//! one-row commit, in alternating rounds).

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{Error, Result, Store};
use tokio::task::JoinSet;

use super::{failed, Bench};
use crate::bare::{BareEngine, BarePg};
use crate::measure::report::{figure, median, micros, rate};
use crate::measure::{Report, Row, PRODUCERS};
use crate::subject::StoreKind;
use crate::{paired, workload};

impl Bench<'_> {
    /// `burst`: [`Workload::Burst`](crate::measure::Workload::Burst).
    pub(super) async fn burst(&self, rounds: usize) -> Result<Report> {
        let (elapsed, commits) = self
            .with_store(async |opened| {
                let before = opened.commits();
                let started = Instant::now();
                for _ in 0..rounds {
                    workload::enqueue_concurrently(&opened.store, PRODUCERS).await?;
                }
                let elapsed = started.elapsed();
                let commits = opened.commits_since(before);
                expect_pending(&opened.store, rounds * PRODUCERS).await?;
                Ok((elapsed, commits))
            })
            .await?;
        let mut figures = vec![
            figure("time per round", micros(elapsed, rounds), "µs", 0),
            figure(
                "enqueue rate",
                rate(elapsed, rounds * PRODUCERS),
                "enqueues/s",
                0,
            ),
        ];
        let mut notes = Vec::new();
        match commits {
            Some(commits) => figures.push(figure(
                "commits per round",
                commits as f64 / rounds as f64,
                "",
                2,
            )),
            None => notes.push(self.uncounted()),
        }
        Ok(Report::one_row(
            format!("{rounds} rounds of {PRODUCERS} concurrent single-record enqueues"),
            figures,
            notes,
        ))
    }

    /// `enqueue-rate`: [`Workload::EnqueueRate`](crate::measure::Workload::EnqueueRate).
    pub(super) async fn enqueue_rate(&self, n: usize) -> Result<Report> {
        let phases = [(1, n), (PRODUCERS, n.div_ceil(PRODUCERS))];
        let measured = self
            .with_store(async |opened| {
                let mut measured = Vec::new();
                let mut total = 0;
                for (producers, each) in phases {
                    let before = opened.commits();
                    let started = Instant::now();
                    let mut tasks = JoinSet::new();
                    for _ in 0..producers {
                        let store = Arc::clone(&opened.store);
                        tasks
                            .spawn(async move { workload::enqueue_one_by_one(&store, each).await });
                    }
                    while let Some(joined) = tasks.join_next().await {
                        joined.map_err(Error::backend)??;
                    }
                    let elapsed = started.elapsed();
                    let commits = opened.commits_since(before);
                    total += producers * each;
                    expect_pending(&opened.store, total).await?;
                    measured.push((producers, producers * each, elapsed, commits));
                }
                Ok(measured)
            })
            .await?;
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        for (producers, enqueues, elapsed, commits) in measured {
            let mut figures = vec![
                figure("time", elapsed.as_secs_f64() * 1e3, "ms", 1),
                figure("enqueue rate", rate(elapsed, enqueues), "enqueues/s", 0),
            ];
            match commits {
                Some(commits) => {
                    figures.push(figure("transactions", commits as f64, "", 0));
                    figures.push(figure(
                        "enqueues per transaction",
                        enqueues as f64 / commits.max(1) as f64,
                        "",
                        1,
                    ));
                }
                None if notes.is_empty() => notes.push(self.uncounted()),
                None => {}
            }
            let who = if producers == 1 {
                "1 producer".to_owned()
            } else {
                format!("{producers} concurrent producers")
            };
            rows.push(Row {
                label: format!("{who}, {enqueues} single-record enqueues"),
                figures,
            });
        }
        Ok(Report::new(rows, notes))
    }

    /// `enqueue-vs-bare`: [`Workload::EnqueueVsBare`](crate::measure::Workload::EnqueueVsBare).
    pub(super) async fn enqueue_vs_bare(&self, rounds: usize, n: usize) -> Result<Report> {
        let mut bare = match (self.kind(), self.kind().bare()) {
            (StoreKind::Postgres, _) => Bare::Pg(BarePg::create(self.server()?.schema(), 1).await?),
            (_, Some(engine)) => Bare::Engine(Some(engine.open()?)),
            (_, None) => return Err(failed("enqueue-vs-bare needs an engine".into())),
        };
        let measured = self
            .with_store(async |opened| {
                let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                for round in 0..rounds {
                    // Each side goes first in every other round, so neither always meets the
                    // disk the other just left busy.
                    if round % 2 == 1 {
                        theirs.push(bare.insert_each(n).await?);
                    }
                    let started = Instant::now();
                    workload::enqueue_one_by_one(&opened.store, n).await?;
                    ours.push(started.elapsed());
                    if round % 2 == 0 {
                        theirs.push(bare.insert_each(n).await?);
                    }
                }
                Ok((ours, theirs))
            })
            .await;
        let dropped = match bare {
            Bare::Pg(bare) => bare.schema().drop().await,
            Bare::Engine(_) => Ok(()),
        };
        let (ours, theirs) = measured?;
        dropped?;
        let paired = paired::ratio(&ours, n as u64, &theirs, n as u64)
            .ok_or_else(|| failed("enqueue-vs-bare: no round was measured".into()))?;
        let per_call = |times: &[Duration]| median(times.iter().map(|t| micros(*t, n)).collect());
        let mut notes = Vec::new();
        if self.kind() != StoreKind::Postgres && self.args.dir != std::env::temp_dir() {
            notes.push(format!(
                "the bare engine's file is under the system temporary directory ({}), the \
                 store's under {}: set TMPDIR to that directory to put both on one disk",
                std::env::temp_dir().display(),
                self.args.dir.display()
            ));
        }
        if self.kind() == StoreKind::Postgres {
            notes.push(
                "the bare insert is one INSERT ... SELECT of one row per transaction, sent \
                 unprepared"
                    .into(),
            );
        }
        Ok(Report::one_row(
            format!("median of {rounds} alternating rounds of {n}"),
            vec![
                figure("store, per enqueue", per_call(&ours), "µs", 0),
                figure("bare, per insert", per_call(&theirs), "µs", 0),
                figure("store/bare rate", paired.ratio, "x", 2),
                figure("lowest round ratio", paired.low, "x", 2),
                figure("highest round ratio", paired.high, "x", 2),
            ],
            notes,
        ))
    }
}

/// The bare engine `enqueue-vs-bare` compares with.
enum Bare {
    /// rusqlite or redb; their calls block, so they run off the runtime's workers.
    Engine(Option<Box<dyn BareEngine>>),
    /// tokio-postgres.
    Pg(BarePg),
}

impl Bare {
    /// Commits `n` one-row transactions and returns how long they took.
    async fn insert_each(&mut self, n: usize) -> Result<Duration> {
        match self {
            Bare::Engine(slot) => {
                let mut engine = slot
                    .take()
                    .ok_or_else(|| failed("the bare engine was lost".into()))?;
                let (engine, took) = tokio::task::spawn_blocking(move || {
                    let started = Instant::now();
                    let done = engine.insert_each(n, system_now());
                    (engine, done.map(|()| started.elapsed()))
                })
                .await
                .map_err(Error::backend)?;
                *slot = Some(engine);
                took
            }
            Bare::Pg(bare) => {
                let started = Instant::now();
                for _ in 0..n {
                    bare.insert_batch(1, system_now()).await?;
                }
                Ok(started.elapsed())
            }
        }
    }
}

/// Fails unless `store` holds exactly `count` pending records: every enqueue that returned is
/// in the store.
async fn expect_pending(store: &Arc<dyn Store>, count: usize) -> Result<()> {
    let pending = store.stats().await?.pending;
    if pending != count as u64 {
        return Err(failed(format!(
            "{count} enqueues returned, the store holds {pending} pending records"
        )));
    }
    Ok(())
}
