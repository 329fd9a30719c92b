#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod cap;
pub mod clock;
mod coalesce;
mod codec;
mod common_errors;
pub mod config;
#[cfg(any(feature = "diesel", feature = "diesel-async"))]
mod diesel;
mod engine;
mod enqueue;
mod error;
mod exec;
mod exists;
mod leased;
pub mod listen;
mod migrations;
mod ops;
mod pending;
mod plan;
pub mod schema;
mod seen;
mod sql;
#[cfg(feature = "sqlx")]
mod sqlx;
pub mod store;
mod tls;
mod unreadable;

pub use clock::ServerClock;
pub use config::{PgConfig, Tls};
pub use listen::{RunnerWakeups, Wakeups};
pub use pending::{Commit, PendingEnqueue};
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
