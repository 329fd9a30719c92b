//! Randomized operation sequences run on the backend and on `outbox-memory`, the reference
//! model, with the two compared after every step.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use fastrand::Rng;
use outbox_core::{
    machine, Backoff, Claim, Jitter, Lease, ListQuery, Millis, NewRecord, Outcome, Record,
    RetryAfter, RetryPolicy, State, Store, Transition,
};
use outbox_memory::MemoryStore;

use super::{all_records, all_tombstones, fresh, T0};
use crate::backend::Backend;
use crate::harness::{ensure_eq, Failure, ScenarioResult, Verdict};

/// Environment variable that replays one seed of [`random_ops_match_reference`].
pub const SEED_ENV: &str = "OUTBOX_TESTKIT_SEED";

/// Steps of one randomized run in the suite.
pub const DEFAULT_STEPS: usize = 300;

/// Randomized operation sequences: enqueue (a third of the writes coalescing on one of two
/// keys, a fifth carrying an expected version), claim, report every kind of outcome, stale
/// reports, rounds (outcomes and a claim in one call), renew, lease recovery, a person's
/// retry, discard and requeue, the halt set and cleared, prune, `stepped_back`, time moving
/// and (for persistent backends, with nothing in flight) restarts, run on the backend and on
/// the reference model with the results and the whole contents compared after every step.
///
/// The seed is random unless `OUTBOX_TESTKIT_SEED` is set; a failure names the seed to replay.
pub async fn random_ops_match_reference(backend: &dyn Backend) -> ScenarioResult {
    let seed = seed_from_env()?;
    run_model(backend, seed, DEFAULT_STEPS)
        .await
        .map_err(|f| f.context(format!("seed {seed} (replay with {SEED_ENV}={seed})")))
}

/// The seed in `OUTBOX_TESTKIT_SEED`, or a random one.
pub fn seed_from_env() -> Result<u64, Failure> {
    match std::env::var(SEED_ENV) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map_err(|e| Failure::new(format!("{SEED_ENV}={text:?} is not a u64: {e}"))),
        Err(_) => Ok(fastrand::u64(..)),
    }
}

/// One randomized run of `steps` steps from `seed`; the same seed makes the same run.
pub async fn run_model(backend: &dyn Backend, seed: u64, steps: usize) -> ScenarioResult {
    let (location, store) = fresh(backend).await?;
    let mut model = Model {
        rng: Rng::with_seed(seed),
        policy: RetryPolicy::default()
            .with_backoff(Backoff::exponential(
                Duration::from_millis(100),
                2.0,
                Duration::from_secs(20),
            ))
            .with_jitter(Jitter::Full)
            .with_max_attempts(4)
            .with_max_interruptions(2),
        reference: MemoryStore::new(),
        store,
        now: T0,
        token: 0,
        keys: 0,
    };
    let persistent = backend.capabilities().persistent;
    for step in 0..steps {
        let op = model.rng.u32(0..100);
        let what = if persistent && op < 3 {
            model.reopen(backend, &location).await
        } else {
            model.step(op).await
        };
        let what = what.map_err(|f| f.context(format!("step {step}")))?;
        model
            .compare()
            .await
            .map_err(|f| f.context(format!("after step {step} ({what})")))?;
    }
    Ok(Verdict::Passed)
}

struct Model {
    rng: Rng,
    policy: RetryPolicy,
    reference: MemoryStore,
    store: Arc<dyn Store>,
    now: Millis,
    token: u64,
    keys: u64,
}

/// Compares two results of the same call on both stores.
fn same<T: PartialEq + Debug>(backend: T, reference: T, call: &str) -> Result<T, Failure> {
    if backend == reference {
        Ok(backend)
    } else {
        Err(Failure::new(format!(
            "{call} differs from the reference model\n  reference: {reference:?}\n    backend: {backend:?}"
        )))
    }
}

impl Model {
    /// Runs one random operation on both stores and checks their answers agree; returns what
    /// it did, for the failure message.
    async fn step(&mut self, op: u32) -> Result<String, Failure> {
        match op {
            0..=19 => self.enqueue().await,
            20..=39 => self.claim().await,
            40..=59 => self.report().await,
            60..=64 => self.stale_report().await,
            65..=69 => self.renew().await,
            70..=74 => self.recover().await,
            75..=79 => self.person().await,
            80..=82 => {
                let cut = self.now.saturating_sub(self.rng.u64(0..20_000));
                let b = self.store.prune(cut).await?;
                let r = self.reference.prune(cut).await?;
                same(b, r, "prune")?;
                Ok(format!("prune({cut})"))
            }
            83..=85 => {
                let at = self.now + self.rng.u64(0..10_000);
                let limit = self.rng.usize(1..20);
                let b = self.store.stepped_back(at, limit).await?;
                let r = self.reference.stepped_back(at, limit).await?;
                same(b, r, "stepped_back")?;
                Ok(format!("stepped_back({at}, {limit})"))
            }
            86..=88 => self.round().await,
            89 => self.halt().await,
            90 | 91 => self.requeue().await,
            _ => {
                let by = if self.rng.u8(0..10) == 0 {
                    self.rng.u64(0..100_000)
                } else {
                    self.rng.u64(0..2_000)
                };
                self.now += by;
                Ok(format!("time moves {by} ms"))
            }
        }
    }

