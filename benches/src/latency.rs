//! Latency on an idle queue: one write at a time, with a pause between writes, as an app that
//! records a user's action sees it. For each write, how long `Outbox::enqueue` took to return
//! (the record is durable then) and how long until the sink was handed the record; next to
//! it, in the same run and alternating with it, the bare engine committing one row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{sink_fn, Error, NewRecord, Outbox, Outcome, Record, Result};
use tokio::sync::mpsc;

use crate::subject::StoreKind;
use crate::PAYLOAD;

/// How long one write may take to reach the sink before the run counts as failed.
const REACH_TIMEOUT: Duration = Duration::from_secs(30);

/// The latencies of one run, in milliseconds, each sorted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latencies {
    /// `enqueue` called until it returned.
    pub enqueue: Vec<f64>,
    /// `enqueue` called until the sink had the record.
    pub to_sink: Vec<f64>,
    /// The bare engine: one row inserted and committed.
    pub bare: Vec<f64>,
}

/// The `p`th percentile (0–100) of sorted samples, by the nearest rank; 0 without samples.
///
/// ```
/// use outbox_benches::latency::percentile;
/// let samples: Vec<f64> = (1..=100).map(f64::from).collect();
/// assert_eq!(percentile(&samples, 50.0), 50.0);
/// assert_eq!(percentile(&samples, 99.0), 99.0);
/// assert_eq!(percentile(&[], 50.0), 0.0);
/// ```
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Latencies {
    /// One line of tab-separated `key=value` fields: p50, p90 and p99 of each series, and
    /// the p50 ratios to the bare commit.
    pub fn line(&self, store: StoreKind) -> String {
        let p = |v: &[f64], q: f64| percentile(v, q);
        let bare = p(&self.bare, 50.0).max(f64::MIN_POSITIVE);
        format!(
            "store={}\tsamples={}\tenqueue_p50_ms={:.3}\tenqueue_p90_ms={:.3}\tenqueue_p99_ms={:.3}\tsink_p50_ms={:.3}\tsink_p90_ms={:.3}\tsink_p99_ms={:.3}\tbare_p50_ms={:.3}\tbare_p90_ms={:.3}\tbare_p99_ms={:.3}\tenqueue_vs_bare={:.2}\tsink_vs_bare={:.2}",
            store.name(),
            self.enqueue.len(),
            p(&self.enqueue, 50.0),
            p(&self.enqueue, 90.0),
            p(&self.enqueue, 99.0),
            p(&self.to_sink, 50.0),
            p(&self.to_sink, 90.0),
            p(&self.to_sink, 99.0),
            p(&self.bare, 50.0),
            p(&self.bare, 90.0),
            p(&self.bare, 99.0),
            p(&self.enqueue, 50.0) / bare,
            p(&self.to_sink, 50.0) / bare,
        )
    }
}

/// The stores this measures: those with a bare engine in this process, whose one-row commit
/// is the yardstick.
///
/// ```
/// use outbox_benches::{latency, subject::StoreKind};
/// let stores: Vec<StoreKind> = latency::stores().collect();
/// assert_eq!(stores, [StoreKind::Sqlite, StoreKind::Redb]);
/// ```
pub fn stores() -> impl Iterator<Item = StoreKind> {
    StoreKind::ALL.into_iter().filter(|k| k.bare().is_some())
}

/// Measures `samples` writes on `store` (one of [`stores`], at its defaults) with a runner
/// started on it, alternating with `samples` one-row commits of the bare engine; `pause` is
/// the idle time before each write (drawn between half of it and all of it; none when zero).
///
/// ```
/// # fn main() -> outbox_core::Result<()> {
/// use std::time::Duration;
/// use outbox_benches::{latency, subject::StoreKind};
///
/// let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
/// let run = runtime.block_on(latency::measure(StoreKind::Sqlite, 5, Duration::ZERO))?;
/// assert_eq!((run.enqueue.len(), run.to_sink.len(), run.bare.len()), (5, 5, 5));
/// // Sorted, and the sink never has a write before `enqueue` was called.
/// assert!(run.enqueue.windows(2).all(|w| w[0] <= w[1]));
/// assert!(run.to_sink.iter().all(|t| *t > 0.0));
/// // The memory store has no engine to compare with: refused, not measured.
/// assert!(runtime.block_on(latency::measure(StoreKind::Memory, 1, Duration::ZERO)).is_err());
/// # Ok(())
/// # }
/// ```
pub async fn measure(store: StoreKind, samples: usize, pause: Duration) -> Result<Latencies> {
    let bare_kind = store.bare().ok_or_else(|| {
        Error::InvalidConfig(format!("no bare engine to compare {} with", store.name()))
    })?;
    let dir = tempfile::tempdir().map_err(Error::backend)?;
    let opened = store.create_in(dir.path()).await?;
    let (seen, mut reached) = mpsc::unbounded_channel::<(u64, Instant)>();
    let sink = sink_fn(move |record: Record| {
        let seen = seen.clone();
        async move {
            let at = Instant::now();
            let mut index = [0u8; 8];
            index.copy_from_slice(&record.payload[..8]);
            let _ = seen.send((u64::from_le_bytes(index), at));
            Outcome::Delivered
        }
    });
    let outbox = Outbox::builder(Arc::clone(&opened), sink).start().await?;
    let mut bare = bare_kind.open()?;
    let mut rng = fastrand::Rng::with_seed(7);
    let mut run = Latencies::default();
    let pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
    let mut idle = || Duration::from_millis(rng.u64(pause_ms / 2..=pause_ms));
    for i in 0..samples as u64 {
        idle_for(idle()).await;
        let mut payload = PAYLOAD.to_vec();
        payload[..8].copy_from_slice(&i.to_le_bytes());
        let started = Instant::now();
        outbox.enqueue(NewRecord::new(payload)).await?;
        let returned = started.elapsed();
        let reached_at = loop {
            match tokio::time::timeout(REACH_TIMEOUT, reached.recv()).await {
                Ok(Some((index, at))) if index == i => break at,
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => {
                    return Err(Error::Backend {
                        detail: format!(
                            "write {i} did not reach the sink within {REACH_TIMEOUT:?}"
                        ),
                        source: None,
                    })
                }
            }
        };
        run.enqueue.push(ms(returned));
        run.to_sink.push(ms(reached_at.duration_since(started)));

        idle_for(idle()).await;
        let now = system_now();
        let took = tokio::task::block_in_place(|| -> Result<Duration> {
            let started = Instant::now();
            bare.insert_each(1, now)?;
            Ok(started.elapsed())
        })?;
        run.bare.push(ms(took));
    }
    outbox.shutdown(Duration::from_secs(10)).await?;
    for series in [&mut run.enqueue, &mut run.to_sink, &mut run.bare] {
        series.sort_by(f64::total_cmp);
    }
    Ok(run)
}

/// The queue's idle time between two writes (nothing when zero).
async fn idle_for(pause: Duration) {
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
