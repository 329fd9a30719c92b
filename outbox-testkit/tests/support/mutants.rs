//! Deliberately broken stores: each one the reference store under a layer that carries one
//! realistic bug, overriding only the operations the bug touches (the rest forward).
//!
//! A [`MutantBackend`] keeps its stores in this process across "restarts", so it declares
//! itself persistent and the restart scenarios run; the bugs that show only after a restart
//! act when a location is opened again.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox_core::{
    machine, Applied, Cap, Change, Claim, Enqueued, Guard, Halt, History, Lease, ListQuery, Millis,
    NewRecord, Progress, Record, RecordId, Result, Round, State, Stats, Store, StoreLayer,
    Tombstone, Transition, DEFAULT_MAX_PAYLOAD,
};
use outbox_memory::MemoryStore;
use outbox_testkit::{Backend, Capabilities};

/// One broken store: its name, the bug, and the scenarios meant to catch it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mutant {
    /// Short name, a column of the matrix.
    pub(crate) name: &'static str,
    /// The bug, in a line.
    pub(crate) bug: &'static str,
    /// Scenarios written to catch this bug.
    pub(crate) meant_for: &'static [&'static str],
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Sound,
    IgnoresGuardToken,
    NextDueCountsHeld,
    ForgetsUnansweredOnReopen,
    ForgetsAttemptsOnReopen,
    LosesLastEnqueue,
    ClaimsPastLease,
    ClaimsByIdNotDeadline,
    DeadlinesInWholeSeconds,
    TwoOfGroupInFlight,
    TwoOfGroupInBigClaims,
    ClaimsTwice,
    ReusesIds,
    EnqueueNotAtomic,
    ApplyStopsAtSkip,
    RoundClaimsFirst,
    DeliveredUncounted,
    UnansweredDropped,
    HaltNotInStats,
    DueQueryScans,
    InterruptedDropped,
    NullGroupIsAGroup,
    ReadsOneWriteBehind,
    DeliveredCounterLostOnReopen,
    SteppedBackSkipsNeverAttempted,
    SteppedBackOnlyNeverAttempted,
    HaltNotPersisted,
    ClearHaltIgnoresSeen,
    ClearHaltReadsThenClears,
    ExpiredIgnoresExpiry,
    RenewNoop,
    RenewIgnoresToken,
    PayloadLimitOffByOne,
    EmptyGroupIsNoGroup,
    KeyTruncated,
    PageSkipsBoundary,
    PruneIgnoresAge,
    AttemptsNeverLowered,
    DeadlineTruncatedToSeconds,
    HeldNotCounted,
    RequeueIgnoresGroup,
    ParkedHoldsEveryGroup,
    LastErrorDropped,
    NeverCoalesces,
    ExpectedVersionDropped,
    VersionDroppedOnInsert,
    UpdateRevivesRejected,
    CoalescesIntoInFlight,
    CreatedAtIsClaimTime,
    NotBeforeIgnored,
    ReplacingDropsNotBefore,
    NotBeforeUnread,
    HistoryDropped,
    HistoryUnread,
    HistoryFullStopsAppending,
    RequeueClearsHistory,
    CapIgnored,
    CapOffByOne,
    CapPartialBatch,
    TraceDropped,
    ReplacingKeepsTrace,
}

/// The sound store, the row every scenario must pass.
pub(crate) const SOUND: Mutant = Mutant {
    name: "sound",
    bug: "none: the reference store",
    meant_for: &[],
    kind: Kind::Sound,
};

