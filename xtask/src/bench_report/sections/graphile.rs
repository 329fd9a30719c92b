//! Section 8: the PostgreSQL store beside `graphile_worker`, from the `graphile` tool, with the
//! goals of issue 32 for it.

use std::fmt::Write as _;

use crate::bench_report::results::{Fields, Results};

/// The drain rows at 1, 4 and 32 deliveries in flight (`outbox_benches::graphile::CONCURRENCY`).
const DRAINS: [(&str, &str); 3] = [("drain-c1", "1"), ("drain-c4", "4"), ("drain-c32", "32")];

/// The outbox with 1, 2 and 4 runners beside the bare loop (`outbox_benches::pg::RUNNERS`).
const RUNNERS: [(&str, &str); 3] = [("runners-1", "1"), ("runners-2", "2"), ("runners-4", "4")];

/// Goal: the drain at least this many times graphile_worker's at every concurrency.
const DRAIN_GOAL: f64 = 2.0;
/// Goal: four runners drain at least this many times as fast as one.
const SCALING_GOAL: f64 = 2.5;
/// Goal: at most this many WAL bytes per record the outbox drains.
const WAL_GOAL: f64 = 300.0;

/// `## 8.`: enqueue and drain rates of both queues with their paired ratios, the outbox's
/// runner scaling beside the bare loop, WAL bytes per drained record, and the goals.
pub(super) fn graphile(results: &Results<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## 8. PostgreSQL beside graphile_worker\n");
    let _ = writeln!(
        out,
        "`graphile`: the PostgreSQL store beside `graphile_worker` (the Rust port of \
         graphile-worker) on the same server, 256-byte payloads on both sides (the outbox \
         record; the peer job's JSON), each side in schemas of its own. The peer runs at its \
         fastest settings for a backlog: a local queue fetching 1,000 jobs at a time, completions \
         deleted in batches after 1 ms, its own pool at its default size (20 connections; the \
         outbox store has 4). Each round runs every row once on both sides, the side going \
         first alternating; rates are medians over the rounds, the ratio the median of the \
         rounds' ratios (lowest – highest in brackets). _WAL_: bytes of write-ahead log per \
         drained record, from the server's WAL insert position before the drain and after \
         the runners or the worker shut down (the whole server's: read them as upper bounds).\n"
    );
    let lines = results.graphile;
    if lines.is_empty() {
        let _ = writeln!(
            out,
            "_No results: the tool did not run (or found no server)._\n"
        );
        return out;
    }
    let row = |name: &str| lines.iter().find(|l| get(l, "row") == name);
    if let Some(first) = lines.first() {
        let _ = writeln!(
            out,
            "{} records per drain and per enqueue block, {} rounds.\n",
            get(first, "records"),
            get(first, "rounds")
        );
    }
    let _ = writeln!(
        out,
        "| workload | outbox | graphile_worker | outbox / graphile_worker | WAL outbox | WAL graphile_worker |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let enqueues = [
        ("enqueue-one", "enqueue, one at a time".to_owned()),
        ("enqueue-64", "enqueue, 64 producers".to_owned()),
    ];
    let drains = DRAINS.map(|(name, c)| (name, format!("drain, concurrency {c}")));
    for (name, what) in enqueues.iter().chain(&drains) {
        if let Some(line) = row(name) {
            let _ = writeln!(
                out,
                "| {what} | {} | {} | {} | {} | {} |",
                rate(line, "ours_rate"),
                rate(line, "peer_rate"),
                paired(line),
                get(line, "ours_wal"),
                get(line, "peer_wal"),
            );
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "The outbox with several runners sharing the queue (default configuration, each with \
         its own store) beside the bare `SKIP LOCKED` loop with as many connections (claim \
         100, then delete them):\n"
    );
    let _ = writeln!(
        out,
        "| runners | outbox | bare loop | outbox / bare | WAL outbox | WAL bare |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for (name, runners) in RUNNERS {
        if let Some(line) = row(name) {
            let _ = writeln!(
                out,
                "| {runners} | {} | {} | {} | {} | {} |",
                rate(line, "ours_rate"),
                rate(line, "peer_rate"),
                paired(line),
                get(line, "ours_wal"),
                get(line, "peer_wal"),
            );
        }
    }
    let _ = writeln!(out);
    goals(&mut out, &row);
    out
}

/// The goals of issue 32 for the comparison, judged on the paired ratios.
fn goals<'a>(out: &mut String, row: &impl Fn(&str) -> Option<&'a Fields>) {
    let _ = writeln!(out, "| goal | figure | met |");
    let _ = writeln!(out, "|---|---|---|");
    for (name, c) in DRAINS {
        let figure = row(name).and_then(|l| number(l, "ratio"));
        let _ = writeln!(
            out,
            "| drain at concurrency {c} ≥ {DRAIN_GOAL}x graphile_worker | {} | {} |",
            figure.map_or("—".to_owned(), |v| format!("{v:.2}x")),
            met(figure, |v| v >= DRAIN_GOAL)
        );
    }
    let scaling = row("scaling-4").and_then(|l| number(l, "ratio"));
    let _ = writeln!(
        out,
        "| 4 runners ≥ {SCALING_GOAL}x one runner | {} | {} |",
        scaling.map_or("—".to_owned(), |v| format!("{v:.2}x")),
        met(scaling, |v| v >= SCALING_GOAL)
    );
    let walls: Vec<f64> = DRAINS
        .iter()
        .chain(&RUNNERS)
        .filter_map(|(name, _)| row(name).and_then(|l| number(l, "ours_wal")))
        .collect();
    let worst = walls.iter().copied().reduce(f64::max);
    let _ = writeln!(
        out,
        "| ≤ {WAL_GOAL:.0} WAL bytes per drained record (worst outbox row) | {} | {} |",
        worst.map_or("—".to_owned(), |v| format!("{v:.0}")),
        met(worst, |v| v <= WAL_GOAL)
    );
    let _ = writeln!(out);
}

