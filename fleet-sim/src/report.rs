//! The figures of each scenario and the Markdown report (`FLEET.md`) that shows them.

use std::fmt::Write;

use crate::params::{ms, Params};
use crate::sim::Run;

/// The figures of one scenario, measured from its [`Run`].
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// Highest requests in one second from the moment the server is back, ÷ capacity.
    pub peak: f64,
    /// The same, from one minute after the server is back.
    pub peak_after_first_minute: f64,
    /// 99th percentile of requests per second from the moment the server is back until the
    /// backlog settled, ÷ capacity.
    pub p99: f64,
    /// Seconds over capacity from one minute after the server is back.
    pub seconds_over: u64,
    /// Milliseconds from the server being back until every record was delivered or parked.
    pub settled_after: Option<u64>,
    /// Requests sent per record written (every request: served, 429 or unanswered).
    pub requests_per_record: f64,
    /// Requests answered 429.
    pub too_many: u64,
    /// Requests that got no answer.
    pub unanswered: u64,
    /// Records parked.
    pub parked: u64,
    /// Records delivered.
    pub delivered: u64,
}

impl Figures {
    /// Measures a run.
    ///
    /// ```
    /// use fleet_sim::{simulate, Figures, Params, Scenario};
    /// use std::time::Duration;
    ///
    /// let params = Params::default().with_devices(50).with_outage(Duration::from_secs(600));
    /// let figures = Figures::of(&params, &simulate(&params, Scenario::Defaults));
    /// assert!(figures.requests_per_record >= 1.0);
    /// ```
    pub fn of(params: &Params, run: &Run) -> Figures {
        let series = &run.series;
        let capacity = f64::from(params.capacity.max(1));
        let back = second(params.back_at());
        let end = run
            .settled_at
            .map_or(series.requests.len(), |t| second(t) + 1)
            .max(back + 1);
        let window: Vec<u32> = (back..end).map(|s| series.at(s)).collect();
        let later: Vec<u32> = (back + 60..end).map(|s| series.at(s)).collect();
        let peak = window.iter().copied().max().unwrap_or(0);
        let peak_later = later.iter().copied().max().unwrap_or(0);
        let mut sorted = window.clone();
        sorted.sort_unstable();
        let p99 = sorted
            .get((sorted.len() * 99).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or(0);
        let seconds_over = later.iter().filter(|&&r| r > params.capacity).count() as u64;
        let sum = |v: &[u32]| v.iter().map(|&x| u64::from(x)).sum::<u64>();
        Figures {
            peak: f64::from(peak) / capacity,
            peak_after_first_minute: f64::from(peak_later) / capacity,
            p99: f64::from(p99) / capacity,
            seconds_over,
            settled_after: run.settled_at.map(|t| t.saturating_sub(params.back_at())),
            requests_per_record: sum(&series.requests) as f64 / run.records.max(1) as f64,
            too_many: sum(&series.too_many),
            unanswered: sum(&series.refused),
            parked: run.parked,
            delivered: run.delivered,
        }
    }
}

fn second(t: u64) -> usize {
    usize::try_from(t / 1_000).unwrap_or(usize::MAX)
}

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A parameter's duration: `2 h`, `60 min`, `90 s`.
fn span(ms_: u64) -> String {
    let s = ms_ / 1_000;
    if s >= 3_600 && s.is_multiple_of(3_600) {
        format!("{} h", s / 3_600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

fn minutes(ms_: u64) -> String {
    let s = ms_ / 1_000;
    format!("{}m {:02}s", s / 60, s % 60)
}

/// The table of figures, one row per scenario.
pub fn table(params: &Params, runs: &[Run]) -> String {
    let mut out = String::from(
        "| scenario | peak ÷ capacity | peak after 1st min ÷ capacity | p99 ÷ capacity | \
         seconds over capacity after 1st min | all settled after | requests per record | \
         parked | wasted: 429 | wasted: unanswered |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let f = Figures::of(params, run);
        let settled = f.settled_after.map_or_else(
            || format!("not within {}", span(ms(params.horizon))),
            minutes,
        );
        let _ = writeln!(
            out,
            "| {} | {:.2}× | {:.2}× | {:.2}× | {} | {} | {:.2} | {} | {} | {} |",
            run.scenario.label(),
            f.peak,
            f.peak_after_first_minute,
            f.p99,
            thousands(f.seconds_over),
            settled,
            f.requests_per_record,
            thousands(f.parked),
            thousands(f.too_many),
            thousands(f.unanswered),
        );
    }
    out
}

/// The whole `FLEET.md`: parameters, table, chart, and what the figures say about our
/// defaults. `timing` is a line about the run itself (left out where bytes must repeat).
pub fn report(params: &Params, runs: &[Run], chart: &str, timing: Option<&str>) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "# A fleet after an outage\n\n\
         Generated by `cargo xtask fleet-sim` (the `fleet-sim` crate): do not edit by hand.\n\n\
         {} devices, each running outbox's own runner scheduler \
         (`outbox_core::runner::scheduler::Scheduler`) and retry policy over its own \
         in-memory store, against one simulated server, on a virtual clock. Each row is one \
         retry schedule; everything else is the same, seed included.\n\n",
        thousands(params.devices as u64),
    );
    let _ = write!(
        out,
        "## Parameters\n\n\
         | parameter | value |\n|---|---|\n\
         | devices | {} |\n\
         | backlog | {} records per device ({} in all): {} |\n\
         | server capacity | {} requests per second; past it, 429 with `Retry-After: {}` |\n\
         | warm-up | {} of a healthy server |\n\
         | outage | {} of no answer at all (connections refused) |\n\
         | flapping after the outage | {} |\n\
         | latency | {}–{} ms per request, uniform |\n\
         | devices offline | online spells of {} on average (exponential), offline spells of {}–{} s (uniform) |\n\
         | runner | `RunnerConfig::default()` (batch 32, concurrency 4, lease 30 s, relink spread 5 min), safety poll {} |\n\
         | horizon | {} after the server is back |\n\
         | seed | {} |\n",
        thousands(params.devices as u64),
        params.backlog,
        thousands(params.records()),
        if params.noticed_within.is_zero() {
            "written at seeded times over the warm-up and the outage".to_owned()
        } else {
            format!(
                "the first written within {} s of the outage's start (the whole fleet meets \
                 the outage together), the others at seeded times over the warm-up and the outage",
                params.noticed_within.as_secs()
            )
        },
        thousands(u64::from(params.capacity)),
        params.retry_after.as_secs(),
        span(ms(params.warmup)),
        span(ms(params.outage)),
        if params.flap.is_zero() {
            "none".to_owned()
        } else {
            format!("{} (20 s down, 40 s up)", span(ms(params.flap)))
        },
        params.latency.0,
        params.latency.1,
        span(ms(params.online_mean)),
        params.offline.0 / 1_000,
        params.offline.1 / 1_000,
        params.safety_poll.map_or_else(
            || "off (one runner per store on a steady clock: it would only re-read the store; a test checks it changes no request)".to_owned(),
            |p| format!("{} s", p.as_secs())
        ),
        span(ms(params.horizon)),
        params.seed,
    );
    if let Some(timing) = timing {
        let _ = writeln!(out, "| run time | {timing} |");
    }
    out.push_str(
        "\n## Scenarios\n\n\
         - **our defaults**: `RetryPolicy::default()`: exponential from 1 s, ×2, 15 min cap, \
         full jitter, 12 answered failures before a record is parked; the server's \
         `Retry-After` is honoured, never below the local schedule.\n\
         - **fixed 30 s retry**: `Backoff::Table([30 s])`, `Jitter::None`.\n\
         - **exponential, no jitter**: the default backoff with `Jitter::None`.\n\
         - **defaults + counter reset on reconnect**: our defaults in an application that, \
         each time the device reconnects, gives every retrying record a fresh budget and makes \
         it due now (`machine::retry_now`): the budget-reset trap.\n\
         - **defaults, Retry-After ignored**: our defaults behind a sink that drops the \
         server's `Retry-After`.\n\n\
         ## Figures\n\n\
         Measured from the moment the server is back for good. *Peak* and *p99* are requests \
         arriving in one second (served, 429 or unanswered) divided by the capacity; *settled* \
         means every record delivered or parked; *wasted* requests are those answered 429 or \
         not answered at all (the outage's probes included).\n\n",
    );
    out.push_str(&table(params, runs));
    let _ = write!(out, "\n![requests per second over time]({chart})\n\n");
    out.push_str(&reading(params, runs));
    out.push_str(
        "\n## How the model works\n\n\
         - Each device is a `Scheduler` fed its inputs on a virtual clock: its writes \
         (`Input::Wake`), its timers (`Input::Timer` at `poll_timeout`), the reports of its \
         deliveries (`Input::Reported`, after the request's latency) and its connectivity \
         (`Input::Online`). Its store calls (`Io`) are made on its own `MemoryStore` as the \
         runner's shell makes them, with the same `machine` functions for the chores.\n\
         - The server decides each request when it arrives: no answer while it is down; \
         otherwise served while fewer than *capacity* requests were served in the current \
         second, else 429 with `Retry-After` as a delay (`RetryAfter::Delay`).\n\
         - One heap of (virtual time, device) orders the whole fleet; a device with nothing \
         left to send leaves it. Every random draw comes from the seed.\n\
         - What the runner does with each answer decides the shape of the load: a no-answer \
         takes the device's link down, and one record then probes on the backoff while the \
         others wait; a 429 with `Retry-After` holds the whole device: its round stops and \
         nothing more is sent until the `Retry-After`, spread by up to half of itself and never \
         below the local schedule, has passed; the device then sends one request, and widens \
         to its concurrency as answers that do not ask it to wait come back; a device coming \
         online, or a probe answered, makes the records that waited for the link due at \
         once, but after a probe answered (the server is back, and so is every device that \
         lost it) the device sends them after a random wait of up to a twelfth of the time it \
         had no answer, at most 5 min (`relink_spread`).\n",
    );
    out
}

/// What the figures say about our defaults, in sentences built from the numbers.
fn reading(params: &Params, runs: &[Run]) -> String {
    let mut out = String::from("## What it shows\n\n");
    let Some(ours) = runs.first() else {
        return out;
    };
    let f = Figures::of(params, ours);
    let settled = f.settled_after.map_or_else(
        || "did not settle within the horizon".to_owned(),
        |t| {
            format!(
                "settled every record {} after the server was back",
                minutes(t)
            )
        },
    );
    if f.seconds_over == 0 {
        let _ = writeln!(
            out,
            "- **{}** kept the server at or below its capacity from the first minute on \
             (peak {:.2}× in the first minute, {:.2}× after it) and {settled}: {} delivered, \
             {} parked.",
            ours.scenario.label(),
            f.peak,
            f.peak_after_first_minute,
            thousands(f.delivered),
            thousands(f.parked),
        );
    } else {
        let _ = writeln!(
            out,
            "- **{}** did **not** keep the server at or below its capacity after the first \
             minute: {} seconds over it, peaking at {:.2}× (p99 {:.2}×); it {settled}: {} \
             delivered, {} parked.",
            ours.scenario.label(),
            thousands(f.seconds_over),
            f.peak_after_first_minute,
            f.p99,
            thousands(f.delivered),
            thousands(f.parked),
        );
        // What no retry schedule can shape: the devices' first requests after the outage.
        let cap = outbox_core::RetryPolicy::default().cap().as_secs_f64();
        let probes = params.devices as f64 / (cap / 2.0);
        let first = probes * f64::from(params.backlog);
        let _ = writeln!(
            out,
            "- What limits it: each device learns that the server is back from its next probe, \
             and after {} without an answer its probes come a full-jitter draw of the \
             {} cap apart, {:.0} s on average: {} devices ÷ {:.0} s = {:.0} probes per second \
             when the server returns. Each answered probe is followed by the device's whole \
             backlog, within `relink_spread` of it, so first contacts and their backlogs ask \
             for up to {} × {:.0} = {} requests per second, {:.2}× the capacity, spread over \
             the relink window and falling as the last probes arrive; a `Retry-After` can only \
             move what is refused into the seconds after. A longer `relink_spread`, a server \
             sized above that demand, or a smaller backlog per device is needed.",
            span(ms(params.outage)),
            span(cap as u64 * 1_000),
            cap / 2.0,
            thousands(params.devices as u64),
            cap / 2.0,
            probes,
            params.backlog,
            probes,
            thousands(first.round() as u64),
            first / f64::from(params.capacity.max(1)),
        );
    }
    for run in &runs[1..] {
        let g = Figures::of(params, run);
        let settled = g.settled_after.map_or_else(
            || "not settled within the horizon".to_owned(),
            |t| format!("settled after {}", minutes(t)),
        );
        let _ = writeln!(
            out,
            "- **{}**: peak {:.2}× ({:.2}× the defaults' peak), {} seconds over capacity after \
             the first minute, {:.2} requests per record ({:.2} for the defaults), {} parked, \
             {settled}.",
            run.scenario.label(),
            g.peak,
            g.peak / f.peak.max(f64::MIN_POSITIVE),
            thousands(g.seconds_over),
            g.requests_per_record,
            f.requests_per_record,
            thousands(g.parked),
        );
    }
    out
}
