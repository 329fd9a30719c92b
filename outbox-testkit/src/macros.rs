//! The one-line entry point, and the one list of scenarios it and [`SCENARIOS`] come from.
//!
//! [`SCENARIOS`]: crate::scenarios::SCENARIOS

/// The list of every scenario, the only place they are named: each line is the kind (`store`
/// or `crash`), the name (the function in [`scenarios`](crate::scenarios) and the test), the
/// capability it needs in parentheses, its wall-clock time limit in seconds, and what it checks
/// (the README's table). It hands the list to [`__scenarios_expand!`] with `mode` in front.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_scenarios {
    ($($mode:tt)*) => {
        $crate::__scenarios_expand! { ($($mode)*)
            store fifo () 60
                "ids increase in enqueue order; claims take records in id order, within the limit, once";
            store deadlines_honoured () 60
                "claimable at the deadline and not a millisecond before, on and off whole seconds; `next_due`";
            store groups_in_order_held_back () 60
                "group heads only; one in flight per group; a parked head holds its group only (`held`)";
            store due_query_ignores_backlog () 300
                "the right due records among 100,000 not yet due, reading none of them";
            store not_before_holds_first_delivery () 60
                "a record held an hour is pending and scheduled, claimed at its time and not a millisecond before, among the due in (deadline, id) order; `stepped_back` leaves it out";
            store not_before_of_the_latest_write_wins () 60
                "a replacing write brings its own not-before time: a held one holds the record, one that may go at once releases it";
            store history_kept_with_each_outcome () 60
                "503, 503, a timeout, 422: four attempts in order (time, class, status, error) read by `get`, `list` and the claim; a requeue keeps them; an interrupted delivery is one more";
            store history_bounded () 60
                "twelve attempts keep the last ten, oldest dropped first; a 2,000-byte error kept as its first 512 bytes at most";
            store queue_full_refuses_and_touches_nothing (SizeCap) 60
                "a cap of 1,000 records refuses the 1,001st with `QueueFull` (limit, usage, addition) and changes nothing; a batch that does not fit is refused whole; a replacing write adds nothing; a rejected record counts until pruned; a 100-byte cap the same; `stats` shows the usage";
            store trace_context_kept () 60
                "a write's trace context comes back from `get`, `list` and the claim; a replacing write brings its own, or none";
            store paging () 60
                "`list` by `after`/`limit`/state/group; tombstone pages";
            store payload_limit () 60
                "one byte over the limit refuses the whole batch";
            store ids_never_reused () 60
                "ids keep increasing after the queue empties";
            store claims_are_exclusive () 60
                "concurrent claimers (one handle each when shared) never share a record";
            store budget_rule_both_halves () 60
                "no-answer spends nothing, backoff grows to its cap; answered failures hit the ceiling";
            store backoff_jitter_window () 60
                "every jittered deadline inside its window, persisted exactly";
            store ceiling_parks_record () 60
                "needs-attention (or tombstone with the discard ceiling), never due";
            store retry_after_honoured () 60
                "Retry-After seconds and dates win over the local schedule";
            store lease_expiry_recovers () 60
                "`expired` order; `interrupted += 1`; stale reports skipped; crash-loop guard";
            store renew_extends_lease () 60
                "renewal by the lease holder only";
            store guards_skip_stale () 60
                "failed guards are skipped, change nothing, the rest of the batch applies";
            store manual_retry_resets_budget () 60
                "a person's retry gives a full fresh budget";
            store poison_at_head_does_not_block () 60
                "`3 processed · 1 parked · 0 blocked`, claim by claim";
            store discard_leaves_tombstone () 60
                "tombstone fields; prune of tombstones and rejected records";
            store stats_exact () 60
                "every `Stats` field after a known mix, and after each change";
            store round_applies_then_claims () 60
                "a round's claim sees its outcomes (a delivered head frees its group, a requeued record is claimable); stale outcomes skipped";
            store stepped_back_exact () 60
                "exactly the records scheduled from after `now`, strict boundaries, lowest ids first, as the reference model";
            store halt_persisted () 60
                "`set_halt` stores the halt as given, `halt` and `stats` report it, `None` clears it";
            store halt_survives_restart (Persistent) 60
                "a halt, and its clearing, survive a restart";
            store halt_cleared_only_as_seen () 60
                "`clear_halt_if` clears only the halt as shown, reports what it found; eight at once clear it once";
            store requeue_takes_its_place () 60
                "a rejected record takes its own place again (same id, before what its group still has queued) with a fresh budget; any other record, or one whose group has a record in flight, is refused";
            store group_key_validated () 60
                "an empty, NUL-containing or 1,025-byte group refuses the batch (`InvalidGroup`); 1,024 bytes are kept";
            store idempotency_key_validated () 60
                "an empty, 256-byte or not visible-ASCII key refuses the batch or the replacing write (`InvalidIdempotencyKey`); 255 bytes and every visible byte are kept";
            store coalescing_replaces_in_place () 60
                "ten edits of one key are one record with the last payload, nine merged; a write behind it in its group is not overtaken; parked records never replaced";
            store coalescing_leaves_in_flight_alone () 60
                "an edit while the previous one is in flight queues behind it; both go out in order";
            store coalescing_under_concurrent_enqueue () 60
                "80 concurrent edits of one key: one record plus 79 merged, none lost";
            store writes_survive_restart (Persistent) 60
                "expected version, coalescing key and the merged count survive a restart; coalescing goes on after it";
            store ceiling_survives_reopen (Persistent) 60
                "a parked record is still parked after a restart";
            store restart_preserves_records (Persistent) 60
                "every field of every record, tombstones, counters, id sequence";
            store unreadable_row_passed_by (UnreadableRows) 60
                "one undecodable row among 100: the 99 delivered, stats exact, listed with its reason, discarded by id";
            store unreadable_head_holds_its_group (UnreadableRows) 60
                "an unreadable head of its group set aside by a claim: the other group and an ungrouped record are claimed, the record behind it waits (not claimed, not due, pending) until the head is discarded; meanwhile a later record of the group can be discarded, a rejected one pruned but not requeued";
            store unreadable_row_leaves_the_cap (UnreadableRows) 60
                "one undecodable row among three, capped at three records and their bytes: set aside by a claim it leaves the cap as it leaves `stats`; three more fit, a fourth is refused with the usage `stats` shows; its discard changes neither (needs a size cap too)";
            store random_ops_match_reference () 300
                "seeded random operations, compared with `outbox-memory` after every step";
            store runner_backoff_growth_and_cap () 60
                "through the runner: exact growth without jitter, windows with it";
            store runner_poison_at_head () 60
                "through the runner, batch of one";
            store runner_retry_after () 60
                "through the runner: a 429 asking for 120 s";
            store runner_retries_at_their_draw () 60
                "200 runners each failing one write with a 503: every retry at its own full-jitter deadline, no 10 ms window with more than 5 %";
            store runner_halt_resume () 60
                "a 401 halts everything with no budget spent; `resume` delivers";
            store runner_groups () 60
                "groups in parallel, in order within, a 409 parks and holds its group";
            store runner_rounds_grow () 60
                "a backlog of 1,500 drains in claims that double from `batch` to `max_batch`; no claim over its limit or with two of a group; each record once, groups in id order";
            store runner_manual_retry () 60
                "a parked record retried through the handle is delivered";
            store runner_recovers_interrupted () 60
                "start-up recovery of a dead runner's lease; a panicking delivery is parked and the runner goes on";
            store runner_long_delivery_keeps_lease () 60
                "a delivery four leases long: renewed, delivered once, never counted interrupted";
            store runner_offline_waits () 60
                "offline means nothing is attempted; online delivers";
            store runner_no_answer_probes () 60
                "after a no-answer, one probe at a time on backoff, no budget spent";
            store runner_events_follow_commits () 60
                "on each event the store already shows the write; events in order";
            store runner_step_back_while_waiting () 60
                "the wall clock set back a day while a record waits: retried within its wait";
            store runner_step_back_across_restart () 60
                "the same across a restart: the wait it was given, counted from the start";
            store runner_not_before_honoured () 60
                "through the runner: a record held an hour goes out at its time, not a second before; scheduled in stats until then";
            store runner_not_before_across_step_back () 60
                "the wall clock set back a day across a restart and again while waiting: a held record keeps its absolute time";
            store runner_history_measures_each_attempt () 60
                "through the runner: a 1.5 s delivery answered 503, then a 0.25 s one answered 422: both attempts with how long the sink took";
            store runner_coalescing_during_a_drain () 60
                "30 edits of one note while deliveries take 300 ms: sent in order, the last one last, each sent or merged, none joined to a delivery under way";
            store runner_stale_parked () 60
                "with `max_age` 3 days a record created 4 days ago is parked as stale, not sent; a retry sends it";
            store runner_halt_survives_restart () 60
                "a 401 halts once; the halt is persisted, a restart sends nothing until `resume`";
            crash crash_sigkill (Persistent) 600
                "SIGKILL at random points: no acknowledged write lost, bounded duplicates";
            crash crash_loop_parks_record (Persistent) 300
                "a delivery that aborts the process is parked after `max_interruptions`";
            crash shared_runners (Shared) 300
                "3 runner processes on one store: each record delivered once, one delivery per group at a time, groups in id order, the work shared";
            crash killed_runner_taken_over (Shared) 300
                "a runner process killed mid-delivery; a second one recovers its records (`interrupted == 1`) and delivers everything in group order";
        }
    };
}

