//! The scenarios of the conformance suite, each a plain `pub async fn` over a [`Backend`].
//!
//! The `conformance!` macro runs every one of them as its own test; a backend can also call one
//! by hand. They come in four kinds:
//!
//! - store-level scenarios drive the [`Store`] directly with explicit `now` values and the pure
//!   transitions of [`outbox_core::machine`], so they need no runner and no clock;
//! - [`random_ops_match_reference`] compares the store with `outbox-memory` after every step
//!   of a seeded random sequence;
//! - `runner_*` scenarios run the real [`Outbox`](outbox_core::Outbox) with a
//!   [`ScriptedSink`](crate::ScriptedSink) on tokio's paused clock (they need a current-thread
//!   runtime, which the macro's tests build);
//! - [`crash_sigkill`] and [`crash_loop_parks_record`] kill worker processes (see
//!   [`crate::crash`]); [`shared_runners`] and [`killed_runner_taken_over`] run several runner
//!   processes on one store.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    machine, Backoff, Claim, Jitter, Lease, ListQuery, Millis, NewRecord, Outcome, Record,
    RecordId, RetryPolicy, Store, Tombstone, Transition,
};

use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure};

mod clock;
mod events;
mod leases;
mod lifecycle;
mod link;
mod model;
mod paused;
mod queue;
mod restart;
mod runner;
mod stats;

pub use clock::{
    runner_halt_survives_restart, runner_step_back_across_restart, runner_step_back_while_waiting,
};
pub use events::runner_events_follow_commits;
pub use leases::{guards_skip_stale, lease_expiry_recovers, renew_extends_lease};
pub use lifecycle::{
    backoff_jitter_window, budget_rule_both_halves, ceiling_parks_record, discard_leaves_tombstone,
    manual_retry_resets_budget, poison_at_head_does_not_block, retry_after_honoured,
};
pub use link::{runner_no_answer_probes, runner_offline_waits};
pub use model::{random_ops_match_reference, run_model, seed_from_env, DEFAULT_STEPS, SEED_ENV};
pub use queue::{
    claims_are_exclusive, deadlines_honoured, due_query_ignores_backlog, fifo,
    groups_in_order_held_back, ids_never_reused, paging, payload_limit,
};
pub use restart::{ceiling_survives_reopen, restart_preserves_records};
pub use runner::{
    runner_backoff_growth_and_cap, runner_groups, runner_halt_resume, runner_manual_retry,
    runner_poison_at_head, runner_recovers_interrupted, runner_retry_after,
};
pub use stats::stats_exact;

pub use crate::crash::{
    crash_loop_parks_record, crash_sigkill, killed_runner_taken_over, shared_runners,
};

/// The name of every scenario, as `conformance!` names its tests.
pub const SCENARIOS: &[&str] = &[
    "fifo",
    "deadlines_honoured",
    "groups_in_order_held_back",
    "due_query_ignores_backlog",
    "paging",
    "payload_limit",
    "ids_never_reused",
    "claims_are_exclusive",
    "budget_rule_both_halves",
    "backoff_jitter_window",
    "ceiling_parks_record",
    "retry_after_honoured",
    "lease_expiry_recovers",
    "renew_extends_lease",
    "guards_skip_stale",
    "manual_retry_resets_budget",
    "poison_at_head_does_not_block",
    "discard_leaves_tombstone",
    "stats_exact",
    "ceiling_survives_reopen",
    "restart_preserves_records",
    "random_ops_match_reference",
    "runner_backoff_growth_and_cap",
    "runner_poison_at_head",
    "runner_retry_after",
    "runner_halt_resume",
    "runner_groups",
    "runner_manual_retry",
    "runner_recovers_interrupted",
    "runner_offline_waits",
    "runner_no_answer_probes",
    "runner_events_follow_commits",
    "runner_step_back_while_waiting",
    "runner_step_back_across_restart",
    "runner_halt_survives_restart",
    "crash_sigkill",
    "crash_loop_parks_record",
    "shared_runners",
    "killed_runner_taken_over",
];

/// A realistic wall-clock base for scenarios: 2023-11-14, in milliseconds.
pub const T0: Millis = 1_700_000_000_000;

/// The lease length scenarios claim with.
pub const LEASE_MS: Millis = 30_000;

/// The policy store-level scenarios report with: no jitter (exact deadlines), backoff from 1 s
/// doubling to a 60 s cap, a ceiling of 3 answered failures, 3 interruptions.
pub fn exact_policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(60),
        ))
        .with_jitter(Jitter::None)
        .with_max_attempts(3)
        .with_max_interruptions(3)
}

