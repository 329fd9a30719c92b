//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod disk;

use std::path::{Path, PathBuf};

use outbox_core::{
    Change, Guard, Lease, Millis, Progress, Record, RecordId, State, Store, Transition,
};
use outbox_redb::{RedbConfig, RedbStore};
use tempfile::TempDir;

/// Delivers the records claimed under `token`.
pub async fn deliver_claimed(store: &RedbStore, claimed: &[Record], token: u64) {
    let delivered = claimed
        .iter()
        .map(|r| Transition {
            id: r.id,
            guard: Guard::Lease(token),
            change: Change::Delivered,
        })
        .collect();
    store.apply(delivered).await.unwrap();
}

/// A fresh outbox in its own temporary directory (kept alive by the returned `TempDir`).
pub async fn fresh() -> (TempDir, PathBuf, RedbStore) {
    fresh_with(RedbConfig::default()).await
}

/// A fresh outbox with a configuration of the test's.
pub async fn fresh_with(config: RedbConfig) -> (TempDir, PathBuf, RedbStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.redb");
    let store = RedbStore::create(&path, config).await.expect("create");
    (dir, path, store)
}

pub fn lease(token: u64, until: Millis) -> Lease {
    Lease { token, until }
}

/// The progress of a failed attempt, due again at `next`.
pub fn failed(record: &Record, now: Millis, next: Millis) -> Progress {
    Progress {
        state: State::Retrying,
        attempts: record.attempts + 1,
        last_attempt_at: Some(now),
        next_attempt_at: Some(next),
        last_error: Some("503".into()),
        ..record.progress()
    }
}

/// Cuts the stored bytes of record `id` short, as a torn write would, with no handle of the
/// store open: the store then reads it as unreadable ("truncated value").
pub fn plant_unreadable(path: &Path, id: RecordId) {
    use redb::ReadableTable;
    const RECORDS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("records");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut records = txn.open_table(RECORDS).unwrap();
        let bytes = records.get(id.0).unwrap().unwrap().value().to_vec();
        records.insert(id.0, &bytes[..bytes.len() / 2]).unwrap();
    }
    txn.commit().unwrap();
}
