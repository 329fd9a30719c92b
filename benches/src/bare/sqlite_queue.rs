//! The bare SQLite queue: one table, one partial index, WAL with `synchronous = FULL`.

use outbox_core::Result;
use rusqlite::{params, Connection};
use tempfile::TempDir;

use super::BareEngine;
use crate::error::engine;
use crate::PAYLOAD;

/// A queue table on rusqlite, at the SQLite store's default durability.
///
/// ```
/// use outbox_benches::bare::{BareEngine, BareSqlite};
/// let mut bare = BareSqlite::create()?;
/// bare.insert_each(2, 1_000)?;
/// assert_eq!(bare.due(1_000, 32)?, 2);
/// # Ok::<(), outbox_core::Error>(())
/// ```
#[derive(Debug)]
pub struct BareSqlite {
    conn: Connection,
    // Dropped after the connection (fields drop in order), which removes the file.
    _dir: TempDir,
}

impl BareSqlite {
    /// A fresh database file in a temporary directory.
    pub fn create() -> Result<Self> {
        let dir = tempfile::tempdir().map_err(engine("creating a temporary directory"))?;
        let conn =
            Connection::open(dir.path().join("bare.db")).map_err(engine("bare sqlite: open"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(engine("bare sqlite: journal_mode"))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(engine("bare sqlite: synchronous"))?;
        conn.execute_batch(
            "CREATE TABLE q (
                id INTEGER PRIMARY KEY,
                due INTEGER NOT NULL,
                payload BLOB NOT NULL,
                lease INTEGER
            );
            CREATE INDEX q_due ON q(due, id) WHERE lease IS NULL;",
        )
        .map_err(engine("bare sqlite: schema"))?;
        Ok(BareSqlite { conn, _dir: dir })
    }

    fn insert_in(conn: &Connection, count: usize, at: u64) -> Result<()> {
        let mut stmt = conn
            .prepare_cached("INSERT INTO q (due, payload) VALUES (?1, ?2)")
            .map_err(engine("bare sqlite: prepare insert"))?;
        for _ in 0..count {
            stmt.execute(params![ms(at), &PAYLOAD[..]])
                .map_err(engine("bare sqlite: insert"))?;
        }
        Ok(())
    }
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl BareEngine for BareSqlite {
    fn insert_each(&mut self, count: usize, at: u64) -> Result<()> {
        for _ in 0..count {
            let tx = self
                .conn
                .transaction()
                .map_err(engine("bare sqlite: begin"))?;
            Self::insert_in(&tx, 1, at)?;
            tx.commit().map_err(engine("bare sqlite: commit"))?;
        }
        Ok(())
    }

    fn insert_batch(&mut self, count: usize, at: u64) -> Result<()> {
        let tx = self
            .conn
            .transaction()
            .map_err(engine("bare sqlite: begin"))?;
        Self::insert_in(&tx, count, at)?;
        tx.commit().map_err(engine("bare sqlite: commit"))
    }

    fn drain(&mut self, per_tx: usize, now: u64) -> Result<u64> {
        let mut removed = 0u64;
        let limit = i64::try_from(per_tx).unwrap_or(i64::MAX);
        loop {
            let tx = self
                .conn
                .transaction()
                .map_err(engine("bare sqlite: begin"))?;
            let ids: Vec<i64> = {
                let mut claim = tx
                    .prepare_cached(
                        "UPDATE q SET lease = 1 WHERE id IN (SELECT id FROM q \
                         WHERE lease IS NULL AND due <= ?1 ORDER BY due, id LIMIT ?2) \
                         RETURNING id",
                    )
                    .map_err(engine("bare sqlite: prepare claim"))?;
                let ids = claim
                    .query_map(params![ms(now), limit], |row| row.get(0))
                    .map_err(engine("bare sqlite: claim"))?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(engine("bare sqlite: claim"))?;
                ids
            };
            tx.commit().map_err(engine("bare sqlite: commit claim"))?;
            if ids.is_empty() {
                return Ok(removed);
            }
            let tx = self
                .conn
                .transaction()
                .map_err(engine("bare sqlite: begin"))?;
            {
                let mut delete = tx
                    .prepare_cached("DELETE FROM q WHERE id = ?1")
                    .map_err(engine("bare sqlite: prepare delete"))?;
                for id in &ids {
                    delete
                        .execute([id])
                        .map_err(engine("bare sqlite: delete"))?;
                }
            }
            tx.commit().map_err(engine("bare sqlite: commit delete"))?;
            removed += ids.len() as u64;
        }
    }

    fn due(&self, now: u64, limit: usize) -> Result<usize> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id FROM q WHERE lease IS NULL AND due <= ?1 ORDER BY due, id LIMIT ?2",
            )
            .map_err(engine("bare sqlite: prepare due"))?;
        let rows = stmt
            .query_map(
                params![ms(now), i64::try_from(limit).unwrap_or(i64::MAX)],
                |row| row.get::<_, i64>(0),
            )
            .map_err(engine("bare sqlite: due"))?;
        let mut count = 0;
        for row in rows {
            row.map_err(engine("bare sqlite: due"))?;
            count += 1;
        }
        Ok(count)
    }
}
