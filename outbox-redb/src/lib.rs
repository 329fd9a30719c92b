//! A pure-Rust embedded [`Store`](outbox_core::Store) for `outbox` on one
//! [redb](https://docs.rs/redb) file: no C in the build.
//!
//! - [`RedbStore::create`] makes a new outbox file, [`RedbStore::open`] opens an existing one
//!   (migrating it from an earlier schema version); they are distinct on purpose, so a typo in a
//!   path never silently starts an empty queue.
//! - Enqueue returns once the records are durable at the configured [`Durability`]
//!   (default: synced to the disk on commit). Concurrent enqueues share one commit (group
//!   commit on a dedicated writer thread); reads run on tokio's blocking pool.
//! - [`RedbStore::enqueue_in`] enqueues inside the caller's own redb `WriteTransaction`, so a
//!   business write and its outbox record commit together.
//! - "What is due" is a range scan of an index ordered by `(next_attempt_at, id)` that holds only
//!   claimable records, so claiming costs the same however many records wait for later.
//!
//! redb lets one process at a time open a file for writing, so the store is *not shared*
//! between processes; in exchange, every in-flight record found at open belongs to a dead
//! process and is recovered at once.
//!
//! Modules: [`config`] (durability, limits, the redb settings chosen and why), [`schema`]
//! (tables, schema version, migrations), [`store`] (the `Store`), and private modules for the
//! record layout (`codec`), the queue operations (`queue`), group commit (`writer`) and the
//! mapping of redb errors into [`outbox_core::Error`] (`error`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox_core::Result<()> {
//! use outbox_core::{Claim, Lease, NewRecord, Store};
//! use outbox_redb::{RedbConfig, RedbStore};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = RedbStore::create(dir.path().join("outbox.redb"), RedbConfig::default()).await?;
//! let ids = store.enqueue(vec![NewRecord::new(b"hello".to_vec())], 1_000).await?;
//! let lease = Lease { token: 1, until: 31_000 };
//! let claimed = store.claim(Claim { now: 1_000, limit: 10, lease }).await?;
//! assert_eq!(claimed[0].id, ids[0]);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod codec;
pub mod config;
mod error;
mod queue;
pub mod schema;
pub mod store;
mod writer;

pub use config::{Durability, RedbConfig};
pub use schema::SCHEMA_VERSION;
pub use store::RedbStore;