/// Every mutant.
pub(crate) const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "ignores_guard",
        bug: "a report under a stale lease token is applied",
        meant_for: &[
            "guards_skip_stale",
            "round_applies_then_claims",
            "random_ops_match_reference",
        ],
        kind: Kind::IgnoresGuardToken,
    },
    Mutant {
        name: "next_due_held",
        bug: "next_due counts records held behind their group's head",
        meant_for: &["stats_exact", "random_ops_match_reference"],
        kind: Kind::NextDueCountsHeld,
    },
    Mutant {
        name: "unanswered_reset",
        bug: "opening the store again zeroes `unanswered`",
        meant_for: &["restart_preserves_records"],
        kind: Kind::ForgetsUnansweredOnReopen,
    },
    Mutant {
        name: "attempts_reset",
        bug: "opening the store again zeroes `attempts`",
        meant_for: &["restart_preserves_records", "ceiling_survives_reopen"],
        kind: Kind::ForgetsAttemptsOnReopen,
    },
    Mutant {
        name: "loses_last_enqueue",
        bug: "the last enqueue was never synced: a restart loses it",
        meant_for: &["restart_preserves_records"],
        kind: Kind::LosesLastEnqueue,
    },
    Mutant {
        name: "claims_past_lease",
        bug: "the due query also takes in-flight records whose lease ran out, uncounted",
        meant_for: &["lease_expiry_recovers", "random_ops_match_reference"],
        kind: Kind::ClaimsPastLease,
    },
    Mutant {
        name: "claims_by_id",
        bug: "due records are claimed in id order, not (deadline, id)",
        meant_for: &["stats_exact", "random_ops_match_reference"],
        kind: Kind::ClaimsByIdNotDeadline,
    },
    Mutant {
        name: "due_in_seconds",
        bug: "the due test compares whole seconds",
        meant_for: &["deadlines_honoured", "runner_retries_at_their_draw"],
        kind: Kind::DeadlinesInWholeSeconds,
    },
    Mutant {
        name: "two_of_group",
        bug: "a claim also takes the record behind a group's head",
        meant_for: &["groups_in_order_held_back", "runner_groups"],
        kind: Kind::TwoOfGroupInFlight,
    },
    Mutant {
        name: "two_of_group_in_big_claims",
        bug: "a claim for more than 64 records also takes the record behind a group's head",
        meant_for: &["runner_rounds_grow"],
        kind: Kind::TwoOfGroupInBigClaims,
    },
    Mutant {
        name: "claims_twice",
        bug: "a claim hands out the first record of the previous claim again",
        meant_for: &["fifo", "claims_are_exclusive"],
        kind: Kind::ClaimsTwice,
    },
    Mutant {
        name: "reuses_ids",
        bug: "ids start again from 1 once the queue is empty",
        meant_for: &["ids_never_reused"],
        kind: Kind::ReusesIds,
    },
    Mutant {
        name: "enqueue_half",
        bug: "an enqueue writes the records before the invalid one",
        meant_for: &[
            "payload_limit",
            "group_key_validated",
            "idempotency_key_validated",
        ],
        kind: Kind::EnqueueNotAtomic,
    },
    Mutant {
        name: "apply_half",
        bug: "a batch of transitions stops at the first skipped one; the rest are lost",
        meant_for: &["guards_skip_stale"],
        kind: Kind::ApplyStopsAtSkip,
    },
    Mutant {
        name: "round_claims_first",
        bug: "a round claims before it applies its outcomes",
        meant_for: &["round_applies_then_claims"],
        kind: Kind::RoundClaimsFirst,
    },
    Mutant {
        name: "delivered_uncounted",
        bug: "a delivery removes the record without adding to the delivered counter",
        meant_for: &[
            "ids_never_reused",
            "round_applies_then_claims",
            "runner_offline_waits",
            "runner_halt_resume",
            "runner_retry_after",
        ],
        kind: Kind::DeliveredUncounted,
    },
    Mutant {
        name: "unanswered_dropped",
        bug: "an update does not write `unanswered`",
        meant_for: &["budget_rule_both_halves", "runner_no_answer_probes"],
        kind: Kind::UnansweredDropped,
    },
    Mutant {
        name: "halt_not_in_stats",
        bug: "`stats` does not report the halt",
        meant_for: &["halt_persisted", "runner_halt_survives_restart"],
        kind: Kind::HaltNotInStats,
    },
    Mutant {
        name: "due_query_scans",
        bug: "the due query reads every record (no index on the deadline)",
        meant_for: &["due_query_ignores_backlog"],
        kind: Kind::DueQueryScans,
    },
    Mutant {
        name: "interrupted_dropped",
        bug: "an update does not write `interrupted`",
        meant_for: &["lease_expiry_recovers", "runner_recovers_interrupted"],
        kind: Kind::InterruptedDropped,
    },
    Mutant {
        name: "null_group_is_a_group",
        bug: "records without a group wait behind each other, as if one group",
        meant_for: &["poison_at_head_does_not_block", "runner_poison_at_head"],
        kind: Kind::NullGroupIsAGroup,
    },
    Mutant {
        name: "reads_lag_a_write",
        bug: "`get` and `list` answer from before the last write (a lagging replica)",
        meant_for: &["runner_events_follow_commits"],
        kind: Kind::ReadsOneWriteBehind,
    },
    Mutant {
        name: "delivered_reset",
        bug: "the delivered counter is not persisted: a restart zeroes it",
        meant_for: &["restart_preserves_records"],
        kind: Kind::DeliveredCounterLostOnReopen,
    },
    Mutant {
        name: "stepped_back_null",
        bug: "stepped_back misses records never attempted (a NULL last attempt)",
        meant_for: &["stepped_back_exact"],
        kind: Kind::SteppedBackSkipsNeverAttempted,
    },
    Mutant {
        name: "stepped_back_attempted",
        bug: "stepped_back misses records attempted after now (scheduled before a step back)",
        meant_for: &[
            "stepped_back_exact",
            "runner_step_back_while_waiting",
            "runner_step_back_across_restart",
        ],
        kind: Kind::SteppedBackOnlyNeverAttempted,
    },
    Mutant {
        name: "halt_in_memory",
        bug: "the halt is kept by the handle, not persisted",
        meant_for: &["halt_survives_restart", "runner_halt_survives_restart"],
        kind: Kind::HaltNotPersisted,
    },
    Mutant {
        name: "clear_halt_ignores_seen",
        bug: "`clear_halt_if` clears whatever halt is persisted, not only the one shown",
        meant_for: &["halt_cleared_only_as_seen"],
        kind: Kind::ClearHaltIgnoresSeen,
    },
    Mutant {
        name: "clear_halt_reads_then_clears",
        bug: "`clear_halt_if` reads the halt, then clears it in a second step others come between",
        meant_for: &["halt_cleared_only_as_seen"],
        kind: Kind::ClearHaltReadsThenClears,
    },
    Mutant {
        name: "expired_ignores_expiry",
        bug: "`expired` lists every record in flight, lease running or not",
        meant_for: &["lease_expiry_recovers", "runner_long_delivery_keeps_lease"],
        kind: Kind::ExpiredIgnoresExpiry,
    },
    Mutant {
        name: "renew_noop",
        bug: "`renew` does nothing",
        meant_for: &["renew_extends_lease", "runner_long_delivery_keeps_lease"],
        kind: Kind::RenewNoop,
    },
    Mutant {
        name: "renew_any_token",
        bug: "`renew` extends leases it does not hold",
        meant_for: &["renew_extends_lease"],
        kind: Kind::RenewIgnoresToken,
    },
    Mutant {
        name: "payload_off_by_one",
        bug: "a payload one byte over the limit is accepted",
        meant_for: &["payload_limit"],
        kind: Kind::PayloadLimitOffByOne,
    },
    Mutant {
        name: "empty_group_none",
        bug: "an empty group is stored as no group instead of refused",
        meant_for: &["group_key_validated"],
        kind: Kind::EmptyGroupIsNoGroup,
    },
    Mutant {
        name: "key_truncated",
        bug: "a key over 255 bytes is cut to 255 (a VARCHAR(255) column) instead of refused",
        meant_for: &["idempotency_key_validated"],
        kind: Kind::KeyTruncated,
    },
    Mutant {
        name: "page_skips",
        bug: "a page starts one record after the one it should",
        meant_for: &["paging"],
        kind: Kind::PageSkipsBoundary,
    },
    Mutant {
        name: "prune_ignores_age",
        bug: "prune removes every rejected record and tombstone, however recent",
        meant_for: &["discard_leaves_tombstone"],
        kind: Kind::PruneIgnoresAge,
    },
    Mutant {
        name: "attempts_never_lowered",
        bug: "an update adds to `attempts` instead of setting it (never lowers it)",
        meant_for: &["manual_retry_resets_budget", "runner_manual_retry"],
        kind: Kind::AttemptsNeverLowered,
    },
    Mutant {
        name: "deadline_in_seconds",
        bug: "a rescheduled deadline is stored in whole seconds",
        meant_for: &[
            "backoff_jitter_window",
            "retry_after_honoured",
            "budget_rule_both_halves",
            "runner_backoff_growth_and_cap",
        ],
        kind: Kind::DeadlineTruncatedToSeconds,
    },
    Mutant {
        name: "held_uncounted",
        bug: "`held` is always 0",
        meant_for: &["stats_exact", "groups_in_order_held_back"],
        kind: Kind::HeldNotCounted,
    },
    Mutant {
        name: "requeue_ignores_group",
        bug: "a requeue rewrites the record as pending without taking its place in its group",
        meant_for: &["requeue_takes_its_place"],
        kind: Kind::RequeueIgnoresGroup,
    },
    Mutant {
        name: "parked_holds_all",
        bug: "a parked record holds back every record, not just its group",
        meant_for: &["groups_in_order_held_back", "runner_groups"],
        kind: Kind::ParkedHoldsEveryGroup,
    },
    Mutant {
        name: "last_error_dropped",
        bug: "an update does not write `last_error`",
        meant_for: &["ceiling_parks_record", "random_ops_match_reference"],
        kind: Kind::LastErrorDropped,
    },
    Mutant {
        name: "never_coalesces",
        bug: "the coalescing key is not stored: every write is a new record",
        meant_for: &[
            "coalescing_replaces_in_place",
            "coalescing_leaves_in_flight_alone",
            "coalescing_under_concurrent_enqueue",
            "writes_survive_restart",
            "runner_coalescing_during_a_drain",
        ],
        kind: Kind::NeverCoalesces,
    },
    Mutant {
        name: "version_dropped",
        bug: "the expected version is not stored",
        meant_for: &["coalescing_replaces_in_place", "writes_survive_restart"],
        kind: Kind::ExpectedVersionDropped,
    },
    Mutant {
        name: "version_dropped_on_insert",
        bug: "the expected version is not stored when a write makes a new record (a merge keeps it)",
        meant_for: &["coalescing_replaces_in_place"],
        kind: Kind::VersionDroppedOnInsert,
    },
    Mutant {
        name: "update_revives_rejected",
        bug: "an update of a rejected record to pending applies, leaving it outside its group's order",
        meant_for: &["requeue_takes_its_place"],
        kind: Kind::UpdateRevivesRejected,
    },
    Mutant {
        name: "coalesces_in_flight",
        bug: "a write whose key is in flight is merged into it (and so never sent)",
        meant_for: &[
            "coalescing_leaves_in_flight_alone",
            "runner_coalescing_during_a_drain",
        ],
        kind: Kind::CoalescesIntoInFlight,
    },
    Mutant {
        name: "created_at_claim_time",
        bug: "a claim rewrites `created_at` with the claim's time",
        meant_for: &["runner_stale_parked"],
        kind: Kind::CreatedAtIsClaimTime,
    },
    Mutant {
        name: "not_before_ignored",
        bug: "the not-before time is not stored: a record held for later is due at its enqueue",
        meant_for: &[
            "not_before_holds_first_delivery",
            "not_before_of_the_latest_write_wins",
            "runner_not_before_honoured",
            "runner_not_before_across_step_back",
        ],
        kind: Kind::NotBeforeIgnored,
    },
    Mutant {
        name: "replacing_drops_not_before",
        bug: "a write that replaces a waiting one keeps its schedule and drops the new not-before time",
        meant_for: &["not_before_of_the_latest_write_wins"],
        kind: Kind::ReplacingDropsNotBefore,
    },
    Mutant {
        name: "not_before_unread",
        bug: "the not-before time is written but never read back, so a re-base takes the held time for a wait",
        meant_for: &[
            "not_before_holds_first_delivery",
            "runner_not_before_honoured",
            "runner_not_before_across_step_back",
        ],
        kind: Kind::NotBeforeUnread,
    },
    Mutant {
        name: "history_dropped",
        bug: "an update writes the schedule and counters but not the attempt history",
        meant_for: &[
            "history_kept_with_each_outcome",
            "history_bounded",
            "runner_history_measures_each_attempt",
        ],
        kind: Kind::HistoryDropped,
    },
    Mutant {
        name: "history_unread",
        bug: "the attempt history is written but reads back empty",
        meant_for: &[
            "history_kept_with_each_outcome",
            "history_bounded",
            "runner_history_measures_each_attempt",
        ],
        kind: Kind::HistoryUnread,
    },
    Mutant {
        name: "history_full_stops_appending",
        bug: "once ten attempts are kept, newer ones are not (the oldest stay)",
        meant_for: &["history_bounded"],
        kind: Kind::HistoryFullStopsAppending,
    },
    Mutant {
        name: "requeue_clears_history",
        bug: "a requeue wipes the attempt history with the budget",
        meant_for: &["history_kept_with_each_outcome"],
        kind: Kind::RequeueClearsHistory,
    },
    Mutant {
        name: "cap_ignored",
        bug: "the size cap is not checked: a full store takes every enqueue",
        meant_for: &["queue_full_refuses_and_touches_nothing"],
        kind: Kind::CapIgnored,
    },
    Mutant {
        name: "cap_off_by_one",
        bug: "the size cap refuses the write that would fill it exactly",
        meant_for: &["queue_full_refuses_and_touches_nothing"],
        kind: Kind::CapOffByOne,
    },
    Mutant {
        name: "cap_partial_batch",
        bug: "a batch that does not fit writes the records that do, then reports QueueFull",
        meant_for: &["queue_full_refuses_and_touches_nothing"],
        kind: Kind::CapPartialBatch,
    },
    Mutant {
        name: "trace_dropped",
        bug: "the trace context of a write is not stored",
        meant_for: &["trace_context_kept"],
        kind: Kind::TraceDropped,
    },
    Mutant {
        name: "replacing_keeps_trace",
        bug: "a replacing write keeps the trace context of the write it replaced",
        meant_for: &["trace_context_kept"],
        kind: Kind::ReplacingKeepsTrace,
    },
];

