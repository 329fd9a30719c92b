//! Creating and opening files: distinct calls, every bad file refused with a typed error and
//! its bytes unchanged, read-only opening, a full disk, the payload limit, and the effective
//! durability settings.

use std::fs;
use std::path::{Path, PathBuf};

use outbox_core::{Change, Claim, Error, Guard, Lease, NewRecord, RecordId, Store, Transition};
use outbox_sqlite::{Durability, SqliteConfig, SqliteStore, SCHEMA_VERSION};
use rusqlite::Connection;

fn lease(token: u64) -> Lease {
    Lease {
        token,
        until: 1_000_000,
    }
}

fn claim(now: u64, limit: usize) -> Claim {
    Claim {
        now,
        limit,
        lease: lease(1),
    }
}

/// A file with `count` records of `size` bytes each, closed (its WAL checkpointed away).
async fn filled(dir: &Path, count: usize, size: usize) -> PathBuf {
    let path = dir.join("outbox.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    let records = (0..count)
        .map(|i| NewRecord::new(vec![i as u8; size]))
        .collect();
    store.enqueue(records, 1_000).await.expect("enqueue");
    store.close().await;
    path
}

#[tokio::test]
async fn create_and_open_are_distinct_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");

    let missing = SqliteStore::open(&path, SqliteConfig::default()).await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    assert!(!path.exists(), "open must not create a file");

    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    let ids = store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 1)
        .await
        .expect("enqueue");
    store.close().await;
    let before = fs::read(&path).expect("read");

    let again = SqliteStore::create(&path, SqliteConfig::default()).await;
    assert!(
        matches!(again, Err(Error::AlreadyExists { .. })),
        "{again:?}"
    );
    assert_eq!(fs::read(&path).expect("read"), before);

    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open");
    assert!(store.get(ids[0]).await.expect("get").is_some());
    store.close().await;

    // Nothing of the build under a temporary name is left behind (the database's own WAL
    // files may outlive a close that could not checkpoint under load; they are not the build's).
    let names: Vec<String> = fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name != "outbox.db-wal" && name != "outbox.db-shm")
        .collect();
    assert_eq!(names, vec!["outbox.db".to_owned()]);
}

/// Opens `path`, expects the error `check` accepts, and checks the bytes did not change.
async fn refused(path: &Path, check: impl Fn(&Error) -> bool) {
    let before = fs::read(path).expect("read");
    let result = SqliteStore::open(path, SqliteConfig::default()).await;
    match result {
        Err(err) => assert!(check(&err), "unexpected error: {err:?}"),
        Ok(_) => panic!("{} was opened", path.display()),
    }
    assert!(
        fs::read(path).expect("read") == before,
        "the file's bytes changed"
    );
}

#[tokio::test]
async fn an_empty_file_is_not_taken_for_an_outbox() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("empty.db");
    fs::write(&path, b"").expect("write");
    refused(&path, |e| matches!(e, Error::NotAnOutbox { .. })).await;
}

#[tokio::test]
async fn a_foreign_database_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let conn = Connection::open(&path).expect("open");
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY); INSERT INTO users VALUES (1);",
    )
    .expect("fill");
    drop(conn);
    refused(&path, |e| {
        matches!(e, Error::NotAnOutbox { detail, .. } if detail.contains("another application"))
    })
    .await;
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("notes.txt");
    fs::write(&path, "these are notes, not a database\n".repeat(200)).expect("write");
    refused(&path, |e| matches!(e, Error::NotAnOutbox { .. })).await;
}

#[tokio::test]
async fn a_file_from_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = filled(dir.path(), 3, 10).await;
    let conn = Connection::open(&path).expect("open");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bump");
    drop(conn);
    refused(&path, |e| {
        matches!(e, Error::SchemaTooNew { found, supported }
            if *found == SCHEMA_VERSION + 1 && *supported == SCHEMA_VERSION)
    })
    .await;
}

#[tokio::test]
async fn a_truncated_file_is_reported_corrupted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = filled(dir.path(), 200, 1_000).await;
    let bytes = fs::read(&path).expect("read");
    assert!(bytes.len() > 100_000, "the file is big enough to cut");
    fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    refused(&path, |e| matches!(e, Error::Corrupted { .. })).await;
}

