//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod disk;

use std::path::PathBuf;

use outbox_core::{Lease, Millis, Progress, Record, State};
use outbox_redb::{RedbConfig, RedbStore};
use tempfile::TempDir;

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