/// Creates a store on the backend and opens it.
pub(crate) async fn fresh(backend: &dyn Backend) -> Result<(String, Arc<dyn Store>), Failure> {
    let location = backend.create().await?;
    let store = backend.open(&location).await?;
    Ok((location, store))
}

/// A record whose payload is `name` and whose key is derived from it, so a scenario can tell
/// records apart by payload.
pub(crate) fn rec(name: &str) -> NewRecord {
    NewRecord::new(name.as_bytes().to_vec()).with_key(format!("key-{name}"))
}

/// [`rec`] in a group.
pub(crate) fn rec_in(name: &str, group: &str) -> NewRecord {
    rec(name).in_group(group)
}

pub(crate) fn lease(token: u64, now: Millis) -> Lease {
    Lease {
        token,
        until: now + LEASE_MS,
    }
}

pub(crate) async fn enqueue(
    store: &dyn Store,
    now: Millis,
    records: Vec<NewRecord>,
) -> Result<Vec<RecordId>, Failure> {
    let count = records.len();
    let ids = store.enqueue(records, now).await?;
    ensure_eq(ids.len(), count, "enqueue returns one id per record")?;
    Ok(ids)
}

pub(crate) async fn claim(
    store: &dyn Store,
    now: Millis,
    limit: usize,
    token: u64,
) -> Result<Vec<Record>, Failure> {
    let lease = lease(token, now);
    let claimed = store.claim(Claim { now, limit, lease }).await?;
    ensure(claimed.len() <= limit, || {
        format!(
            "claim with limit {limit} returned {} records",
            claimed.len()
        )
    })?;
    for record in &claimed {
        ensure(
            record.state == outbox_core::State::InFlight && record.lease == Some(lease),
            || {
                format!(
                    "a claimed record must come back in flight under the claim's lease: {record:?}"
                )
            },
        )?;
    }
    Ok(claimed)
}

pub(crate) fn ids(records: &[Record]) -> Vec<RecordId> {
    records.iter().map(|r| r.id).collect()
}

/// Applies transitions that must all hold.
pub(crate) async fn apply(store: &dyn Store, transitions: Vec<Transition>) -> Result<(), Failure> {
    let what = format!("{transitions:?}");
    let applied = store.apply(transitions).await?;
    ensure(applied.skipped.is_empty(), || {
        format!("apply skipped {:?} of {what}", applied.skipped)
    })
}

/// Reports `outcome` for a claimed record as the runner would, and returns what it persisted.
pub(crate) async fn report(
    store: &dyn Store,
    record: &Record,
    outcome: Outcome,
    now: Millis,
) -> Result<machine::Step, Failure> {
    let mut rng = fastrand::Rng::with_seed(0);
    let step = machine::on_outcome(record, &outcome, &exact_policy(), now, &mut rng);
    apply(store, vec![step.transition.clone()]).await?;
    Ok(step)
}

pub(crate) async fn get(store: &dyn Store, id: RecordId) -> Result<Record, Failure> {
    store
        .get(id)
        .await?
        .ok_or_else(|| Failure::new(format!("record {id} is missing")))
}

/// Every record, read page by page.
pub(crate) async fn all_records(store: &dyn Store) -> Result<Vec<Record>, Failure> {
    let mut out = Vec::new();
    let mut query = ListQuery::new(97);
    loop {
        let page = store.list(&query).await?;
        let Some(last) = page.last().map(|r| r.id) else {
            return Ok(out);
        };
        out.extend(page);
        query = query.after(last);
    }
}

/// Every tombstone, read page by page.
pub(crate) async fn all_tombstones(store: &dyn Store) -> Result<Vec<Tombstone>, Failure> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = store.tombstones(after, 97).await?;
        let Some(last) = page.last().map(|t| t.id) else {
            return Ok(out);
        };
        out.extend(page);
        after = Some(last);
    }
}

#[cfg(test)]
mod tests {
    use super::SCENARIOS;

    // The macro, the README table and this list must not drift apart: a scenario missing from
    // the macro would silently never run on any backend.
    #[test]
    fn every_scenario_is_in_the_macro_and_the_readme() {
        let macros = include_str!("../macros.rs");
        let readme = include_str!("../../README.md");
        for name in SCENARIOS {
            assert!(
                macros.lines().any(|l| l.trim() == *name),
                "{name} is not in conformance!"
            );
            assert!(
                readme.contains(&format!("`{name}`")),
                "{name} is not in the README"
            );
        }
        let in_macro = macros
            .lines()
            .filter(|l| l.starts_with("            ") && !l.trim().contains(' '))
            .filter(|l| l.trim().chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .count();
        assert_eq!(
            in_macro,
            SCENARIOS.len(),
            "the macro lists a scenario SCENARIOS lacks"
        );
    }
}
