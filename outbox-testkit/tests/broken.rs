//! The suite's own proof that it can fail: a store with one defect, per defect class, must make
//! the scenario meant to catch it fail, while the same scenario passes on the sound store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox_core::{
    Change, Claim, Guard, ListQuery, Progress, Record, RecordId, Result, State, Stats, Store,
    StoreLayer, Tombstone, Transition,
};
use outbox_memory::MemoryStore;
use outbox_testkit::{scenarios, Backend, Capabilities, Failure, ScenarioResult, Verdict};

/// The one thing a broken store gets wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defect {
    /// None: the sound store the defects are measured against.
    Sound,
    /// Claims records up to a minute before they are due.
    ClaimsEarly,
    /// Opening an existing store zeroes the attempts of idle records.
    ForgetsAttemptsOnReopen,
    /// Opening an existing store loses the most recent enqueue (an unsynced write).
    LosesLastEnqueue,
    /// A claim hands out the first record of the previous claim again.
    ClaimsTwice,
    /// A claim also takes the record behind a group's head.
    BreaksGroupOrder,
}

/// A backend that keeps its stores in this process across "restarts" (so it can declare itself
/// persistent) and opens them through a wrapper with `defect`.
#[derive(Debug)]
struct BrokenBackend {
    defect: Defect,
    stores: Mutex<HashMap<String, Arc<MemoryStore>>>,
    opened: Mutex<HashSet<String>>,
}

impl BrokenBackend {
    fn new(defect: Defect) -> Self {
        BrokenBackend {
            defect,
            stores: Mutex::default(),
            opened: Mutex::default(),
        }
    }
}

#[async_trait]
impl Backend for BrokenBackend {
    fn name(&self) -> &'static str {
        "broken"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            shared: false,
        }
    }

    async fn create(&self) -> Result<String> {
        let mut stores = self.stores.lock().unwrap();
        let location = format!("broken-{}", stores.len());
        stores.insert(location.clone(), Arc::new(MemoryStore::new()));
        Ok(location)
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        let inner = self.stores.lock().unwrap()[location].clone();
        let reopened = !self.opened.lock().unwrap().insert(location.to_owned());
        if reopened {
            match self.defect {
                Defect::ForgetsAttemptsOnReopen => forget_attempts(&inner).await?,
                Defect::LosesLastEnqueue => lose_last(&inner).await?,
                _ => {}
            }
        }
        Ok(Arc::new(Broken {
            inner,
            defect: self.defect,
            last_claim: Mutex::default(),
        }))
    }
}

async fn forget_attempts(store: &MemoryStore) -> Result<()> {
    let records = store.list(&ListQuery::new(usize::MAX)).await?;
    let transitions = records
        .into_iter()
        .filter(|r| r.state != State::InFlight)
        .map(|r| Transition {
            id: r.id,
            guard: Guard::Idle,
            change: Change::Update(Progress {
                attempts: 0,
                ..r.progress()
            }),
        })
        .collect();
    store.apply(transitions).await?;
    Ok(())
}

async fn lose_last(store: &MemoryStore) -> Result<()> {
    let records = store.list(&ListQuery::new(usize::MAX)).await?;
    if let Some(last) = records.last() {
        let guard = last.lease.map_or(Guard::Idle, |l| Guard::Lease(l.token));
        let change = Change::Discard {
            reason: "lost".into(),
            at: 0,
            attempts: 1,
        };
        store
            .apply(vec![Transition {
                id: last.id,
                guard,
                change,
            }])
            .await?;
    }
    Ok(())
}

#[derive(Debug)]
struct Broken {
    inner: Arc<MemoryStore>,
    defect: Defect,
    last_claim: Mutex<Option<Record>>,
}

