//! Opening and creating files: every file that is not a usable outbox gives a clear typed error
//! and keeps its bytes; a newer schema is refused (an earlier one converges: see `upgrade.rs`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::fresh;
use outbox_core::{Claim, Error, ListQuery, NewRecord, Store};
use outbox_redb::{RedbConfig, RedbStore, SCHEMA_VERSION};
use redb::TableDefinition;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read file")
}

async fn open(path: &Path) -> Result<RedbStore, Error> {
    RedbStore::open(path, RedbConfig::default()).await
}

#[tokio::test]
async fn open_of_a_missing_path_is_not_found_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.redb");
    let err = open(&path).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(!path.exists());
}

#[tokio::test]
async fn create_refuses_an_existing_file_and_leaves_it_alone() {
    let (_dir, path, store) = fresh().await;
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 0)
        .await
        .unwrap();
    drop(store);
    let before = bytes(&path);
    let err = RedbStore::create(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
    assert_eq!(bytes(&path), before);
    assert_eq!(open(&path).await.unwrap().stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn an_empty_file_is_not_an_outbox_and_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    std::fs::write(&path, b"").unwrap();
    let err = open(&path).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotAnOutbox { detail, .. } if detail.contains("empty")),
        "{err:?}"
    );
    let err = RedbStore::create(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
    assert!(bytes(&path).is_empty());
}

#[tokio::test]
async fn a_file_that_is_not_redb_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [
        (
            "notes.txt",
            &b"shopping list: milk, eggs, a durable queue\n"[..],
        ),
        ("short", &b"red"[..]),
        ("sqlite.db", &b"SQLite format 3\0 and then some pages"[..]),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let err = open(&path).await.unwrap_err();
        assert!(
            matches!(&err, Error::NotAnOutbox { detail, .. } if detail.contains("not a redb")),
            "{name}: {err:?}"
        );
        let err = RedbStore::open_read_only(&path, RedbConfig::default())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotAnOutbox { .. }), "{name}: {err:?}");
        assert_eq!(bytes(&path), content, "{name}");
    }
}

#[tokio::test]
async fn a_redb_database_without_an_outbox_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let users: TableDefinition<&str, u64> = TableDefinition::new("users");
        txn.open_table(users).unwrap().insert("ada", 1).unwrap();
        txn.commit().unwrap();
    }
    let before = bytes(&path);
    let err = open(&path).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotAnOutbox { detail, .. } if detail.contains("without outbox")),
        "{err:?}"
    );
    assert_eq!(bytes(&path), before);
}

#[tokio::test]
async fn a_newer_schema_is_refused_unchanged() {
    let (_dir, path, store) = fresh().await;
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 0)
        .await
        .unwrap();
    drop(store);
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("schema_version", u64::from(SCHEMA_VERSION) + 1)
            .unwrap();
        txn.commit().unwrap();
    }
    let before = bytes(&path);
    let err = open(&path).await.unwrap_err();
    assert!(
        matches!(err, Error::SchemaTooNew { found, supported }
            if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{err:?}"
    );
    let err = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SchemaTooNew { .. }), "{err:?}");
    assert_eq!(bytes(&path), before);
}

#[tokio::test]
async fn a_damaged_file_gives_a_typed_error_not_a_panic() {
    let (_dir, path, store) = fresh().await;
    let batch = (0..200)
        .map(|i| NewRecord::new(vec![i as u8; 500]))
        .collect();
    store.enqueue(batch, 0).await.unwrap();
    drop(store);
    let mut damaged = bytes(&path);
    damaged.truncate(damaged.len() / 3);
    std::fs::write(&path, &damaged).unwrap();
    let result = open(&path).await;
    assert!(
        matches!(result, Err(Error::Corrupted { .. } | Error::Backend { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_read_only_handle_reads_refuses_writes_and_writes_nothing() {
    let (_dir, path, store) = fresh().await;
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 0)
        .await
        .unwrap();
    drop(store);
    let before = bytes(&path);

    let reader = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap();
    assert_eq!(reader.stats().await.unwrap().pending, 1);
    assert_eq!(reader.list(&ListQuery::new(10)).await.unwrap().len(), 1);
    let err = reader
        .enqueue(vec![NewRecord::new(b"y".to_vec())], 0)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    let claim = Claim {
        now: 0,
        limit: 1,
        lease: common::lease(1, 10),
    };
    assert!(matches!(
        reader.claim(claim).await,
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(
        reader.prune(10).await,
        Err(Error::ReadOnly { .. })
    ));
    assert!(reader.database().is_none());

    // While the reader holds the file, no writer may open it.
    let err = open(&path).await.unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    drop(reader);
    assert_eq!(bytes(&path), before);
}

/// The child half of the lock test: holds the outbox open until its stdin closes.
async fn hold(path: &str) {
    let store = RedbStore::open(path, RedbConfig::default()).await;
    let mut out = std::io::stdout();
    match store {
        Ok(_store) => {
            writeln!(out, "holding").unwrap();
            out.flush().unwrap();
            let mut rest = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut rest);
        }
        Err(err) => {
            writeln!(out, "child failed: {err}").unwrap();
        }
    }
}

#[tokio::test]
async fn a_file_held_by_another_process_is_locked_and_unchanged() {
    if let Ok(path) = std::env::var("OUTBOX_REDB_HOLD") {
        hold(&path).await;
        return;
    }
    let (_dir, path, store) = fresh().await;
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 0)
        .await
        .unwrap();
    drop(store);

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_file_held_by_another_process_is_locked_and_unchanged",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OUTBOX_REDB_HOLD", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("the child ended before holding")
            .unwrap();
        // libtest may print the test's name on the same line first.
        assert!(!line.contains("child failed"), "{line}");
        if line.ends_with("holding") {
            break;
        }
    }

    let before = bytes(&path);
    let err = open(&path).await.unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    let err = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    assert_eq!(bytes(&path), before);

    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(open(&path).await.unwrap().stats().await.unwrap().pending, 1);
}
