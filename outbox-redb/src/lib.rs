#![doc = include_str!("../README.md")]
//!
//! ## Modules
//!
//! [`config`] (durability, limits, the redb settings), [`schema`] (tables, schema version,
//! migrations), [`store`] (the `Store` and how files are created and opened); private modules
//! hold the record layout (`codec`), the queue operations on the tables (`queue`), group commit
//! (`writer`) and the mapping of redb's errors into [`outbox_core::Error`] (`error`).
#![deny(missing_docs)]

mod codec;
pub mod config;
mod error;
mod pending;
mod queue;
pub mod schema;
pub mod store;
mod writer;

pub use config::{Durability, RedbConfig};
pub use pending::PendingEnqueue;
pub use schema::SCHEMA_VERSION;
pub use store::RedbStore;
