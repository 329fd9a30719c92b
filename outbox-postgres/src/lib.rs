#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod clock;
mod coalesce;
mod codec;
mod common_errors;
pub mod config;
mod engine;
mod error;
mod exists;
pub mod listen;
mod ops;
mod pending;
mod plan;
pub mod schema;
mod seen;
mod sql;
pub mod store;
mod tls;
mod unreadable;

pub use clock::ServerClock;
pub use config::{PgConfig, Tls};
pub use listen::{RunnerWakeups, Wakeups};
pub use pending::PendingEnqueue;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
