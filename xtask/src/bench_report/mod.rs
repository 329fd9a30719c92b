//! `cargo xtask bench-report [--quick] [--no-run] [--rss-records N | --rss-from FILE]`: runs
//! the criterion benchmarks of `outbox-benches` and the `drain-rss` tool, then writes
//! `BENCHMARKS.md` at the root (`--no-run` writes it from the results already in
//! `target/criterion`, e.g. after editing `benches/NOTES.md`): one
//! table per workload with each row's durability, median, spread and ratio to the bare engine
//! of the same run, the targets of issue 7, the machine, and the notes of
//! `benches/NOTES.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::json::Json;
use crate::run;

/// The workloads in report order: criterion group, title, what one iteration does.
const GROUPS: [(&str, &str, &str); 5] = [
    (
        "enqueue-one",
        "1. Enqueue, one producer, one record at a time",
        "Each record is awaited until durable before the next. Bare rows: one insert per transaction.",
    ),
    (
        "enqueue-concurrent",
        "2. Enqueue, 64 concurrent producers",
        "64 tasks each enqueue one record and await it until durable, so the store can commit them together (group commit). Bare rows: 100 inserts per transaction.",
    ),
    (
        "enqueue-batch",
        "3. Enqueue, batches of 100",
        "One call enqueues 100 records. Bare rows: 100 inserts per transaction.",
    ),
    (
        "drain",
        "4. End to end: enqueue, then drain to a no-op sink",
        "The records are enqueued first (not timed); a runner with the default batch (32) and concurrency (4) then delivers them to a sink that answers `Delivered` at once, timed from its start to an empty queue. Bare rows: claim 100 due rows in one transaction, delete them in a second, until none is left. PostgreSQL (`postgres-N-runner(s)`): N runners, each with its own store (pool of 4), drain one schema, against N bare connections each claiming 100 with `FOR UPDATE SKIP LOCKED` and deleting them (`bare-postgres-N-runner(s)`); the rows are absent when no server answered.",
    ),
    (
        "due",
        "5. What is due, over a backlog of records not yet due",
        "The runner's claim (up to 32 records) at a time before every deadline, so nothing is claimed; the size is the backlog. Bare rows: the indexed due query, read-only.",
    ),
];

struct Options {
    quick: bool,
    rss_records: usize,
    /// `drain-rss` lines measured earlier (the 1,000,000-record drain of a slow store takes
    /// longer than the criterion run), instead of running it again.
    rss_from: Option<PathBuf>,
    /// Render from the criterion results already on disk.
    no_run: bool,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        quick: false,
        rss_records: 0,
        rss_from: None,
        no_run: false,
    };
    let mut rss_records = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--no-run" => options.no_run = true,
            "--rss-records" => {
                let n = args.next().map(String::as_str).unwrap_or_default();
                rss_records = Some(
                    n.parse()
                        .map_err(|_| format!("--rss-records takes a count, not {n:?}"))?,
                );
            }
            "--rss-from" => {
                let file = args
                    .next()
                    .ok_or("--rss-from takes a file of drain-rss lines")?;
                options.rss_from = Some(PathBuf::from(file));
            }
            other => return Err(format!("unknown bench-report argument {other:?}")),
        }
    }
    options.rss_records = rss_records.unwrap_or(if options.quick { 20_000 } else { 1_000_000 });
    Ok(options)
}

/// One criterion result.
#[derive(Clone, Debug)]
struct Row {
    name: String,
    size: u64,
    median_ns: f64,
    lower_ns: f64,
    upper_ns: f64,
    elements: Option<u64>,
}

impl Row {
    fn per_second(&self) -> Option<f64> {
        self.elements
            .map(|n| n as f64 / (self.median_ns / 1e9).max(f64::MIN_POSITIVE))
    }
}

/// One line of `drain-rss` or `paired-ratios`: its `key=value` fields.
type RssLine = BTreeMap<String, String>;

