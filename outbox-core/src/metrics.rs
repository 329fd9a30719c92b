//! Counters, gauges and histograms through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`, off by default).
//!
//! The outbox records into whatever recorder the application installed (a Prometheus
//! exporter, StatsD, a test's debugging recorder); without one, recording costs next to
//! nothing. Counters are counted where the facts are: the handle's and the runner's events
//! (one place, as they are sent), and each delivery as it ends. Gauges are read from
//! [`Store::stats`](crate::Store::stats) by the runner: when it goes idle, at most once a
//! second, and at least every ten seconds while it stays busy, so their cost is bounded
//! whatever the load.
//!
//! | name | kind | labels | what it counts or shows |
//! |---|---|---|---|
//! | `outbox_enqueued_total` | counter | | records enqueued through the handle |
//! | `outbox_attempts_total` | counter | `outcome` | deliveries that ended, by what the sink reported: `delivered`, `transient`, `no_answer`, `rejected`, `conflict`, `halt` (before a conflict resolver), or `panicked`, `abandoned` (aborted at shutdown) |
//! | `outbox_delivered_total` | counter | | records delivered and recorded so |
//! | `outbox_retries_total` | counter | `spent` (`true`, `false`) | records scheduled again after a failure, and whether it spent an attempt |
//! | `outbox_rejected_total` | counter | | records the server rejected for good |
//! | `outbox_parked_total` | counter | | records parked for a person (budget exhausted, crash loop, conflict) |
//! | `outbox_discarded_total` | counter | | records discarded by a person |
//! | `outbox_requeued_total` | counter | | rejected records re-admitted |
//! | `outbox_halts_total` | counter | | halts: a refused credential or a rejection storm |
//! | `outbox_records` | gauge | `state` (`pending`, `retrying`, `in_flight`, `needs_attention`, `rejected`, `discarded`) | records per state (`discarded`: tombstones not yet pruned) |
//! | `outbox_held_back` | gauge | | records waiting behind a needs-attention record of their group |
//! | `outbox_oldest_undelivered_age_seconds` | gauge | | age of the oldest record still owed a delivery; 0 when there is none |
//! | `outbox_link_up` | gauge | | 1 while the link is up, 0 while it is down |
//! | `outbox_halted` | gauge | | 1 while a halt holds the runner, 0 otherwise |
//! | `outbox_delivery_duration_seconds` | histogram | `outcome` | how long the sink took, per delivery |
//! | `outbox_enqueue_to_delivery_seconds` | histogram | | from enqueue to the server's acceptance, per delivered record |
//!
//! The names carry no label telling outboxes apart: a process running several adds one with
//! its exporter's global labels, or runs each in its own recorder scope.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox_core::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use outbox_core::{metrics::ATTEMPTS, sink_fn, NewRecord, Outbox, Outcome, Record};
//!
//! // Install a recorder first (e.g. `metrics_exporter_prometheus::PrometheusBuilder`);
//! // the names are constants of this module.
//! assert_eq!(ATTEMPTS, "outbox_attempts_total");
//! let sink = sink_fn(|_: Record| async { Outcome::Delivered });
//! let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?;
//! outbox.enqueue(NewRecord::new(b"{}".to_vec())).await?;
//! outbox.flush(Duration::from_secs(5)).await?;
//! # outbox.shutdown(Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::event::Event;
use crate::outcome::Outcome;
use crate::record::Millis;
use crate::runner::scheduler::Gauges;
use ::metrics::Unit;
use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

/// Counter: records enqueued through the handle.
pub const ENQUEUED: &str = "outbox_enqueued_total";
/// Counter: writes merged into an earlier waiting write of their coalescing key.
pub const SUPERSEDED: &str = "outbox_superseded_total";
/// Counter: deliveries that ended, labelled `outcome`.
pub const ATTEMPTS: &str = "outbox_attempts_total";
/// Counter: records delivered.
pub const DELIVERED: &str = "outbox_delivered_total";
/// Counter: records scheduled again, labelled `spent`.
pub const RETRIES: &str = "outbox_retries_total";
/// Counter: records rejected for good.
pub const REJECTED: &str = "outbox_rejected_total";
/// Counter: records parked for a person.
pub const PARKED: &str = "outbox_parked_total";
/// Counter: records discarded.
pub const DISCARDED: &str = "outbox_discarded_total";
/// Counter: rejected records re-admitted.
pub const REQUEUED: &str = "outbox_requeued_total";
/// Counter: halts.
pub const HALTS: &str = "outbox_halts_total";
/// Gauge: records per state, labelled `state`.
pub const RECORDS: &str = "outbox_records";
/// Gauge: records held back behind a needs-attention record of their group.
pub const HELD_BACK: &str = "outbox_held_back";
/// Gauge: age of the oldest undelivered record, in seconds.
pub const OLDEST_AGE: &str = "outbox_oldest_undelivered_age_seconds";
/// Gauge: 1 while the link is up.
pub const LINK_UP: &str = "outbox_link_up";
/// Gauge: 1 while halted.
pub const HALTED: &str = "outbox_halted";
/// Histogram: seconds the sink took, labelled `outcome`.
pub const DELIVERY_DURATION: &str = "outbox_delivery_duration_seconds";
/// Histogram: seconds from enqueue to delivery.
pub const ENQUEUE_TO_DELIVERY: &str = "outbox_enqueue_to_delivery_seconds";