#[async_trait]
impl StoreLayer for Broken {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        match self.defect {
            Defect::ClaimsEarly => {
                self.inner
                    .claim(Claim {
                        now: claim.now + 60_000,
                        ..claim
                    })
                    .await
            }
            Defect::ClaimsTwice => {
                let mut claimed = self.inner.claim(claim).await?;
                let previous = self.last_claim.lock().unwrap().take();
                if let Some(first) = claimed.first() {
                    *self.last_claim.lock().unwrap() = Some(first.clone());
                }
                if let Some(mut again) = previous {
                    if claimed.len() < claim.limit {
                        again.lease = Some(claim.lease);
                        claimed.push(again);
                    }
                }
                Ok(claimed)
            }
            Defect::BreaksGroupOrder => {
                let mut claimed = self.inner.claim(claim).await?;
                let waiting = self
                    .inner
                    .list(&ListQuery::new(usize::MAX).state(State::Pending))
                    .await?;
                let behind = waiting
                    .into_iter()
                    .find(|r| r.group.is_some() && claimed.iter().any(|c| c.group == r.group));
                if let Some(mut record) = behind {
                    if claimed.len() < claim.limit && record.next_attempt_at <= Some(claim.now) {
                        record.state = State::InFlight;
                        record.lease = Some(claim.lease);
                        claimed.push(record);
                    }
                }
                Ok(claimed)
            }
            _ => self.inner.claim(claim).await,
        }
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        // A lost write leaves no trace a user could see.
        let mut tombstones = self.inner.tombstones(after, limit).await?;
        tombstones.retain(|t| t.reason != "lost");
        Ok(tombstones)
    }

    async fn stats(&self) -> Result<Stats> {
        let mut stats = self.inner.stats().await?;
        let lost = self
            .inner
            .tombstones(None, usize::MAX)
            .await?
            .iter()
            .filter(|t| t.reason == "lost")
            .count() as u64;
        stats.discarded -= lost;
        Ok(stats)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `scenario` on the sound store (it must pass) and on the store with `defect` (it must
/// fail); returns the failure.
fn caught<F, Fut>(defect: Defect, scenario: F) -> Failure
where
    F: Fn(Arc<BrokenBackend>) -> Fut,
    Fut: std::future::Future<Output = ScenarioResult>,
{
    let sound = runtime().block_on(scenario(Arc::new(BrokenBackend::new(Defect::Sound))));
    assert_eq!(
        sound,
        Ok(Verdict::Passed),
        "the scenario passes on the sound store"
    );
    match runtime().block_on(scenario(Arc::new(BrokenBackend::new(defect)))) {
        Err(failure) => failure,
        Ok(verdict) => panic!("{defect:?} went unnoticed: {verdict}"),
    }
}

#[test]
fn claiming_a_record_not_yet_due_is_caught_by_deadlines_honoured() {
    let failure = caught(Defect::ClaimsEarly, |b| async move {
        scenarios::deadlines_honoured(&*b).await
    });
    assert!(failure.message().contains("nothing is due"), "{failure}");
}

#[test]
fn forgetting_attempts_on_reopen_is_caught_by_restart_preserves_records() {
    let failure = caught(Defect::ForgetsAttemptsOnReopen, |b| async move {
        scenarios::restart_preserves_records(&*b).await
    });
    assert!(failure.message().contains("attempts"), "{failure}");
}

#[test]
fn forgetting_attempts_on_reopen_is_caught_by_ceiling_survives_reopen() {
    let failure = caught(Defect::ForgetsAttemptsOnReopen, |b| async move {
        scenarios::ceiling_survives_reopen(&*b).await
    });
    assert!(failure.message().contains("after the restart"), "{failure}");
}

#[test]
fn losing_the_last_enqueue_is_caught_by_restart_preserves_records() {
    let failure = caught(Defect::LosesLastEnqueue, |b| async move {
        scenarios::restart_preserves_records(&*b).await
    });
    assert!(failure.message().contains("as many records"), "{failure}");
}

#[test]
fn claiming_one_record_twice_is_caught_by_claims_are_exclusive() {
    let failure = caught(Defect::ClaimsTwice, |b| async move {
        scenarios::claims_are_exclusive(&*b).await
    });
    assert!(failure.message().contains("claimed twice"), "{failure}");
}

#[test]
fn claiming_one_record_twice_is_caught_by_fifo() {
    let failure = caught(Defect::ClaimsTwice, |b| async move {
        scenarios::fifo(&*b).await
    });
    assert!(
        failure.message().contains("takes the rest in order"),
        "{failure}"
    );
}

#[test]
fn breaking_group_order_is_caught_by_groups_in_order_held_back() {
    let failure = caught(Defect::BreaksGroupOrder, |b| async move {
        scenarios::groups_in_order_held_back(&*b).await
    });
    assert!(
        failure.message().contains("head of each group"),
        "{failure}"
    );
}

#[test]
fn every_defect_is_caught_by_the_randomized_model() {
    for defect in [
        Defect::ClaimsEarly,
        Defect::ForgetsAttemptsOnReopen,
        Defect::LosesLastEnqueue,
        Defect::ClaimsTwice,
        Defect::BreaksGroupOrder,
    ] {
        let backend = BrokenBackend::new(defect);
        let caught = (0..20u64).any(|seed| {
            runtime()
                .block_on(scenarios::run_model(&backend, seed, 300))
                .is_err()
        });
        assert!(
            caught,
            "{defect:?} survived 20 seeds of the randomized model"
        );
    }
}