/// Expands the scenario list of [`__with_scenarios!`] in one of two modes: `tests` (one
/// `#[test]` per scenario, for [`conformance!`]) or `list` (the [`Scenario`](crate::Scenario)
/// table).
#[doc(hidden)]
#[macro_export]
macro_rules! __scenarios_expand {
    ((list)
        $($kind:ident $name:ident ($($needs:ident)?) $secs:literal $checks:literal;)*
    ) => {
        &[$(
            $crate::Scenario {
                name: stringify!($name),
                needs: $crate::__needs!($($needs)?),
                limit_secs: $secs,
                checks: $checks,
            },
        )*]
    };
    ((run $wanted:ident $backend:ident)
        $($kind:ident $name:ident ($($needs:ident)?) $secs:literal $checks:literal;)*
    ) => {{
        $(
            if $wanted == stringify!($name) {
                return $crate::__run_by_kind!($kind $name $backend);
            }
        )*
        None
    }};
    ((tests ($backend:expr) ($skip:expr))
        $($kind:ident $name:ident ($($needs:ident)?) $secs:literal $checks:literal;)*
    ) => {
        $(
            $crate::__scenario_test! { $kind $name ($backend) ($skip)
                $crate::Scenario {
                    name: stringify!($name),
                    needs: $crate::__needs!($($needs)?),
                    limit_secs: $secs,
                    checks: $checks,
                }
            }
        )*
    };
}

