//! `graphile_worker` beside the PostgreSQL store: section 8 of the report.
//!
//! The peer is the Rust port of graphile-worker, a PostgreSQL job queue, at its fastest
//! settings for a backlog (a local queue fetching 1,000 jobs at a time, completions deleted in
//! batches). Both sides write 256-byte payloads to the server at `OUTBOX_PG_URL` (see
//! [`crate::pg`]), each in schemas of its own with random names, dropped at the end. The rows:
//!
//! - `enqueue-one`: one record or job at a time, each awaited until committed;
//! - `enqueue-64`: 64 producers at once, each adding one, in bursts;
//! - `drain-c1`, `drain-c4`, `drain-c32`: a backlog drained to a no-op task by one runner (one
//!   worker) with 1, 4 or 32 deliveries (jobs) in flight;
//! - `runners-1`, `runners-2`, `runners-4`: the outbox with that many runners sharing the
//!   queue, each with the default configuration, beside the bare `SKIP LOCKED` loop with as
//!   many connections;
//! - `scaling-4`: the four-runner drain over the one-runner drain, round by round.
//!
//! Every round runs each row once on both sides, the side going first alternating; a row's
//! ratio is the median of its rounds' ratios (see [`crate::paired`]). WAL bytes per drained
//! record come from the server's WAL insert position before and after each drain (see
//! [`crate::pg::wal_bytes`]).

mod compare;
mod peer;

pub use compare::{compare, Sizes};
pub use peer::Graphile;

/// Bytes of every payload on both sides: the outbox record's, and the JSON of the peer's job.
pub const PAYLOAD_BYTES: usize = 256;

/// The deliveries (jobs) in flight at once in the drain rows.
pub const CONCURRENCY: [usize; 3] = [1, 4, 32];

/// Producers adding at once in the `enqueue-64` row.
pub const PRODUCERS: usize = 64;
