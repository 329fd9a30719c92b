//! The human-readable output of the read commands: aligned tables, local times and "in 3m".
//!
//! Every text that comes from the queue (errors, reasons, groups, keys, payloads) is shown
//! through [`crate::escape`], so a control sequence in it is printed, not obeyed.

use std::fmt::Write as _;

use chrono::{Local, TimeZone};
use outbox_core::{Attempt, Halt, History, Millis, Record, Tombstone, Unreadable};

use crate::escape::{visible, visible_lines};
use crate::view::{Listing, StatsView};

/// A text from the queue, on one line, as a person may see it.
fn shown(text: &str) -> String {
    visible(text).into_owned()
}

/// An optional group, or `-`.
fn group(group: Option<&str>) -> String {
    group.map_or_else(|| "-".into(), shown)
}

/// The widest `last error` cell of a table; the rest is cut with `…` (`show` prints it whole).
const ERROR_WIDTH: usize = 60;

/// A halt as a person is asked about it: when, in local time, and why (escaped).
///
/// ```
/// use outbox_core::Halt;
/// let text = outbox_cli::human::halt(&Halt { reason: "HTTP 401\x1b[2J".into(), since: 0 });
/// assert!(text.starts_with("the halt since ") && text.ends_with("(HTTP 401\\x1b[2J)"));
/// ```
pub fn halt(halt: &Halt) -> String {
    format!(
        "the halt since {} ({})",
        local(halt.since),
        visible(&halt.reason)
    )
}

/// A wall-clock time in the local time zone, to the second.
///
/// ```
/// // With TZ=UTC: 2026-12-01 08:00:00.
/// let text = outbox_cli::human::local(1_795_939_200_000);
/// assert_eq!(text.len(), "2026-12-01 08:00:00".len());
/// ```
pub fn local(at: Millis) -> String {
    i64::try_from(at)
        .ok()
        .and_then(|ms| Local.timestamp_millis_opt(ms).single())
        .map_or_else(
            || format!("{at} ms after 1970"),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

/// A span in its two largest units: `45s`, `3m 12s`, `2h 5m`, `3d 4h`.
///
/// ```
/// use outbox_cli::human::span;
/// assert_eq!(span(192_000), "3m 12s");
/// assert_eq!(span(7_200_000), "2h");
/// assert_eq!(span(400), "0s");
/// ```
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    let (big, big_unit, small, small_unit) = match s {
        0..60 => return format!("{s}s"),
        60..3600 => (s / 60, "m", s % 60, "s"),
        3600..86_400 => (s / 3600, "h", s % 3600 / 60, "m"),
        _ => (s / 86_400, "d", s % 86_400 / 3600, "h"),
    };
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit} {small}{small_unit}")
    }
}

/// An interval as given: `500ms`, `1s`, `2m`.
pub fn span_precise(interval: std::time::Duration) -> String {
    let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    if ms % 1000 == 0 {
        span(ms)
    } else {
        format!("{ms}ms")
    }
}

/// `in 3m`, `3m ago` or `now`, from `now`'s point of view.
pub fn relative(at: Millis, now: Millis) -> String {
    if at > now && at - now >= 1000 {
        format!("in {}", span(at - now))
    } else if now > at && now - at >= 1000 {
        format!("{} ago", span(now - at))
    } else {
        "now".to_owned()
    }
}

/// A time with its distance from now: `2026-12-01 08:03:00 (in 3m)`.
pub fn when(at: Millis, now: Millis) -> String {
    format!("{} ({})", local(at), relative(at, now))
}

