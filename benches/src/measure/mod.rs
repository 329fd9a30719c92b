//! The workloads of the `measure` program (`src/bin/measure.rs`): one measurement per run, on
//! the store named on its command line, built from the same workloads, bare engines and
//! PostgreSQL helpers as the criterion harness.
//!
//! [`Args::parse`] reads the command line (`args`, with the [`Workload`] and the durability
//! [`Level`] it names), [`run`] measures (`runs`, a module per family of workloads) and returns
//! a [`Report`] whose `Display` is what the program prints (`report`). A workload that makes
//! no sense for a store (a bare comparison for the memory store, which has no engine under it)
//! is refused with [`MeasureError::NotAvailable`] before anything is opened.
//!
//! ```
//! # fn main() -> Result<(), outbox_benches::measure::MeasureError> {
//! use outbox_benches::measure::{self, Args};
//!
//! let args = Args::parse(["idle-claims", "--store", "memory", "--n", "10"].map(String::from))?;
//! let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
//! let report = runtime.block_on(measure::run(&args))?;
//! assert!(report.figure("idle claims", "per claim").unwrap() > 0.0);
//! # Ok(())
//! # }
//! ```

mod args;
mod level;
mod report;
mod runs;
mod workload;

use std::fmt;

use outbox_core::Error;

pub use args::{usage, Args};
pub use level::{Level, RedbLevel};
pub use report::{Figure, Report, Row};
pub use workload::{Workload, PRODUCERS};

use crate::subject::StoreKind;

/// Measures what `args` asks for.
pub async fn run(args: &Args) -> Result<Report, MeasureError> {
    let bench = runs::Bench::new(args).await?;
    let mut report = bench.measure().await?;
    report.heading = bench.heading();
    Ok(report)
}

/// What went wrong, by kind: the command line, a workload a store cannot run, or the run.
#[derive(Debug)]
pub enum MeasureError {
    /// The command line does not say what to measure (exit status 2).
    Usage(String),
    /// The workload or setting has no meaning for this store (exit status 3).
    NotAvailable {
        /// The workload or flag asked for.
        what: String,
        /// The store it was asked of.
        store: StoreKind,
        /// Why the store cannot do it.
        why: &'static str,
    },
    /// No PostgreSQL server answered.
    NoServer {
        /// Where the program looked (`OUTBOX_PG_URL`, or [`crate::pg::DEFAULT_URL`]).
        url: String,
        /// What the connection attempt said.
        source: Error,
    },
    /// A store or engine failed during the measurement.
    Failed(Error),
}

impl fmt::Display for MeasureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeasureError::Usage(message) => f.write_str(message),
            MeasureError::NotAvailable { what, store, why } => {
                write!(f, "{what} is not available for {store}: {why}")
            }
            MeasureError::NoServer { url, source } => {
                write!(f, "no PostgreSQL server answered at {url}: {source}")
            }
            MeasureError::Failed(err) => write!(f, "the measurement failed: {err}"),
        }
    }
}

impl std::error::Error for MeasureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MeasureError::NoServer { source, .. } | MeasureError::Failed(source) => Some(source),
            _ => None,
        }
    }
}

impl From<Error> for MeasureError {
    fn from(err: Error) -> Self {
        MeasureError::Failed(err)
    }
}
