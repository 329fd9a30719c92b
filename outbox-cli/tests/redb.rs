//! The binary on redb files the tests make: the same golden output as every backend, and a
//! file in use by another process refused at once.
#![cfg(feature = "redb")]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outbox_redb::{RedbConfig, RedbStore};

async fn seeded(dir: &Path) -> PathBuf {
    let path = dir.join("app.redb");
    let store = RedbStore::create(&path, RedbConfig::default())
        .await
        .unwrap();
    support::seed(&store).await;
    store.close().await;
    path
}

#[tokio::test]
async fn read_commands_print_the_golden_output_and_never_change_the_file() {
    let dir = tempfile::tempdir().unwrap();
    support::golden_reads(&seeded(dir.path()).await);
}

#[tokio::test]
async fn verbs_change_records_through_the_core_rules() {
    let dir = tempfile::tempdir().unwrap();
    support::verbs(&seeded(dir.path()).await);
}

#[tokio::test]
async fn resume_lifts_the_persisted_halt() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    support::resume_lifts_the_halt(&[path.to_str().unwrap()]);
}

#[tokio::test]
async fn a_record_rejected_between_show_and_retry_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let seen = support::revision(&path, 3);
    // The application (the only process that may hold a redb file) records a verdict.
    let app = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    support::reject_now(&app, 3).await;
    app.close().await;
    support::retry_refused_after_a_change(&path, 3, &seen);
}

#[tokio::test]
async fn user_errors_are_one_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    support::user_errors(dir.path(), &path);
}

#[tokio::test]
async fn a_file_in_use_by_another_process_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    // This test process is the application holding the file; the binary is another process.
    let app = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    let p = path.to_str().unwrap();
    for args in [&["stats", p][..], &["retry", p, "1"]] {
        let started = Instant::now();
        let (code, err) = support::fails(args);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} waited"
        );
        assert_eq!(code, 1);
        assert_eq!(
            err.trim_end(),
            format!(
                "error: {p} is in use by another process (a redb file is opened by one process \
                 at a time): stop the application using it, or copy the file and look at the copy"
            )
        );
    }
    app.close().await;
}