#[tokio::test]
async fn a_corrupted_file_is_reported_corrupted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = filled(dir.path(), 200, 1_000).await;
    let mut bytes = fs::read(&path).expect("read");
    let page = 4096;
    // Scribble over the b-tree pages in the middle of the file.
    let middle = bytes.len() / 2 / page * page;
    for b in &mut bytes[middle..middle + 3 * page] {
        *b = 0xA5;
    }
    fs::write(&path, &bytes).expect("corrupt");
    refused(&path, |e| matches!(e, Error::Corrupted { .. })).await;
}

#[tokio::test]
async fn read_only_opening_reads_and_refuses_writes_without_touching_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = filled(dir.path(), 3, 10).await;
    let before = fs::read(&path).expect("read");

    let store = SqliteStore::open(&path, SqliteConfig::default().read_only(true))
        .await
        .expect("open read-only");
    assert_eq!(store.stats().await.expect("stats").pending, 3);
    assert!(store.get(RecordId(1)).await.expect("get").is_some());
    let settings = store.effective_settings().await.expect("settings");
    assert_eq!(settings.journal_mode, "wal");

    let enqueue = store.enqueue(vec![NewRecord::new(b"x".to_vec())], 1).await;
    assert!(
        matches!(enqueue, Err(Error::ReadOnly { .. })),
        "{enqueue:?}"
    );
    let claimed = store.claim(claim(5_000, 10)).await;
    assert!(
        matches!(claimed, Err(Error::ReadOnly { .. })),
        "{claimed:?}"
    );
    let applied = store
        .apply(vec![Transition {
            id: RecordId(1),
            guard: Guard::Idle,
            change: Change::Delivered,
        }])
        .await;
    assert!(
        matches!(applied, Err(Error::ReadOnly { .. })),
        "{applied:?}"
    );
    let pruned = store.prune(u64::MAX).await;
    assert!(matches!(pruned, Err(Error::ReadOnly { .. })), "{pruned:?}");
    assert_eq!(store.stats().await.expect("stats").pending, 3);
    store.close().await;
    assert!(
        fs::read(&path).expect("read") == before,
        "the file's bytes changed"
    );

    let create = SqliteStore::create(
        dir.path().join("new.db"),
        SqliteConfig::default().read_only(true),
    )
    .await;
    assert!(matches!(create, Err(Error::InvalidConfig(_))), "{create:?}");
}

#[tokio::test]
async fn a_full_disk_refuses_the_write_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("small.db");
    let config = SqliteConfig::default().size_limit(Some(256 * 1024));
    let store = SqliteStore::create(&path, config.clone())
        .await
        .expect("create");
    let mut acknowledged = Vec::new();
    let full = loop {
        let batch = (0..4).map(|_| NewRecord::new(vec![7u8; 8_000])).collect();
        match store.enqueue(batch, 1_000).await {
            Ok(ids) => acknowledged.extend(ids),
            Err(err) => break err,
        }
        assert!(acknowledged.len() < 1_000, "the size limit never bit");
    };
    assert!(matches!(full, Error::StorageFull { .. }), "{full:?}");
    assert!(!acknowledged.is_empty());
    // Nothing of the refused batch was kept; everything acknowledged is there.
    assert_eq!(
        store.stats().await.expect("stats").pending,
        acknowledged.len() as u64
    );

    // Delivering frees space for new writes.
    let claimed = store.claim(claim(1_000, 8)).await.expect("claim");
    let delivered = claimed
        .iter()
        .map(|r| Transition {
            id: r.id,
            guard: Guard::Lease(1),
            change: Change::Delivered,
        })
        .collect();
    store.apply(delivered).await.expect("deliver");
    store
        .enqueue(vec![NewRecord::new(vec![1u8; 8_000])], 2_000)
        .await
        .expect("room again");
    store.close().await;

    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("reopen");
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.pending, acknowledged.len() as u64 - 8 + 1);
    assert_eq!(stats.delivered, 8);
}

