//! Bindings of `outbox` for mobile cores: one Rust outbox on a SQLite file, called from Kotlin,
//! Swift and Python through [uniffi](https://mozilla.github.io/uniffi-rs/) proc-macros.
//!
//! What is exported, by module:
//!
//! - [`mod@outbox`]: [`open_outbox`] (the app's own delivery code) and [`open_http_outbox`]
//!   (the built-in HTTP sink) return an [`Outbox`]: enqueue, stats, list, get, the manual
//!   verbs, the connectivity signal, events (a poll call and a listener) and shutdown;
//! - [`sink`]: the [`DeliverySink`] the app implements, reporting a [`Delivery`] that the
//!   core's HTTP classifier turns into an outcome;
//! - [`options`]: policy, runner and classification settings with the core's defaults
//!   ([`default_options`]);
//! - [`types`]: records, stats, tombstones and events as plain values;
//! - [`error`]: [`OutboxError`], raised as a typed exception in every language.
//!
//! No panic crosses the boundary: the calls run on the crate's own tokio runtime, a task that
//! panicked is an [`OutboxError::Internal`], and a sink callback that raises or panics is a
//! delivery without an answer (nothing spent, logged, retried).
//!
//! ```
//! let options = outbox_ffi::default_options();
//! assert_eq!(options.policy.max_attempts, 12);
//! ```
#![deny(missing_docs)]

pub mod error;
pub mod options;
pub mod outbox;
pub mod sink;
pub mod types;

#[cfg(feature = "bindgen")]
pub mod bindgen;

pub use error::OutboxError;
pub use options::{
    default_options, BackoffOptions, CeilingKind, ClassifierOptions, ConflictChoice,
    ForbiddenMeaning, JitterKind, OpenOptions, PolicyOptions, RunnerOptions,
};
pub use outbox::{open_http_outbox, open_outbox, EventListener, ListFilter, ListenerError, Outbox};
pub use sink::{classify_delivery, Delivery, DeliverySink, HttpOptions, SinkError};
pub use types::{
    Link, OutboxAttempt, OutboxEvent, OutboxRecord, OutboxStats, OutboxTombstone, RecordState,
    Write,
};

uniffi::setup_scaffolding!();