    async fn enqueue(&mut self) -> Result<String, Failure> {
        let count = self.rng.usize(1..4);
        let mut batch = Vec::with_capacity(count);
        for _ in 0..count {
            self.keys += 1;
            let len = self.rng.usize(0..24);
            let payload: Vec<u8> = (0..len).map(|_| self.rng.u8(..)).collect();
            let mut record = NewRecord::new(payload).with_key(format!("model-{}", self.keys));
            if let Some(group) = ["a", "b", "c", ""].get(self.rng.usize(0..6)) {
                if !group.is_empty() {
                    record = record.in_group(*group);
                }
            }
            // A third of the writes coalesce on one of two keys, a fifth carry a version.
            if let Some(key) = ["k1", "k2"].get(self.rng.usize(0..6)) {
                record = record.replacing(*key);
            }
            if self.rng.usize(0..5) == 0 {
                record = record.expecting(format!("v{}", self.keys));
            }
            batch.push(record);
        }
        let b = self.store.enqueue(batch.clone(), self.now).await?;
        let r = self.reference.enqueue(batch, self.now).await?;
        let ids = same(b, r, "enqueue")?;
        Ok(format!("enqueue {ids:?} at {}", self.now))
    }

    async fn claim(&mut self) -> Result<String, Failure> {
        self.token += 1;
        let claim = Claim {
            now: self.now,
            limit: self.rng.usize(1..6),
            lease: Lease {
                token: self.token,
                until: self.now + self.rng.u64(1..60_000),
            },
        };
        let b = self.store.claim(claim).await?;
        let r = self.reference.claim(claim).await?;
        let claimed = same(b, r, "claim")?;
        Ok(format!("{claim:?} took {:?}", super::ids(&claimed)))
    }

