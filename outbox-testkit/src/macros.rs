//! The one-line entry point: `conformance!` expands to one test per scenario.

/// Runs the whole conformance suite on a backend: one `#[test]` per scenario, named after it.
///
/// Put one line in a backend crate's `tests/conformance.rs`; the argument is an expression that
/// builds the [`Backend`](crate::Backend) (it is evaluated once per test). Scenarios that need a
/// capability the backend does not declare still appear, pass, and print
/// `skipped: <scenario> needs <capability>`.
///
/// ```
/// // tests/conformance.rs of a backend crate
/// outbox_testkit::conformance!(outbox_testkit::MemoryBackend::new());
/// # fn main() {}
/// ```
///
/// To run the suite on several configurations in one file, name a module for each; the tests
/// are then `<module>::<scenario>`:
///
/// ```
/// outbox_testkit::conformance!(small_payloads => outbox_testkit::MemoryBackend::new());
/// outbox_testkit::conformance!(defaults => outbox_testkit::MemoryBackend::new());
/// # fn main() {}
/// ```
///
/// The macro also generates `__outbox_testkit_worker`, the entry of the child processes of the
/// crash scenarios; in a normal run it returns at once.
#[macro_export]
macro_rules! conformance {
    ($module:ident => $backend:expr $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance!($backend);
        }
    };
    ($backend:expr $(,)?) => {
        $crate::__conformance_tests! {
            ($backend)
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
            runner_offline_waits
            runner_no_answer_probes
            runner_events_follow_commits
            runner_step_back_while_waiting
            runner_step_back_across_restart
            runner_halt_survives_restart
        }

        /// Not a scenario: the entry of the crash scenarios' child processes. It returns at
        /// once unless the test binary was re-executed as a worker.
        #[test]
        fn __outbox_testkit_worker() {
            $crate::crash::worker_entry(|| $backend);
        }

        $crate::__conformance_crash_tests! {
            ($backend)
            crash_sigkill
            crash_loop_parks_record
            shared_runners
            killed_runner_taken_over
        }
    };
}

/// Expands to one test per scenario name; used by [`conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    (($backend:expr) $($scenario:ident)*) => {
        $(
            #[test]
            fn $scenario() {
                $crate::run_scenario(
                    || $backend,
                    |backend| async move { $crate::scenarios::$scenario(&*backend).await },
                );
            }
        )*
    };
}

/// Expands to one test per crash scenario, each told where the worker entry test is; used by
/// [`conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_crash_tests {
    (($backend:expr) $($scenario:ident)*) => {
        $(
            #[test]
            fn $scenario() {
                let worker = $crate::crash::Worker::at(module_path!(), "__outbox_testkit_worker");
                $crate::run_scenario(
                    || $backend,
                    |backend| async move {
                        $crate::scenarios::$scenario(&*backend, &worker).await
                    },
                );
            }
        )*
    };
}
