//! Section 6: the peak resident memory of a runner draining a backlog, and what the drain
//! cost the whole process per record beside the bare loop, from `drain-rss`.

use std::fmt::Write as _;

use crate::bench_report::results::Results;

/// `## 6.`: a line of each table per `drain-rss` line; `rss_from_earlier_run` when the lines
/// come from a run of their own (`--rss-from`).
pub(super) fn peak_memory(results: &Results<'_>, rss_from_earlier_run: bool) -> String {
    let mut out = String::new();
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
    if rss_from_earlier_run {
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
    for line in results.rss {
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
    for line in results.rss {
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
    out
}
