//! Rounds that grow, through the runner: a backlog drains in claims that double from `batch`
//! up to `max_batch`, and the store's promises hold at every size.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use outbox_core::{
    async_trait, Claim, Jitter, Outcome, Record, RecordId, Result as StoreResult, Round,
    RunnerConfig, Sink, Store, StoreLayer, TokioClock, Transition,
};

use super::runner::{enqueue, fresh_paused, pause_time, policy, Rig};
use super::{rec, rec_in, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, ScenarioResult, Verdict};

/// Records in the backlog: rounds of 8, 16, ... 256, then four at 256.
const BACKLOG: usize = 1_500;
const BATCH: usize = 8;
const MAX_BATCH: usize = 256;

/// Every claim the runner made: what it asked for and what it got.
struct ClaimLog {
    inner: Arc<dyn Store>,
    claims: Mutex<Vec<(usize, Vec<Record>)>>,
}

impl std::fmt::Debug for ClaimLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimLog").finish_non_exhaustive()
    }
}

#[async_trait]
impl StoreLayer for ClaimLog {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn claim(&self, claim: Claim) -> StoreResult<Vec<Record>> {
        let claimed = self.inner.claim(claim).await?;
        self.log(claim, &claimed);
        Ok(claimed)
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> StoreResult<Round> {
        let round = self.inner.round(outcomes, claim).await?;
        if let Some(claim) = claim {
            self.log(claim, &round.claimed);
        }
        Ok(round)
    }
}

impl ClaimLog {
    fn log(&self, claim: Claim, claimed: &[Record]) {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        claims.push((claim.limit, claimed.to_vec()));
    }
}

/// Deliveries in the order they were made: the record and its group.
type Log = Arc<Mutex<Vec<(RecordId, Option<String>)>>>;

/// A sink that answers at once (after letting the other deliveries run), recording the order.
#[derive(Clone, Default)]
struct Quick {
    delivered: Log,
}

#[async_trait]
impl Sink for Quick {
    async fn deliver(&self, record: &Record) -> Outcome {
        tokio::task::yield_now().await;
        self.delivered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((record.id, record.group.clone()));
        Outcome::Delivered
    }
}

/// A backlog of 1,500 records (one in ten in one of five groups) with a sink that answers at
/// once: the claims double from `batch` to `max_batch` and stay there; no claim takes more than
/// it asked for or two records of one group; every record is delivered once, each group in id
/// order.
pub async fn runner_rounds_grow(backend: &dyn Backend) -> ScenarioResult {
    pause_time()?;
    let log = Arc::new(ClaimLog {
        inner: fresh_paused(backend).await?,
        claims: Mutex::default(),
    });
    let sink = Quick::default();
    let config = RunnerConfig {
        batch: BATCH,
        max_batch: MAX_BATCH,
        concurrency: 8,
        seed: Some(7),
        ..RunnerConfig::default()
    };
    let mut rig = Rig::start(
        log.clone(),
        sink.clone(),
        TokioClock::starting_at(T0),
        policy(Jitter::None, 3),
        config,
    )
    .await?;
    let records = (0..BACKLOG)
        .map(|i| {
            let name = format!("r{i}");
            if i % 10 == 0 {
                rec_in(&name, &format!("g{}", i / 10 % 5))
            } else {
                rec(&name)
            }
        })
        .collect();
    let ids = enqueue(&rig, records).await?;
    rig.until("the backlog delivered", |s| s.delivered == BACKLOG as u64)
        .await?;
    rig.stop().await?;

    let claims = std::mem::take(&mut *log.claims.lock().unwrap_or_else(|e| e.into_inner()));
    for (limit, claimed) in &claims {
        ensure(claimed.len() <= *limit, || {
            format!("a claim for {limit} records took {}", claimed.len())
        })?;
        let mut groups = BTreeSet::new();
        for record in claimed {
            if let Some(group) = &record.group {
                ensure(groups.insert(group.clone()), || {
                    format!("a claim for {limit} records took two records of group {group}")
                })?;
            }
        }
    }
    let limits: Vec<usize> = claims
        .iter()
        .filter(|(_, claimed)| !claimed.is_empty())
        .map(|(limit, _)| *limit)
        .collect();
    ensure_eq(
        limits.get(..6).map(<[usize]>::to_vec),
        Some(vec![8, 16, 32, 64, 128, 256]),
        "claims double from batch while they come back full and every delivery succeeds",
    )?;
    ensure(limits.iter().all(|&l| l <= MAX_BATCH), || {
        format!("no claim above max_batch: {limits:?}")
    })?;

    let delivered = sink
        .delivered
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let unique: BTreeSet<RecordId> = delivered.iter().map(|(id, _)| *id).collect();
    ensure_eq(
        (delivered.len(), unique.len()),
        (BACKLOG, BACKLOG),
        "every record delivered once",
    )?;
    let mut by_group: HashMap<String, Vec<RecordId>> = HashMap::new();
    for (id, group) in &delivered {
        if let Some(group) = group {
            by_group.entry(group.clone()).or_default().push(*id);
        }
    }
    for (group, order) in by_group {
        let expected: Vec<RecordId> = ids
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 == 0 && format!("g{}", i / 10 % 5) == group)
            .map(|(_, id)| *id)
            .collect();
        ensure_eq(
            order,
            expected,
            format!("group {group} delivered in id order"),
        )?;
    }
    Ok(Verdict::Passed)
}
