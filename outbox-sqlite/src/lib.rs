#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod apply;
mod common_errors;
pub mod config;
mod counters;
#[cfg(feature = "diesel")]
mod diesel;
mod enqueue;
mod error;
mod json;
mod ops;
mod pending;
#[cfg(test)]
mod plan_tests;
mod row;
pub mod schema;
#[cfg(feature = "sqlx")]
mod sqlx;
pub mod store;
mod unreadable;
mod worker;

pub use config::{Durability, SqliteConfig};
pub use pending::PendingEnqueue;
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::{EffectiveSettings, SqliteStore};
