//! The `measure` program at tiny sizes: every workload on every store it runs on, with the
//! figures it prints read back and checked; the refusals of a workload a store does not have;
//! and the program itself, its output and its exit statuses. PostgreSQL runs only where a
//! server answers (a loud skip line otherwise), unless `OUTBOX_PG_REQUIRED=1`.

mod support;

use std::process::{Command, Output};

use outbox_benches::measure::{self, Args, MeasureError, Report};
use outbox_benches::pg::PgServer;
use outbox_benches::subject::StoreKind;
use support::runtime;
use tempfile::TempDir;

/// The figure `name` as the report prints it, on the first line that names it.
fn printed(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(name)?;
        if !rest.starts_with(char::is_whitespace) {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The figure `name` of the row labelled with `row`: present, a finite non-negative number;
/// and the printed report shows the figures it holds.
fn figure(report: &Report, row: &str, name: &str) -> f64 {
    let value = report
        .figure(row, name)
        .unwrap_or_else(|| panic!("no {name:?} in the row {row:?}:\n{report}"));
    assert!(
        value.is_finite() && value >= 0.0,
        "{name} = {value}\n{report}"
    );
    // The first printed line of that name shows the first figure of that name.
    let first = report
        .rows
        .iter()
        .flat_map(|r| &r.figures)
        .find(|f| f.name == name)
        .expect("the figure found above");
    let text = report.to_string();
    let shown = printed(&text, name).unwrap_or_else(|| panic!("{name:?} not printed:\n{text}"));
    let rounding = 0.5 * 10f64.powi(-(first.decimals as i32)) + 1e-9;
    assert!(
        (shown - first.value).abs() <= rounding,
        "{name}: printed {shown}, held {}",
        first.value
    );
    value
}

fn args(line: &str, dir: &TempDir) -> Args {
    let mut words: Vec<String> = line.split_whitespace().map(String::from).collect();
    words.extend(["--dir".into(), dir.path().display().to_string()]);
    Args::parse(words).unwrap_or_else(|err| panic!("{line}: {err}"))
}

/// Runs every workload the store has at tiny sizes and checks each figure it reports.
fn every_workload(store: StoreKind) -> Result<(), MeasureError> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runtime = runtime();
    let run = |line: &str| -> Result<Report, MeasureError> {
        let report = runtime.block_on(measure::run(&args(
            &format!("{line} --store {store}"),
            &dir,
        )))?;
        assert!(
            report
                .heading
                .starts_with(line.split(' ').next().unwrap_or_default()),
            "{report}"
        );
        assert!(report.heading.contains(store.name()), "{report}");
        Ok(report)
    };
    // The stores that count their write transactions.
    let counts_commits = matches!(store.name(), "sqlite" | "redb");

    let burst = run("burst --rounds 2")?;
    assert!(figure(&burst, "2 rounds of 64", "time per round") > 0.0);
    assert!(figure(&burst, "2 rounds of 64", "enqueue rate") > 0.0);
    if counts_commits {
        // 64 waiting producers share their commits: at least one per round, never one each.
        let commits = figure(&burst, "2 rounds", "commits per round");
        assert!((1.0..64.0).contains(&commits), "{burst}");
    } else {
        assert!(burst.figure("2 rounds", "commits per round").is_none());
        assert_eq!(burst.notes.len(), 1, "{burst}");
    }

    let rate = run("enqueue-rate --n 8")?;
    assert!(figure(&rate, "1 producer, 8 single-record", "enqueue rate") > 0.0);
    assert!(
        figure(
            &rate,
            "64 concurrent producers, 64 single-record",
            "enqueue rate"
        ) > 0.0
    );
    assert!(figure(&rate, "64 concurrent", "time") > 0.0);
    if counts_commits {
        // A lone producer commits alone every time.
        assert_eq!(figure(&rate, "1 producer", "transactions"), 8.0);
        assert!(figure(&rate, "64 concurrent", "enqueues per transaction") >= 1.0);
    }

    if store.name() == "memory" {
        let refused = Args::parse(["enqueue-vs-bare", "--store", "memory"].map(String::from));
        assert!(
            matches!(refused, Err(MeasureError::NotAvailable { .. })),
            "{refused:?}"
        );
    } else {
        let paired = run("enqueue-vs-bare --rounds 2 --n 3")?;
        let row = "median of 2 alternating rounds of 3";
        assert!(figure(&paired, row, "store, per enqueue") > 0.0);
        assert!(figure(&paired, row, "bare, per insert") > 0.0);
        let ratio = figure(&paired, row, "store/bare rate");
        let (low, high) = (
            figure(&paired, row, "lowest round ratio"),
            figure(&paired, row, "highest round ratio"),
        );
        assert!(0.0 < low && low <= ratio && ratio <= high, "{paired}");
    }

    let calls = run("call-overhead --n 20")?;
    assert!(figure(&calls, "20 calls", "store.get") > 0.0);
    assert!(figure(&calls, "20 calls", "empty spawn_blocking round trip") > 0.0);
    match store.name() {
        "memory" => assert!(calls
            .figure("20 calls", "the same read on the engine")
            .is_none()),
        _ => assert!(figure(&calls, "20 calls", "the same read on the engine") > 0.0),
    }

    let idle = run("idle-claims --n 20")?;
    assert!(figure(&idle, "20 idle claims", "per claim") > 0.0);
    if counts_commits {
        // A claim that finds nothing due commits nothing.
        assert_eq!(figure(&idle, "20 idle claims", "commits"), 0.0);
    }

    let drain = run("drain-rate --n 30")?;
    assert!(figure(&drain, "enqueue of 30 records", "enqueue rate") > 0.0);
    let runners: &[usize] = match store.name() {
        "sqlite" | "postgres" => &[1, 2, 4],
        _ => &[1],
    };
    let drains: Vec<_> = drain
        .rows
        .iter()
        .filter(|r| r.label.starts_with("drain of 30"))
        .collect();
    assert_eq!(drains.len(), runners.len(), "{drain}");
    for runners in runners {
        let row = format!("by {runners} runner");
        assert!(figure(&drain, &row, "drain rate") > 0.0, "{drain}");
        assert!(figure(&drain, &row, "time") > 0.0, "{drain}");
    }
    Ok(())
}

#[test]
fn every_workload_reports_its_figures_on_memory() -> Result<(), MeasureError> {
    every_workload(StoreKind::parse("memory").expect("a store"))
}

#[test]
fn every_workload_reports_its_figures_on_sqlite() -> Result<(), MeasureError> {
    every_workload(StoreKind::parse("sqlite").expect("a store"))
}

#[test]
fn every_workload_reports_its_figures_on_redb() -> Result<(), MeasureError> {
    every_workload(StoreKind::parse("redb").expect("a store"))
}

#[test]
fn every_workload_reports_its_figures_on_postgres() -> Result<(), MeasureError> {
    // Fails here when OUTBOX_PG_REQUIRED=1 and no server answers.
    if runtime().block_on(PgServer::find())?.is_none() {
        eprintln!(
            "\n*** SKIPPED: the measure program on postgres (no server; set OUTBOX_PG_URL, or \
             OUTBOX_PG_REQUIRED=1 to fail instead) ***\n"
        );
        return Ok(());
    }
    every_workload(StoreKind::Postgres)
}

#[test]
fn settings_a_store_does_not_have_are_refused_by_kind() {
    let parse = |line: &str| Args::parse(line.split_whitespace().map(String::from));
    for line in [
        "enqueue-vs-bare --store memory",
        "enqueue-vs-bare --store sqlite --durability off",
        "enqueue-vs-bare --store redb --durability two-phase",
        "burst --store postgres --durability off",
        "burst --store memory --durability full",
    ] {
        let refused = parse(line);
        assert!(
            matches!(refused, Err(MeasureError::NotAvailable { .. })),
            "{line}: {refused:?}"
        );
    }
    for line in [
        "",
        "burst",
        "teleport --store sqlite",
        "burst --store floppy",
        "burst --store sqlite --n 3",
        "idle-claims --store sqlite --rounds 3",
        "idle-claims --store sqlite --n 0",
        "enqueue-rate --store sqlite --durability fast",
        "enqueue-rate --store redb --durability full",
        "burst --store sqlite --verbose",
    ] {
        let refused = parse(line);
        assert!(
            matches!(refused, Err(MeasureError::Usage(_))),
            "{line}: {refused:?}"
        );
    }
    let accepted = parse("enqueue-vs-bare --store redb").expect("the bare engine's level");
    assert_eq!(
        accepted.level,
        measure::Level::Redb(measure::RedbLevel::Immediate)
    );
}

fn program(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_measure"))
        .args(args)
        .output()
        .expect("measure runs")
}

#[test]
fn the_program_prints_its_figures_and_says_what_it_refuses() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir_arg = dir.path().display().to_string();
    let output = program(&[
        "idle-claims",
        "--store",
        "sqlite",
        "--n",
        "5",
        "--dir",
        &dir_arg,
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.starts_with("idle-claims on sqlite (WAL, synchronous=FULL"),
        "{text}"
    );
    assert!(text.contains(&format!("directory {dir_arg}")), "{text}");
    assert!(
        printed(&text, "per claim").is_some_and(|us| us > 0.0),
        "{text}"
    );
    assert_eq!(printed(&text, "commits"), Some(0.0), "{text}");

    let refused = program(&["enqueue-vs-bare", "--store", "memory"]);
    assert_eq!(refused.status.code(), Some(3));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("enqueue-vs-bare is not available for memory"),
        "{said}"
    );
    assert!(refused.stdout.is_empty());

    let wrong = program(&["burst", "--store", "sqlite", "--n", "4"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("usage: measure"));

    let help = program(&["--help"]);
    assert!(help.status.success());
    let usage = String::from_utf8_lossy(&help.stdout);
    for name in measure::Workload::NAMES {
        assert!(usage.contains(name), "{usage}");
    }
}
