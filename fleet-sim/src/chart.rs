//! The chart: requests per second at the server over time, one line per scenario, as SVG
//! written by hand (no fonts, no C dependencies).

use std::fmt::Write;

use crate::params::Params;
use crate::sim::Run;

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const PANEL: f64 = 260.0;
/// The lowest ratio to capacity drawn (the log axis needs a floor).
const FLOOR: f64 = 0.01;
const COLOURS: [&str; 5] = ["#1b7837", "#d6604d", "#4393c3", "#b2182b", "#8073ac"];

/// One panel: seconds `from..to` of every run, drawn at `top`.
struct Panel<'a> {
    params: &'a Params,
    runs: &'a [Run],
    from: u64,
    to: u64,
    top: f64,
    /// The highest decade of the y axis (log10 of the ratio to capacity).
    decades: f64,
    title: &'a str,
}

impl Panel<'_> {
    fn draw(&self, svg: &mut String) {
        let params = self.params;
        let capacity = f64::from(params.capacity.max(1));
        let span = (self.to - self.from).max(1);
        let bin = span.div_ceil(1_000).max(1);
        let back = (params.back_at() / 1_000) as f64;
        let top = self.decades;
        let bottom = FLOOR.log10();
        let plot_w = WIDTH - LEFT - RIGHT;
        let (from, to, y0) = (self.from, self.to, self.top);
        let x = |s: f64| LEFT + (s - from as f64) / span as f64 * plot_w;
        let y = |ratio: f64| {
            let l = ratio.max(FLOOR).log10();
            y0 + (top - l) / (top - bottom) * PANEL
        };
        let _ = writeln!(
            svg,
            "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"13\">{} (busiest second of every \
             {bin} s)</text>",
            y0 - 8.0,
            self.title,
        );
        // The outage (and any flapping), shaded.
        let outage = ((params.outage_start() / 1_000) as f64).max(from as f64);
        if outage < back {
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{y0}\" width=\"{:.1}\" height=\"{PANEL}\" \
                 fill=\"#eeeeee\"/>",
                x(outage),
                x(back.min(to as f64)) - x(outage),
            );
        }
        // Decades on the y axis, the capacity line bold.
        let mut decade = bottom;
        while decade <= top + 1e-9 {
            let ratio = 10f64.powf(decade);
            let yy = y(ratio);
            let capacity_line = decade.abs() < 1e-9;
            let (stroke, width) = if capacity_line {
                ("#000000", 1.5)
            } else {
                ("#cccccc", 0.5)
            };
            let _ = writeln!(
                svg,
                "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" \
                 stroke=\"{stroke}\" stroke-width=\"{width}\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" \
                 text-anchor=\"end\">{}</text>",
                WIDTH - RIGHT,
                LEFT - 6.0,
                yy + 4.0,
                if capacity_line {
                    "capacity".to_owned()
                } else {
                    format!("{ratio}×")
                },
            );
            decade += 1.0;
        }
        // Minutes since the server is back: every 15 on a long panel, every 5 on a short one.
        let step = if span > 3_600 { 900.0 } else { 300.0 };
        let first = ((from as f64 - back) / step).ceil() as i64;
        let last = ((to as f64 - back) / step).floor() as i64;
        for k in first..=last {
            let s = back + k as f64 * step;
            let xx = x(s);
            let _ = writeln!(
                svg,
                "<line x1=\"{xx:.1}\" y1=\"{y0}\" x2=\"{xx:.1}\" y2=\"{:.1}\" \
                 stroke=\"#dddddd\" stroke-width=\"0.5\"/>\n<text x=\"{xx:.1}\" y=\"{:.1}\" \
                 text-anchor=\"middle\">{}</text>",
                y0 + PANEL,
                y0 + PANEL + 16.0,
                k * (step as i64 / 60),
            );
        }
        // Our defaults last, so they are drawn on top.
        for (i, run) in self.runs.iter().enumerate().rev() {
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
            let width = if i == 0 { 2.0 } else { 1.2 };
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"{width}\" \
                 stroke-opacity=\"0.85\" points=\"{}\"/>",
                points.trim_end(),
            );
        }
    }
}

/// The chart as an SVG document: requests per second at the server over time, the whole run
/// above and the recovery below.
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
    let back = params.back_at() / 1_000;
    let end = runs
        .iter()
        .map(|r| r.series.requests.len() as u64)
        .max()
        .unwrap_or(0)
        .max(back + 600)
        + 60;
    let peak = runs
        .iter()
        .flat_map(|r| r.series.requests.iter())
        .copied()
        .max()
        .unwrap_or(0);
    let decades = (f64::from(peak) / capacity).max(2.0).log10().ceil();
    let height = 90.0 + 2.0 * PANEL + 60.0 + 50.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"15\">Requests per second at the server ÷ \
         capacity: {} devices, {} requests per second of capacity, a {} min outage (grey)</text>\n",
        crate::report::thousands(params.devices as u64),
        crate::report::thousands(u64::from(params.capacity)),
        params.outage.as_secs() / 60,
    );
    // The legend, in one row under the title.
    let mut lx = LEFT;
    for (i, run) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let label = run.scenario.label();
        let _ = writeln!(
            svg,
            "<line x1=\"{lx:.1}\" y1=\"42\" x2=\"{:.1}\" y2=\"42\" stroke=\"{colour}\" \
             stroke-width=\"3\"/>\n<text x=\"{:.1}\" y=\"46\">{label}</text>",
            lx + 18.0,
            lx + 22.0,
        );
        lx += 40.0 + 6.2 * label.chars().count() as f64;
    }
    Panel {
        params,
        runs,
        from: (params.outage_start() / 1_000).saturating_sub(120),
        to: end,
        top: 90.0,
        decades,
        title: "The whole run",
    }
    .draw(&mut svg);
    Panel {
        params,
        runs,
        from: back.saturating_sub(120),
        to: end.min(back + 45 * 60),
        top: 90.0 + PANEL + 60.0,
        decades,
        title: "From 2 minutes before the server is back",
    }
    .draw(&mut svg);
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">minutes since the server is \
         back</text>",
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        height - 12.0,
    );
    svg.push_str("</svg>\n");
    svg
}