/// The future of one scenario by kind, for [`run_by_name`](crate::scenarios::run_by_name):
/// crash scenarios need a worker, so they are `None` there.
#[doc(hidden)]
#[macro_export]
macro_rules! __run_by_kind {
    (store $name:ident $backend:ident) => {
        Some($crate::scenarios::$name($backend).await)
    };
    (crash $name:ident $backend:ident) => {
        None
    };
}

/// `Option<Capability>` from an optional capability name.
#[doc(hidden)]
#[macro_export]
macro_rules! __needs {
    () => {
        None
    };
    ($needs:ident) => {
        Some($crate::Capability::$needs)
    };
}

/// One test of [`conformance!`], by kind.
#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_test {
    (store $name:ident ($backend:expr) ($skip:expr) $scenario:expr) => {
        #[test]
        fn $name() {
            $crate::harness::run_listed(
                &$scenario,
                $skip,
                || $backend,
                |backend| async move { $crate::scenarios::$name(&*backend).await },
            );
        }
    };
    (crash $name:ident ($backend:expr) ($skip:expr) $scenario:expr) => {
        #[test]
        fn $name() {
            let worker = $crate::crash::Worker::at(module_path!(), "__outbox_testkit_worker");
            $crate::harness::run_listed(
                &$scenario,
                $skip,
                || $backend,
                |backend| async move { $crate::scenarios::$name(&*backend, &worker).await },
            );
        }
    };
}

/// Runs the whole conformance suite on a backend: one `#[test]` per scenario, named after it.
///
/// Put one line in a backend crate's `tests/conformance.rs`; the argument is an expression that
/// builds the [`Backend`](crate::Backend) (it is evaluated once per test). A scenario that
/// needs a capability the backend does not declare still appears, passes, and prints
/// `skipped: <scenario> needs <capability> (<why>), backend <name>`. Every scenario runs under
/// its own wall-clock limit: one that does not finish in time fails with its name and what it
/// was waiting for.
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
/// A backend that cannot run here at all (no server answers) is skipped as a whole with
/// `skip_when = <expression>`: an `Option<String>`, evaluated in each test before the backend
/// is built; `Some(reason)` makes every test print `skipped: <scenario> (backend skipped:
/// <reason>)` and pass, without building the backend. [`skip::unless_reachable`] is the usual
/// check for a server:
///
/// [`skip::unless_reachable`]: crate::skip::unless_reachable
///
/// ```
/// outbox_testkit::conformance!(
///     outbox_testkit::MemoryBackend::new(),
///     skip_when = outbox_testkit::skip::unless_reachable("127.0.0.1:9", "NO_SUCH_ENV_VAR"),
/// );
/// # fn main() {}
/// ```
///
/// The macro also generates `__outbox_testkit_worker`, the entry of the child processes of the
/// crash scenarios, and `__outbox_testkit_soak`, the crash soak `cargo xtask soak` runs; in a
/// normal run both return at once.
#[macro_export]
macro_rules! conformance {
    ($module:ident => $backend:expr, skip_when = $skip:expr $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance!($backend, skip_when = $skip);
        }
    };
    ($module:ident => $backend:expr $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance!($backend);
        }
    };
    ($backend:expr, skip_when = $skip:expr $(,)?) => {
        $crate::__with_scenarios! { tests ($backend) ($skip) }

        /// Not a scenario: the entry of the crash scenarios' child processes. It returns at
        /// once unless the test binary was re-executed as a worker.
        #[test]
        fn __outbox_testkit_worker() {
            $crate::crash::worker_entry(|| $backend);
        }

        /// Not a scenario: `cargo xtask soak` runs it with `OUTBOX_TESTKIT_SOAK_KILLS` set; in
        /// a normal run it returns at once.
        #[test]
        fn __outbox_testkit_soak() {
            let worker = $crate::crash::Worker::at(module_path!(), "__outbox_testkit_worker");
            $crate::crash::soak_entry(|| $backend, &worker);
        }
    };
    ($backend:expr $(,)?) => {
        $crate::conformance!($backend, skip_when = ::core::option::Option::<String>::None);
    };
}
