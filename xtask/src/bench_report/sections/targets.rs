//! The Targets section: each goal with the figure it is judged on, the paired ratio where
//! `paired-ratios` measured one, else criterion's ratio or the tool's figure. The goals are
//! those of the issues "Rounds that grow" (the embedded stores' drain, enqueue and CPU per
//! record) and "PostgreSQL fleets" (the PostgreSQL drain against the bare loop).

use std::fmt::Write as _;

use super::ratio;
use crate::bench_report::results::{
    backlog_growth, ratio_to_bare, Fields, Results, BARE_STORES, LOCAL_STORES, POSTGRES_DRAINS,
};

/// `## Targets`: the ratios criterion and `paired-ratios` measured against their goals, then
/// the goals the tools measure (CPU time and context switches of a drain, idle latency).
pub(super) fn targets(results: &Results<'_>) -> String {
    let mut out = String::new();
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
    ratio_targets(&mut out, results);
    tool_targets(&mut out, results);
    let _ = writeln!(out);
    if let Some(records) = results.rss.first().and_then(|l| l.get("records")) {
        let _ = writeln!(
            out,
            "Runner memory while draining {records} records: see section 6 (goal: bounded by \
             the batch, not by the backlog).\n"
        );
    }
    out
}

/// The goals set on a ratio: of a store to its bare engine, or of the due query over the large
/// backlog to the small one.
fn ratio_targets(out: &mut String, results: &Results<'_>) {
    let mut target = |what: &str,
                      store: &str,
                      value: Option<f64>,
                      pair: Option<&Fields>,
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
        results.paired.iter().find(|p| {
            p.get("target").map(String::as_str) == Some(name)
                && p.get("store").map(String::as_str) == Some(store)
        })
    };
    for store in BARE_STORES {
        let find = |g: &str| results.group(g).iter().find(|r| r.name == store);
        target(
            "enqueue, one producer, vs bare one insert per transaction",
            store,
            find("enqueue-one").and_then(|r| ratio_to_bare(results.group("enqueue-one"), r, true)),
            pair_of("enqueue-one", store),
            "≥ 0.8x",
            |v| v >= 0.8,
        );
        target(
            "enqueue, 64 producers, vs bare 100 inserts per transaction",
            store,
            find("enqueue-concurrent")
                .and_then(|r| ratio_to_bare(results.group("enqueue-concurrent"), r, false)),
            pair_of("enqueue-concurrent", store),
            "≥ 0.4x",
            |v| v >= 0.4,
        );
        target(
            "drain, vs bare claim + delete 100 per transaction",
            store,
            find("drain").and_then(|r| ratio_to_bare(results.group("drain"), r, true)),
            pair_of("drain", store),
            "≥ 0.8x",
            |v| v >= 0.8,
        );
    }
    // PostgreSQL: the drain with 1, 2 and 4 runners, each against as many bare connections
    // (a row is missing when the run had no server).
    for store in POSTGRES_DRAINS {
        let Some(row) = results.group("drain").iter().find(|r| r.name == store) else {
            continue;
        };
        target(
            "drain, vs bare claim (SKIP LOCKED) + delete 100 per transaction, as many connections",
            store,
            ratio_to_bare(results.group("drain"), row, true),
            pair_of("drain", store),
            "≥ 0.6x",
            |v| v >= 0.6,
        );
    }
    for store in LOCAL_STORES {
        let growth = backlog_growth(results.group("due"), store);
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
}

/// The goals set on what `drain-rss` and `latency` measure.
fn tool_targets(out: &mut String, results: &Results<'_>) {
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
            goal: "≤ 6 µs",
            limit: 6.0,
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
    let sqlite_drains = results
        .rss
        .iter()
        .filter(|l| l.get("store").map(String::as_str) == Some("sqlite"));
    let rows = sqlite_drains
        .flat_map(|line| DRAIN.iter().map(move |m| (line, m)))
        .chain(
            results
                .latency
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
}