fn met(figure: Option<f64>, ok: impl Fn(f64) -> bool) -> &'static str {
    figure.map_or("not measured", |v| if ok(v) { "yes" } else { "**no**" })
}

fn get<'a>(line: &'a Fields, key: &str) -> &'a str {
    line.get(key).map_or("—", String::as_str)
}

fn number(line: &Fields, key: &str) -> Option<f64> {
    line.get(key)?.parse().ok()
}

/// A rate field as the report writes rates.
fn rate(line: &Fields, key: &str) -> String {
    number(line, key).map_or("—".to_owned(), super::rate)
}

/// `1.23x (0.900 – 1.500, 3 rounds)`.
fn paired(line: &Fields) -> String {
    match number(line, "ratio") {
        Some(r) => format!(
            "{r:.2}x ({} – {}, {} rounds)",
            get(line, "low"),
            get(line, "high"),
            get(line, "rounds")
        ),
        None => "—".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_report::results::parse_fields;
    use std::collections::BTreeMap;

    fn results<'a>(
        graphile: &'a [Fields],
        empty: &'a BTreeMap<String, Vec<crate::bench_report::results::Row>>,
        durability: &'a BTreeMap<String, String>,
    ) -> Results<'a> {
        Results {
            rows: empty,
            durability,
            rss: &[],
            paired: &[],
            latency: &[],
            graphile,
        }
    }

    #[test]
    fn the_section_judges_each_goal_on_the_paired_figures() {
        let lines: Vec<Fields> = [
            "row=enqueue-one\tpeer=graphile_worker\trecords=100\tours_rate=300\tpeer_rate=250\tratio=1.200\tlow=1.100\thigh=1.300\trounds=3",
            "row=drain-c1\tpeer=graphile_worker\trecords=100\tours_rate=9000\tpeer_rate=3000\tratio=3.000\tlow=2.500\thigh=3.500\trounds=3\tours_wal=280\tpeer_wal=700",
            "row=drain-c4\tpeer=graphile_worker\trecords=100\tours_rate=9000\tpeer_rate=6000\tratio=1.500\tlow=1.400\thigh=1.600\trounds=3\tours_wal=310\tpeer_wal=700",
            "row=runners-4\tpeer=bare\trecords=100\tours_rate=20000\tpeer_rate=40000\tratio=0.500\tlow=0.400\thigh=0.600\trounds=3\tours_wal=290\tpeer_wal=600",
            "row=scaling-4\tpeer=outbox-1-runner\trecords=100\tours_rate=20000\tpeer_rate=9000\tratio=2.222\tlow=2.000\thigh=2.400\trounds=3",
        ]
        .iter()
        .map(|l| parse_fields(l))
        .collect();
        let (rows, durability) = (BTreeMap::new(), BTreeMap::new());
        let text = graphile(&results(&lines, &rows, &durability));
        assert!(
            text.contains("100 records per drain and per enqueue block, 3 rounds."),
            "{text}"
        );
        assert!(text.contains("| enqueue, one at a time | 300 /s | 250 /s | 1.20x (1.100 – 1.300, 3 rounds) | — | — |"), "{text}");
        assert!(text.contains("| drain, concurrency 1 | 9.0 k/s | 3.0 k/s | 3.00x (2.500 – 3.500, 3 rounds) | 280 | 700 |"), "{text}");
        assert!(
            text.contains(
                "| 4 | 20.0 k/s | 40.0 k/s | 0.50x (0.400 – 0.600, 3 rounds) | 290 | 600 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| drain at concurrency 1 ≥ 2x graphile_worker | 3.00x | yes |"),
            "{text}"
        );
        assert!(
            text.contains("| drain at concurrency 4 ≥ 2x graphile_worker | 1.50x | **no** |"),
            "{text}"
        );
        assert!(
            text.contains("| drain at concurrency 32 ≥ 2x graphile_worker | — | not measured |"),
            "{text}"
        );
        assert!(
            text.contains("| 4 runners ≥ 2.5x one runner | 2.22x | **no** |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| ≤ 300 WAL bytes per drained record (worst outbox row) | 310 | **no** |"
            ),
            "{text}"
        );
    }

    #[test]
    fn without_lines_the_section_says_so() {
        let (rows, durability) = (BTreeMap::new(), BTreeMap::new());
        let text = graphile(&results(&[], &rows, &durability));
        assert!(text.starts_with("## 8. PostgreSQL beside graphile_worker\n"));
        assert!(text.contains("_No results: the tool did not run"), "{text}");
    }
}
