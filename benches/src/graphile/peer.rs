//! The peer queue: a `graphile_worker` schema, its producers' calls and its worker draining
//! to a no-op task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, WorkerContext, WorkerOptions,
    WorkerUtils,
};
use outbox_core::{Error, Result};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio_postgres::Client;

use super::PAYLOAD_BYTES;
use crate::error::engine;
use crate::pg::{connect, PgSchema};
use crate::workload::Drained;

/// Jobs per `add_jobs` call when the queue is filled before a drain (not timed).
const FILL_BATCH: usize = 1_000;

/// How long completed jobs may wait to be deleted together: the peer's batched completions,
/// at the low end of what its documentation suggests (a millisecond or a few).
const COMPLETION_BATCH_DELAY: Duration = Duration::from_millis(1);

/// Jobs the peer's local queue fetches at once. Measured here (10,000 jobs, one round each):
/// with 100 the peer drained 14–18 k jobs/s, with 1,000 35–40 k/s at every concurrency, as the
/// issue measured it in its fastest configuration; a longer completion batch (10 ms) or four
/// local queues added nothing beyond that.
const LOCAL_QUEUE: usize = 1_000;

/// How long a drain may take before it counts as failed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3_600);

/// The benchmark's one task: it counts itself and does nothing else. Its JSON form is
/// [`PAYLOAD_BYTES`] long, the size of the outbox records it is compared with.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Noop {
    body: String,
}

impl Noop {
    fn new() -> Self {
        // `{"body":"…"}` around the string.
        let framing = r#"{"body":""}"#.len();
        Noop {
            body: "x".repeat(PAYLOAD_BYTES - framing),
        }
    }
}

/// How many times the task ran, shared with the worker as an extension.
#[derive(Clone, Debug, Default)]
struct Ran(Arc<AtomicU64>);

impl TaskHandler for Noop {
    const IDENTIFIER: &'static str = "outbox_bench_noop";

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        if let Some(ran) = ctx.get_ext::<Ran>() {
            ran.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok::<(), String>(())
    }
}

/// A `graphile_worker` queue in a schema of its own.
pub struct Graphile {
    schema: PgSchema,
    utils: WorkerUtils,
    /// A connection of its own to count the jobs left.
    watch: Client,
}

impl std::fmt::Debug for Graphile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graphile")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl Graphile {
    /// Creates the peer's tables in `schema` (its migrations) and its producers' handle.
    pub async fn create(schema: PgSchema) -> Result<Self> {
        let worker = options(&schema, 1, Ran::default())
            .init()
            .await
            .map_err(engine("graphile_worker: init"))?;
        let utils = worker.create_utils();
        let watch = connect(schema.url()).await?;
        Ok(Graphile {
            schema,
            utils,
            watch,
        })
    }

    /// The schema the peer lives in (drop it with [`PgSchema::drop`] when done).
    pub fn schema(&self) -> &PgSchema {
        &self.schema
    }

    /// Adds `count` jobs one at a time, each awaited until committed.
    pub async fn enqueue_one_by_one(&self, count: usize) -> Result<()> {
        for _ in 0..count {
            self.utils
                .add_job(Noop::new(), JobSpec::default())
                .await
                .map_err(engine("graphile_worker: add_job"))?;
        }
        Ok(())
    }

    /// Runs `producers` tasks at once, each adding one job and awaiting it.
    pub async fn enqueue_concurrently(&self, producers: usize) -> Result<()> {
        let mut tasks = JoinSet::new();
        for _ in 0..producers {
            let utils = self.utils.clone();
            tasks.spawn(async move { utils.add_job(Noop::new(), JobSpec::default()).await });
        }
        while let Some(joined) = tasks.join_next().await {
            joined
                .map_err(Error::backend)?
                .map_err(engine("graphile_worker: add_job"))?;
        }
        Ok(())
    }

    /// Adds `count` jobs, runnable now, in batches (the untimed set-up of a drain).
    pub async fn fill(&self, count: usize) -> Result<()> {
        let spec = JobSpec::default();
        let mut left = count;
        while left > 0 {
            let n = left.min(FILL_BATCH);
            let jobs: Vec<(Noop, &JobSpec)> = (0..n).map(|_| (Noop::new(), &spec)).collect();
            self.utils
                .add_jobs(&jobs)
                .await
                .map_err(engine("graphile_worker: add_jobs"))?;
            left -= n;
        }
        Ok(())
    }

    /// Jobs in the queue, whatever their state.
    pub async fn jobs(&self) -> Result<i64> {
        let sql = format!(
            "SELECT count(*) FROM \"{}\"._private_jobs",
            self.schema.name()
        );
        let row = self
            .watch
            .query_one(&sql, &[])
            .await
            .map_err(engine("graphile_worker: counting jobs"))?;
        row.try_get(0)
            .map_err(engine("graphile_worker: counting jobs"))
    }

    /// Starts a worker running `concurrency` jobs at once over the `expected` jobs the queue
    /// holds, and times it from its start until the task ran for each of them and every
    /// completion is committed (the table is empty). The worker is then shut down.
    ///
    /// Fails unless the task ran exactly `expected` times and no job is left.
    pub async fn drain(&self, expected: u64, concurrency: usize) -> Result<Drained> {
        let ran = Ran::default();
        let worker = Arc::new(
            options(&self.schema, concurrency, ran.clone())
                .init()
                .await
                .map_err(engine("graphile_worker: init"))?,
        );
        let started = Instant::now();
        let running = tokio::spawn({
            let worker = Arc::clone(&worker);
            async move { worker.run().await }
        });
        let finished = loop {
            if ran.0.load(Ordering::Relaxed) >= expected && self.jobs().await? == 0 {
                break Ok(started.elapsed());
            }
            if running.is_finished() {
                break Err(Error::Backend {
                    detail: "the graphile_worker worker stopped before the queue was empty".into(),
                    source: None,
                });
            }
            if started.elapsed() > DRAIN_TIMEOUT {
                break Err(Error::Backend {
                    detail: format!("the graphile_worker drain took over {DRAIN_TIMEOUT:?}"),
                    source: None,
                });
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        worker.request_shutdown();
        running
            .await
            .map_err(Error::backend)?
            .map_err(engine("graphile_worker: run"))?;
        let elapsed = finished?;
        let records = ran.0.load(Ordering::Relaxed);
        let left = self.jobs().await?;
        if records != expected || left != 0 {
            return Err(Error::Backend {
                detail: format!(
                    "the graphile_worker task ran {records} times for {expected} jobs and \
                     {left} jobs are left"
                ),
                source: None,
            });
        }
        Ok(Drained { records, elapsed })
    }
}

/// The peer at its fastest settings for a backlog: jobs fetched [`LOCAL_QUEUE`] at a time into
/// a local queue and completions deleted together; its own pool at its default size.
fn options(schema: &PgSchema, concurrency: usize, ran: Ran) -> WorkerOptions {
    WorkerOptions::default()
        .database_url(schema.url())
        .schema(schema.name())
        .concurrency(concurrency)
        .define_job::<Noop>()
        .add_extension(ran)
        .local_queue(LocalQueueConfig::default().with_size(LOCAL_QUEUE))
        .complete_job_batch_delay(COMPLETION_BATCH_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_is_as_long_as_the_outbox_records() {
        let json = serde_json::to_vec(&Noop::new()).expect("json");
        assert_eq!(json.len(), PAYLOAD_BYTES);
    }
}