/// A text from the queue for a table cell: escaped, runs of spaces joined, cut to `width`.
fn cut(text: &str, width: usize) -> String {
    let flat: String = visible(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if flat.chars().count() <= width {
        flat
    } else {
        let mut short: String = flat.chars().take(width - 1).collect();
        short.push('…');
        short
    }
}

/// The `stats` report.
pub fn stats(view: &StatsView) -> String {
    let c = &view.counts;
    let now = view.now;
    let mut out = String::new();
    let rows: [(&str, u64, String); 8] = [
        ("pending", c.pending, String::new()),
        ("retrying", c.retrying, String::new()),
        ("in-flight", c.in_flight, String::new()),
        (
            "needs-attention",
            c.needs_attention,
            if c.needs_attention > 0 {
                "waiting for a person: outbox retry".to_owned()
            } else {
                String::new()
            },
        ),
        (
            "held back",
            view.held,
            if view.held > 0 {
                "behind a needs-attention record of their group".to_owned()
            } else {
                String::new()
            },
        ),
        (
            "rejected",
            c.rejected,
            if c.rejected > 0 {
                "refused by the server: outbox requeue".to_owned()
            } else {
                String::new()
            },
        ),
        (
            "discarded",
            c.discarded,
            "tombstones until pruned".to_owned(),
        ),
        (
            "delivered",
            c.delivered,
            "since the outbox was created".to_owned(),
        ),
    ];
    let merged = (c.superseded > 0).then(|| {
        (
            "superseded",
            c.superseded,
            "writes merged into a waiting one of their key".to_owned(),
        )
    });
    let scheduled = (c.scheduled > 0).then(|| {
        (
            "scheduled",
            c.scheduled,
            "pending, enqueued for a later time, not attempted yet".to_owned(),
        )
    });
    for (name, count, note) in rows.into_iter().chain(merged).chain(scheduled) {
        let line = format!("{name:<18}{count:>8}   {note}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.push('\n');
    let oldest = match view.oldest_created_at {
        Some(at) => format!("enqueued {}", when(at, now)),
        None => "none: nothing is owed a delivery".to_owned(),
    };
    let next_due = match view.next_due {
        Some(at) if at <= now => format!("now: due since {}", when(at, now)),
        Some(at) => when(at, now),
        None => "none".to_owned(),
    };
    let runner = match &view.halt {
        Some(halt) => format!(
            "HALTED since {}: {} (`outbox resume` or the application lifts it)",
            when(halt.since, now),
            shown(&halt.reason)
        ),
        None => "not halted".to_owned(),
    };
    let _ = writeln!(
        out,
        "{:<21}{} bytes in {} records (what a size cap counts)",
        "payload held",
        view.payload_bytes,
        view.undelivered + c.rejected
    );
    let _ = writeln!(out, "{:<21}{oldest}", "oldest undelivered");
    let _ = writeln!(out, "{:<21}{next_due}", "next due");
    let _ = writeln!(out, "{:<21}{runner}", "runner");
    if view.common_errors.is_empty() {
        let _ = writeln!(out, "{:<21}none", "common errors");
    }
    for (i, e) in view.common_errors.iter().enumerate() {
        let label = if i == 0 { "common errors" } else { "" };
        let _ = writeln!(
            out,
            "{label:<21}{:>4} × {}",
            e.count,
            cut(&e.error, ERROR_WIDTH)
        );
    }
    out
}

/// Lays out rows under headers, columns padded to their widest cell, no trailing spaces.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (cell, w) in cells.zip(&widths) {
            let pad = w.saturating_sub(cell.chars().count());
            text.push_str(cell);
            text.extend(std::iter::repeat_n(' ', pad + 2));
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

fn record_row(r: &Record, now: Millis) -> Vec<String> {
    let next = match (r.next_attempt_at, r.lease) {
        (_, Some(lease)) => format!("lease ends {}", relative(lease.until, now)),
        (Some(at), None) => when(at, now),
        (None, None) => "-".to_owned(),
    };
    // A record held until its not-before time is pending, but nothing is wrong with it.
    let state = if crate::view::scheduled(r, now) {
        "scheduled".to_owned()
    } else {
        r.state.to_string()
    };
    vec![
        r.id.0.to_string(),
        group(r.group.as_deref()),
        state,
        format!("{}/{}/{}", r.attempts, r.unanswered, r.interrupted),
        next,
        span(now.saturating_sub(r.created_at)),
        r.last_error
            .as_deref()
            .map_or_else(|| "-".into(), |e| cut(e, ERROR_WIDTH)),
    ]
}

fn tombstone_row(t: &Tombstone, now: Millis) -> Vec<String> {
    vec![
        t.id.0.to_string(),
        group(t.group.as_deref()),
        when(t.discarded_at, now),
        t.attempts.to_string(),
        cut(&t.reason, ERROR_WIDTH),
    ]
}

/// The `list` table.
pub fn list(listing: &Listing, now: Millis) -> String {
    let (mut out, count, next) = match listing {
        Listing::Records(records, next) => {
            let rows: Vec<_> = records.iter().map(|r| record_row(r, now)).collect();
            let headers = [
                "ID",
                "GROUP",
                "STATE",
                "A/U/I",
                "NEXT ATTEMPT",
                "AGE",
                "LAST ERROR",
            ];
            (table(&headers, &rows), rows.len(), next)
        }
        Listing::Tombstones(tombstones, next) => {
            let rows: Vec<_> = tombstones.iter().map(|t| tombstone_row(t, now)).collect();
            let headers = ["ID", "GROUP", "DISCARDED", "ATTEMPTS", "REASON"];
            (table(&headers, &rows), rows.len(), next)
        }
        Listing::Unreadable(unreadable, next) => {
            let rows: Vec<_> = unreadable
                .iter()
                .map(|row| vec![row.id.0.to_string(), shown(&row.reason)])
                .collect();
            (table(&["ID", "CANNOT BE READ"], &rows), rows.len(), next)
        }
    };
    let noun = if count == 1 { "record" } else { "records" };
    match next {
        Some(after) => {
            let _ = writeln!(out, "\n{count} {noun}; the next page: --after {}", after.0);
        }
        None if count == 0 => out = "no records match\n".to_owned(),
        None => {
            let _ = writeln!(out, "\n{count} {noun}");
        }
    }
    if matches!(listing, Listing::Records(..)) && count > 0 {
        out.push_str("A/U/I: answered failures (the spent budget) / unanswered / interrupted\n");
    }
    if matches!(listing, Listing::Unreadable(..)) && count > 0 {
        out.push_str(SET_ASIDE);
    }
    out
}

/// What becomes of a row that cannot be read, and what a person can do.
const SET_ASIDE: &str = "Rows that cannot be read are set aside: no runner delivers them, and a \
    group's\nlater records wait behind one. `outbox discard TARGET ID --reason ...` removes \
    one,\nkeeping a tombstone.\n";

/// The `show` report for a row the store cannot decode.
pub fn unreadable(row: &Unreadable) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<15}#{}", "record", row.id.0);
    let _ = writeln!(out, "{:<15}unreadable (damaged on disk)", "state");
    let _ = writeln!(out, "{:<15}{}", "cannot read", shown(&row.reason));
    out.push_str(SET_ASIDE);
    out
}

/// The `show` report for a record still in the queue.
pub fn record(r: &Record, now: Millis) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<15}{value}");
    };
    field("record", format!("#{}", r.id.0));
    if crate::view::scheduled(r, now) {
        field("state", format!("{} (scheduled)", r.state));
    } else {
        field("state", r.state.to_string());
    }
    field("group", group(r.group.as_deref()));
    field("key", shown(&r.key));
    if let Some(version) = &r.expected_version {
        field(
            "expects",
            format!("version {} (sent as If-Match)", shown(version)),
        );
    }
    if let Some(key) = &r.replaces {
        field(
            "replaces",
            format!("{} (a later write of this key replaces it)", shown(key)),
        );
    }
    if let Some(at) = r.not_before {
        field("not before", when(at, now));
    }
    if let Some(cx) = &r.trace {
        let state = cx
            .tracestate()
            .map_or_else(String::new, |s| format!(" ({})", shown(s)));
        field("trace", format!("{}{state}", cx.traceparent()));
    }
    field("created", when(r.created_at, now));
    field(
        "attempts",
        format!(
            "{} answered, {} unanswered, {} interrupted",
            r.attempts, r.unanswered, r.interrupted
        ),
    );
    field(
        "last attempt",
        r.last_attempt_at
            .map_or_else(|| "never".into(), |t| when(t, now)),
    );
    let next = match (r.next_attempt_at, r.lease) {
        (_, Some(lease)) => format!("in flight, lease ends {}", when(lease.until, now)),
        (Some(at), None) => when(at, now),
        (None, None) => "never on its own".into(),
    };
    field("next attempt", next);
    field(
        "last error",
        r.last_error.as_deref().map_or_else(|| "-".into(), shown),
    );
    field("history", history_head(&r.history));
    if !r.history.is_empty() {
        let _ = writeln!(
            out,
            "  {:>2}  {:<19}  {:<11}  {:<6}  {:<8}  error",
            "#", "ended", "class", "status", "took"
        );
    }
    for (n, attempt) in r.history.attempts().iter().enumerate() {
        let _ = writeln!(out, "{}", attempt_line(n + 1, attempt));
    }
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<15}{value}");
    };
    let revision = crate::revision::of(r);
    field(
        "revision",
        format!("{revision} (a verb with --seen {revision} acts only if it is unchanged)"),
    );
    out.push('\n');
    out.push_str(&payload(&r.payload));
    out
}

