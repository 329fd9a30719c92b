//! `RedbStore::open_or_create`: creates a missing file, opens an existing one with its records,
//! refuses every file `open` refuses with the same error and its bytes unchanged, and lets
//! callers racing on a missing path end up on one outbox, never on a half-made file.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::fresh;
use outbox_core::{Error, NewRecord, Store};
use outbox_redb::{RedbConfig, RedbStore, SCHEMA_VERSION};
use redb::TableDefinition;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_missing_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.redb");

    let store = RedbStore::open_or_create(&path, RedbConfig::default())
        .await
        .unwrap();
    assert_eq!(store.stats().await.unwrap().pending, 0);
    store.close().await;

    // An outbox that `open` takes, and nothing of the build under a temporary name left over.
    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    assert_eq!(store.stats().await.unwrap().pending, 0);
    store.close().await;
    assert_eq!(names(dir.path()), ["outbox.redb"]);
}

#[tokio::test]
async fn an_existing_file_is_opened_with_its_records() {
    let (_dir, path, store) = fresh().await;
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"a".to_vec()),
                NewRecord::new(b"b".to_vec()).in_group("g"),
            ],
            1_000,
        )
        .await
        .unwrap();
    store.close().await;

    let store = RedbStore::open_or_create(&path, RedbConfig::default())
        .await
        .unwrap();
    assert_eq!(store.stats().await.unwrap().pending, 2);
    let b = store.get(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        (b.payload.as_slice(), b.group.as_deref()),
        (&b"b"[..], Some("g"))
    );
    // Ids go on from the file's counter: nothing was recreated.
    let next = store
        .enqueue(vec![NewRecord::new(b"c".to_vec())], 2_000)
        .await
        .unwrap();
    assert!(next[0] > ids[1], "{next:?} after {ids:?}");
}

/// `open_or_create` refuses the file at `path` with the error `open` gives, and leaves it as it
/// was.
async fn refused_like_open(path: &Path, same: impl Fn(&Error, &Error) -> bool) {
    let before = std::fs::read(path).ok();
    let opened = RedbStore::open(path, RedbConfig::default())
        .await
        .unwrap_err();
    let either = RedbStore::open_or_create(path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(
        same(&opened, &either),
        "open: {opened:?}, open_or_create: {either:?}"
    );
    assert!(
        !matches!(either, Error::NotFound { .. } | Error::AlreadyExists { .. }),
        "{either:?}"
    );
    assert!(
        std::fs::read(path).ok() == before,
        "the file's bytes changed"
    );
}

fn not_an_outbox(a: &Error, b: &Error) -> bool {
    matches!((a, b), (
        Error::NotAnOutbox { detail: x, .. },
        Error::NotAnOutbox { detail: y, .. },
    ) if x == y)
}

#[tokio::test]
async fn a_file_that_is_not_an_outbox_is_refused_as_open_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [
        ("empty.redb", &b""[..]),
        (
            "notes.txt",
            &b"shopping list: milk, eggs, a durable queue\n"[..],
        ),
        ("short", &b"red"[..]),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        refused_like_open(&path, not_an_outbox).await;
    }

    let app = dir.path().join("app.redb");
    {
        let db = redb::Database::create(&app).unwrap();
        let txn = db.begin_write().unwrap();
        let users: TableDefinition<&str, u64> = TableDefinition::new("users");
        txn.open_table(users).unwrap().insert("ada", 1).unwrap();
        txn.commit().unwrap();
    }
    refused_like_open(&app, not_an_outbox).await;

    // A directory is not an outbox either.
    refused_like_open(dir.path(), not_an_outbox).await;
}

#[tokio::test]
async fn a_newer_schema_is_refused_as_open_refuses_it() {
    let (_dir, path, store) = fresh().await;
    store.close().await;
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("schema_version", u64::from(SCHEMA_VERSION) + 1)
            .unwrap();
        txn.commit().unwrap();
    }
    refused_like_open(&path, |a, b| {
        matches!((a, b), (Error::SchemaTooNew { .. }, Error::SchemaTooNew { found, supported })
            if *found == SCHEMA_VERSION + 1 && *supported == SCHEMA_VERSION)
    })
    .await;
}

#[tokio::test]
async fn a_file_held_open_is_locked_as_open_says() {
    let (_dir, path, store) = fresh().await;
    let before = std::fs::read(&path).unwrap();
    let err = RedbStore::open_or_create(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    drop(store);
}

#[tokio::test]
async fn nothing_is_created_where_no_file_can_be() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("missing").join("outbox.redb");
    let created = RedbStore::open_or_create(&nowhere, RedbConfig::default()).await;
    assert!(created.is_err(), "{created:?}");
    assert!(!nowhere.exists());
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// Two callers race on a missing path, many times over. redb lets one handle at a time have a
/// file, so while the first holds its store the second is told `Locked`, whatever the
/// interleaving: never `NotAnOutbox` for a file caught half-made, never `AlreadyExists`, never
/// an outbox of its own. Once the first closes, the second opens the same outbox. The rounds
/// only vary which interleaving is tested; the outcome is the same each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callers_racing_on_a_missing_path_end_up_on_one_outbox() {
    const ROUNDS: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let path = dir.path().join(format!("outbox-{round}.redb"));
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let caller = |path: PathBuf, start: Arc<tokio::sync::Barrier>| {
            tokio::spawn(async move {
                start.wait().await;
                RedbStore::open_or_create(&path, RedbConfig::default()).await
            })
        };
        let a = caller(path.clone(), Arc::clone(&start));
        let b = caller(path.clone(), Arc::clone(&start));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let (winner, loser) = match (a, b) {
            (Ok(store), Err(err)) | (Err(err), Ok(store)) => (store, err),
            (a, b) => panic!("round {round}: one store and one refusal expected: {a:?}, {b:?}"),
        };
        assert!(
            matches!(loser, Error::Locked { .. }),
            "round {round}: {loser:?}"
        );

        let ids = winner
            .enqueue(vec![NewRecord::new(b"first".to_vec())], 1_000)
            .await
            .unwrap();
        winner.close().await;
        let second = RedbStore::open_or_create(&path, RedbConfig::default())
            .await
            .unwrap();
        let record = second.get(ids[0]).await.unwrap();
        assert_eq!(
            record.map(|r| r.payload),
            Some(b"first".to_vec()),
            "round {round}"
        );
        second.close().await;
    }
    let mut expected: Vec<String> = (0..ROUNDS).map(|r| format!("outbox-{r}.redb")).collect();
    expected.sort();
    assert_eq!(names(dir.path()), expected, "no temporary file left behind");
}
