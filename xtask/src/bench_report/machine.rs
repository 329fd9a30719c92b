//! The machine and the code a run measured, as the report's Machine section states them: read
//! at the measuring run and kept beside criterion's results, so `--no-run` states the same.

use std::fs;
use std::process::Command;

/// The machine the run was on.
pub(super) fn machine() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU".to_owned(), |(_, m)| m.trim().to_owned());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<f64>().ok())
        .map_or("unknown".to_owned(), |kb| {
            format!("{:.1} GiB", kb / 1024.0 / 1024.0)
        });
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rustc = command_line("rustc", &["--version"]);
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let commit = command_line("git", &["rev-parse", "--short", "HEAD"]);
    // Other engineers edit the same working tree: say whether the measured code was committed.
    let status = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no", "--"])
        .args([
            "outbox-core",
            "outbox-memory",
            "outbox-sqlite",
            "outbox-redb",
            "benches",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success());
    let tree = match status {
        Some(o) if o.stdout.is_empty() => "as committed",
        Some(_) => "with uncommitted changes to the measured crates",
        None => "(git status unavailable)",
    };
    format!(
        "- CPU: {cpu}, {cores} cores (nproc)\n- Memory: {memory}\n- Kernel: Linux {}\n- Compiler: {rustc}\n- Code: commit {commit}, {tree}\n- Run at: {date}\n",
        kernel.trim()
    )
}

/// What `program` prints, trimmed, or `unknown` when it prints nothing or does not run.
fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
