//! `drain-rss`: the peak resident memory of a runner draining a large backlog.
//!
//! ```text
//! drain-rss --store sqlite --records 1000000
//! ```
//!
//! A persistent store is filled by a child process (this program again, `fill`), so the
//! memory the fill used is not counted; the parent then opens the file, resets its peak
//! (`/proc/self/clear_refs`), starts a runner with the default configuration and a no-op sink,
//! waits for an empty queue and prints one line of `key=value` fields, tab-separated:
//! `store records baseline_mib peak_mib growth_mib drain_s rate peak_reset claims applies
//! commits_per_1000` (write calls to the store per 1,000 records delivered), then what the
//! drain cost the whole process per record (`getrusage`): `cpu_us` (user and system), `sys_us`
//! (the kernel's share) and `switches` (context switches, voluntary and involuntary). For
//! SQLite and redb the same process then drains as many records from the bare engine (claim
//! 100 and delete them, two durable transactions per 100) and adds `bare_cpu_us`,
//! `bare_sys_us`, `bare_switches` and `bare_s`: the yardstick measured in the same run. The
//! memory store holds its backlog in the process, so it is filled in-process and its baseline
//! includes it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use outbox_benches::bare::BareKind;
use outbox_benches::probe::Counting;
use outbox_benches::rss::{mib, reset_peak, Rss};
use outbox_benches::subject::StoreKind;
use outbox_benches::usage::Usage;
use outbox_benches::workload;
use outbox_core::clock::system_now;
use outbox_core::{Error, Result, Store};

struct Args {
    fill_only: bool,
    store: StoreKind,
    records: usize,
    dir: Option<PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> std::result::Result<Args, String> {
    let mut parsed = Args {
        fill_only: false,
        store: StoreKind::Sqlite,
        records: 1_000_000,
        dir: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "fill" => parsed.fill_only = true,
            "--store" => {
                let name = args.next().unwrap_or_default();
                // A server's memory is not this process's: PostgreSQL has no line here.
                parsed.store = StoreKind::local()
                    .find(|k| k.name() == name)
                    .ok_or_else(|| format!("unknown store {name:?}"))?;
            }
            "--records" => {
                let n = args.next().unwrap_or_default();
                parsed.records = n
                    .parse()
                    .map_err(|_| format!("--records takes a count, not {n:?}"))?;
            }
            "--dir" => parsed.dir = args.next().map(PathBuf::from),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!(
                "drain-rss: {message}\nusage: drain-rss --store {} --records N",
                StoreKind::names(StoreKind::local(), "|")
            );
            return ExitCode::from(2);
        }
    };
    let Some(runtime) = outbox_benches::tool_runtime("drain-rss") else {
        return ExitCode::FAILURE;
    };
    let result = match (&args.dir, args.fill_only) {
        (Some(dir), true) => runtime.block_on(fill(args.store, dir, args.records)),
        (None, true) => Err(Error::InvalidConfig("fill needs --dir".into())),
        _ => runtime
            .block_on(measure(args.store, args.records))
            .and_then(|line| writeln!(std::io::stdout().lock(), "{line}").map_err(Error::backend)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("drain-rss: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The child's part: a new store file in `dir` holding `records` due records.
async fn fill(store: StoreKind, dir: &Path, records: usize) -> Result<()> {
    let tmp = tempfile::TempDir::new_in(dir).map_err(Error::backend)?;
    let path = tmp.keep();
    let opened = store.create_in(&path).await?;
    workload::fill(&opened, records, system_now()).await?;
    drop(opened);
    // Tell the parent which directory holds the file.
    writeln!(std::io::stdout().lock(), "{}", path.display()).map_err(Error::backend)
}

async fn measure(store: StoreKind, records: usize) -> Result<String> {
    let parent = tempfile::tempdir().map_err(Error::backend)?;
    let opened = if store.persistent() {
        let exe = std::env::current_exe().map_err(Error::backend)?;
        let output = Command::new(exe)
            .arg("fill")
            .args(["--store", store.name()])
            .args(["--records", &records.to_string()])
            .arg("--dir")
            .arg(parent.path())
            .output()
            .map_err(Error::backend)?;
        if !output.status.success() {
            return Err(Error::Backend {
                detail: format!(
                    "the fill process failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                ),
                source: None,
            });
        }
        let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        store.reopen_in(Path::new(&dir)).await?
    } else {
        let opened = store.create_in(parent.path()).await?;
        workload::fill(&opened, records, system_now()).await?;
        opened
    };
    let counting = Arc::new(Counting::new(opened));
    let opened: Arc<dyn Store> = counting.clone();
    let peak_reset = reset_peak();
    let baseline = Rss::read()?;
    let used_before = Usage::read()?;
    let drained = workload::drain_backlog(&opened, records as u64).await?;
    let used = Usage::read()?
        .since(used_before)
        .per_record(drained.records);
    let after = Rss::read()?;
    drop(opened);
    let calls = counting.calls();
    let baseline_kib = if peak_reset {
        baseline.current_kib
    } else {
        baseline.peak_kib
    };
    let bare = match store.bare() {
        Some(bare) => bare_drain(bare, records)?,
        None => String::new(),
    };
    Ok(format!(
        "store={}\trecords={}\tbaseline_mib={:.1}\tpeak_mib={:.1}\tgrowth_mib={:.1}\tdrain_s={:.2}\trate={:.0}\tpeak_reset={}\tclaims={}\tapplies={}\tcommits_per_1000={:.1}\tcpu_us={:.2}\tsys_us={:.2}\tswitches={:.3}{bare}",
        store.name(),
        drained.records,
        mib(baseline_kib),
        mib(after.peak_kib),
        mib(after.peak_kib.saturating_sub(baseline_kib)),
        drained.elapsed.as_secs_f64(),
        drained.rate(),
        peak_reset,
        calls.claims,
        calls.applies,
        calls.commits() as f64 * 1000.0 / drained.records.max(1) as f64,
        used.cpu_us,
        used.system_us,
        used.switches,
    ))
}

/// The bare engine's drain of `records` due records (filled first, not measured): its CPU
/// time and context switches per record, as extra fields.
fn bare_drain(kind: BareKind, records: usize) -> Result<String> {
    let mut bare = kind.open()?;
    let now = system_now();
    bare.insert_batch(records, now)?;
    let before = Usage::read()?;
    let started = std::time::Instant::now();
    let drained = bare.drain(100, now)?;
    let elapsed = started.elapsed();
    let used = Usage::read()?.since(before).per_record(drained);
    if drained != records as u64 {
        return Err(Error::Backend {
            detail: format!("the bare drain removed {drained} of {records} records"),
            source: None,
        });
    }
    Ok(format!(
        "\tbare_cpu_us={:.2}\tbare_sys_us={:.2}\tbare_switches={:.3}\tbare_s={:.2}",
        used.cpu_us,
        used.system_us,
        used.switches,
        elapsed.as_secs_f64(),
    ))
}
