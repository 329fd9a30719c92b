//! Reading what the tools wrote: criterion's JSON under `target/criterion`, the harness's
//! durability of each row, and the `key=value` lines of `drain-rss`, `paired-ratios`,
//! `latency` and `graphile`; and the comparisons the report draws from criterion's rows.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::json::Json;

/// The stores in the benchmarks' process, in the report's order: `drain-rss` runs on each, and
/// each has a due target. This is `StoreKind::local()` of `outbox-benches`, which the xtask
/// cannot import (it keeps no dependencies): the report's one copy of that list.
pub(super) const LOCAL_STORES: [&str; 3] = ["memory", "sqlite", "redb"];

/// The stores with a bare engine in the process (`StoreKind::bare`): the enqueue and drain
/// targets.
pub(super) const BARE_STORES: [&str; 2] = ["sqlite", "redb"];

/// The PostgreSQL drain rows, with 1, 2 and 4 runners (`outbox_benches::pg::row_name`).
pub(super) const POSTGRES_DRAINS: [&str; 3] = [
    "postgres-1-runner",
    "postgres-2-runners",
    "postgres-4-runners",
];

/// One criterion result.
#[derive(Clone, Debug)]
pub(super) struct Row {
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) median_ns: f64,
    pub(super) lower_ns: f64,
    pub(super) upper_ns: f64,
    pub(super) elements: Option<u64>,
}

impl Row {
    pub(super) fn per_second(&self) -> Option<f64> {
        self.elements
            .map(|n| n as f64 / (self.median_ns / 1e9).max(f64::MIN_POSITIVE))
    }
}

/// One line of `drain-rss`, `paired-ratios` or `latency`: its `key=value` fields.
pub(super) type Fields = BTreeMap<String, String>;

/// Everything one run measured.
pub(super) struct Results<'a> {
    /// Criterion's rows, by group.
    pub(super) rows: &'a BTreeMap<String, Vec<Row>>,
    /// Each row's durability setting, as the harness wrote it.
    pub(super) durability: &'a BTreeMap<String, String>,
    /// `drain-rss`, one line per store.
    pub(super) rss: &'a [Fields],
    /// `paired-ratios`, one line per target and store.
    pub(super) paired: &'a [Fields],
    /// `latency`, one line per store.
    pub(super) latency: &'a [Fields],
    /// `graphile`, one line per row of section 8 (none without a PostgreSQL server).
    pub(super) graphile: &'a [Fields],
}

impl Results<'_> {
    /// The rows of criterion group `name` (none when it did not run).
    pub(super) fn group(&self, name: &str) -> &[Row] {
        self.rows.get(name).map_or(&[], Vec::as_slice)
    }
}

/// The text of a file, or what went wrong reading it.
pub(super) fn read_text(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// The non-empty lines of a file.
pub(super) fn read_lines(path: &Path) -> Result<Vec<String>, String> {
    Ok(read_text(path)?
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// The `key=value` fields of one tab-separated line.
pub(super) fn parse_fields(text: &str) -> Fields {
    text.trim()
        .split('\t')
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The harness's `row<TAB>durability` lines.
pub(super) fn read_durability(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = read_text(path)?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Every `new/benchmark.json` under `dir`, with its estimates, by group.
pub(super) fn read_rows(dir: &Path) -> Result<BTreeMap<String, Vec<Row>>, String> {
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

/// Where a row goes in its group: the stores first in the usual order ([`LOCAL_STORES`], then
/// [`POSTGRES_DRAINS`]), then their bare engines in the same order, then any other row.
fn rank(name: &str) -> (usize, usize) {
    let mut stores = LOCAL_STORES.iter().chain(&POSTGRES_DRAINS);
    if let Some(at) = stores.position(|n| *n == name) {
        return (0, at);
    }
    let mut bare = BARE_STORES.iter().chain(&POSTGRES_DRAINS);
    match name
        .strip_prefix("bare-")
        .and_then(|store| bare.position(|n| *n == store))
    {
        Some(at) => (1, at),
        None => (2, 0),
    }
}

fn read_json(path: &Path) -> Result<Json, String> {
    let text = read_text(path)?;
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

/// The bare row a store is compared with, in a group.
fn bare_of<'a>(rows: &'a [Row], store: &str, size: Option<u64>) -> Option<&'a Row> {
    let bare = format!("bare-{store}");
    rows.iter()
        .find(|r| r.name == bare && size.is_none_or(|s| r.size == s))
}

/// Throughput of `row` over throughput of its bare engine (1.0 = as fast as the engine).
pub(super) fn ratio_to_bare(rows: &[Row], row: &Row, same_size: bool) -> Option<f64> {
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
pub(super) fn backlog_growth(rows: &[Row], name: &str) -> Option<(u64, u64, f64)> {
    let mine: Vec<&Row> = rows.iter().filter(|r| r.name == name).collect();
    let small = mine.iter().min_by_key(|r| r.size)?;
    let large = mine.iter().max_by_key(|r| r.size)?;
    (small.size != large.size).then(|| (small.size, large.size, large.median_ns / small.median_ns))
}

#[cfg(test)]
impl Row {
    /// A row with a spread of ±10 % around its median.
    pub(super) fn sample(name: &str, size: u64, median_ns: f64, elements: Option<u64>) -> Row {
        Row {
            name: name.into(),
            size,
            median_ns,
            lower_ns: median_ns * 0.9,
            upper_ns: median_ns * 1.1,
            elements,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, size: u64, median_ns: f64, elements: Option<u64>) -> Row {
        Row::sample(name, size, median_ns, elements)
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
    fn rows_sort_stores_first_then_their_bare_engines() {
        let mut names = [
            "bare-postgres-4-runners",
            "zebra",
            "bare-redb",
            "postgres-1-runner",
            "redb",
            "memory",
            "bare-sqlite",
            "sqlite",
        ];
        names.sort_by_key(|n| (rank(n), *n));
        assert_eq!(
            names,
            [
                "memory",
                "sqlite",
                "redb",
                "postgres-1-runner",
                "bare-sqlite",
                "bare-redb",
                "bare-postgres-4-runners",
                "zebra",
            ]
        );
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
}
