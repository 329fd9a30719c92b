//! The writer keeps no statement journal: enqueuing, claiming, rewriting, delivering,
//! pruning and discarding two thousand records at once opens no temporary file. (SQLite copies the pages a statement changes into
//! a statement journal when the statement changes many rows and may stop part-way, and writes
//! that journal to a temporary file once it passes 64 KiB; see the writer's docs.)
//!
//! A temporary file leaves no trace to look for afterwards: SQLite unlinks it as soon as it is
//! opened, and newer versions open it without a name (`O_TMPFILE`). So the test forbids new
//! files instead: while [`NoNewFiles`] holds, the process's limit on open files is its lowest
//! free descriptor, and any open fails, a temporary file's included. A first part checks that
//! a statement needing a journal then fails. The limit is the whole process's, so this file
//! holds one test.

use std::fs::File;
use std::os::fd::AsRawFd;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use outbox_core::{Change, Claim, Guard, Lease, NewRecord, Progress, State, Store, Transition};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

const RECORDS: usize = 2_000;

/// While it lives, the process can open no file: its soft limit on open files is the number
/// the next open would get (every lower one is in use). Dropping it restores the limit.
struct NoNewFiles {
    soft: u64,
    hard: u64,
}

impl NoNewFiles {
    fn now() -> Self {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("the limit on open files");
        // An open takes the lowest free descriptor: this one, once the probe is closed.
        let next = File::open("/dev/null").expect("probe").as_raw_fd();
        let next = u64::try_from(next).expect("a descriptor is not negative");
        setrlimit(Resource::RLIMIT_NOFILE, next, hard).expect("lower the limit");
        NoNewFiles { soft, hard }
    }
}

impl Drop for NoNewFiles {
    fn drop(&mut self) {
        setrlimit(Resource::RLIMIT_NOFILE, self.soft, self.hard).expect("restore the limit");
    }
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
    let applied = store
        .apply(transitions)
        .await
        .unwrap_or_else(|err| panic!("apply at {now}: {err:?}"));
    assert!(applied.skipped.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_thousands_of_records_open_no_temporary_file() {
    let files = tempfile::tempdir().expect("directory for the databases");

    // The guard works: with it held, a plain multi-row update of a NOT NULL column inside a
    // transaction cannot open its statement journal, and fails.
    let conn = Connection::open(files.path().join("plain.db")).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, state INTEGER NOT NULL, body BLOB NOT NULL);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
         INSERT INTO t (state, body) SELECT 0, randomblob(256) FROM n;",
    )
    .expect("fill");
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let journaled = {
        let _guard = NoNewFiles::now();
        conn.execute("UPDATE t SET state = state + 1", [])
    };
    conn.execute_batch("ROLLBACK").expect("rollback");
    assert!(
        journaled.is_err(),
        "the control statement should have needed a statement journal: {journaled:?}"
    );
    drop(conn);

    let store = SqliteStore::create(files.path().join("outbox.db"), SqliteConfig::default())
        .await
        .expect("create");
    // Each of the store's connections opens the write-ahead log at its first read: the
    // reader's is made here, before the guard.
    store.stats().await.expect("stats before");

    // Under the guard, three batches of 2,000 records, each enqueued at once: the first
    // claimed and requeued (the general path rewrites every row), claimed again and delivered
    // under its lease (the round's own path); the second rejected and pruned; the third
    // discarded (its tombstones written at once). None of it may open a file.
    let guard = NoNewFiles::now();
    enqueue(&store, 1_000).await;
    round(&store, 2_000, 1, Change::Update(Progress::requeued(3_000))).await;
    round(&store, 3_000, 2, Change::Delivered).await;
    enqueue(&store, 4_000).await;
    round(&store, 4_000, 3, Change::Update(rejected(4_500))).await;
    assert_eq!(store.prune(5_000).await.expect("prune"), RECORDS as u64);
    enqueue(&store, 6_000).await;
    let discard = Change::Discard {
        reason: "by a person".into(),
        at: 6_500,
        attempts: 1,
    };
    round(&store, 6_000, 4, discard).await;
    let stats = store.stats().await.expect("stats");
    drop(guard);
    assert_eq!((stats.delivered, stats.undelivered()), (RECORDS as u64, 0));
    assert_eq!((stats.discarded, stats.rejected), (RECORDS as u64, 0));
}

/// Enqueues [`RECORDS`] records of 256 bytes at once, at `now`.
async fn enqueue(store: &SqliteStore, now: u64) {
    let records: Vec<NewRecord> = (0..RECORDS)
        .map(|i| NewRecord::new(format!("{i:0>256}").into_bytes()))
        .collect();
    store.enqueue(records, now).await.expect("enqueue");
}

/// A verdict that rejects the record, answered at `at`.
fn rejected(at: u64) -> Progress {
    Progress {
        state: State::Rejected,
        attempts: 1,
        unanswered: 0,
        interrupted: 0,
        last_attempt_at: Some(at),
        next_attempt_at: None,
        last_error: Some("HTTP 422".into()),
        history: Default::default(),
    }
}
