//! `SqliteStore::open_or_create`: creates a missing file, opens an existing one with its
//! records, refuses every file `open` refuses with the same error and its bytes unchanged, never
//! creates with a read-only configuration, and lets callers racing on a missing path all end up
//! on one outbox.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use outbox_core::{Error, NewRecord, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore, SCHEMA_VERSION};
use rusqlite::Connection;

/// The names in `dir`, without the database's own WAL and shared-memory files (they may outlive
/// a close that could not checkpoint under load).
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with("-wal") && !name.ends_with("-shm"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_missing_file_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");

    let store = SqliteStore::open_or_create(&path, SqliteConfig::default())
        .await
        .expect("open or create");
    let settings = store.effective_settings().await.expect("settings");
    assert_eq!(settings.schema_version, SCHEMA_VERSION);
    assert_eq!(store.stats().await.expect("stats").pending, 0);
    store.close().await;

    // An outbox that `open` takes, and nothing of the build under a temporary name left over.
    SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open")
        .close()
        .await;
    assert_eq!(names(dir.path()), ["outbox.db"]);
}

#[tokio::test]
async fn an_existing_file_is_opened_with_its_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"a".to_vec()),
                NewRecord::new(b"b".to_vec()).in_group("g"),
            ],
            1_000,
        )
        .await
        .expect("enqueue");
    store.close().await;

    let store = SqliteStore::open_or_create(&path, SqliteConfig::default())
        .await
        .expect("open or create");
    assert_eq!(store.stats().await.expect("stats").pending, 2);
    let b = store.get(ids[1]).await.expect("get").expect("record b");
    assert_eq!(
        (b.payload.as_slice(), b.group.as_deref()),
        (&b"b"[..], Some("g"))
    );
    // Ids go on from the file's counter: nothing was recreated.
    let next = store
        .enqueue(vec![NewRecord::new(b"c".to_vec())], 2_000)
        .await
        .expect("enqueue");
    assert!(next[0] > ids[1], "{next:?} after {ids:?}");
    store.close().await;
}

/// `open_or_create` refuses the file at `path` with the error `open` gives, and leaves it as it
/// was.
async fn refused_like_open(path: &Path, same: impl Fn(&Error, &Error) -> bool) {
    let before = fs::read(path).ok();
    let opened = SqliteStore::open(path, SqliteConfig::default())
        .await
        .expect_err("open refuses it");
    let either = SqliteStore::open_or_create(path, SqliteConfig::default())
        .await
        .expect_err("open_or_create refuses it");
    assert!(
        same(&opened, &either),
        "open: {opened:?}, open_or_create: {either:?}"
    );
    assert!(
        !matches!(either, Error::NotFound { .. } | Error::AlreadyExists { .. }),
        "{either:?}"
    );
    assert!(fs::read(path).ok() == before, "the file's bytes changed");
}

#[tokio::test]
async fn a_file_that_is_not_an_outbox_is_refused_as_open_refuses_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let not_an_outbox = |a: &Error, b: &Error| {
        matches!((a, b), (
            Error::NotAnOutbox { detail: x, .. },
            Error::NotAnOutbox { detail: y, .. },
        ) if x == y)
    };

    let empty = dir.path().join("empty.db");
    fs::write(&empty, b"").expect("write");
    refused_like_open(&empty, not_an_outbox).await;

    let notes = dir.path().join("notes.txt");
    fs::write(&notes, "these are notes, not a database\n".repeat(200)).expect("write");
    refused_like_open(&notes, not_an_outbox).await;

    let foreign = dir.path().join("app.db");
    let conn = Connection::open(&foreign).expect("open");
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY); INSERT INTO users VALUES (1);",
    )
    .expect("fill");
    drop(conn);
    refused_like_open(&foreign, not_an_outbox).await;

    // A directory is not an outbox either.
    refused_like_open(dir.path(), not_an_outbox).await;
}

#[tokio::test]
async fn a_file_from_a_newer_schema_is_refused_as_open_refuses_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create")
        .close()
        .await;
    let conn = Connection::open(&path).expect("open");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bump");
    drop(conn);
    refused_like_open(&path, |a, b| {
        matches!((a, b), (Error::SchemaTooNew { .. }, Error::SchemaTooNew { found, supported })
            if *found == SCHEMA_VERSION + 1 && *supported == SCHEMA_VERSION)
    })
    .await;
}

#[tokio::test]
async fn a_read_only_configuration_opens_and_never_creates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    let read_only = SqliteConfig::default().read_only(true);

    let missing = SqliteStore::open_or_create(&path, read_only.clone()).await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));

    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 1)
        .await
        .expect("enqueue");
    store.close().await;
    let store = SqliteStore::open_or_create(&path, read_only)
        .await
        .expect("open read-only");
    assert_eq!(store.stats().await.expect("stats").pending, 1);
    let enqueue = store.enqueue(vec![NewRecord::new(b"y".to_vec())], 2).await;
    assert!(
        matches!(enqueue, Err(Error::ReadOnly { .. })),
        "{enqueue:?}"
    );
    store.close().await;
}

#[tokio::test]
async fn nothing_is_created_where_no_file_can_be() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nowhere = dir.path().join("missing").join("outbox.db");
    let created = SqliteStore::open_or_create(&nowhere, SqliteConfig::default()).await;
    assert!(created.is_err(), "{created:?}");
    assert!(!nowhere.exists());
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// Two callers race on a missing path, many times over: each time both succeed, on one outbox
/// (a record enqueued through either is seen through the other), and the directory holds that
/// one file. Whatever the interleaving (both open first, or one creates before the other
/// looks), that is the outcome; the rounds only vary which interleaving is tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callers_racing_on_a_missing_path_share_one_outbox() {
    const ROUNDS: usize = 16;
    let dir = tempfile::tempdir().expect("temp dir");
    for round in 0..ROUNDS {
        let name = format!("outbox-{round}.db");
        let path = dir.path().join(&name);
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let caller = |path: std::path::PathBuf, start: Arc<tokio::sync::Barrier>| {
            tokio::spawn(async move {
                start.wait().await;
                SqliteStore::open_or_create(&path, SqliteConfig::default()).await
            })
        };
        let a = caller(path.clone(), Arc::clone(&start));
        let b = caller(path.clone(), Arc::clone(&start));
        let a = a.await.expect("task a").expect("caller a");
        let b = b.await.expect("task b").expect("caller b");

        let from_a = a
            .enqueue(vec![NewRecord::new(b"from a".to_vec())], 1_000)
            .await
            .expect("enqueue a");
        let from_b = b
            .enqueue(vec![NewRecord::new(b"from b".to_vec())], 1_000)
            .await
            .expect("enqueue b");
        assert_ne!(from_a[0], from_b[0], "round {round}: one id counter");
        for store in [&a, &b] {
            assert!(
                store.get(from_a[0]).await.expect("get").is_some(),
                "round {round}"
            );
            assert!(
                store.get(from_b[0]).await.expect("get").is_some(),
                "round {round}"
            );
            assert_eq!(
                store.stats().await.expect("stats").pending,
                2,
                "round {round}"
            );
        }
        a.close().await;
        b.close().await;
    }
    let expected: Vec<String> = {
        let mut names: Vec<String> = (0..ROUNDS).map(|r| format!("outbox-{r}.db")).collect();
        names.sort();
        names
    };
    assert_eq!(names(dir.path()), expected, "no temporary file left behind");
}
