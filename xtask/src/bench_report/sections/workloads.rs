//! The sections of the five criterion workloads: one table per group, each row with its
//! durability, median, spread and ratio to the bare engine of the same run.

use std::fmt::Write as _;

use super::{duration, rate, ratio};
use crate::bench_report::results::{ratio_to_bare, Results};

/// The workloads in report order: criterion group, title, what one iteration does.
pub(in crate::bench_report) const GROUPS: [(&str, &str, &str); 5] = [
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

/// Sections 1 to 5, one per criterion group of [`GROUPS`].
pub(super) fn workloads(results: &Results<'_>) -> String {
    GROUPS
        .iter()
        .map(|&(name, title, what)| workload(results, name, title, what))
        .collect()
}

/// The section of the criterion group `name`: its title, what one iteration does, and its
/// table (the due query's by backlog, with each row over the smallest backlog's).
fn workload(results: &Results<'_>, name: &str, title: &str, what: &str) -> String {
    let rows = results.group(name);
    let durability = results.durability;
    let mut out = String::new();
    let _ = writeln!(out, "## {title}\n\n{what}\n");
    if rows.is_empty() {
        let _ = writeln!(out, "_No results: the benchmark did not run._\n");
        return out;
    }
    // The due query is read against the smallest backlog; the others by their rates.
    let due = name == "due";
    let (size, last) = if due {
        ("backlog", "vs bare | vs smallest backlog")
    } else {
        ("records per iteration", "records/s | vs bare")
    };
    let _ = writeln!(
        out,
        "| row | durability | {size} | median | spread (95% CI of the median) | {last} |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for row in rows {
        let [first, second] = if due {
            let smallest = rows
                .iter()
                .filter(|r| r.name == row.name)
                .min_by_key(|r| r.size)
                .map(|s| row.median_ns / s.median_ns);
            [ratio(ratio_to_bare(rows, row, true)), ratio(smallest)]
        } else {
            // The concurrent rows are compared by rate with bare batches of another size.
            let same_size = name != "enqueue-concurrent";
            [
                row.per_second().map_or("—".to_owned(), rate),
                ratio(ratio_to_bare(rows, row, same_size)),
            ]
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} – {} | {first} | {second} |",
            row.name,
            durability.get(&row.name).map_or("", String::as_str),
            row.size,
            duration(row.median_ns),
            duration(row.lower_ns),
            duration(row.upper_ns),
        );
    }
    let _ = writeln!(
        out,
        "\n_vs bare_: the store's records/s over its engine's records/s (1.00x = as fast as \
         the bare engine); memory has no engine.\n"
    );
    out
}
