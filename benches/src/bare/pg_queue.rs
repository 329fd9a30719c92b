//! The bare PostgreSQL queue: one table and one partial index on `tokio-postgres`, drained by
//! several connections at once with `FOR UPDATE SKIP LOCKED`, at the server's
//! `synchronous_commit`.
//!
//! `tokio-postgres` does its work on the network, not on the calling thread, so this queue is
//! driven from the caller's runtime like the stores.

use futures::future::try_join_all;
use outbox_core::Result;
use tokio_postgres::Client;

use crate::error::engine;
use crate::pg::{connect, PgSchema};
use crate::PAYLOAD;

/// The queue table in its own schema, with one connection per worker.
#[derive(Debug)]
pub struct BarePg {
    schema: PgSchema,
    workers: Vec<Client>,
}

impl BarePg {
    /// Creates the table in `schema` (which must not exist yet) and opens `workers`
    /// connections (at least one).
    pub async fn create(schema: PgSchema, workers: usize) -> Result<Self> {
        let mut clients = Vec::with_capacity(workers.max(1));
        for _ in 0..workers.max(1) {
            clients.push(connect(schema.url()).await?);
        }
        let name = schema.name();
        clients[0]
            .batch_execute(&format!(
                "CREATE SCHEMA \"{name}\";
                 CREATE TABLE \"{name}\".q (
                     id BIGSERIAL PRIMARY KEY,
                     due BIGINT NOT NULL,
                     payload BYTEA NOT NULL,
                     lease BIGINT
                 );
                 CREATE INDEX q_due ON \"{name}\".q (due, id) WHERE lease IS NULL;"
            ))
            .await
            .map_err(engine("bare postgres: schema"))?;
        Ok(BarePg {
            schema,
            workers: clients,
        })
    }

    /// The schema the queue lives in (drop it with [`PgSchema::drop`] when done).
    pub fn schema(&self) -> &PgSchema {
        &self.schema
    }

    /// Inserts `count` records due at `at` in one transaction.
    pub async fn insert_batch(&self, count: usize, at: u64) -> Result<()> {
        self.insert_payloads(count, at, &PAYLOAD).await
    }

    /// Inserts `count` records due at `at`, each with `payload`, in one transaction.
    pub async fn insert_payloads(&self, count: usize, at: u64, payload: &[u8]) -> Result<()> {
        let sql = format!(
            "INSERT INTO \"{}\".q (due, payload) SELECT $1, $2 FROM generate_series(1, $3)",
            self.schema.name()
        );
        self.workers[0]
            .execute(
                &sql,
                &[&ms(at), &payload, &i32::try_from(count).unwrap_or(i32::MAX)],
            )
            .await
            .map_err(engine("bare postgres: insert"))?;
        Ok(())
    }

    /// Every connection at once claims the records due at `now`, `per_tx` at a time with
    /// `FOR UPDATE SKIP LOCKED` (one transaction), and deletes each claimed batch (a second
    /// transaction), until it finds none. Returns how many records they removed.
    pub async fn drain(&self, per_tx: usize, now: u64) -> Result<u64> {
        let removed = try_join_all(
            self.workers
                .iter()
                .map(|client| self.claim_and_delete(client, per_tx, now, None)),
        )
        .await?;
        Ok(removed.into_iter().sum())
    }

    /// One connection's loop of [`drain`](Self::drain): claims `per_tx` due records, deletes
    /// them, until it finds none; with `took`, times each claim statement. Returns how many it
    /// removed.
    async fn claim_and_delete(
        &self,
        client: &Client,
        per_tx: usize,
        now: u64,
        mut took: Option<&mut Vec<std::time::Duration>>,
    ) -> Result<u64> {
        let name = self.schema.name();
        let claim = client
            .prepare(&format!(
                "UPDATE \"{name}\".q SET lease = 1 WHERE id IN (SELECT id FROM \"{name}\".q \
                 WHERE lease IS NULL AND due <= $1 ORDER BY due, id LIMIT $2 \
                 FOR UPDATE SKIP LOCKED) RETURNING id"
            ))
            .await
            .map_err(engine("bare postgres: prepare claim"))?;
        let delete = client
            .prepare(&format!("DELETE FROM \"{name}\".q WHERE id = ANY($1)"))
            .await
            .map_err(engine("bare postgres: prepare delete"))?;
        let limit = i64::try_from(per_tx).unwrap_or(i64::MAX);
        let mut removed = 0u64;
        loop {
            let started = std::time::Instant::now();
            // Each statement outside a transaction block commits on its own.
            let ids: Vec<i64> = client
                .query(&claim, &[&ms(now), &limit])
                .await
                .map_err(engine("bare postgres: claim"))?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<std::result::Result<_, _>>()
                .map_err(engine("bare postgres: claim"))?;
            if let Some(took) = took.as_deref_mut() {
                took.push(started.elapsed());
            }
            if ids.is_empty() {
                return Ok(removed);
            }
            client
                .execute(&delete, &[&ids])
                .await
                .map_err(engine("bare postgres: delete"))?;
            removed += ids.len() as u64;
        }
    }
}

impl BarePg {
    /// Every connection at once removes the records due at `now`, `per_tx` at a time, each
    /// batch with one statement that commits on its own (`DELETE … WHERE id IN (SELECT …
    /// FOR UPDATE SKIP LOCKED) RETURNING`): the loop of a queue that hands each record over at
    /// most once, with nothing to release if its consumer dies. Returns how many it removed.
    pub async fn drain_deleting(&self, per_tx: usize, now: u64) -> Result<u64> {
        let name = self.schema.name();
        let delete = format!(
            "DELETE FROM \"{name}\".q WHERE id IN (SELECT id FROM \"{name}\".q \
             WHERE lease IS NULL AND due <= $1 ORDER BY due, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
             RETURNING id, payload"
        );
        let limit = i64::try_from(per_tx).unwrap_or(i64::MAX);
        let removed = try_join_all(self.workers.iter().map(|client| {
            let delete = &delete;
            async move {
                let delete = client
                    .prepare(delete)
                    .await
                    .map_err(engine("bare postgres: prepare delete"))?;
                let mut removed = 0u64;
                loop {
                    let rows = client
                        .query(&delete, &[&ms(now), &limit])
                        .await
                        .map_err(engine("bare postgres: delete"))?;
                    if rows.is_empty() {
                        return Ok::<u64, outbox_core::Error>(removed);
                    }
                    removed += rows.len() as u64;
                }
            }
        }))
        .await?;
        Ok(removed.into_iter().sum())
    }

    /// One connection claims and deletes the records due at `now`, `per_tx` at a time, as
    /// [`drain`](Self::drain) does, and returns how long each claim statement took, in order:
    /// whether the claim slows as the drain leaves dead index entries behind it.
    pub async fn claim_times(&self, per_tx: usize, now: u64) -> Result<Vec<std::time::Duration>> {
        let mut took = Vec::new();
        self.claim_and_delete(&self.workers[0], per_tx, now, Some(&mut took))
            .await?;
        Ok(took)
    }
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