/// The head of a record's history in `show`: how many attempts are kept.
fn history_head(history: &History) -> String {
    match history.len() {
        _ if history.is_unreadable() => {
            "unreadable (the stored history is damaged; the next attempt starts a new one)".into()
        }
        0 => "no attempts yet".into(),
        1 => "1 attempt".into(),
        n if n == History::LIMIT => format!("the last {n} attempts, oldest first"),
        n => format!("{n} attempts, oldest first"),
    }
}

/// One attempt in `show`, under its header: its number, when it ended, its class, the
/// status, how long the sink took and the error (escaped, whole).
fn attempt_line(n: usize, a: &Attempt) -> String {
    let status = a.status.map_or_else(|| "-".into(), |s| s.to_string());
    let took = a.took_ms.map_or_else(
        || "-".into(),
        |ms| span_precise(std::time::Duration::from_millis(ms)),
    );
    format!(
        "  {n:>2}  {:<19}  {:<11}  {status:<6}  {took:<8}  {}",
        local(a.at),
        a.class.as_str(),
        shown(&a.error)
    )
}

/// The `show` report for a discarded record.
pub fn tombstone(t: &Tombstone, now: Millis) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<15}{value}");
    };
    field("record", format!("#{}", t.id.0));
    field(
        "state",
        "discarded (a tombstone; the payload is gone)".into(),
    );
    field("group", group(t.group.as_deref()));
    field("key", shown(&t.key));
    field("discarded", when(t.discarded_at, now));
    field("attempts", format!("{} answered", t.attempts));
    field("reason", shown(&t.reason));
    out
}

/// A payload: pretty JSON when it parses, text when it is UTF-8, else a hex dump.
fn payload(bytes: &[u8]) -> String {
    let size = bytes.len();
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
            if let Ok(pretty) = serde_json::to_string_pretty(&value) {
                let pretty = visible_lines(&pretty);
                return format!("payload ({size} bytes, JSON)\n{pretty}\n");
            }
        }
        let text = visible_lines(text.strip_suffix('\n').unwrap_or(text));
        return format!("payload ({size} bytes, UTF-8 text)\n{text}\n");
    }
    let mut out = format!("payload ({size} bytes, not UTF-8: hex)\n");
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    char::from(b)
                } else {
                    '.'
                }
            })
            .collect();
        let _ = writeln!(out, "{:08x}  {:<48}  {ascii}", i * 16, hex.join(" "));
    }
    out
}
