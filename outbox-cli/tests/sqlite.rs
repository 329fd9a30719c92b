//! The binary on SQLite files the tests make.
#![cfg(feature = "sqlite")]

mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use outbox_sqlite::{SqliteConfig, SqliteStore, SCHEMA_VERSION};

async fn seeded(dir: &Path) -> PathBuf {
    let path = dir.join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
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
async fn a_record_rejected_between_show_and_retry_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let seen = support::revision(&path, 3);
    // The application, still running, records the server's verdict meanwhile.
    let app = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::reject_now(&app, 3).await;
    support::retry_refused_after_a_change(&path, 3, &seen);
    app.close().await;
}

#[tokio::test]
async fn user_errors_are_one_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    support::user_errors(dir.path(), &path);

    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let (code, err) = support::fails(&["stats", foreign.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        format!(
            "error: {} is not an outbox: an SQLite database of another application (application_id 0x0)",
            foreign.display()
        )
    );

    let newer = dir.path().join("newer.db");
    SqliteStore::create(&newer, SqliteConfig::default())
        .await
        .unwrap()
        .close()
        .await;
    rusqlite::Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let (code, err) = support::fails(&["list", newer.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("was written by a newer outbox"), "{err}");
    assert_eq!(err.lines().count(), 1);
}

#[tokio::test]
async fn reads_and_verbs_work_beside_a_running_application() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    // The application keeps the file open for writing the whole time.
    let app = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .unwrap();
    let p = path.to_str().unwrap();
    let started = Instant::now();
    assert!(support::ok(&["stats", p]).contains("needs-attention          2"));
    support::ok(&["retry", p, "9"]);
    assert_eq!(
        outbox_core::Store::get(&app, outbox_core::RecordId(9))
            .await
            .unwrap()
            .unwrap()
            .state,
        outbox_core::State::Pending,
        "the application sees the retry"
    );
    assert!(started.elapsed().as_secs() < 10);
    app.close().await;
}
