//! `graphile`: the PostgreSQL store beside `graphile_worker` (see `outbox_benches::graphile`),
//! one line per row, `key=value` fields tab-separated: `row peer records ours_rate peer_rate
//! ratio low high rounds`, and `ours_wal peer_wal` (WAL bytes per record) on the drain rows.
//! The ratio is ours over the peer's (the bare loop's on the `runners-*` rows, the one-runner
//! drain's on `scaling-4`).
//!
//! ```text
//! graphile [--quick] [--records N] [--rounds R]   # default 10,000 records, 3 rounds
//! ```
//!
//! Without a PostgreSQL server it prints a `SKIPPED` line on stderr and nothing else, unless
//! `OUTBOX_PG_REQUIRED=1`.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use outbox_benches::graphile::{compare, Sizes};
use outbox_benches::pg::PgServer;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let quick = args.iter().any(|a| a == "--quick");
    let sizes = Sizes {
        records: value("--records").unwrap_or(if quick { 500 } else { 10_000 }),
        rounds: value("--rounds").unwrap_or(if quick { 1 } else { 3 }),
    };
    let Some(runtime) = outbox_benches::tool_runtime("graphile") else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        match PgServer::find().await? {
            Some(server) => compare(&server, sizes).await.map(Some),
            None => Ok(None),
        }
    });
    match result {
        Ok(lines) => {
            for line in lines.unwrap_or_default() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("graphile: {err}");
            ExitCode::FAILURE
        }
    }
}
