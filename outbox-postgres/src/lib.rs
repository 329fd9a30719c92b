#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod apply;
mod codec;
pub mod config;
mod engine;
mod error;
pub mod listen;
pub mod schema;
mod sql;
pub mod store;

pub use config::PgConfig;
pub use listen::Wakeups;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
