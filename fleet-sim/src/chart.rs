//! The chart: requests per second at the server over time, one line per scenario, as SVG
//! written by hand (no fonts, no C dependencies).

use std::fmt::Write;

use crate::params::Params;
use crate::sim::Run;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 520.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// The lowest ratio to capacity drawn (the log axis needs a floor).
const FLOOR: f64 = 0.01;
const COLOURS: [&str; 5] = ["#1b7837", "#d6604d", "#4393c3", "#b2182b", "#8073ac"];

/// The chart as an SVG document.
///
/// The y axis is logarithmic in requests per second ÷ capacity, so a flood many times the
/// capacity and a load just under it both read. Each point is the busiest second of its bin.
///
/// ```
/// use fleet_sim::{chart, simulate, Params, Scenario};
/// use std::time::Duration;
///
/// let params = Params::default().with_devices(20).with_outage(Duration::from_secs(300));
/// let svg = chart(&params, &[simulate(&params, Scenario::Defaults)]);
/// assert!(svg.starts_with("<svg") && svg.contains("our defaults"));
/// ```
pub fn chart(params: &Params, runs: &[Run]) -> String {
    let capacity = f64::from(params.capacity.max(1));
    let from = params.outage_start().saturating_sub(120_000) / 1_000;
    let to = runs
        .iter()
        .map(|r| r.series.requests.len() as u64)
        .max()
        .unwrap_or(0)
        .max(params.back_at() / 1_000 + 600)
        + 60;
    let span = (to - from).max(1);
    let bin = span.div_ceil(1_200).max(1);
    let back = (params.back_at() / 1_000) as f64;
    let peak = runs
        .iter()
        .flat_map(|r| r.series.requests.iter())
        .copied()
        .max()
        .unwrap_or(0);
    let top = (f64::from(peak) / capacity).max(2.0).log10().ceil();
    let bottom = FLOOR.log10();
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |s: f64| LEFT + (s - from as f64) / span as f64 * plot_w;
    let y = |ratio: f64| {
        let l = ratio.max(FLOOR).log10();
        TOP + (top - l) / (top - bottom) * plot_h
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"15\">Requests per second at the server ÷ \
         capacity ({} devices, {} req/s capacity; busiest second of every {bin} s)</text>\n",
        crate::report::thousands(params.devices as u64),
        crate::report::thousands(u64::from(params.capacity)),
    );
    // The outage (and flapping), shaded.
    let _ = writeln!(
        svg,
        "<rect x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{plot_h}\" fill=\"#eeeeee\"/>",
        x((params.outage_start() / 1_000) as f64),
        x(back) - x((params.outage_start() / 1_000) as f64),
    );
    // Decades on the y axis, the capacity line bold.
    let mut decade = bottom;
    while decade <= top + 1e-9 {
        let ratio = 10f64.powf(decade);
        let yy = y(ratio);
        let (stroke, width) = if decade.abs() < 1e-9 {
            ("#000000", 1.5)
        } else {
            ("#cccccc", 0.5)
        };
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"{stroke}\" \
             stroke-width=\"{width}\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            if decade.abs() < 1e-9 {
                "capacity".to_owned()
            } else {
                format!("{ratio}×")
            },
        );
        decade += 1.0;
    }
    // Minutes from the moment the server is back, every 15.
    let first = ((from as f64 - back) / 900.0).ceil() as i64;
    let last = ((to as f64 - back) / 900.0).floor() as i64;
    for k in first..=last {
        let s = back + k as f64 * 900.0;
        let xx = x(s);
        let _ = writeln!(
            svg,
            "<line x1=\"{xx:.1}\" y1=\"{TOP}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#dddddd\" \
             stroke-width=\"0.5\"/>\n<text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + plot_h,
            TOP + plot_h + 16.0,
            k * 15,
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">minutes since the server is back \
         (grey: the outage)</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0,
    );
    for (i, run) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points = String::new();
        let mut s = from;
        while s < to {
            let busiest = (s..s + bin)
                .map(|t| run.series.at(usize::try_from(t).unwrap_or(usize::MAX)))
                .max()
                .unwrap_or(0);
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                x(s as f64),
                y(f64::from(busiest) / capacity)
            );
            s += bin;
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.2\" \
             stroke-opacity=\"0.85\" points=\"{}\"/>",
            points.trim_end(),
        );
        let ly = TOP + 14.0 + i as f64 * 16.0;
        let lx = WIDTH - RIGHT - 260.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{lx:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" \
             stroke-width=\"3\"/>\n<text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 4.0,
            lx + 20.0,
            ly - 4.0,
            lx + 26.0,
            run.scenario.label(),
        );
    }
    svg.push_str("</svg>\n");
    svg
}
