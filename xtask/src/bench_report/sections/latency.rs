//! Section 7: latency on an idle queue, one write at a time, against the bare engine's
//! one-row commit, from `latency`.

use std::fmt::Write as _;

use crate::bench_report::results::Results;

/// `## 7.`: the percentiles of each `latency` line, with the store's durability.
pub(super) fn latency(results: &Results<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## 7. Latency on an idle queue\n");
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
    if results.latency.is_empty() {
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
        for line in results.latency {
            let get = |k: &str| line.get(k).map_or("?", String::as_str);
            let store = get("store");
            let durability = results.durability.get(store).map_or("?", String::as_str);
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
    out
}