pub(crate) fn bench_report(args: &[String]) -> Result<(), String> {
    let options = options(args)?;
    let root = root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let criterion = target_dir().join("criterion");
    let meta = criterion.join("outbox-durability.tsv");
    // The machine and the commit are those of the measuring run, also when rewriting.
    let machine_file = criterion.join("outbox-machine.md");
    let machine = if options.no_run {
        fs::read_to_string(&machine_file)
            .map_err(|e| format!("reading {}: {e}", machine_file.display()))?
    } else {
        machine()
    };
    if !options.no_run {
        run_benches(&cargo, &criterion, &meta, options.quick)?;
        fs::write(&machine_file, &machine)
            .map_err(|e| format!("writing {}: {e}", machine_file.display()))?;
    }
    let rss_file = criterion.join("outbox-rss.tsv");
    let rss_lines = match (&options.rss_from, options.no_run) {
        (Some(file), _) => read_lines(file)?,
        (None, true) => read_lines(&rss_file)?,
        (None, false) => drain_rss(&cargo, options.rss_records)?,
    };
    fs::write(&rss_file, rss_lines.join("\n"))
        .map_err(|e| format!("writing {}: {e}", rss_file.display()))?;
    let rss: Vec<RssLine> = rss_lines.iter().map(|l| parse_rss_line(l)).collect();
    let paired_file = criterion.join("outbox-paired.tsv");
    if !options.no_run {
        let lines = run_tool(
            &cargo,
            "paired-ratios",
            options.quick.then_some("--quick").as_slice(),
        )?;
        fs::write(&paired_file, lines.join("\n"))
            .map_err(|e| format!("writing {}: {e}", paired_file.display()))?;
    }
    let paired: Vec<RssLine> = read_lines(&paired_file)
        .unwrap_or_default()
        .iter()
        .map(|l| parse_rss_line(l))
        .collect();
    let latency_file = criterion.join("outbox-latency.tsv");
    if !options.no_run {
        let samples: &[&str] = if options.quick {
            &["--samples", "50"]
        } else {
            &[]
        };
        let lines = run_tool(&cargo, "latency", samples)?;
        fs::write(&latency_file, lines.join("\n"))
            .map_err(|e| format!("writing {}: {e}", latency_file.display()))?;
    }
    let latency: Vec<RssLine> = read_lines(&latency_file)
        .unwrap_or_default()
        .iter()
        .map(|l| parse_rss_line(l))
        .collect();
    let durability = read_durability(&meta)?;
    let rows = read_rows(&criterion)?;
    let notes = fs::read_to_string(root.join("benches").join("NOTES.md")).unwrap_or_default();
    let report = render(
        &options,
        &Results {
            rows: &rows,
            durability: &durability,
            rss: &rss,
            paired: &paired,
            latency: &latency,
        },
        &machine,
        &notes,
    );
    let out = root.join("BENCHMARKS.md");
    fs::write(&out, report).map_err(|e| format!("writing {}: {e}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// Runs the criterion harness, writing its results under `criterion` and each row's
/// durability to `meta`.
fn run_benches(cargo: &str, criterion: &Path, meta: &Path, quick: bool) -> Result<(), String> {
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

fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` when set (relative to the workspace
/// root), else the root's `target`.
fn target_dir() -> PathBuf {
    target_dir_from(&root(), std::env::var_os("CARGO_TARGET_DIR"))
}

fn target_dir_from(root: &Path, configured: Option<std::ffi::OsString>) -> PathBuf {
    match configured {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// Builds one of the crate's tools in release mode, runs it with `args`, and returns its
/// output lines.
fn run_tool(cargo: &str, tool: &str, args: &[&str]) -> Result<Vec<String>, String> {
    run(
        cargo,
        &["build", "--release", "-p", "outbox-benches", "--bin", tool],
        &[],
    )?;
    let exe = target_dir().join("release").join(tool);
    eprintln!("$ {tool} {}", args.join(" "));
    let output = Command::new(&exe)
        .args(args)
        .output()
        .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{tool} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    eprint!("{text}");
    Ok(text.lines().map(str::to_owned).collect())
}

/// The non-empty lines of a file.
fn read_lines(path: &Path) -> Result<Vec<String>, String> {
    Ok(fs::read_to_string(path)
        .map_err(|e| format!("reading {}: {e}", path.display()))?
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

fn drain_rss(cargo: &str, records: usize) -> Result<Vec<String>, String> {
    run(
        cargo,
        &[
            "build",
            "--release",
            "-p",
            "outbox-benches",
            "--bin",
            "drain-rss",
        ],
        &[],
    )?;
    let exe = target_dir().join("release").join("drain-rss");
    let mut lines = Vec::new();
    for store in ["memory", "sqlite", "redb"] {
        eprintln!("$ drain-rss --store {store} --records {records}");
        let output = Command::new(&exe)
            .args(["--store", store, "--records", &records.to_string()])
            .output()
            .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
        if !output.status.success() {
            return Err(format!(
                "drain-rss --store {store} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        eprintln!("{}", text.trim());
        lines.push(text.trim().to_owned());
    }
    Ok(lines)
}

fn parse_rss_line(text: &str) -> RssLine {
    text.trim()
        .split('\t')
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn read_durability(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Every `new/benchmark.json` under `dir`, with its estimates, by group.
fn read_rows(dir: &Path) -> Result<BTreeMap<String, Vec<Row>>, String> {
    let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.ends_with("new/benchmark.json") {
                let (group, row) = read_row(&path)?;
                rows.entry(group).or_default().push(row);
            }
        }
    }
    for group in rows.values_mut() {
        group.sort_by(|a, b| {
            (rank(&a.name), &a.name, a.size).cmp(&(rank(&b.name), &b.name, b.size))
        });
    }
    Ok(rows)
}

/// Stores first in the usual order, then the bare engines.
fn rank(name: &str) -> usize {
    [
        "memory",
        "sqlite",
        "redb",
        "postgres-1-runner",
        "postgres-2-runners",
        "postgres-4-runners",
        "bare-sqlite",
        "bare-redb",
        "bare-postgres-1-runner",
        "bare-postgres-2-runners",
        "bare-postgres-4-runners",
    ]
    .iter()
    .position(|n| *n == name)
    .unwrap_or(usize::MAX)
}

fn read_json(path: &Path) -> Result<Json, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Json::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_row(benchmark: &Path) -> Result<(String, Row), String> {
    let meta = read_json(benchmark)?;
    let estimates = read_json(&benchmark.with_file_name("estimates.json"))?;
    let missing = |what: &str| format!("{}: no {what}", benchmark.display());
    let group = meta
        .string(&["group_id"])
        .ok_or_else(|| missing("group_id"))?;
    let name = meta
        .string(&["function_id"])
        .ok_or_else(|| missing("function_id"))?;
    let size = meta
        .string(&["value_str"])
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| missing("value_str"))?;
    let median = |key: &[&str]| {
        let mut path = vec!["median"];
        path.extend_from_slice(key);
        estimates
            .number(&path)
            .ok_or_else(|| missing("median estimate"))
    };
    Ok((
        group.to_owned(),
        Row {
            name: name.to_owned(),
            size,
            median_ns: median(&["point_estimate"])?,
            lower_ns: median(&["confidence_interval", "lower_bound"])?,
            upper_ns: median(&["confidence_interval", "upper_bound"])?,
            elements: meta.number(&["throughput", "Elements"]).map(|n| n as u64),
        },
    ))
}

/// The machine the run was on.
fn machine() -> String {
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

fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn duration(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.1} k/s", per_second / 1e3)
    } else {
        format!("{per_second:.0} /s")
    }
}

/// The bare row a store is compared with, in a group.
fn bare_of<'a>(rows: &'a [Row], store: &str, size: Option<u64>) -> Option<&'a Row> {
    let bare = format!("bare-{store}");
    rows.iter()
        .find(|r| r.name == bare && size.is_none_or(|s| r.size == s))
}

/// Throughput of `row` over throughput of its bare engine (1.0 = as fast as the engine).
fn ratio_to_bare(rows: &[Row], row: &Row, same_size: bool) -> Option<f64> {
    if row.name.starts_with("bare-") {
        return None;
    }
    let bare = bare_of(rows, &row.name, same_size.then_some(row.size))?;
    match (row.per_second(), bare.per_second()) {
        (Some(a), Some(b)) => Some(a / b),
        _ => Some(bare.median_ns / row.median_ns),
    }
}

/// Median at the largest backlog over the median at the smallest, for one row name.
fn backlog_growth(rows: &[Row], name: &str) -> Option<(u64, u64, f64)> {
    let mine: Vec<&Row> = rows.iter().filter(|r| r.name == name).collect();
    let small = mine.iter().min_by_key(|r| r.size)?;
    let large = mine.iter().max_by_key(|r| r.size)?;
    (small.size != large.size).then(|| (small.size, large.size, large.median_ns / small.median_ns))
}

fn ratio(value: Option<f64>) -> String {
    value.map_or("—".to_owned(), |r| format!("{r:.2}x"))
}

/// Everything one run measured.
struct Results<'a> {
    rows: &'a BTreeMap<String, Vec<Row>>,
    durability: &'a BTreeMap<String, String>,
    rss: &'a [RssLine],
    paired: &'a [RssLine],
    latency: &'a [RssLine],
}

fn render(options: &Options, results: &Results<'_>, machine: &str, notes: &str) -> String {
    let Results {
        rows,
        durability,
        rss,
        paired,
        latency,
    } = *results;
    let empty = Vec::new();
    let group = |name: &str| rows.get(name).unwrap_or(&empty);
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Written by `cargo xtask bench-report{}` from one run of the criterion benchmarks in \
         `benches/` and of its `paired-ratios`, `drain-rss` and `latency` tools; do not edit by hand (the notes at the end come \
         from `benches/NOTES.md`). Every store runs at its default durability; each figure is \
         compared with the bare engine doing the same durable work **in the same run**.\n",
        if options.quick { " --quick" } else { "" }
    );
    if options.quick {
        let _ = writeln!(
            out,
            "**Quick run**: smaller sizes and few samples, a smoke test of the pipeline, not \
             figures to quote.\n"
        );
    }
    let _ = writeln!(out, "## Machine\n\n{machine}");
    let _ = writeln!(
        out,
        "The machine is a shared two-core virtual machine whose disk latency swings from one \
         minute to the next, so absolute figures move between runs more than the ratios do. \
         Rely on the ratios, and for the targets on the paired ones (see below).\n"
    );

    // Targets of issue 7.
    let _ = writeln!(out, "## Targets\n");
    let _ = writeln!(
        out,
        "_criterion_ is the ratio of the two criterion rows of the same run. _paired_ runs the \
         store and its bare engine (for the due query: the store over the large backlog and \
         over the small one) in alternating blocks (`paired-ratios`) and takes the median of \
         the block ratios (lowest – highest in brackets): on this shared disk `fsync` \
         latency swings several-fold within seconds, so rows measured seconds apart can \
         disagree by more than the gap being measured; _met_ is judged on the paired figure \
         where there is one.\n"
    );
    let _ = writeln!(out, "| target | store | criterion | paired | goal | met |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let mut target = |what: &str,
                      store: &str,
                      value: Option<f64>,
                      pair: Option<&RssLine>,
                      goal: &str,
                      ok: fn(f64) -> bool| {
        let pair_value = pair.and_then(|p| p.get("ratio")?.parse::<f64>().ok());
        let pair_text = match (pair_value, pair) {
            (Some(v), Some(p)) => format!(
                "{v:.2}x ({} – {}, {} blocks)",
                p.get("low").map_or("?", String::as_str),
                p.get("high").map_or("?", String::as_str),
                p.get("blocks").map_or("?", String::as_str),
            ),
            _ => "—".to_owned(),
        };
        let judged = pair_value.or(value);
        let met = judged.map_or("not measured", |v| if ok(v) { "yes" } else { "**no**" });
        let _ = writeln!(
            out,
            "| {what} | {store} | {} | {pair_text} | {goal} | {met} |",
            ratio(value)
        );
    };
    let pair_of = |name: &str, store: &str| {
        paired.iter().find(|p| {
            p.get("target").map(String::as_str) == Some(name)
                && p.get("store").map(String::as_str) == Some(store)
        })
    };
    for store in ["sqlite", "redb"] {
        let find = |g: &str| group(g).iter().find(|r| r.name == store);
        target(
            "enqueue, one producer, vs bare one insert per transaction",
            store,
            find("enqueue-one").and_then(|r| ratio_to_bare(group("enqueue-one"), r, true)),
            pair_of("enqueue-one", store),
            "≥ 0.8x",
            |v| v >= 0.8,
        );
        target(
            "enqueue, 64 producers, vs bare 100 inserts per transaction",
            store,
            find("enqueue-concurrent")
                .and_then(|r| ratio_to_bare(group("enqueue-concurrent"), r, false)),
            pair_of("enqueue-concurrent", store),
            "≥ 0.4x",
            |v| v >= 0.4,
        );
        target(
            "drain, vs bare claim + delete 100 per transaction",
            store,
            find("drain").and_then(|r| ratio_to_bare(group("drain"), r, true)),
            pair_of("drain", store),
            "≥ 0.5x",
            |v| v >= 0.5,
        );
    }
    // PostgreSQL: the drain with 1, 2 and 4 runners, each against as many bare connections
    // (a row is missing when the run had no server).
    for store in [
        "postgres-1-runner",
        "postgres-2-runners",
        "postgres-4-runners",
    ] {
        let Some(row) = group("drain").iter().find(|r| r.name == store) else {
            continue;
        };
        target(
            "drain, vs bare claim (SKIP LOCKED) + delete 100 per transaction, as many connections",
            store,
            ratio_to_bare(group("drain"), row, true),
            pair_of("drain", store),
            "≥ 0.5x",
            |v| v >= 0.5,
        );
    }
    for store in ["memory", "sqlite", "redb"] {
        let growth = backlog_growth(group("due"), store);
        let what = growth.map_or(
            "due query, large vs small backlog".to_owned(),
            |(s, l, _)| format!("due query at {l} vs {s} not-due records"),
        );
        target(
            &what,
            store,
            growth.map(|g| g.2),
            pair_of("due", store),
            "≤ 1.3x",
            |v| v <= 1.3,
        );
    }
    // What a drained record costs the process (section 6), and the idle-queue latency
    // (section 7): measured by their tools, not by criterion.
    struct Measured {
        what: &'static str,
        /// The field of the tool's line, and of the bare figure shown beside it.
        key: &'static str,
        bare: Option<&'static str>,
        unit: &'static str,
        decimals: usize,
        goal: &'static str,
        limit: f64,
    }
    const DRAIN: [Measured; 2] = [
        Measured {
            what: "drain: CPU time per record (`drain-rss`, user + system, every thread)",
            key: "cpu_us",
            bare: Some("bare_cpu_us"),
            unit: " µs",
            decimals: 1,
            goal: "≤ 8 µs",
            limit: 8.0,
        },
        Measured {
            what: "drain: context switches per record (`drain-rss`)",
            key: "switches",
            bare: Some("bare_switches"),
            unit: "",
            decimals: 2,
            goal: "≤ 0.2",
            limit: 0.2,
        },
    ];
    const LATENCY: [Measured; 2] = [
        Measured {
            what: "idle queue: `enqueue` p50 vs the bare one-row commit p50 (`latency`)",
            key: "enqueue_vs_bare",
            bare: None,
            unit: "x",
            decimals: 2,
            goal: "≤ 1.5x",
            limit: 1.5,
        },
        Measured {
            what: "idle queue: enqueue-to-sink p50 vs the bare one-row commit p50 (`latency`)",
            key: "sink_vs_bare",
            bare: None,
            unit: "x",
            decimals: 2,
            goal: "≤ 2.5x",
            limit: 2.5,
        },
    ];
    let sqlite_drains = rss
        .iter()
        .filter(|l| l.get("store").map(String::as_str) == Some("sqlite"));
    let rows = sqlite_drains
        .flat_map(|line| DRAIN.iter().map(move |m| (line, m)))
        .chain(
            latency
                .iter()
                .flat_map(|line| LATENCY.iter().map(move |m| (line, m))),
        );
    for (line, m) in rows {
        let Measured {
            what,
            key,
            bare,
            unit,
            decimals,
            goal,
            limit,
        } = *m;
        let number = |key: &str| line.get(key).and_then(|v| v.parse::<f64>().ok());
        let shown = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v:.decimals$}{unit}"));
        let value = number(key);
        let mut text = shown(value);
        if let Some(bare) = bare {
            text = format!("{text} (bare loop {})", shown(number(bare)));
        }
        let met = match value {
            None => "not measured",
            Some(v) if v <= limit => "yes",
            Some(_) => "**no**",
        };
        let store = line.get("store").map_or("?", String::as_str);
        let _ = writeln!(out, "| {what} | {store} | {text} | — | {goal} | {met} |");
    }
    let _ = writeln!(out);
    if let Some(records) = rss.first().and_then(|l| l.get("records")) {
        let _ = writeln!(
            out,
            "Runner memory while draining {records} records: see section 6 (goal: bounded by \
             the batch, not by the backlog).\n"
        );
    }

    for (name, title, what) in GROUPS {
        let rows = group(name);
        let _ = writeln!(out, "## {title}\n\n{what}\n");
        if rows.is_empty() {
            let _ = writeln!(out, "_No results: the benchmark did not run._\n");
            continue;
        }
        if name == "due" {
            let _ = writeln!(
                out,
                "| row | durability | backlog | median | spread (95% CI of the median) | vs bare | vs smallest backlog |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|---|");
            for row in rows {
                let smallest = rows
                    .iter()
                    .filter(|r| r.name == row.name)
                    .min_by_key(|r| r.size)
                    .map(|s| row.median_ns / s.median_ns);
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} – {} | {} | {} |",
                    row.name,
                    durability.get(&row.name).map_or("", String::as_str),
                    row.size,
                    duration(row.median_ns),
                    duration(row.lower_ns),
                    duration(row.upper_ns),
                    ratio(ratio_to_bare(rows, row, true)),
                    ratio(smallest),
                );
            }
        } else {
            let same_size = name != "enqueue-concurrent";
            let _ = writeln!(
                out,
                "| row | durability | records per iteration | median | spread (95% CI of the median) | records/s | vs bare |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|---|");
            for row in rows {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} – {} | {} | {} |",
                    row.name,
                    durability.get(&row.name).map_or("", String::as_str),
                    row.size,
                    duration(row.median_ns),
                    duration(row.lower_ns),
                    duration(row.upper_ns),
                    row.per_second().map_or("—".to_owned(), rate),
                    ratio(ratio_to_bare(rows, row, same_size)),
                );
            }
        }
        let _ = writeln!(
            out,
            "\n_vs bare_: the store's records/s over its engine's records/s (1.00x = as fast as \
             the bare engine); memory has no engine.\n"
        );
    }

    let _ = writeln!(out, "## 6. Peak memory of a runner draining a backlog\n");
    let _ = writeln!(
        out,
        "`drain-rss`: a persistent store is filled by a child process; the measuring process \
         opens it, resets its peak (`/proc/self/clear_refs`), drains it with the default runner \
         and reads `VmHWM`. Growth is the peak over the resident size before the runner started. \
         The memory store keeps its whole backlog in the process, so its baseline includes it. \
         The last columns count the runner's write calls to the store (each a durable commit \
         on a persistent store).\n"
    );
    if options.rss_from.is_some() {
        let _ = writeln!(
            out,
            "These figures come from a separate run of `drain-rss` just before the criterion \
             run (`--rss-from`): the drain of the slowest store takes longer than all the \
             criterion rows together.\n"
        );
    }
    let _ = writeln!(
        out,
        "| store | records | resident before (MiB) | peak (MiB) | growth (MiB) | drain time | records/s | store writes per 1,000 records |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for line in rss {
        let get = |k: &str| line.get(k).map_or("?", String::as_str);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} s | {} | {} |",
            get("store"),
            get("records"),
            get("baseline_mib"),
            get("peak_mib"),
            get("growth_mib"),
            get("drain_s"),
            get("rate"),
            get("commits_per_1000"),
        );
    }
    let _ = writeln!(
        out,
        "\nWhat the same drains cost the whole process per record (`getrusage`, every thread: \
         the runtime's workers, the store's writer, the sink), and for SQLite and redb what \
         the bare loop (claim 100, delete them, two durable transactions) cost in the same \
         process right after, over as many records:\n"
    );
    let _ = writeln!(
        out,
        "| store | CPU µs per record | of which kernel | context switches per record | bare loop: CPU µs | bare: kernel | bare: switches | bare loop time |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for line in rss {
        let get = |k: &str| line.get(k).map_or("—", String::as_str);
        let bare_time = line
            .get("bare_s")
            .map_or("—".to_owned(), |s| format!("{s} s"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            get("store"),
            get("cpu_us"),
            get("sys_us"),
            get("switches"),
            get("bare_cpu_us"),
            get("bare_sys_us"),
            get("bare_switches"),
            bare_time,
        );
    }
    let _ = writeln!(out);

    let _ = writeln!(
        out,
        "## 7. Latency on an idle queue
"
    );
    let _ = writeln!(
        out,
        "`latency`: a runner with the default configuration and a sink that notes when it is \
         handed a record; one write at a time after an idle pause (7.5–15 ms), waiting for the \
         sink to have it, alternating with one row inserted and committed by the bare engine at \
         the same durability. _enqueue_: `Outbox::enqueue` called until it returned (the record \
         is durable then); _to sink_: called until the sink had the record (the runner woke, \
         claimed it in a second durable commit and handed it over); _bare_: one insert in one \
         transaction. Milliseconds.\n"
    );
    if latency.is_empty() {
        let _ = writeln!(out, "_No results: the tool did not run._\n");
    } else {
        let _ = writeln!(
            out,
            "| store | durability | samples | enqueue p50 | p90 | p99 | to sink p50 | p90 | p99 | bare commit p50 | p90 | p99 | enqueue p50 vs bare | to sink p50 vs bare |"
        );
        let _ = writeln!(
            out,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for line in latency {
            let get = |k: &str| line.get(k).map_or("?", String::as_str);
            let store = get("store");
            let durability = durability.get(store).map_or("?", String::as_str);
            let _ = writeln!(
                out,
                "| {store} | {durability} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}x | {}x |",
                get("samples"),
                get("enqueue_p50_ms"),
                get("enqueue_p90_ms"),
                get("enqueue_p99_ms"),
                get("sink_p50_ms"),
                get("sink_p90_ms"),
                get("sink_p99_ms"),
                get("bare_p50_ms"),
                get("bare_p90_ms"),
                get("bare_p99_ms"),
                get("enqueue_vs_bare"),
                get("sink_vs_bare"),
            );
        }
        let _ = writeln!(out);
    }
    if !notes.trim().is_empty() {
        let _ = writeln!(out, "{}", notes.trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_found_under_cargo_target_dir() {
        let root = Path::new("/work/outbox");
        assert_eq!(
            target_dir_from(root, None),
            Path::new("/work/outbox/target")
        );
        assert_eq!(
            target_dir_from(root, Some("".into())),
            Path::new("/work/outbox/target")
        );
        assert_eq!(
            target_dir_from(root, Some("/tmp/t".into())),
            Path::new("/tmp/t")
        );
        assert_eq!(
            target_dir_from(root, Some("build/t".into())),
            Path::new("/work/outbox/build/t")
        );
    }

    fn row(name: &str, size: u64, median_ns: f64, elements: Option<u64>) -> Row {
        Row {
            name: name.into(),
            size,
            median_ns,
            lower_ns: median_ns * 0.9,
            upper_ns: median_ns * 1.1,
            elements,
        }
    }

    #[test]
    fn ratios_compare_throughput_with_the_bare_engine() {
        // 64 records in 2 ms against 100 records in 1 ms: 32k/s over 100k/s.
        let rows = vec![
            row("sqlite", 64, 2e6, Some(64)),
            row("bare-sqlite", 100, 1e6, Some(100)),
        ];
        let ratio = ratio_to_bare(&rows, &rows[0], false).unwrap();
        assert!((ratio - 0.32).abs() < 1e-9, "{ratio}");
        assert_eq!(ratio_to_bare(&rows, &rows[0], true), None);
        assert_eq!(ratio_to_bare(&rows, &rows[1], false), None);
    }

    #[test]
    fn each_postgres_drain_row_is_compared_with_as_many_bare_connections() {
        let rows = vec![
            row("postgres-2-runners", 2_000, 4e9, Some(2_000)),
            row("bare-postgres-1-runner", 2_000, 1e9, Some(2_000)),
            row("bare-postgres-2-runners", 2_000, 0.5e9, Some(2_000)),
        ];
        let ratio = ratio_to_bare(&rows, &rows[0], true).unwrap();
        assert!((ratio - 0.125).abs() < 1e-9, "{ratio}");
        assert!(rank("postgres-4-runners") < rank("bare-sqlite"));
        assert!(rank("bare-postgres-1-runner") > rank("bare-redb"));
    }

    #[test]
    fn the_due_target_divides_the_large_backlog_by_the_small_one() {
        let rows = vec![
            row("redb", 1_000_000, 150.0, None),
            row("redb", 10_000, 100.0, None),
        ];
        assert_eq!(
            backlog_growth(&rows, "redb"),
            Some((10_000, 1_000_000, 1.5))
        );
        assert_eq!(backlog_growth(&rows, "sqlite"), None);
    }

    #[test]
    fn the_report_has_a_table_per_workload_and_the_targets() {
        let mut rows = BTreeMap::new();
        rows.insert(
            "enqueue-one".to_owned(),
            vec![
                row("sqlite", 1, 1e6, Some(1)),
                row("bare-sqlite", 1, 0.5e6, Some(1)),
            ],
        );
        let durability = BTreeMap::from([("sqlite".to_owned(), "FULL".to_owned())]);
        let rss = vec![parse_rss_line(
            "store=sqlite\trecords=10\tbaseline_mib=5.0\tpeak_mib=6.0\tgrowth_mib=1.0\tdrain_s=0.10\trate=100\tpeak_reset=true\tclaims=2\tapplies=5\tcommits_per_1000=700.0\tcpu_us=9.50\tsys_us=3.00\tswitches=0.150\tbare_cpu_us=3.00\tbare_sys_us=1.00\tbare_switches=0.040\tbare_s=0.10\n",
        )];
        let latency = vec![parse_rss_line(
            "store=sqlite\tsamples=40\tenqueue_p50_ms=0.500\tenqueue_p90_ms=0.900\tenqueue_p99_ms=2.000\tsink_p50_ms=1.100\tsink_p90_ms=1.500\tsink_p99_ms=3.000\tbare_p50_ms=0.400\tbare_p90_ms=0.800\tbare_p99_ms=1.900\tenqueue_vs_bare=1.25\tsink_vs_bare=2.75",
        )];
        let paired = vec![parse_rss_line(
            "target=enqueue-one\tstore=sqlite\tratio=0.850\tlow=0.700\thigh=1.000\tblocks=9",
        )];
        let text = render(
            &Options {
                quick: true,
                rss_records: 10,
                rss_from: None,
                no_run: false,
            },
            &Results {
                rows: &rows,
                durability: &durability,
                rss: &rss,
                paired: &paired,
                latency: &latency,
            },
            "- CPU: test\n",
            "## Notes\n",
        );
        assert!(
            text.contains("| sqlite | FULL | 1 | 1.00 ms | 900.0 µs – 1.10 ms | 1.0 k/s | 0.50x |"),
            "{text}"
        );
        assert!(text.contains("| enqueue, one producer, vs bare one insert per transaction | sqlite | 0.50x | 0.85x (0.700 – 1.000, 9 blocks) | ≥ 0.8x | yes |"), "{text}");
        assert!(text.contains("| drain, vs bare claim + delete 100 per transaction | redb | — | — | ≥ 0.5x | not measured |"), "{text}");
        assert!(
            text.contains("| sqlite | 10 | 5.0 | 6.0 | 1.0 | 0.10 s | 100 | 700.0 |"),
            "{text}"
        );
        assert!(
            text.contains("| sqlite | 9.50 | 3.00 | 0.150 | 3.00 | 1.00 | 0.040 | 0.10 s |"),
            "{text}"
        );
        assert!(text.contains("| drain: CPU time per record (`drain-rss`, user + system, every thread) | sqlite | 9.5 µs (bare loop 3.0 µs) | — | ≤ 8 µs | **no** |"), "{text}");
        assert!(text.contains("| drain: context switches per record (`drain-rss`) | sqlite | 0.15 (bare loop 0.04) | — | ≤ 0.2 | yes |"), "{text}");
        assert!(text.contains("| idle queue: `enqueue` p50 vs the bare one-row commit p50 (`latency`) | sqlite | 1.25x | — | ≤ 1.5x | yes |"), "{text}");
        assert!(text.contains("| idle queue: enqueue-to-sink p50 vs the bare one-row commit p50 (`latency`) | sqlite | 2.75x | — | ≤ 2.5x | **no** |"), "{text}");
        assert!(
            text.contains("| sqlite | FULL | 40 | 0.500 | 0.900 | 2.000 | 1.100 | 1.500 | 3.000 | 0.400 | 0.800 | 1.900 | 1.25x | 2.75x |"),
            "{text}"
        );
        assert!(
            text.contains("## 3. Enqueue, batches of 100\n\nOne call"),
            "{text}"
        );
        assert!(text.contains("_No results: the benchmark did not run._"));
        assert!(text.ends_with("## Notes\n"));
    }

    #[test]
    fn options_take_quick_and_a_record_count() {
        let quick = options(&["--quick".to_owned()]).unwrap();
        assert!(quick.quick);
        assert_eq!(quick.rss_records, 20_000);
        let full = options(&["--rss-records".to_owned(), "500".to_owned()]).unwrap();
        assert_eq!((full.quick, full.rss_records), (false, 500));
        assert!(options(&["--fast".to_owned()]).is_err());
        let reuse = options(&["--rss-from".to_owned(), "rss.tsv".to_owned()]).unwrap();
        assert_eq!(reuse.rss_from, Some(PathBuf::from("rss.tsv")));
        assert!(options(&["--rss-from".to_owned()]).is_err());
        assert!(options(&["--no-run".to_owned()]).unwrap().no_run);
    }
}
