//! Running the tools of `outbox-benches`: the criterion harness, and the release builds of
//! `drain-rss`, `paired-ratios`, `latency` and `graphile`, whose output lines the report is written from.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::results::LOCAL_STORES;
use super::sections::GROUPS;
use super::target_dir;
use crate::run;

/// Runs the criterion harness, writing its results under `criterion` and each row's
/// durability to `meta`.
pub(super) fn run_benches(
    cargo: &str,
    criterion: &Path,
    meta: &Path,
    quick: bool,
) -> Result<(), String> {
    // Rows of an earlier run with other sizes would mix into this one.
    for (group, _, _) in GROUPS {
        let dir = criterion.join(group);
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
        }
    }
    fs::create_dir_all(criterion).map_err(|e| format!("creating {}: {e}", criterion.display()))?;
    let meta_str = meta.to_string_lossy().into_owned();
    let criterion_str = criterion.to_string_lossy().into_owned();
    let mut envs = vec![
        ("OUTBOX_BENCH_META", meta_str.as_str()),
        ("CRITERION_HOME", criterion_str.as_str()),
    ];
    if quick {
        envs.push(("OUTBOX_BENCH_QUICK", "1"));
    }
    run(
        cargo,
        &["bench", "-p", "outbox-benches", "--bench", "outbox"],
        &envs,
    )
}

/// Builds one of the crate's tools in release mode, runs it with `args`, and returns its
/// output lines.
pub(super) fn run_tool(cargo: &str, tool: &str, args: &[&str]) -> Result<Vec<String>, String> {
    let exe = build(cargo, tool)?;
    let text = output(&exe, tool, args, tool)?;
    eprint!("{text}");
    Ok(text.lines().map(str::to_owned).collect())
}

/// `drain-rss` on each store of the process, `records` records each: one line per store.
pub(super) fn drain_rss(cargo: &str, records: usize) -> Result<Vec<String>, String> {
    let exe = build(cargo, "drain-rss")?;
    let mut lines = Vec::new();
    for store in LOCAL_STORES {
        let records = records.to_string();
        let what = format!("drain-rss --store {store}");
        let text = output(
            &exe,
            "drain-rss",
            &["--store", store, "--records", &records],
            &what,
        )?;
        eprintln!("{}", text.trim());
        lines.push(text.trim().to_owned());
    }
    Ok(lines)
}

/// Builds `tool` in release mode and returns where its executable is.
fn build(cargo: &str, tool: &str) -> Result<PathBuf, String> {
    run(
        cargo,
        &["build", "--release", "-p", "outbox-benches", "--bin", tool],
        &[],
    )?;
    Ok(target_dir().join("release").join(tool))
}

/// Runs the built `tool` with `args` and returns what it printed; `what` names the run in the
/// error when it fails.
fn output(exe: &Path, tool: &str, args: &[&str], what: &str) -> Result<String, String> {
    eprintln!("$ {tool} {}", args.join(" "));
    let output = Command::new(exe)
        .args(args)
        .output()
        .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