/// State of one location that outlives its handles (what a file would hold).
#[derive(Debug, Default)]
struct Location {
    store: Arc<MemoryStore>,
    opened: bool,
    /// For `ReusesIds`: how ids are shifted, per range of inner ids.
    ids: Arc<Mutex<Shifts>>,
}

/// A backend whose stores carry one mutant's bug.
#[derive(Debug)]
pub(crate) struct MutantBackend {
    mutant: Mutant,
    locations: Mutex<HashMap<String, Location>>,
}

impl MutantBackend {
    pub(crate) fn new(mutant: Mutant) -> Self {
        MutantBackend {
            mutant,
            locations: Mutex::default(),
        }
    }
}

#[async_trait]
impl Backend for MutantBackend {
    fn name(&self) -> &'static str {
        self.mutant.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            shared: false,
            unreadable_rows: false,
            size_cap: true,
        }
    }

    async fn open_capped(&self, location: &str, cap: Cap) -> Result<Arc<dyn Store>> {
        let store = self.open(location).await?;
        let inner = {
            let locations = self.locations.lock().unwrap();
            locations.get(location).map(|loc| Arc::clone(&loc.store))
        };
        let lower = |max: Option<u64>| max.map(|m| m.saturating_sub(1));
        let cap = match self.mutant.kind {
            Kind::CapIgnored => Cap::none(),
            Kind::CapOffByOne => Cap {
                max_records: lower(cap.max_records),
                max_bytes: lower(cap.max_bytes),
            },
            _ => cap,
        };
        if let Some(inner) = inner {
            inner.set_cap(cap);
        }
        Ok(store)
    }

    async fn create(&self) -> Result<String> {
        let mut locations = self.locations.lock().unwrap();
        let location = format!("{}-{}", self.mutant.name, locations.len());
        let max = if self.mutant.kind == Kind::PayloadLimitOffByOne {
            DEFAULT_MAX_PAYLOAD + 1
        } else {
            DEFAULT_MAX_PAYLOAD
        };
        let store = Arc::new(MemoryStore::new().with_max_payload(max));
        locations.insert(
            location.clone(),
            Location {
                store,
                ..Location::default()
            },
        );
        Ok(location)
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        let (inner, reopened, ids) = {
            let mut locations = self.locations.lock().unwrap();
            let Some(loc) = locations.get_mut(location) else {
                return Err(outbox_core::Error::NotFound {
                    path: location.to_owned(),
                });
            };
            let reopened = std::mem::replace(&mut loc.opened, true);
            (Arc::clone(&loc.store), reopened, Arc::clone(&loc.ids))
        };
        let mut base = 0;
        if reopened {
            on_reopen(self.mutant.kind, &inner).await?;
            if self.mutant.kind == Kind::DeliveredCounterLostOnReopen {
                base = inner.stats().await?.delivered;
            }
        }
        Ok(wrap(self.mutant.kind, inner, ids, base))
    }
}

