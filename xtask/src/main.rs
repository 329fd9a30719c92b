//! Project automation, run as `cargo xtask <command>`.
//!
//! - `ci`: formatting check, clippy with warnings denied on all targets, the test suite
//!   with `INSTA_UPDATE=no` and `OUTBOX_PG_REQUIRED=1`, then `package` (the same commands
//!   `.ci/run` runs, without its crash soaks).
//! - `package`: packages every published crate, checks each archive's metadata, licenses and
//!   readme, and builds what a user gets from the archives outside the workspace: the README's
//!   app example, and the conformance suite on the memory store (see [`package`] and
//!   [`outside`]).
//! - `bench-report [--quick] [--no-run] [--rss-records N | --rss-from FILE]`: runs the
//!   benchmarks of `benches/` and writes `BENCHMARKS.md` (see [`bench_report`]).
//! - `soak --store sqlite|redb|postgres|journal --kills N [--seed S] [--release]`: a crash
//!   soak of one store, N workers killed with SIGKILL (see [`soak`]).
//! - `fleet-sim [options]`: simulates a fleet after an outage and writes `FLEET.md` and
//!   `fleet.svg` (see [`fleet`]).
//! - `bindings [--out DIR]`: builds `outbox-ffi` and generates its Kotlin and Swift sources
//!   (see [`bindings`]).

mod bench_report;
mod bindings;
mod fleet;
mod json;
mod outside;
mod package;
mod soak;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("package") => package::package(&args[1..]),
        Some("bench-report") => bench_report::bench_report(&args[1..]),
        Some("soak") => soak::soak(&args[1..]),
        Some("fleet-sim") => fleet::fleet_sim(&args[1..]),
        Some("bindings") => bindings::bindings(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask ci | package | bench-report [--quick] [--no-run] [--rss-records N | --rss-from FILE] | soak --store sqlite|redb|postgres|journal --kills N [--seed S] [--release] | fleet-sim [options] | bindings [--out DIR]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `cargo run` sets this variable for the xtask itself. A nested cargo inheriting
/// them would show build scripts that watch them (ring's watches `CARGO_MANIFEST_DIR` and the
/// `CARGO_PKG_*` ones) other values than a cargo started from the shell sees, and the two
/// would rebuild those crates, and all that depends on them, for each other every time.
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

/// Runs one command, failing with its description when it fails.
fn run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("$ {program} {}", args.join(" "));
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(name);
        }
    }
    let status = command
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .map_err(|e| format!("could not start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{program} {}` failed ({status})", args.join(" ")))
    }
}

fn ci() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(&cargo, &["fmt", "--all", "--", "--check"], &[])?;
    run(
        &cargo,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // As in `.ci/run`: snapshots are never rewritten, and the PostgreSQL tests may not skip.
    run(
        &cargo,
        &["test", "--workspace"],
        &[("INSTA_UPDATE", "no"), ("OUTBOX_PG_REQUIRED", "1")],
    )?;
    package::package(&[])
}