    async fn pick(&mut self, query: ListQuery) -> Result<Option<Record>, Failure> {
        let candidates = self.reference.list(&query.clone()).await?;
        if candidates.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            candidates[self.rng.usize(0..candidates.len())].clone(),
        ))
    }

    async fn apply_both(&self, transitions: Vec<Transition>) -> Result<String, Failure> {
        let what = format!("{transitions:?}");
        let b = self.store.apply(transitions.clone()).await?;
        let r = self.reference.apply(transitions).await?;
        same(b, r, "apply")?;
        Ok(what)
    }

    fn outcome(&mut self) -> Outcome {
        match self.rng.u8(0..10) {
            0..=2 => Outcome::Delivered,
            3 => Outcome::no_answer("refused"),
            4 | 5 => Outcome::transient("HTTP 503", None),
            6 => {
                let retry_after = if self.rng.bool() {
                    RetryAfter::Delay(Duration::from_millis(self.rng.u64(0..30_000)))
                } else {
                    RetryAfter::At(self.now + self.rng.u64(0..30_000))
                };
                Outcome::transient("HTTP 429", Some(retry_after))
            }
            7 => Outcome::rejected("HTTP 422"),
            8 => Outcome::halt("HTTP 401"),
            _ => Outcome::conflict("HTTP 409"),
        }
    }

    async fn report(&mut self) -> Result<String, Failure> {
        let Some(record) = self
            .pick(ListQuery::new(1_000).state(State::InFlight))
            .await?
        else {
            return Ok("report: nothing in flight".into());
        };
        let outcome = self.outcome();
        let step = machine::on_outcome(&record, &outcome, &self.policy, self.now, &mut self.rng);
        let what = self.apply_both(vec![step.transition]).await?;
        Ok(format!("report {outcome:?}: {what}"))
    }

    /// A runner's round: outcomes for up to three records in flight (one maybe stale), then
    /// a claim or none.
    async fn round(&mut self) -> Result<String, Failure> {
        let in_flight = self
            .reference
            .list(&ListQuery::new(1_000).state(State::InFlight))
            .await?;
        let mut outcomes = Vec::new();
        for record in in_flight.iter().take(self.rng.usize(0..4)) {
            let outcome = self.outcome();
            let mut step =
                machine::on_outcome(record, &outcome, &self.policy, self.now, &mut self.rng);
            if self.rng.u8(0..8) == 0 {
                step.transition.guard = outbox_core::Guard::Lease(self.token + 1_000);
            }
            outcomes.push(step.transition);
        }
        let claim = if self.rng.u8(0..4) == 0 {
            None
        } else {
            self.token += 1;
            Some(Claim {
                now: self.now,
                limit: self.rng.usize(1..6),
                lease: Lease {
                    token: self.token,
                    until: self.now + self.rng.u64(1..60_000),
                },
            })
        };
        let what = format!("round({outcomes:?}, {claim:?})");
        let b = self.store.round(outcomes.clone(), claim).await?;
        let r = self.reference.round(outcomes, claim).await?;
        same(b, r, "round")?;
        Ok(what)
    }

    /// The runner halts or resumes.
    async fn halt(&mut self) -> Result<String, Failure> {
        let halt = self.rng.bool().then(|| outbox_core::Halt {
            reason: format!("HTTP 401 #{}", self.rng.u32(..)),
            since: self.now,
        });
        let what = format!("set_halt({halt:?})");
        self.store.set_halt(halt.clone()).await?;
        self.reference.set_halt(halt).await?;
        same(
            self.store.halt().await?,
            self.reference.halt().await?,
            "halt",
        )?;
        Ok(what)
    }

    /// A person requeues a rejected record (or, now and then, tries one that is not).
    async fn requeue(&mut self) -> Result<String, Failure> {
        let query = if self.rng.u8(0..4) == 0 {
            ListQuery::new(1_000)
        } else {
            ListQuery::new(1_000).state(State::Rejected)
        };
        let Some(record) = self.pick(query).await? else {
            return Ok("requeue: no candidate".into());
        };
        let transition = Transition {
            id: record.id,
            guard: outbox_core::Guard::Idle,
            change: outbox_core::Change::Requeue {
                at: self.now + self.rng.u64(0..5_000),
            },
        };
        self.apply_both(vec![transition]).await
    }

    async fn stale_report(&mut self) -> Result<String, Failure> {
        let Some(record) = self.pick(ListQuery::new(1_000)).await? else {
            return Ok("stale report: no records".into());
        };
        let transition = Transition {
            id: record.id,
            guard: outbox_core::Guard::Lease(self.token + 1_000),
            change: outbox_core::Change::Delivered,
        };
        self.apply_both(vec![transition]).await
    }

    async fn renew(&mut self) -> Result<String, Failure> {
        let Some(record) = self
            .pick(ListQuery::new(1_000).state(State::InFlight))
            .await?
        else {
            return Ok("renew: nothing in flight".into());
        };
        let token = match (record.lease, self.rng.u8(0..4)) {
            (Some(lease), 0..=2) => lease.token,
            _ => self.token + 1_000,
        };
        let lease = Lease {
            token,
            until: self.now + self.rng.u64(1..60_000),
        };
        self.store.renew(&[record.id], lease).await?;
        self.reference.renew(&[record.id], lease).await?;
        Ok(format!("renew {} with {lease:?}", record.id))
    }

    async fn recover(&mut self) -> Result<String, Failure> {
        let limit = self.rng.usize(1..10);
        let b = self.store.expired(self.now, limit).await?;
        let r = self.reference.expired(self.now, limit).await?;
        let expired = same(b, r, "expired")?;
        let transitions = expired
            .iter()
            .map(|record| machine::on_interrupted(record, &self.policy, self.now).transition)
            .collect();
        let what = self.apply_both(transitions).await?;
        Ok(format!("recover expired: {what}"))
    }

    async fn person(&mut self) -> Result<String, Failure> {
        let Some(record) = self.pick(ListQuery::new(1_000)).await? else {
            return Ok("person: no records".into());
        };
        let step = if self.rng.bool() {
            machine::retry_now(&record, self.now)
        } else {
            machine::discard(&record, "model", self.now)
        };
        match step {
            Some(step) => self.apply_both(vec![step.transition]).await,
            None => Ok(format!(
                "person: {} refused in state {}",
                record.id, record.state
            )),
        }
    }

    async fn reopen(&mut self, backend: &dyn Backend, location: &str) -> Result<String, Failure> {
        let stats = self.reference.stats().await?;
        if stats.in_flight > 0 {
            // A store that only one process opens may expire leases at open; keep the model
            // exact by restarting only with nothing in flight.
            return Ok("restart skipped: records in flight".into());
        }
        // Drop the old handle before opening, as a restart does.
        let placeholder: Arc<dyn Store> = Arc::new(MemoryStore::new());
        drop(std::mem::replace(&mut self.store, placeholder));
        self.store = backend.open(location).await?;
        Ok("restart".into())
    }

    async fn compare(&self) -> Result<(), Failure> {
        ensure_eq(
            all_records(&*self.store).await?,
            all_records(&self.reference).await?,
            "records differ from the reference model",
        )?;
        ensure_eq(
            all_tombstones(&*self.store).await?,
            all_tombstones(&self.reference).await?,
            "tombstones differ from the reference model",
        )?;
        ensure_eq(
            self.store.stats().await?,
            self.reference.stats().await?,
            "stats differ from the reference model",
        )?;
        ensure_eq(
            self.store.next_due().await?,
            self.reference.next_due().await?,
            "next_due differs from the reference model",
        )?;
        Ok(())
    }
}
