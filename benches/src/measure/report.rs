//! What one measurement reports: its figures, row by row, and the notes on what they leave
//! out; printed by the program as they are.

use std::fmt;
use std::time::Duration;

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// What it measures (`per round`, `rate`).
    pub name: &'static str,
    /// Its value.
    pub value: f64,
    /// Its unit (`µs`, `enqueues/s`), empty for a plain number.
    pub unit: &'static str,
    /// Digits printed after the decimal point.
    pub decimals: usize,
}

/// The figures of one part of a measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was done (`100 rounds of 64 concurrent enqueues`).
    pub label: String,
    /// What it measured.
    pub figures: Vec<Figure>,
}

/// What one run measured: printed by the program as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The workload, the store, its durability and where it ran.
    pub heading: String,
    /// The figures, part by part.
    pub rows: Vec<Row>,
    /// What the figures leave out, and how to measure it otherwise.
    pub notes: Vec<String>,
}

impl Report {
    /// A report of `rows` and `notes`; [`run`](super::run) writes its heading.
    pub(super) fn new(rows: Vec<Row>, notes: Vec<String>) -> Report {
        Report {
            heading: String::new(),
            rows,
            notes,
        }
    }

    /// A report of one row, labelled `label`.
    pub(super) fn one_row(label: String, figures: Vec<Figure>, notes: Vec<String>) -> Report {
        Report::new(vec![Row { label, figures }], notes)
    }

    /// The figure `name` of the first row whose label contains `row`.
    pub fn figure(&self, row: &str, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .filter(|r| r.label.contains(row))
            .flat_map(|r| &r.figures)
            .find(|f| f.name == name)
            .map(|f| f.value)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.heading)?;
        for row in &self.rows {
            writeln!(f, "{}:", row.label)?;
            for figure in &row.figures {
                writeln!(
                    f,
                    "  {:<30} {:>12.*} {}",
                    figure.name, figure.decimals, figure.value, figure.unit
                )?;
            }
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}

/// A figure of `value` in `unit`, printed with `decimals` digits after the point.
pub(super) fn figure(
    name: &'static str,
    value: f64,
    unit: &'static str,
    decimals: usize,
) -> Figure {
    Figure {
        name,
        value,
        unit,
        decimals,
    }
}

/// Microseconds per operation.
pub(super) fn micros(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_secs_f64() * 1e6 / ops.max(1) as f64
}

/// Operations per second.
pub(super) fn rate(elapsed: Duration, ops: usize) -> f64 {
    ops as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// The middle value (the upper one of an even count), or NaN without values.
pub(super) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
