//! The workloads, run against any [`Store`]: what one benchmark iteration does.
//!
//! Every function runs on the caller's tokio runtime; the stores do their blocking engine work
//! on their own threads, never on the runtime's workers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{
    sink_fn, Claim, Error, Lease, NewRecord, Outbox, Outcome, Record, Result, Store,
};
use tokio::task::JoinSet;

use crate::{EARLY, FAR, PAYLOAD};

/// How long the drain may take before it counts as failed: generous, so only a runner that
/// stopped making progress hits it.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3_600);

/// How many times the drain re-checks an early `flush` before it gives up.
const MAX_CHECKS: u32 = 10_000;

/// Records per enqueue call when a workload fills a store before its timed part.
const FILL_BATCH: usize = 1_000;

fn record() -> NewRecord {
    NewRecord::new(PAYLOAD.to_vec())
}

/// Enqueues `count` records one at a time, each awaited until durable.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_benches::{subject::StoreKind, workload};
/// let subject = StoreKind::Memory.open().await?;
/// workload::enqueue_one_by_one(&subject.store, 3).await?;
/// assert_eq!(subject.store.stats().await?.pending, 3);
/// # Ok(())
/// # }
/// ```
pub async fn enqueue_one_by_one(store: &Arc<dyn Store>, count: usize) -> Result<()> {
    for _ in 0..count {
        store.enqueue(vec![record()], system_now()).await?;
    }
    Ok(())
}

/// Runs `producers` tasks at once, each enqueuing one record and awaiting it until durable:
/// the store may commit them together (group commit).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_benches::{subject::StoreKind, workload};
/// let subject = StoreKind::Memory.open().await?;
/// workload::enqueue_concurrently(&subject.store, 8).await?;
/// assert_eq!(subject.store.stats().await?.pending, 8);
/// # Ok(())
/// # }
/// ```
pub async fn enqueue_concurrently(store: &Arc<dyn Store>, producers: usize) -> Result<()> {
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

/// Enqueues one batch of `size` records in one call, awaited until durable.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_benches::{subject::StoreKind, workload};
/// let subject = StoreKind::Memory.open().await?;
/// workload::enqueue_batch(&subject.store, 100).await?;
/// assert_eq!(subject.store.stats().await?.pending, 100);
/// # Ok(())
/// # }
/// ```
pub async fn enqueue_batch(store: &Arc<dyn Store>, size: usize) -> Result<()> {
    let ids = store
        .enqueue((0..size).map(|_| record()).collect(), system_now())
        .await?;
    if ids.len() != size {
        return Err(Error::Backend {
            detail: format!(
                "enqueued {size} records, the store returned {} ids",
                ids.len()
            ),
            source: None,
        });
    }
    Ok(())
}

/// Enqueues `count` records due at `at`, in batches, for the untimed set-up of a workload.
pub async fn fill(store: &Arc<dyn Store>, count: usize, at: u64) -> Result<()> {
    let mut left = count;
    while left > 0 {
        let n = left.min(FILL_BATCH);
        store
            .enqueue((0..n).map(|_| record()).collect(), at)
            .await?;
        left -= n;
    }
    Ok(())
}

/// What one end-to-end drain did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Records the runner delivered.
    pub records: u64,
    /// From the runner's start (its first claim follows at once) to an empty queue.
    pub elapsed: Duration,
}

impl Drained {
    /// Delivered records per second.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The end-to-end workload: enqueues `count` due records (not timed), then starts a runner
/// with the default batch and concurrency that delivers them to a no-op sink, and times it
/// from its start to an empty queue.
///
/// Fails unless exactly `count` more records were delivered and nothing is left undelivered.
pub async fn drain(store: &Arc<dyn Store>, count: usize) -> Result<Drained> {
    fill(store, count, system_now()).await?;
    drain_backlog(store, count as u64).await
}

/// Starts a runner with the default configuration over what `store` already holds, and times
/// it until the queue is empty; `expected` records must be delivered.
pub async fn drain_backlog(store: &Arc<dyn Store>, expected: u64) -> Result<Drained> {
    let before = store.stats().await?;
    let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    let started = Instant::now();
    let outbox = Outbox::builder(Arc::clone(store), sink).start().await?;
    let mut checks = 0u32;
    loop {
        outbox.flush(DRAIN_TIMEOUT).await?;
        // The drain is over when nothing is in flight either. `flush` used to return while
        // the runner's last claim was on its way back from the store (nothing due, nothing
        // held yet); the runner now counts a round as held from its start, and this check
        // keeps the figure honest should that ever regress.
        if store.stats().await?.in_flight == 0 || checks == MAX_CHECKS {
            break;
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    outbox.shutdown(Duration::from_secs(30)).await?;
    let after = store.stats().await?;
    let records = after.delivered - before.delivered;
    if records != expected || after.undelivered() != 0 {
        return Err(Error::Backend {
            detail: format!(
                "the drain delivered {records} of {expected} records and left {} undelivered",
                after.undelivered()
            ),
            source: None,
        });
    }
    Ok(Drained { records, elapsed })
}

/// Fills `store` with `count` records that are not due before [`FAR`]: the backlog the due
/// query must not pay for.
pub async fn fill_not_due(store: &Arc<dyn Store>, count: usize) -> Result<()> {
    fill(store, count, FAR).await
}

/// "What is due": the runner's claim (up to 32 records, the default batch) at [`EARLY`], when
/// nothing is due yet. Returns how many records it claimed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_benches::{subject::StoreKind, workload};
/// let subject = StoreKind::Memory.open().await?;
/// workload::fill_not_due(&subject.store, 1_000).await?;
/// assert_eq!(workload::what_is_due(&subject.store).await?, 0);
/// # Ok(())
/// # }
/// ```
pub async fn what_is_due(store: &Arc<dyn Store>) -> Result<usize> {
    let lease = Lease {
        token: 1,
        until: EARLY + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: EARLY,
            limit: 32,
            lease,
        })
        .await?;
    Ok(claimed.len())
}
