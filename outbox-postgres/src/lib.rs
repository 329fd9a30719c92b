#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod clock;
mod coalesce;
mod codec;
pub mod config;
#[cfg(any(feature = "diesel", feature = "diesel-async"))]
mod diesel;
mod engine;
mod enqueue;
mod error;
pub mod listen;
mod ops;
mod pending;
mod plan;
pub mod schema;
mod sql;
#[cfg(feature = "sqlx")]
mod sqlx;
pub mod store;
mod tls;

pub use clock::ServerClock;
pub use config::{PgConfig, Tls};
pub use listen::{RunnerWakeups, Wakeups};
pub use pending::{Commit, PendingEnqueue};
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
