//! The bare redb queue: a table of payloads, a due index keyed by `(deadline, id)` and a lease
//! table, committed with `Durability::Immediate` and redb's own one-sync commit (the redb
//! store's defaults: no two-phase commit, no quick repair).

use outbox_core::Result;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use tempfile::TempDir;

use super::BareEngine;
use crate::error::engine;
use crate::PAYLOAD;

const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");
const DUE: TableDefinition<(u64, u64), ()> = TableDefinition::new("due");
const LEASES: TableDefinition<u64, u64> = TableDefinition::new("leases");

/// The redb store's page cache, so both read the disk alike.
const CACHE: usize = 16 * 1024 * 1024;

/// A queue on redb, at the redb store's default durability.
///
/// ```
/// use outbox_benches::bare::{BareEngine, BareRedb};
/// let mut bare = BareRedb::create()?;
/// bare.insert_batch(2, 1_000)?;
/// assert_eq!(bare.drain(100, 1_000)?, 2);
/// # Ok::<(), outbox_core::Error>(())
/// ```
#[derive(Debug)]
pub struct BareRedb {
    db: Database,
    next_id: u64,
    // Dropped after the database (fields drop in order), which removes the file.
    _dir: TempDir,
}

impl BareRedb {
    /// A fresh database file in a temporary directory.
    pub fn create() -> Result<Self> {
        let dir = tempfile::tempdir().map_err(engine("creating a temporary directory"))?;
        let mut builder = Database::builder();
        builder.set_cache_size(CACHE);
        let db = builder
            .create(dir.path().join("bare.redb"))
            .map_err(engine("bare redb: create"))?;
        let bare = BareRedb {
            db,
            next_id: 1,
            _dir: dir,
        };
        let txn = bare.begin()?;
        {
            txn.open_table(ROWS).map_err(engine("bare redb: table"))?;
            txn.open_table(DUE).map_err(engine("bare redb: table"))?;
            txn.open_table(LEASES).map_err(engine("bare redb: table"))?;
        }
        txn.commit().map_err(engine("bare redb: commit"))?;
        Ok(bare)
    }

    fn begin(&self) -> Result<WriteTransaction> {
        let mut txn = self.db.begin_write().map_err(engine("bare redb: begin"))?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(engine("bare redb: durability"))?;
        txn.set_two_phase_commit(false);
        txn.set_quick_repair(false);
        Ok(txn)
    }

    fn insert_in(&mut self, txn: &WriteTransaction, count: usize, at: u64) -> Result<()> {
        let mut rows = txn.open_table(ROWS).map_err(engine("bare redb: table"))?;
        let mut due = txn.open_table(DUE).map_err(engine("bare redb: table"))?;
        for _ in 0..count {
            let id = self.next_id;
            self.next_id += 1;
            rows.insert(id, &PAYLOAD[..])
                .map_err(engine("bare redb: insert"))?;
            due.insert((at, id), ())
                .map_err(engine("bare redb: insert"))?;
        }
        Ok(())
    }
}

impl BareEngine for BareRedb {
    fn insert_each(&mut self, count: usize, at: u64) -> Result<()> {
        for _ in 0..count {
            let txn = self.begin()?;
            self.insert_in(&txn, 1, at)?;
            txn.commit().map_err(engine("bare redb: commit"))?;
        }
        Ok(())
    }

    fn insert_batch(&mut self, count: usize, at: u64) -> Result<()> {
        let txn = self.begin()?;
        self.insert_in(&txn, count, at)?;
        txn.commit().map_err(engine("bare redb: commit"))
    }

    fn drain(&mut self, per_tx: usize, now: u64) -> Result<u64> {
        let mut removed = 0u64;
        loop {
            let txn = self.begin()?;
            let claimed: Vec<(u64, u64)> = {
                let mut due = txn.open_table(DUE).map_err(engine("bare redb: table"))?;
                let mut leases = txn.open_table(LEASES).map_err(engine("bare redb: table"))?;
                let mut keys = Vec::with_capacity(per_tx);
                for entry in due
                    .range((0, 0)..=(now, u64::MAX))
                    .map_err(engine("bare redb: due"))?
                    .take(per_tx)
                {
                    let (key, _) = entry.map_err(engine("bare redb: due"))?;
                    keys.push(key.value());
                }
                for &(at, id) in &keys {
                    due.remove((at, id)).map_err(engine("bare redb: claim"))?;
                    leases.insert(id, 1).map_err(engine("bare redb: claim"))?;
                }
                keys
            };
            txn.commit().map_err(engine("bare redb: commit claim"))?;
            if claimed.is_empty() {
                return Ok(removed);
            }
            let txn = self.begin()?;
            {
                let mut rows = txn.open_table(ROWS).map_err(engine("bare redb: table"))?;
                let mut leases = txn.open_table(LEASES).map_err(engine("bare redb: table"))?;
                for &(_, id) in &claimed {
                    rows.remove(id).map_err(engine("bare redb: delete"))?;
                    leases.remove(id).map_err(engine("bare redb: delete"))?;
                }
            }
            txn.commit().map_err(engine("bare redb: commit delete"))?;
            removed += claimed.len() as u64;
        }
    }

    fn due(&self, now: u64, limit: usize) -> Result<usize> {
        let txn = self
            .db
            .begin_read()
            .map_err(engine("bare redb: begin read"))?;
        let due = txn.open_table(DUE).map_err(engine("bare redb: table"))?;
        let mut count = 0;
        for entry in due
            .range((0, 0)..=(now, u64::MAX))
            .map_err(engine("bare redb: due"))?
            .take(limit)
        {
            entry.map_err(engine("bare redb: due"))?;
            count += 1;
        }
        Ok(count)
    }
}
