//! Benchmarks of every `outbox` store, each next to the bare engine doing the same durable
//! work, so that every figure comes with a ratio measured in the same run.
//!
//! The workloads live here, in the library, so the criterion harness (`benches/outbox.rs`),
//! the smoke tests and the peak-memory tool (`drain-rss`) all run the same code:
//!
//! - [`subject`]: the stores under test (memory, SQLite, redb, PostgreSQL), the one list every
//!   harness and tool takes its stores from, each opened at its default durability;
//! - [`bare`]: rusqlite, redb and tokio-postgres driven directly, with the same durability
//!   settings;
//! - [`pg`]: the PostgreSQL server, a schema per run, and the drain with 1, 2 and 4 runners;
//! - [`measure`]: the one-shot measurements of the `measure` program, one workload on one
//!   store named on its command line;
//! - [`workload`]: enqueue (one at a time, concurrent producers, batches), the end-to-end
//!   drain, and "what is due" over a backlog of records that are not yet due;
//! - [`latency`]: one write at a time on an idle queue, `enqueue` and enqueue-to-sink
//!   against the bare engine's one-row commit;
//! - [`paired`]: store and bare engine in alternating blocks, for ratios that survive a noisy
//!   disk;
//! - [`plan`]: the sizes of a full run, a quick run and a smoke run;
//! - [`probe`]: a store wrapper counting the commits a drain makes;
//! - [`rss`]: the resident-memory figures the peak-memory tool reports;
//! - [`usage`]: CPU time and context switches of the process (`getrusage`), per record.
//!
//! Run everything and write `BENCHMARKS.md` with `cargo xtask bench-report` (add `--quick` for a
//! smoke run of a minute or two).
//!
//! ```
//! # fn main() -> outbox_core::Result<()> {
//! use outbox_benches::{subject::StoreKind, workload};
//!
//! let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
//! runtime.block_on(async {
//!     let subject = StoreKind::Memory.open().await?;
//!     let drained = workload::drain(&subject.store, 100).await?;
//!     assert_eq!(drained.records, 100);
//!     Ok(())
//! })
//! # }
//! ```
#![deny(missing_docs)]

pub mod bare;
mod error;
pub mod graphile;
pub mod latency;
pub mod measure;
pub mod paired;
pub mod pg;
pub mod plan;
pub mod probe;
pub mod rss;
pub mod subject;
pub mod usage;
pub mod workload;

/// The runtime the measuring programs (`drain-rss`, `latency`, `measure`) run on: two worker
/// threads, as on the two-core machines the figures come from. On failure it prints why,
/// prefixed with the program's name.
///
/// ```
/// let runtime = outbox_benches::tool_runtime("doc").expect("a runtime");
/// assert_eq!(runtime.block_on(async { 1 + 1 }), 2);
/// ```
pub fn tool_runtime(program: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(err) => {
            eprintln!("{program}: no tokio runtime: {err}");
            None
        }
    }
}

/// The payload every benchmark writes: 128 bytes, the size of a small JSON API write.
pub const PAYLOAD: [u8; 128] = [b'x'; 128];

/// A deadline far in the future (year 2100 in Unix milliseconds): records due then are the
/// backlog that "what is due" must not pay for.
pub const FAR: u64 = 4_102_444_800_000;

/// The `now` at which the due query runs: before every [`FAR`] deadline.
pub const EARLY: u64 = 1_000;
