//! The writer keeps no statement journal: claiming, rewriting and deleting two thousand
//! records at once creates no temporary file. (SQLite copies the pages a statement changes
//! into a statement journal when the statement changes many rows and may stop part-way, and
//! writes that journal to a temporary file once it passes 64 KiB; see the writer's docs.)
//!
//! SQLite creates its temporary files in `SQLITE_TMPDIR`, read once when it starts, so this
//! file holds one test, which sets it before anything opens a database. A temporary file is
//! unlinked as soon as it is opened, so the test watches the directory's modification time,
//! which creating one moves; a first part checks that it does, with a statement that needs a
//! journal.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, SystemTime};

use outbox_core::{Change, Claim, Guard, Lease, NewRecord, Progress, Store, Transition};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

const RECORDS: usize = 2_000;

/// Sets the directory's modification time far in the past, so any file created in it later
/// moves it, however coarse the file system's clock.
fn age(dir: &Path) {
    File::open(dir)
        .expect("open the directory")
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .expect("set the directory's time");
}

/// Whether a file was created in `dir` since [`age`].
fn touched(dir: &Path) -> bool {
    let modified = std::fs::metadata(dir)
        .expect("the directory")
        .modified()
        .expect("modification time");
    modified != SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
}

/// Claims every record due at `now` under the lease `token` and applies `change` to each.
async fn round(store: &SqliteStore, now: u64, token: u64, change: Change) {
    let lease = Lease {
        token,
        until: 60_000,
    };
    let claimed = store
        .claim(Claim {
            now,
            limit: RECORDS,
            lease,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), RECORDS);
    let transitions = claimed
        .iter()
        .map(|r| Transition {
            id: r.id,
            guard: Guard::Lease(token),
            change: change.clone(),
        })
        .collect();
    let applied = store.apply(transitions).await.expect("apply");
    assert!(applied.skipped.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_rewrites_and_deliveries_of_thousands_write_no_temporary_file() {
    let temporary = tempfile::tempdir().expect("temporary directory");
    // Before any database opens in this process: SQLite reads it once, at its start.
    std::env::set_var("SQLITE_TMPDIR", temporary.path());
    let files = tempfile::tempdir().expect("directory for the databases");

    // The watch works: a plain multi-row update of a NOT NULL column inside a transaction
    // writes its statement journal to a temporary file there.
    let conn = Connection::open(files.path().join("plain.db")).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, state INTEGER NOT NULL, body BLOB NOT NULL);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
         INSERT INTO t (state, body) SELECT 0, randomblob(256) FROM n;",
    )
    .expect("fill");
    age(temporary.path());
    conn.execute_batch("BEGIN IMMEDIATE; UPDATE t SET state = 2; COMMIT;")
        .expect("update");
    assert!(
        touched(temporary.path()),
        "the control statement should have written a statement journal to SQLITE_TMPDIR"
    );
    drop(conn);

    let store = SqliteStore::create(files.path().join("outbox.db"), SqliteConfig::default())
        .await
        .expect("create");
    let records: Vec<NewRecord> = (0..RECORDS)
        .map(|i| NewRecord::new(format!("{i:0>256}").into_bytes()))
        .collect();
    store.enqueue(records, 1_000).await.expect("enqueue");
    age(temporary.path());

    // A claim of all of them, a requeue of all (the general path rewrites every row), a
    // second claim and a delivery of all under its lease (the round's own path).
    round(&store, 2_000, 1, Change::Update(Progress::requeued(3_000))).await;
    round(&store, 3_000, 2, Change::Delivered).await;
    let stats = store.stats().await.expect("stats");
    assert_eq!((stats.delivered, stats.undelivered()), (RECORDS as u64, 0));

    assert!(
        !touched(temporary.path()),
        "the store wrote a temporary file: a statement kept a statement journal"
    );
}
