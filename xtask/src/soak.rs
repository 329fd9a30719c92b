//! `cargo xtask soak --store sqlite|redb|postgres|journal --kills N [--seed S] [--release]`: a
//! crash soak of one store.
//!
//! The soak is the testkit's (`outbox_testkit::crash::soak`), run by the `__outbox_testkit_soak`
//! test that `conformance!` generates in every backend's test binary: this command only runs
//! that test with `OUTBOX_TESTKIT_SOAK_KILLS=N`. Each of the N rounds starts a worker process
//! that enqueues and delivers on the store and kills it with SIGKILL at a random ledger line;
//! after each restart the store is checked against what the workers acknowledged. The test
//! prints `kills · acknowledged · delivered · duplicates · lost` and fails on any breach.

use std::process::Command;

/// Which test binary runs the soak of a store: the package and the test target holding the
/// `conformance!` call.
fn target(store: &str) -> Option<(&'static str, &'static str)> {
    Some(match store {
        "sqlite" => ("outbox-sqlite", "conformance"),
        "redb" => ("outbox-redb", "conformance"),
        "postgres" => ("outbox-postgres", "conformance"),
        // The testkit's own file-backed store: the soak without a production backend.
        "journal" => ("outbox-testkit", "journal_store"),
        _ => return None,
    })
}

const USAGE: &str =
    "usage: cargo xtask soak --store sqlite|redb|postgres|journal --kills N [--seed S] [--release]";

/// The parsed command line.
#[derive(Debug, PartialEq, Eq)]
struct Options {
    store: String,
    kills: u64,
    seed: Option<u64>,
    release: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut store = None;
    let mut kills = None;
    let mut seed = None;
    let mut release = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--store" => store = Some(value("--store")?),
            "--kills" => {
                let text = value("--kills")?;
                kills = Some(
                    text.parse()
                        .map_err(|e| format!("--kills {text:?}: {e}; {USAGE}"))?,
                );
            }
            "--seed" => {
                let text = value("--seed")?;
                seed = Some(
                    text.parse()
                        .map_err(|e| format!("--seed {text:?}: {e}; {USAGE}"))?,
                );
            }
            "--release" => release = true,
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    let store = store.ok_or_else(|| format!("--store is missing; {USAGE}"))?;
    if target(&store).is_none() {
        return Err(format!("no soak for store {store:?}; {USAGE}"));
    }
    let kills = kills.ok_or_else(|| format!("--kills is missing; {USAGE}"))?;
    Ok(Options {
        store,
        kills,
        seed,
        release,
    })
}

/// Runs the soak.
pub(crate) fn soak(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let (package, test) = target(&options.store).ok_or(USAGE)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command.args(["test", "-p", package, "--test", test]);
    if options.release {
        command.arg("--release");
    }
    command
        .args([
            "--",
            "__outbox_testkit_soak",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OUTBOX_TESTKIT_SOAK_KILLS", options.kills.to_string());
    if let Some(seed) = options.seed {
        command.env("OUTBOX_TESTKIT_SEED", seed.to_string());
    }
    if options.store == "postgres" {
        // A soak on a stand-in would prove nothing: PostgreSQL must answer.
        command.env("OUTBOX_PG_REQUIRED", "1");
    }
    eprintln!(
        "$ OUTBOX_TESTKIT_SOAK_KILLS={} cargo test -p {package} --test {test} -- __outbox_testkit_soak --nocapture",
        options.kills
    );
    let status = command
        .status()
        .map_err(|e| format!("could not start {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the soak of {} failed ({status})", options.store))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_command_line_is_read() {
        assert_eq!(
            parse(&args("--store redb --kills 300 --seed 7")),
            Ok(Options {
                store: "redb".into(),
                kills: 300,
                seed: Some(7),
                release: false
            })
        );
        assert!(parse(&args("--store mongo --kills 3")).is_err());
        assert!(parse(&args("--store sqlite")).is_err());
        assert!(parse(&args("--store sqlite --kills many")).is_err());
    }
}
