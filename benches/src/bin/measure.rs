//! `measure`: one measurement of one store, printed as plain figures. The workloads are those
//! of the criterion harness (`outbox_benches::workload`, `bare`, `pg`), run once at the size
//! asked for, for a question the report does not answer: how many commits a burst takes, what
//! a call costs beyond its engine work, how fast PostgreSQL drains with more runners.
//!
//! ```text
//! cargo run --release -p outbox-benches --bin measure -- WORKLOAD --store STORE \
//!     [--n N] [--rounds R] [--durability LEVEL] [--dir DIR]
//! ```
//!
//! `STORE` is `memory`, `sqlite`, `redb` or `postgres`. Workloads:
//!
//! - `burst [--rounds R]` (default 100): rounds of 64 concurrent producers, each enqueuing one
//!   record and waiting until it is durable (group commit): time per round, enqueues per
//!   second, and commits per round where the store counts them (SQLite, redb).
//! - `enqueue-rate [--n N]` (default 5,000): N single-record enqueues by one producer, then as
//!   many by 64 concurrent producers (N/64 each, rounded up): time, enqueues per second, and
//!   the transactions they took where the store counts them.
//! - `enqueue-vs-bare [--rounds R] [--n N]` (default 5 rounds of 200): one producer, one record
//!   per enqueue, against the bare engine of `outbox_benches::bare` committing one row per
//!   transaction, in alternating rounds: median time per call on each side, and the median
//!   store/bare ratio of rates with its lowest and highest round. Both sides run at the bare
//!   engine's durability (SQLite `full`, redb `two-phase`, PostgreSQL the server's); the
//!   memory store has no engine to compare with.
//! - `call-overhead [--n N]` (default 10,000): N `get` calls of one record, N times the same
//!   read on the engine alone (a `SELECT` on a rusqlite connection, a redb read transaction, a
//!   prepared `SELECT` on a tokio-postgres connection), and N empty `spawn_blocking` round
//!   trips: what a store call costs beyond its engine work.
//! - `idle-claims [--n N]` (default 1,000): N claims of up to 32 records on a queue whose 100
//!   records are not due yet, as an idle runner makes them: time per claim, and the commits
//!   they made where the store counts them (none is expected).
//! - `drain-rate [--n N]` (default 4,000): the enqueue rate of N records in batches of 100, a
//!   third of them in 50 groups; then the end-to-end drain of N due records (the harness's
//!   drain: no groups, the default runner configuration, a sink that answers at once) by one
//!   runner, or on PostgreSQL by 1, 2 and 4 runners with a pool each, as on separate hosts.
//!
//! `--durability` chooses what a commit survives: SQLite `full` (the default), `normal` or
//! `off`; redb `immediate` (the default: one sync per commit), `two-phase` (two-phase commit
//! and quick repair: two syncs) or `none`. The memory store has no levels; PostgreSQL commits
//! at the server's `synchronous_commit`.
//!
//! `--dir` is where the store's file goes (default: the system's temporary directory, where
//! the bare engines put theirs). It should be on the disk you care about: on a tmpfs every
//! sync is free and the figures mean nothing.
//!
//! PostgreSQL is the server at `OUTBOX_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); every store and bare queue works in a schema of
//! its own, dropped at the end.
//!
//! Exit status: 0 after printing the figures, 1 when the measurement failed (no PostgreSQL
//! server among others), 2 for a command line that does not parse, 3 for a workload or level
//! the store does not have.
#![allow(clippy::print_stdout)] // A measuring tool: its output is the point.

use std::process::ExitCode;

use outbox_benches::measure::{self, usage, Args, MeasureError};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let args = match Args::parse(args) {
        Ok(args) => args,
        Err(err) => return fail(&err),
    };
    let Some(runtime) = outbox_benches::tool_runtime("measure") else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(measure::run(&args)) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => fail(&err),
    }
}

fn fail(err: &MeasureError) -> ExitCode {
    eprintln!("measure: {err}");
    match err {
        MeasureError::Usage(_) => {
            eprintln!("{}", usage());
            ExitCode::from(2)
        }
        MeasureError::NotAvailable { .. } => ExitCode::from(3),
        _ => ExitCode::FAILURE,
    }
}
