//! What one store call costs: `call-overhead` (a `get` against the same read on the engine
//! alone, and an empty `spawn_blocking` round trip) and `idle-claims` (the claims of an idle
//! runner on a queue where nothing is due).

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{Error, NewRecord, RecordId, Result};
use redb::{ReadableDatabase, TableDefinition};

use super::opened::Engine;
use super::{failed, Bench};
use crate::error::engine;
use crate::measure::report::{figure, micros};
use crate::measure::Report;
use crate::{pg, workload, PAYLOAD};

/// Records that are not due yet under the idle claims.
const IDLE_BACKLOG: usize = 100;

/// The redb store's record table (id → encoded record): the bare read of `call-overhead`
/// fetches a row from it with redb alone.
const REDB_RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("records");

impl Bench<'_> {
    /// `call-overhead`: [`Workload::CallOverhead`](crate::measure::Workload::CallOverhead).
    pub(super) async fn call_overhead(&self, n: usize) -> Result<Report> {
        let (store_get, bare_get) = self
            .with_store(async |opened| {
                let id = opened
                    .store
                    .enqueue(vec![NewRecord::new(PAYLOAD.to_vec())], system_now())
                    .await?[0];
                let started = Instant::now();
                for _ in 0..n {
                    if opened.store.get(id).await?.is_none() {
                        return Err(failed(format!("record {} vanished", id.0)));
                    }
                }
                let store_get = started.elapsed();
                let bare_get = bare_reads(&opened.engine, id, n).await?;
                Ok((store_get, bare_get))
            })
            .await?;
        let started = Instant::now();
        for _ in 0..n {
            tokio::task::spawn_blocking(|| ())
                .await
                .map_err(Error::backend)?;
        }
        let hop = started.elapsed();
        let mut figures = vec![figure("store.get", micros(store_get, n), "µs per call", 2)];
        let mut notes = Vec::new();
        match bare_get {
            Some(bare) => figures.push(figure(
                "the same read on the engine",
                micros(bare, n),
                "µs per call",
                2,
            )),
            None => notes.push("the memory store is its own engine: no read to compare".into()),
        }
        figures.push(figure(
            "empty spawn_blocking round trip",
            micros(hop, n),
            "µs",
            2,
        ));
        Ok(Report::one_row(
            format!("{n} calls of each"),
            figures,
            notes,
        ))
    }

    /// `idle-claims`: [`Workload::IdleClaims`](crate::measure::Workload::IdleClaims).
    pub(super) async fn idle_claims(&self, n: usize) -> Result<Report> {
        let (elapsed, commits) = self
            .with_store(async |opened| {
                workload::fill_not_due(&opened.store, IDLE_BACKLOG).await?;
                let before = opened.commits();
                let started = Instant::now();
                for _ in 0..n {
                    let claimed = workload::what_is_due(&opened.store).await?;
                    if claimed != 0 {
                        return Err(failed(format!("an idle claim took {claimed} records")));
                    }
                }
                let elapsed = started.elapsed();
                Ok((elapsed, opened.commits_since(before)))
            })
            .await?;
        let mut figures = vec![figure("per claim", micros(elapsed, n), "µs", 2)];
        let mut notes = Vec::new();
        match commits {
            Some(commits) => figures.push(figure("commits", commits as f64, "", 0)),
            None => notes.push(self.uncounted()),
        }
        Ok(Report::one_row(
            format!("{n} idle claims (nothing due among {IDLE_BACKLOG} later records)"),
            figures,
            notes,
        ))
    }
}

/// Reads the row of record `id` `n` times with the engine alone, without the store: the
/// timing of the reads, or `None` for the memory store.
async fn bare_reads(on: &Engine, id: RecordId, n: usize) -> Result<Option<Duration>> {
    let key = i64::try_from(id.0).map_err(Error::backend)?;
    match on {
        Engine::Memory => Ok(None),
        Engine::Sqlite(store) => {
            let path = store.path().to_owned();
            let took = tokio::task::spawn_blocking(move || -> Result<Duration> {
                let conn = rusqlite::Connection::open(path).map_err(engine("sqlite: open"))?;
                let started = Instant::now();
                for _ in 0..n {
                    let mut stmt = conn
                        .prepare_cached("SELECT * FROM records WHERE id = ?1")
                        .map_err(engine("sqlite: prepare"))?;
                    let mut rows = stmt.query([key]).map_err(engine("sqlite: get"))?;
                    while rows.next().map_err(engine("sqlite: get"))?.is_some() {}
                }
                Ok(started.elapsed())
            })
            .await
            .map_err(Error::backend)??;
            Ok(Some(took))
        }
        Engine::Redb(store) => {
            let store = Arc::clone(store);
            let took = tokio::task::spawn_blocking(move || -> Result<Duration> {
                let db = store
                    .database()
                    .ok_or_else(|| failed("redb: the store is read-only".into()))?;
                let started = Instant::now();
                for _ in 0..n {
                    let txn = db.begin_read().map_err(engine("redb: begin read"))?;
                    let table = txn
                        .open_table(REDB_RECORDS)
                        .map_err(engine("redb: records table"))?;
                    if table.get(id.0).map_err(engine("redb: get"))?.is_none() {
                        return Err(failed(format!("redb: record {} vanished", id.0)));
                    }
                }
                Ok(started.elapsed())
            })
            .await
            .map_err(Error::backend)??;
            Ok(Some(took))
        }
        Engine::Postgres(schema) => {
            let client = pg::connect(schema.url()).await?;
            let get = client
                .prepare(&format!(
                    "SELECT * FROM \"{}\".records WHERE id = $1",
                    schema.name()
                ))
                .await
                .map_err(engine("postgres: prepare"))?;
            let started = Instant::now();
            for _ in 0..n {
                client
                    .query_opt(&get, &[&key])
                    .await
                    .map_err(engine("postgres: get"))?
                    .ok_or_else(|| failed(format!("postgres: record {} vanished", id.0)))?;
            }
            Ok(Some(started.elapsed()))
        }
    }
}
