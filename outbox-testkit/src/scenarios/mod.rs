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
use crate::harness::{ensure, ensure_eq, Failure, Scenario, ScenarioResult};

mod cap;
mod clock;
mod contract;
mod events;
mod halt;
mod history;
mod leases;
mod lifecycle;
mod link;
mod model;
mod pacing;
mod queue;
mod restart;
mod rounds;
mod runner;
mod schedule;
mod stats;
mod trace;
mod unreadable;
mod writes;

pub use cap::{queue_full_refuses_and_touches_nothing, unreadable_row_leaves_the_cap};
pub use clock::{
    runner_halt_survives_restart, runner_step_back_across_restart, runner_step_back_while_waiting,
};
pub use contract::{
    group_key_validated, idempotency_key_validated, requeue_takes_its_place,
    round_applies_then_claims, stepped_back_exact,
};
pub use events::runner_events_follow_commits;
pub use halt::{halt_cleared_only_as_seen, halt_persisted, halt_survives_restart};
pub use history::{
    history_bounded, history_kept_with_each_outcome, runner_history_measures_each_attempt,
};
pub use leases::{guards_skip_stale, lease_expiry_recovers, renew_extends_lease};
pub use lifecycle::{
    backoff_jitter_window, budget_rule_both_halves, ceiling_parks_record, discard_leaves_tombstone,
    manual_retry_resets_budget, poison_at_head_does_not_block, retry_after_honoured,
};
pub use link::{runner_no_answer_probes, runner_offline_waits};
pub use model::{random_ops_match_reference, run_model, seed_from_env, DEFAULT_STEPS, SEED_ENV};
pub use pacing::runner_retries_at_their_draw;
pub use queue::{
    claims_are_exclusive, deadlines_honoured, due_query_ignores_backlog, fifo,
    groups_in_order_held_back, ids_never_reused, paging, payload_limit,
};
pub use restart::{ceiling_survives_reopen, restart_preserves_records};
pub use rounds::runner_rounds_grow;
pub use runner::{
    runner_backoff_growth_and_cap, runner_groups, runner_halt_resume,
    runner_long_delivery_keeps_lease, runner_manual_retry, runner_poison_at_head,
    runner_recovers_interrupted, runner_retry_after,
};
pub use schedule::{
    not_before_holds_first_delivery, not_before_of_the_latest_write_wins,
    runner_not_before_across_step_back, runner_not_before_honoured,
};
pub use stats::stats_exact;
pub use trace::trace_context_kept;
pub use unreadable::{unreadable_head_holds_its_group, unreadable_row_passed_by};
pub use writes::{
    coalescing_leaves_in_flight_alone, coalescing_replaces_in_place,
    coalescing_under_concurrent_enqueue, runner_coalescing_during_a_drain, runner_stale_parked,
    writes_survive_restart,
};

pub use crate::crash::{
    crash_loop_parks_record, crash_sigkill, killed_runner_taken_over, shared_runners,
};

/// Every scenario, in the order `conformance!` runs them: the list in the macro, the only
/// place scenarios are named. The README's table is made from it.
pub const SCENARIOS: &[Scenario] = crate::__with_scenarios!(list);

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
    Ok(ids.ids)
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

/// The deadline a reported step set, as the core computed it (before any store kept it).
pub(crate) fn deadline(step: &machine::Step) -> Millis {
    match &step.transition.change {
        machine::Change::Update(progress) => progress.next_attempt_at.unwrap_or(0),
        _ => 0,
    }
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

/// Runs the store-level scenario named `name` (every scenario but the crash scenarios, which
/// need a worker process) on `backend`; `None` for a crash scenario or an unknown name.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use outbox_testkit::{scenarios, MemoryBackend, Verdict};
/// let verdict = scenarios::run_by_name("fifo", &MemoryBackend::new()).await;
/// assert_eq!(verdict, Some(Ok(Verdict::Passed)));
/// assert_eq!(scenarios::run_by_name("crash_sigkill", &MemoryBackend::new()).await, None);
/// # }
/// ```
pub async fn run_by_name(name: &str, backend: &dyn Backend) -> Option<ScenarioResult> {
    crate::__with_scenarios!(run name backend)
}

/// The README's table of scenarios, made from [`SCENARIOS`].
pub fn readme_table() -> String {
    let mut table = String::from("| scenario | needs | limit | checks |\n|---|---|---|---|\n");
    for s in SCENARIOS {
        let needs = s.needs.map(|n| n.to_string()).unwrap_or_default();
        table.push_str(&format!(
            "| `{}` | {needs} | {} s | {} |\n",
            s.name, s.limit_secs, s.checks
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::{readme_table, SCENARIOS};

    const BEGIN: &str =
        "<!-- scenarios: made from SCENARIOS; OUTBOX_TESTKIT_BLESS=1 rewrites it -->\n";
    const END: &str = "<!-- /scenarios -->";

    // The README's table is made from the list; a changed list shows here, and
    // `OUTBOX_TESTKIT_BLESS=1 cargo test -p outbox-testkit --lib` writes the new table.
    #[test]
    fn the_readme_table_is_made_from_the_list() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let start = readme.find(BEGIN).expect("README has the scenarios marker") + BEGIN.len();
        let end = start
            + readme[start..]
                .find(END)
                .expect("README has the end marker");
        let table = readme_table();
        if readme[start..end] != table {
            if std::env::var_os("OUTBOX_TESTKIT_BLESS").is_some() {
                let updated = format!("{}{table}{}", &readme[..start], &readme[end..]);
                std::fs::write(path, updated).unwrap();
            } else {
                panic!("the README's scenario table is stale; the list makes:\n{table}");
            }
        }
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len());
    }
}
