//! The PostgreSQL [`Store`](outbox_core::Store) for `outbox`: when one machine is not enough,
//! any number of runners in any number of processes and hosts share one queue in the
//! PostgreSQL server you already operate.
//!
//! - [`PgStore::connect`] opens the outbox in the schema you name ([`PgConfig`]), creating it
//!   if missing and migrating it under an advisory lock, so processes that start together do
//!   not race. A schema from a newer build is refused with
//!   [`Error::SchemaTooNew`](outbox_core::Error::SchemaTooNew); a schema holding other tables
//!   with [`Error::NotAnOutbox`](outbox_core::Error::NotAnOutbox).
//! - Claims take records with `FOR UPDATE SKIP LOCKED`, so runners claim disjoint records
//!   without waiting on each other. Only pending or retrying *group heads* carry the
//!   `claimable` flag, kept in the same transaction as every change under a per-group advisory
//!   lock, so a group never has two records in flight, cluster-wide. A runner that dies leaves
//!   its leases to expire; another runner then takes its records over, counting one
//!   interruption each.
//! - [`PgStore::enqueue_in`] enqueues inside your own `tokio_postgres::Transaction`: the
//!   business row and its outbox record commit or roll back together.
//! - [`PgStore::listen`] returns [`Wakeups`]: every enqueue sends `NOTIFY` on commit, so
//!   runners wake without polling (the runner's slow safety poll stays as a backstop).
//! - Connection loss is an [`Error::Unavailable`](outbox_core::Error::Unavailable): the runner
//!   backs off and retries, and the pool replaces closed connections with fresh ones. Nothing
//!   is lost: a record whose report did not reach the server stays in flight until its lease
//!   expires and is then delivered again (with the same idempotency key).
//!
//! # Why tokio-postgres and deadpool-postgres
//! The store needs a handful of hand-written statements (`SKIP LOCKED`, advisory locks,
//! `LISTEN`) and the caller's own transaction type. `tokio-postgres` is the driver underneath
//! most of the ecosystem; it pipelines, speaks `LISTEN`/`NOTIFY` directly and compiles in a
//! fraction of sqlx's time (no macros, no offline query cache). `deadpool-postgres` adds a
//! small pool with per-connection statement caching and recycling of closed connections.
//!
//! # Durability
//! Every call returns after PostgreSQL committed it, at the server's `synchronous_commit`
//! setting (by default: flushed to the write-ahead log).
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox_core::Result<()> {
//! use std::sync::Arc;
//! use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
//! use outbox_postgres::{PgConfig, PgStore};
//!
//! let store = PgStore::connect(PgConfig::new("postgres://postgres@127.0.0.1/test", "orders_outbox")).await?;
//! let wakeups = store.listen().await?;
//! let sink = sink_fn(|record: Record| async move { Outcome::Delivered });
//! let outbox = Outbox::builder(Arc::new(store), sink).start().await?;
//! outbox.enqueue(NewRecord::new(b"{}".to_vec()).in_group("order-7")).await?;
//! loop {
//!     // Enqueues from every other process wake this runner too.
//!     wakeups.notified().await;
//!     outbox.notify();
//! }
//! # }
//! ```
#![deny(missing_docs)]

mod codec;
pub mod config;
mod error;
pub mod listen;
pub mod schema;
mod sql;
pub mod store;

pub use config::PgConfig;
pub use listen::Wakeups;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
