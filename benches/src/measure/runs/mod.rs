//! The runs of the `measure` program, one module per family of workloads: the enqueue paths
//! ([`enqueue`]), the cost of one store call ([`calls`]) and the drain ([`drain`]); and
//! [`opened`], the store every run opens at the chosen level and closes after.

mod calls;
mod drain;
mod enqueue;
mod opened;

use outbox_core::{Error, Result};

use super::{Args, MeasureError, Report, Workload};
use crate::pg::{self, PgServer};
use crate::subject::StoreKind;
use crate::PAYLOAD;

/// One run: the command line, and the PostgreSQL server when the store is on one.
pub(super) struct Bench<'a> {
    args: &'a Args,
    server: Option<PgServer>,
}

impl<'a> Bench<'a> {
    /// The run `args` asks for; for PostgreSQL, after finding the server at `OUTBOX_PG_URL`.
    pub(super) async fn new(args: &'a Args) -> std::result::Result<Bench<'a>, MeasureError> {
        let server = match args.store {
            StoreKind::Postgres => {
                let url = std::env::var("OUTBOX_PG_URL").unwrap_or_else(|_| pg::DEFAULT_URL.into());
                match PgServer::at(&url).await {
                    Ok(server) => Some(server),
                    Err(source) => return Err(MeasureError::NoServer { url, source }),
                }
            }
            StoreKind::Memory | StoreKind::Sqlite | StoreKind::Redb => None,
        };
        Ok(Bench { args, server })
    }
}

impl Bench<'_> {
    /// Runs the workload and returns its figures (without the heading).
    pub(super) async fn measure(&self) -> Result<Report> {
        match self.args.workload {
            Workload::Burst { rounds } => self.burst(rounds).await,
            Workload::EnqueueRate { n } => self.enqueue_rate(n).await,
            Workload::EnqueueVsBare { rounds, n } => self.enqueue_vs_bare(rounds, n).await,
            Workload::CallOverhead { n } => self.call_overhead(n).await,
            Workload::IdleClaims { n } => self.idle_claims(n).await,
            Workload::DrainRate { n } => self.drain_rate(n).await,
        }
    }

    /// The report's first line: the workload, the store, its durability and where it ran.
    pub(super) fn heading(&self) -> String {
        let place = match &self.server {
            Some(server) => format!("server {}", server.url()),
            None => format!("directory {}", self.args.dir.display()),
        };
        format!(
            "{} on {} ({}), payload {} bytes, {} CPU cores, {place}",
            self.args.workload.name(),
            self.kind(),
            self.args.level.describe(self.server.as_ref()),
            PAYLOAD.len(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        )
    }

    /// The store measured.
    fn kind(&self) -> StoreKind {
        self.args.store
    }

    fn server(&self) -> Result<&PgServer> {
        self.server
            .as_ref()
            .ok_or_else(|| failed("postgres without a server".into()))
    }
}

/// A measurement that went wrong, saying how.
fn failed(detail: String) -> Error {
    Error::Backend {
        detail,
        source: None,
    }
}