/// What a restart does to a store with a bug that shows on reopening.
async fn on_reopen(kind: Kind, store: &MemoryStore) -> Result<()> {
    let idle = || async {
        Ok::<_, outbox_core::Error>(
            store
                .list(&ListQuery::new(usize::MAX))
                .await?
                .into_iter()
                .filter(|r| r.state != State::InFlight),
        )
    };
    let rewrite = |record: Record, progress: Progress| Transition {
        id: record.id,
        guard: Guard::Idle,
        change: Change::Update(progress),
    };
    match kind {
        Kind::ForgetsUnansweredOnReopen => {
            let t = idle().await?.map(|r| {
                let p = Progress {
                    unanswered: 0,
                    ..r.progress()
                };
                rewrite(r, p)
            });
            store.apply(t.collect()).await?;
        }
        Kind::ForgetsAttemptsOnReopen => {
            let t = idle().await?.map(|r| {
                let p = Progress {
                    attempts: 0,
                    ..r.progress()
                };
                rewrite(r, p)
            });
            store.apply(t.collect()).await?;
        }
        Kind::LosesLastEnqueue => {
            let records = store.list(&ListQuery::new(usize::MAX)).await?;
            if let Some(last) = records.last() {
                let guard = last.lease.map_or(Guard::Idle, |l| Guard::Lease(l.token));
                let change = Change::Discard {
                    reason: LOST.into(),
                    at: 0,
                    attempts: 0,
                };
                store
                    .apply(vec![Transition {
                        id: last.id,
                        guard,
                        change,
                    }])
                    .await?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The reason of the tombstone a lost record leaves in the reference store; hidden from users.
const LOST: &str = "\u{0}lost";

/// `base`: the delivered count a restart forgot (for `DeliveredCounterLostOnReopen`).
fn wrap(kind: Kind, inner: Arc<MemoryStore>, ids: Arc<Mutex<Shifts>>, base: u64) -> Arc<dyn Store> {
    match kind {
        Kind::ReusesIds => Arc::new(ReusesIds { inner, ids }),
        Kind::LosesLastEnqueue => Arc::new(HidesLost { inner }),
        _ => {
            let layer = Layer::new(kind, inner);
            layer.delivered_base.store(base, Ordering::SeqCst);
            Arc::new(layer)
        }
    }
}

/// The layer of most mutants: one struct, each operation it overrides changes only for the
/// mutants whose bug lies there and forwards for the others.
#[derive(Debug)]
struct Layer {
    kind: Kind,
    inner: Arc<MemoryStore>,
    last_claim: Mutex<Option<Record>>,
    halt: Mutex<Option<Halt>>,
    uncounted: AtomicU64,
    delivered_base: AtomicU64,
    /// For `ReadsOneWriteBehind`: every record as it was before the last write.
    before_last_write: Mutex<Option<Vec<Record>>>,
    /// For `ReplacingKeepsTrace`: the trace context each record was first written with.
    first_trace: Mutex<HashMap<RecordId, Option<outbox_core::TraceContext>>>,
}

impl Layer {
    fn new(kind: Kind, inner: Arc<MemoryStore>) -> Self {
        Layer {
            kind,
            inner,
            last_claim: Mutex::default(),
            halt: Mutex::default(),
            uncounted: AtomicU64::new(0),
            delivered_base: AtomicU64::new(0),
            before_last_write: Mutex::default(),
            first_trace: Mutex::default(),
        }
    }

    async fn all(&self) -> Result<Vec<Record>> {
        self.inner.list(&ListQuery::new(usize::MAX)).await
    }

    /// Records as this store hands them out: `NotBeforeUnread` never reads the not-before
    /// time back.
    fn shown(&self, mut records: Vec<Record>) -> Vec<Record> {
        if self.kind == Kind::NotBeforeUnread {
            for record in &mut records {
                record.not_before = None;
            }
        }
        if self.kind == Kind::HistoryUnread {
            for record in &mut records {
                record.history = History::default();
            }
        }
        if self.kind == Kind::ReplacingKeepsTrace {
            let first = self.first_trace.lock().unwrap();
            for record in &mut records {
                if let Some(trace) = first.get(&record.id) {
                    record.trace = trace.clone();
                }
            }
        }
        records
    }

    /// The transitions as this mutant writes them.
    async fn mutate(&self, transitions: Vec<Transition>) -> Result<Vec<Transition>> {
        let mut out = Vec::with_capacity(transitions.len());
        for mut t in transitions {
            let current = self.inner.get(t.id).await?;
            match (self.kind, &mut t.change) {
                (Kind::IgnoresGuardToken, _) => {
                    if let (Guard::Lease(_), Some(lease)) =
                        (t.guard, current.as_ref().and_then(|r| r.lease))
                    {
                        t.guard = Guard::Lease(lease.token);
                    }
                }
                (Kind::AttemptsNeverLowered, Change::Update(p)) => {
                    if let Some(r) = &current {
                        p.attempts = p.attempts.max(r.attempts);
                    }
                }
                (Kind::DeadlineTruncatedToSeconds, Change::Update(p)) => {
                    p.next_attempt_at = p.next_attempt_at.map(|at| at - at % 1_000);
                }
                (Kind::InterruptedDropped, Change::Update(p)) => {
                    p.interrupted = current.as_ref().map_or(0, |r| r.interrupted);
                }
                (Kind::UnansweredDropped, Change::Update(p)) => {
                    p.unanswered = current.as_ref().map_or(0, |r| r.unanswered);
                }
                (Kind::LastErrorDropped, Change::Update(p)) => {
                    p.last_error = current.as_ref().and_then(|r| r.last_error.clone());
                }
                (Kind::RequeueIgnoresGroup, Change::Requeue { at })
                    if current.as_ref().is_some_and(|r| r.state == State::Rejected) =>
                {
                    let history = current.as_ref().map(|r| r.history.clone());
                    t.change = Change::Update(Progress {
                        history: history.unwrap_or_default(),
                        ..Progress::requeued(*at)
                    });
                }
                (Kind::HistoryDropped, Change::Update(p)) => {
                    p.history = current
                        .as_ref()
                        .map(|r| r.history.clone())
                        .unwrap_or_default();
                }
                (Kind::HistoryFullStopsAppending, Change::Update(p)) => {
                    if let Some(r) = current
                        .as_ref()
                        .filter(|r| r.history.len() >= History::LIMIT)
                    {
                        p.history = r.history.clone();
                    }
                }
                (Kind::RequeueClearsHistory, Change::Requeue { .. }) => {
                    if let Some(r) = current.as_ref().filter(|r| r.state == State::Rejected) {
                        // Applied as the store would, then the history forgotten.
                        let mut fresh = r.clone();
                        if let Change::Requeue { at } = t.change {
                            fresh.requeue(at);
                        }
                        t.change = Change::Update(Progress {
                            history: History::default(),
                            ..fresh.progress()
                        });
                    }
                }
                _ => {}
            }
            out.push(t);
        }
        Ok(out)
    }

    /// Notes the records as they are before a write, for `ReadsOneWriteBehind`.
    async fn before_write(&self) -> Result<()> {
        if self.kind == Kind::ReadsOneWriteBehind {
            let all = self.all().await?;
            *self.before_last_write.lock().unwrap() = Some(all);
        }
        Ok(())
    }

    fn lagging(&self) -> Option<Vec<Record>> {
        self.before_last_write.lock().unwrap().clone()
    }

    async fn write(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.before_write().await?;
        let delivered: Vec<RecordId> = transitions
            .iter()
            .filter(|t| t.change == Change::Delivered)
            .map(|t| t.id)
            .collect();
        let applied = self.write_mutated(transitions).await?;
        if self.kind == Kind::DeliveredUncounted {
            let counted = delivered
                .iter()
                .filter(|id| !applied.skipped.contains(id))
                .count();
            self.uncounted.fetch_add(counted as u64, Ordering::SeqCst);
        }
        Ok(applied)
    }

    async fn write_mutated(&self, transitions: Vec<Transition>) -> Result<Applied> {
        let mut transitions = self.mutate(transitions).await?;
        if self.kind == Kind::UpdateRevivesRejected {
            for t in &mut transitions {
                let Change::Update(progress) = &t.change else {
                    continue;
                };
                let rejected = self
                    .inner
                    .get(t.id)
                    .await?
                    .is_some_and(|r| r.state == State::Rejected);
                if rejected && progress.state != State::Rejected {
                    // The rule refuses it; this store lets it through the only door it has.
                    let at = progress.next_attempt_at.unwrap_or(0);
                    t.change = Change::Requeue { at };
                    t.guard = Guard::Idle;
                }
            }
        }
        if self.kind == Kind::ApplyStopsAtSkip {
            let mut applied = Applied::default();
            for t in transitions {
                let id = t.id;
                let one = self.inner.apply(vec![t]).await?;
                if !one.skipped.is_empty() {
                    applied.skipped.push(id);
                    return Ok(applied);
                }
            }
            return Ok(applied);
        }
        self.inner.apply(transitions).await
    }

    async fn claim_with(&self, claim: Claim) -> Result<Vec<Record>> {
        match self.kind {
            Kind::CreatedAtIsClaimTime => {
                let mut claimed = self.inner.claim(claim).await?;
                for record in &mut claimed {
                    record.created_at = claim.now;
                }
                Ok(claimed)
            }
            Kind::ClaimsPastLease => {
                let expired = self.inner.expired(claim.now, usize::MAX).await?;
                let release = expired.iter().map(machine::release).collect();
                self.inner.apply(release).await?;
                self.inner.claim(claim).await
            }
            Kind::ClaimsByIdNotDeadline => {
                let all = self
                    .inner
                    .claim(Claim {
                        limit: usize::MAX,
                        ..claim
                    })
                    .await?;
                let mut all = all;
                all.sort_by_key(|r| r.id);
                let rest = all.split_off(claim.limit.min(all.len()));
                let release = rest.iter().map(machine::release).collect();
                self.inner.apply(release).await?;
                Ok(all)
            }
            Kind::DeadlinesInWholeSeconds => {
                let now = claim.now - claim.now % 1_000 + 999;
                self.inner.claim(Claim { now, ..claim }).await
            }
            Kind::TwoOfGroupInFlight | Kind::TwoOfGroupInBigClaims => {
                let mut claimed = self.inner.claim(claim).await?;
                if self.kind == Kind::TwoOfGroupInBigClaims && claim.limit <= 64 {
                    return Ok(claimed);
                }
                let waiting = self.all().await?;
                let behind = waiting.into_iter().find(|r| {
                    r.state.is_due_kind()
                        && r.group.is_some()
                        && r.next_attempt_at.is_some_and(|at| at <= claim.now)
                        && claimed.iter().any(|c| c.group == r.group && c.id != r.id)
                });
                if let Some(mut record) = behind {
                    if claimed.len() < claim.limit {
                        record.state = State::InFlight;
                        record.lease = Some(claim.lease);
                        claimed.push(record);
                    }
                }
                Ok(claimed)
            }
            Kind::ClaimsTwice => {
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
            Kind::DueQueryScans => {
                // What a table scan reads: every record, to find the due ones.
                let all = self.all().await?;
                let due = all.iter().any(|r| {
                    r.state.is_due_kind() && r.next_attempt_at.is_some_and(|at| at <= claim.now)
                });
                if due {
                    self.inner.claim(claim).await
                } else {
                    Ok(Vec::new())
                }
            }
            Kind::NullGroupIsAGroup => {
                let all = self.all().await?;
                let head = all
                    .iter()
                    .filter(|r| r.group.is_none() && r.state.holds_group())
                    .map(|r| r.id)
                    .min();
                let claimed = self.inner.claim(claim).await?;
                let (keep, back): (Vec<Record>, Vec<Record>) = claimed
                    .into_iter()
                    .partition(|r| r.group.is_some() || Some(r.id) == head);
                self.inner
                    .apply(back.iter().map(machine::release).collect())
                    .await?;
                Ok(keep)
            }
            Kind::ParkedHoldsEveryGroup => {
                let parked = self
                    .inner
                    .list(&ListQuery::new(1).state(State::NeedsAttention))
                    .await?;
                if parked.is_empty() {
                    self.inner.claim(claim).await
                } else {
                    Ok(Vec::new())
                }
            }
            _ => self.inner.claim(claim).await,
        }
    }
}

#[async_trait]
impl StoreLayer for Layer {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        match self.kind {
            Kind::TraceDropped => {
                let records = records
                    .into_iter()
                    .map(|r| NewRecord { trace: None, ..r })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::ReplacingKeepsTrace => {
                let traces: Vec<_> = records.iter().map(|r| r.trace.clone()).collect();
                let enqueued = self.inner.enqueue(records, now).await?;
                let mut first = self.first_trace.lock().unwrap();
                for (index, (id, trace)) in enqueued.ids.iter().zip(traces).enumerate() {
                    if !enqueued.replaced(index) {
                        first.insert(*id, trace);
                    }
                }
                drop(first);
                Ok(enqueued)
            }
            Kind::CapPartialBatch if records.len() > 1 => {
                match self.inner.enqueue(records.clone(), now).await {
                    Err(full @ outbox_core::Error::QueueFull { .. }) => {
                        // Writes what fits, one by one, then reports the refusal.
                        for record in records {
                            if self.inner.enqueue(vec![record], now).await.is_err() {
                                break;
                            }
                        }
                        Err(full)
                    }
                    other => other,
                }
            }
            Kind::NotBeforeIgnored => {
                let records = records
                    .into_iter()
                    .map(|r| NewRecord {
                        not_before: None,
                        ..r
                    })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::ReplacingDropsNotBefore => {
                // A write merges only into an undelivered record of its key: those lose
                // their not-before time here.
                let present = self.all().await?;
                let records = records
                    .into_iter()
                    .map(|mut r| {
                        let merges = r.replaces.as_ref().is_some_and(|key| {
                            present.iter().any(|p| p.replaces.as_ref() == Some(key))
                        });
                        if merges {
                            r.not_before = None;
                        }
                        r
                    })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::EnqueueNotAtomic => {
                let mut enqueued = Enqueued::default();
                for (index, record) in records.into_iter().enumerate() {
                    let one = self.inner.enqueue(vec![record], now).await?;
                    if one.replaced(0) {
                        enqueued.superseded.push(index);
                    }
                    enqueued.ids.extend(one.ids);
                }
                Ok(enqueued)
            }
            Kind::EmptyGroupIsNoGroup => {
                let records = records
                    .into_iter()
                    .map(|mut r| {
                        if r.group.as_deref() == Some("") {
                            r.group = None;
                        }
                        r
                    })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::VersionDroppedOnInsert => {
                // A write merges only into an undelivered record of its key: every other one
                // makes a new record, and loses its version here.
                let present = self.inner.list(&ListQuery::new(usize::MAX)).await?;
                let records = records
                    .into_iter()
                    .map(|mut r| {
                        let merges = r.replaces.as_ref().is_some_and(|key| {
                            present.iter().any(|p| p.replaces.as_ref() == Some(key))
                        });
                        if !merges {
                            r.expected_version = None;
                        }
                        r
                    })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::KeyTruncated => {
                let records = records
                    .into_iter()
                    .map(|mut r| {
                        r.key.truncate(outbox_core::key::MAX_LEN);
                        r
                    })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::NeverCoalesces | Kind::ExpectedVersionDropped => {
                let records = records
                    .into_iter()
                    .map(|mut r| {
                        if self.kind == Kind::NeverCoalesces {
                            r.replaces = None;
                        } else {
                            r.expected_version = None;
                        }
                        r
                    })
                    .collect();
                self.inner.enqueue(records, now).await
            }
            Kind::CoalescesIntoInFlight if records.iter().any(|r| r.replaces.is_some()) => {
                let mut enqueued = Enqueued::default();
                for (index, record) in records.into_iter().enumerate() {
                    let all = match record.replaces {
                        Some(_) => self.all().await?,
                        None => Vec::new(),
                    };
                    let latest = record.replaces.as_ref().and_then(|key| {
                        all.iter().rev().find(|r| r.replaces.as_ref() == Some(key))
                    });
                    match latest {
                        Some(r) if r.state == State::InFlight && r.group == record.group => {
                            enqueued.ids.push(r.id);
                            enqueued.superseded.push(index);
                        }
                        _ => {
                            let one = self.inner.enqueue(vec![record], now).await?;
                            if one.replaced(0) {
                                enqueued.superseded.push(index);
                            }
                            enqueued.ids.extend(one.ids);
                        }
                    }
                }
                Ok(enqueued)
            }
            _ => self.inner.enqueue(records, now).await,
        }
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        self.before_write().await?;
        Ok(self.shown(self.claim_with(claim).await?))
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        match self.kind {
            Kind::RenewNoop => Ok(()),
            Kind::RenewIgnoresToken => {
                for &id in ids {
                    if let Some(r) = self.inner.get(id).await? {
                        if let Some(held) = r.lease {
                            let lease = Lease {
                                token: held.token,
                                until: lease.until,
                            };
                            self.inner.renew(&[id], lease).await?;
                        }
                    }
                }
                Ok(())
            }
            _ => self.inner.renew(ids, lease).await,
        }
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.write(transitions).await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        if self.kind == Kind::RoundClaimsFirst {
            let claimed = match claim {
                Some(c) => self.claim_with(c).await?,
                None => Vec::new(),
            };
            let applied = self.write(outcomes).await?;
            return Ok(Round { applied, claimed });
        }
        let applied = self.write(outcomes).await?;
        let claimed = match claim {
            Some(c) => self.shown(self.claim_with(c).await?),
            None => Vec::new(),
        };
        Ok(Round { applied, claimed })
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        if self.kind == Kind::ExpiredIgnoresExpiry {
            let mut in_flight = self
                .inner
                .list(&ListQuery::new(usize::MAX).state(State::InFlight))
                .await?;
            in_flight.sort_by_key(|r| (r.lease.map(|l| l.until), r.id));
            in_flight.truncate(limit);
            return Ok(in_flight);
        }
        Ok(self.shown(self.inner.expired(now, limit).await?))
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        if self.kind == Kind::NotBeforeUnread {
            // Without the time, the rule sees a never-reported record due later: a wait.
            let mut found: Vec<Record> = self
                .shown(self.all().await?)
                .into_iter()
                .filter(|r| r.needs_rebase(now))
                .collect();
            found.truncate(limit);
            return Ok(found);
        }
        let mut found = self.inner.stepped_back(now, usize::MAX).await?;
        if self.kind == Kind::SteppedBackSkipsNeverAttempted {
            found.retain(|r| r.last_attempt_at.is_some());
        }
        if self.kind == Kind::SteppedBackOnlyNeverAttempted {
            found.retain(|r| r.last_attempt_at.is_none());
        }
        found.truncate(limit);
        Ok(found)
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        if let Some(old) = self.lagging() {
            return Ok(old.into_iter().find(|r| r.id == id));
        }
        let record = self.inner.get(id).await?;
        Ok(self.shown(record.into_iter().collect()).pop())
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        if let Some(old) = self.lagging() {
            return Ok(old
                .into_iter()
                .filter(|r| query.matches(r))
                .take(query.limit)
                .collect());
        }
        if self.kind == Kind::PageSkipsBoundary {
            if let Some(after) = query.after {
                let query = query.clone().after(RecordId(after.0 + 1));
                return self.inner.list(&query).await;
            }
        }
        Ok(self.shown(self.inner.list(query).await?))
    }

    async fn stats(&self) -> Result<Stats> {
        let mut stats = self.inner.stats().await?;
        match self.kind {
            Kind::NextDueCountsHeld => stats.next_due = StoreLayer::next_due(self).await?,
            Kind::HeldNotCounted => stats.held = 0,
            Kind::DeliveredUncounted => stats.delivered -= self.uncounted.load(Ordering::SeqCst),
            Kind::HaltNotInStats => stats.halt = None,
            Kind::HaltNotPersisted => stats.halt = self.halt.lock().unwrap().clone(),
            Kind::DeliveredCounterLostOnReopen => {
                stats.delivered -= self.delivered_base.load(Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(stats)
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        if self.kind == Kind::NextDueCountsHeld {
            let all = self.all().await?;
            return Ok(all
                .iter()
                .filter(|r| r.state.is_due_kind())
                .filter_map(|r| r.next_attempt_at)
                .min());
        }
        self.inner.next_due().await
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        if self.kind == Kind::HaltNotPersisted {
            return Ok(self.halt.lock().unwrap().clone());
        }
        self.inner.halt().await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        if self.kind == Kind::HaltNotPersisted {
            *self.halt.lock().unwrap() = halt;
            return Ok(());
        }
        self.inner.set_halt(halt).await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        match self.kind {
            Kind::HaltNotPersisted => Ok(Halt::clear_if_seen(&mut self.halt.lock().unwrap(), seen)),
            Kind::ClearHaltIgnoresSeen => {
                let found = self.inner.halt().await?;
                self.inner.set_halt(None).await?;
                Ok(found)
            }
            Kind::ClearHaltReadsThenClears => {
                let found = self.inner.halt().await?;
                // The other writers' turn between the read and the write.
                tokio::task::yield_now().await;
                if found.as_ref() == Some(seen) {
                    self.inner.set_halt(None).await?;
                }
                Ok(found)
            }
            _ => self.inner.clear_halt_if(seen).await,
        }
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        if self.kind == Kind::PruneIgnoresAge {
            return self.inner.prune(Millis::MAX).await;
        }
        self.inner.prune(older_than).await
    }
}

/// `LosesLastEnqueue`: the lost record leaves no trace a user could see.
#[derive(Debug)]
struct HidesLost {
    inner: Arc<MemoryStore>,
}

#[async_trait]
impl StoreLayer for HidesLost {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        let mut tombstones = self.inner.tombstones(after, usize::MAX).await?;
        tombstones.retain(|t| t.reason != LOST);
        tombstones.truncate(limit);
        Ok(tombstones)
    }

    async fn stats(&self) -> Result<Stats> {
        let mut stats = self.inner.stats().await?;
        let lost = self
            .inner
            .tombstones(None, usize::MAX)
            .await?
            .iter()
            .filter(|t| t.reason == LOST)
            .count() as u64;
        stats.discarded -= lost;
        Ok(stats)
    }
}

/// How `ReusesIds` numbers records: inner ids from `start` on are shown as `inner - shift`.
#[derive(Debug, Default)]
struct Shifts(Vec<(u64, u64)>);

impl Shifts {
    fn outer(&self, inner: RecordId) -> RecordId {
        let shift = self
            .0
            .iter()
            .rev()
            .find(|(start, _)| inner.0 >= *start)
            .map_or(0, |(_, shift)| *shift);
        RecordId(inner.0 - shift)
    }

    fn inner(&self, outer: RecordId, live: &BTreeSet<u64>) -> RecordId {
        // The newest record shown under this id wins, as a reused id would.
        for (start, shift) in self.0.iter().rev() {
            let candidate = outer.0 + shift;
            if candidate >= *start && live.contains(&candidate) {
                return RecordId(candidate);
            }
        }
        RecordId(outer.0 + self.0.last().map_or(0, |(_, s)| *s))
    }
}

/// `ReusesIds`: numbers records from `MAX(id) + 1` of the records present, as a table without
/// a persisted sequence does, so an emptied queue starts again from 1.
#[derive(Debug)]
struct ReusesIds {
    inner: Arc<MemoryStore>,
    ids: Arc<Mutex<Shifts>>,
}

impl ReusesIds {
    async fn live(&self) -> Result<BTreeSet<u64>> {
        let records = self.inner.list(&ListQuery::new(usize::MAX)).await?;
        let tombstones = self.inner.tombstones(None, usize::MAX).await?;
        Ok(records
            .iter()
            .map(|r| r.id.0)
            .chain(tombstones.iter().map(|t| t.id.0))
            .collect())
    }

    fn outer(&self, mut record: Record) -> Record {
        record.id = self.ids.lock().unwrap().outer(record.id);
        record
    }

    fn outers(&self, records: Vec<Record>) -> Vec<Record> {
        records.into_iter().map(|r| self.outer(r)).collect()
    }

    async fn to_inner(&self, id: RecordId) -> Result<RecordId> {
        let live = self.live().await?;
        Ok(self.ids.lock().unwrap().inner(id, &live))
    }

    async fn transitions(&self, transitions: Vec<Transition>) -> Result<Vec<Transition>> {
        let mut out = Vec::with_capacity(transitions.len());
        for mut t in transitions {
            t.id = self.to_inner(t.id).await?;
            out.push(t);
        }
        Ok(out)
    }

    fn applied(&self, applied: Applied) -> Applied {
        let ids = self.ids.lock().unwrap();
        Applied {
            skipped: applied.skipped.iter().map(|id| ids.outer(*id)).collect(),
        }
    }
}

#[async_trait]
impl StoreLayer for ReusesIds {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        let present = self.inner.list(&ListQuery::new(usize::MAX)).await?;
        let Enqueued { ids, superseded } = self.inner.enqueue(records, now).await?;
        // The first fresh id (a replaced record keeps the id it was given).
        let fresh = ids
            .iter()
            .enumerate()
            .find(|(index, _)| !superseded.contains(index));
        let Some((_, first)) = fresh else {
            return Ok(Enqueued {
                ids: ids
                    .iter()
                    .map(|id| self.ids.lock().unwrap().outer(*id))
                    .collect(),
                superseded,
            });
        };
        let mut shifts = self.ids.lock().unwrap();
        let max_present = present
            .iter()
            .map(|r| shifts.outer(r.id).0)
            .max()
            .unwrap_or(0);
        let shift = first.0 - (max_present + 1);
        if shifts.0.last().map_or(0, |(_, s)| *s) != shift {
            shifts.0.push((first.0, shift));
        }
        Ok(Enqueued {
            ids: ids.iter().map(|id| shifts.outer(*id)).collect(),
            superseded,
        })
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        Ok(self.outers(self.inner.claim(claim).await?))
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let mut inner_ids = Vec::with_capacity(ids.len());
        for id in ids {
            inner_ids.push(self.to_inner(*id).await?);
        }
        self.inner.renew(&inner_ids, lease).await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        let transitions = self.transitions(transitions).await?;
        Ok(self.applied(self.inner.apply(transitions).await?))
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        let outcomes = self.transitions(outcomes).await?;
        let round = self.inner.round(outcomes, claim).await?;
        Ok(Round {
            applied: self.applied(round.applied),
            claimed: self.outers(round.claimed),
        })
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        Ok(self.outers(self.inner.expired(now, limit).await?))
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        Ok(self.outers(self.inner.stepped_back(now, limit).await?))
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        let id = self.to_inner(id).await?;
        Ok(self.inner.get(id).await?.map(|r| self.outer(r)))
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let mut all = self.outers(
            self.inner
                .list(&ListQuery {
                    after: None,
                    limit: usize::MAX,
                    ..query.clone()
                })
                .await?,
        );
        all.sort_by_key(|r| r.id);
        Ok(all
            .into_iter()
            .filter(|r| query.after.is_none_or(|after| r.id > after))
            .take(query.limit)
            .collect())
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        let all = self.inner.tombstones(None, usize::MAX).await?;
        let ids = self.ids.lock().unwrap();
        let mut all: Vec<Tombstone> = all
            .into_iter()
            .map(|mut t| {
                t.id = ids.outer(t.id);
                t
            })
            .collect();
        all.sort_by_key(|t| t.id);
        Ok(all
            .into_iter()
            .filter(|t| after.is_none_or(|a| t.id > a))
            .take(limit)
            .collect())
    }
}