/// Describes the metrics to the recorder and sets the gauges known at start.
pub(crate) fn started(halted: bool) {
    describe_counter!(
        ENQUEUED,
        Unit::Count,
        "Records enqueued through the handle."
    );
    describe_counter!(
        SUPERSEDED,
        Unit::Count,
        "Writes merged into an earlier waiting write of their coalescing key."
    );
    describe_counter!(
        ATTEMPTS,
        Unit::Count,
        "Deliveries that ended, by what the sink reported."
    );
    describe_counter!(DELIVERED, Unit::Count, "Records delivered.");
    describe_counter!(
        RETRIES,
        Unit::Count,
        "Records scheduled again after a failure."
    );
    describe_counter!(
        REJECTED,
        Unit::Count,
        "Records the server rejected for good."
    );
    describe_counter!(PARKED, Unit::Count, "Records parked for a person.");
    describe_counter!(DISCARDED, Unit::Count, "Records discarded by a person.");
    describe_counter!(REQUEUED, Unit::Count, "Rejected records re-admitted.");
    describe_counter!(HALTS, Unit::Count, "Halts of the runner.");
    describe_gauge!(RECORDS, Unit::Count, "Records per state.");
    describe_gauge!(
        HELD_BACK,
        Unit::Count,
        "Records waiting behind a needs-attention record of their group."
    );
    describe_gauge!(
        OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest record still owed a delivery."
    );
    describe_gauge!(LINK_UP, "1 while the link is up, 0 while it is down.");
    describe_gauge!(HALTED, "1 while a halt holds the runner.");
    describe_histogram!(
        DELIVERY_DURATION,
        Unit::Seconds,
        "How long the sink took per delivery."
    );
    describe_histogram!(
        ENQUEUE_TO_DELIVERY,
        Unit::Seconds,
        "From enqueue to the server's acceptance."
    );
    gauge!(LINK_UP).set(1.0);
    gauge!(HALTED).set(flag(halted));
}

/// Counts an event; called once per event, as it is sent.
pub(crate) fn event(event: &Event) {
    match event {
        Event::Enqueued { .. } => counter!(ENQUEUED).increment(1),
        Event::Superseded { .. } => counter!(SUPERSEDED).increment(1),
        Event::Delivered { .. } => counter!(DELIVERED).increment(1),
        Event::Retrying { spent, .. } => {
            counter!(RETRIES, "spent" => if *spent { "true" } else { "false" }).increment(1);
        }
        Event::Rejected { .. } => counter!(REJECTED).increment(1),
        Event::Parked { .. } => counter!(PARKED).increment(1),
        Event::Discarded { .. } => counter!(DISCARDED).increment(1),
        Event::Requeued { .. } => counter!(REQUEUED).increment(1),
        Event::Halted { .. } => {
            counter!(HALTS).increment(1);
            gauge!(HALTED).set(1.0);
        }
        Event::Resumed => gauge!(HALTED).set(0.0),
        Event::StillHalted { .. } => gauge!(HALTED).set(1.0),
        Event::LinkDown { .. } => gauge!(LINK_UP).set(0.0),
        Event::LinkUp { .. } => gauge!(LINK_UP).set(1.0),
        // An unreadable row is said once per process, so a counter of it would count
        // processes, not rows: the event and its warning line are the report.
        Event::Attempted { .. } | Event::Unreadable { .. } => {}
    }
}

/// A delivery ended with what the sink reported, after `took`.
pub(crate) fn attempt(outcome: &Outcome, took: Duration) {
    let class = outcome.class();
    counter!(ATTEMPTS, "outcome" => class).increment(1);
    histogram!(DELIVERY_DURATION, "outcome" => class).record(took.as_secs_f64());
}

/// A delivery ended without a report: `panicked` or `abandoned`.
pub(crate) fn attempt_ended(class: &'static str) {
    counter!(ATTEMPTS, "outcome" => class).increment(1);
}

/// A record was accepted `age_ms` after it was enqueued.
pub(crate) fn delivered_after(age_ms: Millis) {
    histogram!(ENQUEUE_TO_DELIVERY).record(Duration::from_millis(age_ms).as_secs_f64());
}

/// Sets the gauges from one reading the scheduler asked for.
pub(crate) fn set_gauges(reading: &Gauges) {
    let Gauges {
        stats,
        link_up,
        halted,
        now,
    } = reading;
    let states = [
        ("pending", stats.pending),
        ("retrying", stats.retrying),
        ("in_flight", stats.in_flight),
        ("needs_attention", stats.needs_attention),
        ("rejected", stats.rejected),
        ("discarded", stats.discarded),
    ];
    for (state, count) in states {
        gauge!(RECORDS, "state" => state).set(count as f64);
    }
    gauge!(HELD_BACK).set(stats.held as f64);
    let age = stats
        .oldest_created_at
        .map_or(0, |at| now.saturating_sub(at));
    gauge!(OLDEST_AGE).set(Duration::from_millis(age).as_secs_f64());
    gauge!(LINK_UP).set(flag(*link_up));
    gauge!(HALTED).set(flag(*halted));
}

fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}
