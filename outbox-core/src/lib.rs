//! The core of `outbox`: a durable queue of pending writes, the policy that decides what each
//! failure means, and the runner that delivers them.
//!
//! This crate is storage-agnostic. Pick a backend crate (`outbox-sqlite`, `outbox-redb`,
//! `outbox-memory`) for the [`Store`]; the modules here read like the design:
//!
//! - [`record`] and [`state`]: one queued write and where it stands; [`key`]: its
//!   idempotency key, drawn from the operating system and checked at enqueue;
//! - [`outcome`] and [`http`]: what a delivery reported, and the HTTP classifier;
//! - [`policy`]: backoff, jitter, the ceiling and the crash-loop guard, as data;
//! - [`machine`]: the pure transition function;
//! - [`store`]: the trait a backend implements ([`mod@file`]: creating a one-file store whole;
//!   [`group_commit`]: batching a writer thread's writes), and [`layer`]: wrappers that change
//!   a few of its operations and forward the rest;
//! - [`clock`]: where `now` comes from;
//! - [`sink`], [`runner`] and [`handle`]: the user's delivery code, the task that runs the
//!   queue, and the [`Outbox`] handle around it.
//!
//! The runner opens a `tracing` span per round (`outbox.round`) and per delivery
//! (`outbox.deliver`: record id, group, the record's counters, then the outcome), at debug
//! level. Optional features, all off by default:
//!
//! - `metrics`: counters, gauges and histograms through the `metrics` facade, named in the
//!   table of the `metrics` module;
//! - `tower`: `tower::ServiceSink`, any `tower::Service<Record>` as the sink;
//! - `serde`: `NewRecord::json` and `Record::json`, JSON payloads with typed errors;
//! - `opentelemetry`: `NewRecord::new` takes the trace context of the current span (through
//!   `tracing-opentelemetry`), and each `outbox.deliver` span links to it (see `trace`).
//!
//! ```
//! use outbox_core::{http, machine, Change, Record, RecordId, RetryPolicy, State};
//!
//! // A 503 with `Retry-After: 30` spends one attempt and is retried 30 to 45 s later (the
//! // server's delay, spread by up to half of it).
//! let record = Record::fresh(RecordId(1), None, b"{}".to_vec(), "key-1".into(), 0);
//! let outcome = http::classify(503, Some("30"));
//! let mut rng = fastrand::Rng::with_seed(1);
//! let step = machine::on_outcome(&record, &outcome, &RetryPolicy::default(), 1_000, &mut rng);
//! let Change::Update(progress) = step.transition.change else { unreachable!() };
//! assert_eq!(progress.state, State::Retrying);
//! assert_eq!(progress.attempts, 1);
//! let at = progress.next_attempt_at.unwrap();
//! assert!((31_000..=46_000).contains(&at));
//! ```
#![deny(missing_docs)]

pub mod cap;
pub mod clock;
pub mod config;
pub mod error;
pub mod event;
pub mod file;
pub mod group_commit;
pub mod halt;
pub mod handle;
pub mod history;
pub mod http;
pub mod key;
pub mod layer;
pub mod link;
pub mod machine;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod outcome;
pub mod policy;
pub mod record;
pub mod runner;
pub mod seen;
pub mod sink;
pub mod state;
pub mod store;
#[cfg(feature = "tower")]
pub mod tower;
pub mod trace;
pub mod unreadable;

pub use cap::{Cap, CapLimit, Usage};
pub use clock::{Clock, ManualClock, SteppedClock, SystemClock, TokioClock};
pub use config::{RateLimit, RunnerConfig};
pub use error::{BoxError, Error, Result};
pub use event::Event;
pub use handle::{Notifier, Outbox, OutboxBuilder, Uncommitted};
pub use history::{Attempt, AttemptClass, History};
pub use layer::{Entered, Operation, StoreLayer};
pub use link::LinkState;
pub use machine::{Change, Guard, Step, Transition};
pub use outcome::{ConflictResolution, ConflictResolver, Outcome, ParkOnConflict, RetryAfter};
pub use policy::{Backoff, Ceiling, Jitter, RetryPolicy};
pub use record::{Lease, Millis, NewRecord, Progress, Record, RecordId, Tombstone, MAX_GROUP_LEN};
pub use seen::Seen;
pub use sink::{sink_fn, Sink, SinkFn};
pub use state::State;
pub use store::{
    Applied, Claim, Enqueued, ErrorCount, Halt, ListQuery, Round, Stats, Store, DEFAULT_MAX_PAYLOAD,
};
pub use trace::TraceContext;
pub use unreadable::Unreadable;

/// Re-exported so a `Sink` implementation needs no direct dependency on `async-trait`.
pub use async_trait::async_trait;
// Re-exported so users and backends name the same RNG type the policy takes.
pub use fastrand;
