//! The testkit's conformance suite on PostgreSQL, every scenario as its own test in its own
//! schema (so they run in parallel).
//!
//! This is `outbox_testkit::conformance!` with one addition: each test first checks that a
//! server answers, and skips loudly when none does (unless `OUTBOX_PG_REQUIRED=1`). The
//! testkit's macro has no hook for that, so the scenario list is repeated here, and
//! `every_testkit_scenario_runs_here` fails as soon as the testkit's list and this one differ.

mod common;

macro_rules! pg_conformance {
    (($($scenario:ident)*) crash ($($crash:ident)*)) => {
        const SCENARIOS: &[&str] = &[$(stringify!($scenario),)* $(stringify!($crash),)*];
        $(
            #[test]
            fn $scenario() {
                if !common::server_ready() {
                    return;
                }
                outbox_testkit::run_scenario(common::PgBackend::new, |backend| async move {
                    outbox_testkit::scenarios::$scenario(&*backend).await
                });
            }
        )*
        $(
            #[test]
            fn $crash() {
                if !common::server_ready() {
                    return;
                }
                let worker =
                    outbox_testkit::crash::Worker::at(module_path!(), "__outbox_testkit_worker");
                outbox_testkit::run_scenario(common::PgBackend::new, |backend| async move {
                    outbox_testkit::scenarios::$crash(&*backend, &worker).await
                });
            }
        )*
    };
}

/// Not a scenario: the entry of the crash scenarios' child processes; it returns at once
/// unless the binary was re-executed as a worker.
#[test]
fn __outbox_testkit_worker() {
    outbox_testkit::crash::worker_entry(common::PgBackend::new);
}

pg_conformance! {
    (
        fifo
        deadlines_honoured
        groups_in_order_held_back
        due_query_ignores_backlog
        paging
        payload_limit
        ids_never_reused
        claims_are_exclusive
        budget_rule_both_halves
        backoff_jitter_window
        ceiling_parks_record
        retry_after_honoured
        lease_expiry_recovers
        renew_extends_lease
        guards_skip_stale
        manual_retry_resets_budget
        poison_at_head_does_not_block
        discard_leaves_tombstone
        stats_exact
        ceiling_survives_reopen
        restart_preserves_records
        random_ops_match_reference
        runner_backoff_growth_and_cap
        runner_poison_at_head
        runner_retry_after
        runner_halt_resume
        runner_groups
        runner_manual_retry
        runner_recovers_interrupted
    )
    crash (
        crash_sigkill
        crash_loop_parks_record
    )
}

/// The scenario names listed in the testkit's `conformance!` macro (both of its lists).
fn testkit_scenarios() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../outbox-testkit/src/macros.rs"
    );
    let text = std::fs::read_to_string(path).expect("the testkit's macros.rs is readable");
    let mut names = Vec::new();
    for marker in ["__conformance_tests! {", "__conformance_crash_tests! {"] {
        let start = text
            .find(marker)
            .unwrap_or_else(|| panic!("the conformance! macro invokes {marker}"));
        let rest = &text[start + marker.len()..];
        let end = rest.find('}').expect("the scenario list ends with a brace");
        names.extend(
            rest[..end]
                .split_whitespace()
                .filter(|word| *word != "($backend)")
                .map(str::to_owned),
        );
    }
    names
}

#[test]
fn every_testkit_scenario_runs_here() {
    let mut theirs = testkit_scenarios();
    let mut ours: Vec<String> = SCENARIOS.iter().map(|s| (*s).to_owned()).collect();
    theirs.sort();
    ours.sort();
    assert_eq!(
        ours, theirs,
        "tests/conformance.rs must list exactly the testkit's scenarios"
    );
}
