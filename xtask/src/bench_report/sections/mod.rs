//! `BENCHMARKS.md`, one function per section: the introduction, the machine, the targets
//! (`targets`), the five criterion workloads (`workloads`), peak memory (`memory`), idle-queue
//! latency (`latency`), PostgreSQL beside `graphile_worker` (`graphile`), then the notes of
//! `benches/NOTES.md`.

mod graphile;
mod latency;
mod memory;
mod targets;
mod workloads;

use std::fmt::Write as _;

pub(super) use workloads::GROUPS;

use super::options::Options;
use super::results::Results;

/// The whole report, section by section.
pub(super) fn render(
    options: &Options,
    results: &Results<'_>,
    machine: &str,
    notes: &str,
) -> String {
    [
        intro(options.quick),
        machine_section(machine),
        targets::targets(results),
        workloads::workloads(results),
        memory::peak_memory(results, options.rss_from.is_some()),
        latency::latency(results),
        graphile::graphile(results),
        notes_section(notes),
    ]
    .concat()
}

/// The title, what wrote the file and from what, and the warning on a quick run.
fn intro(quick: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Written by `cargo xtask bench-report{}` from one run of the criterion benchmarks in \
         `benches/` and of its `paired-ratios`, `drain-rss`, `latency` and `graphile` tools; do not edit by hand (the notes at the end come \
         from `benches/NOTES.md`). Every store runs at its default durability; each figure is \
         compared with the bare engine doing the same durable work **in the same run**.\n",
        if quick { " --quick" } else { "" }
    );
    if quick {
        let _ = writeln!(
            out,
            "**Quick run**: smaller sizes and few samples, a smoke test of the pipeline, not \
             figures to quote.\n"
        );
    }
    out
}

/// `## Machine`: what the run was on, and why the ratios are what to rely on.
fn machine_section(machine: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Machine\n\n{machine}");
    let _ = writeln!(
        out,
        "The machine is a shared two-core virtual machine whose disk latency swings from one \
         minute to the next, so absolute figures move between runs more than the ratios do. \
         Rely on the ratios, and for the targets on the paired ones (see below).\n"
    );
    out
}

/// The notes of `benches/NOTES.md`, as they are.
fn notes_section(notes: &str) -> String {
    let mut out = String::new();
    if !notes.trim().is_empty() {
        let _ = writeln!(out, "{}", notes.trim_end());
    }
    out
}

/// A time in nanoseconds, in the unit that reads best.
pub(super) fn duration(ns: f64) -> String {
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

/// Records per second, in the unit that reads best.
pub(super) fn rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.1} k/s", per_second / 1e3)
    } else {
        format!("{per_second:.0} /s")
    }
}

/// A ratio to two decimals (`0.85x`), or `—` where there is none.
pub(super) fn ratio(value: Option<f64>) -> String {
    value.map_or("—".to_owned(), |r| format!("{r:.2}x"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bench_report::results::{parse_fields, Row};

    fn row(name: &str, size: u64, median_ns: f64, elements: Option<u64>) -> Row {
        Row::sample(name, size, median_ns, elements)
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
        let rss = vec![parse_fields(
            "store=sqlite\trecords=10\tbaseline_mib=5.0\tpeak_mib=6.0\tgrowth_mib=1.0\tdrain_s=0.10\trate=100\tpeak_reset=true\tclaims=2\tapplies=5\tcommits_per_1000=700.0\tcpu_us=9.50\tsys_us=3.00\tswitches=0.150\tbare_cpu_us=3.00\tbare_sys_us=1.00\tbare_switches=0.040\tbare_s=0.10\n",
        )];
        let latency = vec![parse_fields(
            "store=sqlite\tsamples=40\tenqueue_p50_ms=0.500\tenqueue_p90_ms=0.900\tenqueue_p99_ms=2.000\tsink_p50_ms=1.100\tsink_p90_ms=1.500\tsink_p99_ms=3.000\tbare_p50_ms=0.400\tbare_p90_ms=0.800\tbare_p99_ms=1.900\tenqueue_vs_bare=1.25\tsink_vs_bare=2.75",
        )];
        let paired = vec![parse_fields(
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
                graphile: &[],
            },
            "- CPU: test\n",
            "## Notes\n",
        );
        assert!(
            text.contains("| sqlite | FULL | 1 | 1.00 ms | 900.0 µs – 1.10 ms | 1.0 k/s | 0.50x |"),
            "{text}"
        );
        assert!(text.contains("| enqueue, one producer, vs bare one insert per transaction | sqlite | 0.50x | 0.85x (0.700 – 1.000, 9 blocks) | ≥ 0.8x | yes |"), "{text}");
        assert!(text.contains("| drain, vs bare claim + delete 100 per transaction | redb | — | — | ≥ 0.8x | not measured |"), "{text}");
        assert!(
            text.contains("| sqlite | 10 | 5.0 | 6.0 | 1.0 | 0.10 s | 100 | 700.0 |"),
            "{text}"
        );
        assert!(
            text.contains("| sqlite | 9.50 | 3.00 | 0.150 | 3.00 | 1.00 | 0.040 | 0.10 s |"),
            "{text}"
        );
        assert!(text.contains("| drain: CPU time per record (`drain-rss`, user + system, every thread) | sqlite | 9.5 µs (bare loop 3.0 µs) | — | ≤ 6 µs | **no** |"), "{text}");
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
}