#[tokio::test]
async fn a_payload_over_the_limit_is_refused_and_nothing_of_the_batch_is_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    let store = SqliteStore::create(&path, SqliteConfig::default().max_payload(8))
        .await
        .expect("create");
    let batch = vec![NewRecord::new(vec![0u8; 8]), NewRecord::new(vec![0u8; 9])];
    let refused = store.enqueue(batch, 1).await;
    assert!(
        matches!(refused, Err(Error::PayloadTooLarge { size: 9, max: 8 })),
        "{refused:?}"
    );
    assert_eq!(store.stats().await.expect("stats").pending, 0);
    store
        .enqueue(vec![NewRecord::new(vec![0u8; 8])], 1)
        .await
        .expect("at the limit");
}

#[tokio::test]
async fn each_durability_level_is_what_sqlite_applies() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create")
        .close()
        .await;
    for (level, synchronous) in [
        (Durability::Full, 2),
        (Durability::Normal, 1),
        (Durability::Off, 0),
    ] {
        let store = SqliteStore::open(&path, SqliteConfig::default().durability(level))
            .await
            .expect("open");
        let settings = store.effective_settings().await.expect("settings");
        assert_eq!(settings.journal_mode, "wal", "{level:?}");
        assert_eq!(settings.synchronous, synchronous, "{level:?}");
        assert_eq!(settings.synchronous, level.synchronous_code(), "{level:?}");
        assert_eq!(settings.busy_timeout_ms, 5_000);
        assert_eq!(settings.schema_version, SCHEMA_VERSION);
        store.close().await;
    }
    let default = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open");
    assert_eq!(
        default
            .effective_settings()
            .await
            .expect("settings")
            .synchronous,
        2
    );
}

#[tokio::test]
async fn a_file_marked_as_an_outbox_without_its_tables_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("marked.db");
    let conn = Connection::open(&path).expect("open");
    conn.pragma_update(None, "application_id", outbox_sqlite::APPLICATION_ID)
        .expect("mark");
    conn.execute_batch("CREATE TABLE other (x)").expect("table");
    drop(conn);
    // No schema version: not an outbox, whatever its mark says.
    refused(&path, |e| matches!(e, Error::NotAnOutbox { .. })).await;

    let conn = Connection::open(&path).expect("open");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .expect("version");
    drop(conn);
    // A version but no outbox tables: damaged.
    refused(
        &path,
        |e| matches!(e, Error::Corrupted { detail, .. } if detail.contains("records")),
    )
    .await;
}

#[tokio::test]
async fn a_directory_is_not_an_outbox_and_a_missing_directory_cannot_hold_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let opened = SqliteStore::open(dir.path(), SqliteConfig::default()).await;
    assert!(
        matches!(opened, Err(Error::NotAnOutbox { .. })),
        "{opened:?}"
    );

    let nowhere = dir.path().join("missing").join("outbox.db");
    let created = SqliteStore::create(&nowhere, SqliteConfig::default()).await;
    assert!(created.is_err(), "{created:?}");
    assert!(!nowhere.exists());
}

#[tokio::test]
async fn a_copy_holds_what_the_application_wrote_and_has_not_checkpointed_and_goes_when_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    // The application keeps the file open: its writes sit in the WAL, not in the file.
    let app = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    let ids = app
        .enqueue(vec![NewRecord::new(b"in the wal".to_vec())], 1_000)
        .await
        .unwrap()
        .ids;
    let wal = fs::metadata(dir.path().join("app.db-wal")).unwrap().len();
    assert!(wal > 0, "written to the WAL");

    let copy = SqliteStore::open_copy(&path, SqliteConfig::default().read_only(true))
        .await
        .unwrap();
    let record = copy.get(ids[0]).await.unwrap().expect("copied");
    assert_eq!(record.payload, b"in the wal");
    assert_eq!(copy.stats().await.unwrap().pending, 1);
    // The copy's writes stay in the copy.
    copy.enqueue(vec![NewRecord::new(b"only here".to_vec())], 2_000)
        .await
        .unwrap();
    assert_eq!(app.stats().await.unwrap().pending, 1);
    let copied = copy.path().parent().unwrap().to_path_buf();
    copy.close().await;
    assert!(!copied.exists(), "the copy's directory is removed");
    app.close().await;
}
