//! The in-transaction enqueue on every driver feature (sqlx, diesel), on real files: a
//! committed transaction is announced and delivered with no `notify()` and no poll; a
//! rolled-back one leaves nothing; a coalescing write in a transaction merges as it does
//! outside one; a bad batch is a typed error that leaves the business write free to commit;
//! and a file the store never made, or one of a newer schema, is refused before any write.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use outbox_core::{Error, NewRecord, Store, TokioClock};
use outbox_sqlite::{PendingEnqueue, SqliteConfig, SqliteStore, SCHEMA_VERSION};
use outbox_testkit::WakeOnlyRunner;

/// An outbox file with a business table, its store, and a runner that only a wake-up moves.
async fn app() -> (tempfile::TempDir, PathBuf, Arc<SqliteStore>, WakeOnlyRunner) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = Arc::new(
        SqliteStore::create(&path, SqliteConfig::default())
            .await
            .unwrap(),
    );
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE docs (id INTEGER PRIMARY KEY)")
        .unwrap();
    let runner = WakeOnlyRunner::start(store.clone(), Arc::new(TokioClock::new())).await;
    (dir, path, store, runner)
}

fn docs(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM docs", [], |row| row.get(0))
        .unwrap()
}

/// A file that is an SQLite database of another application, and an outbox file of a newer
/// schema than this build's.
fn foreign_and_newer(dir: &Path, outbox: &Path) -> (PathBuf, PathBuf) {
    let foreign = dir.join("other.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let newer = dir.join("newer.db");
    std::fs::copy(outbox, &newer).unwrap();
    rusqlite::Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    (foreign, newer)
}

fn bad_batches() -> [Vec<NewRecord>; 2] {
    [
        vec![NewRecord::new(b"x".to_vec()).in_group("")],
        vec![
            NewRecord::new(b"fine".to_vec()),
            NewRecord::new(b"x".to_vec()).replacing("a\0b"),
        ],
    ]
}

fn assert_refused(result: outbox_core::Result<PendingEnqueue>) {
    match result {
        Err(Error::InvalidGroup { .. }) => {}
        other => panic!("expected a typed refusal of the batch, got {other:?}"),
    }
}

fn edit(title: &str, group: &str) -> NewRecord {
    NewRecord::new(title.as_bytes().to_vec())
        .in_group(group)
        .replacing(format!("{group}/title"))
}

/// A waiting edit enqueued outside any transaction, then a second edit of its key inside one
/// (`inside`): the second replaces the first, as two enqueues outside do (on another group).
async fn check_coalescing<F, Fut>(store: &SqliteStore, inside: F)
where
    F: FnOnce(Vec<NewRecord>) -> Fut,
    Fut: std::future::Future<Output = PendingEnqueue>,
{
    let outside_first = store.enqueue(vec![edit("v1", "out")], 1).await.unwrap();
    let outside_second = store.enqueue(vec![edit("v2", "out")], 2).await.unwrap();
    let first = store.enqueue(vec![edit("v1", "in")], 1).await.unwrap();
    let pending = inside(vec![edit("v2", "in")]).await;
    assert_eq!(outside_second.ids, outside_first.ids);
    assert_eq!(pending.ids(), first.ids.as_slice(), "replaced in place");
    assert_eq!(pending.enqueued().superseded, outside_second.superseded);
    for id in [outside_first.ids[0], first.ids[0]] {
        assert_eq!(store.get(id).await.unwrap().unwrap().payload, b"v2");
    }
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.superseded), (2, 2));
}

/// A record held for later (until 2100: the app's runner runs on the system clock), enqueued
/// inside a transaction (`inside`, at time 2): it keeps its not-before time, is due then and
/// not before, and counts as scheduled.
async fn check_held<F, Fut>(store: &SqliteStore, inside: F)
where
    F: FnOnce(Vec<NewRecord>) -> Fut,
    Fut: std::future::Future<Output = PendingEnqueue>,
{
    const AT: u64 = 4_102_444_800_000;
    let held = NewRecord::new(b"later".to_vec()).not_before(AT);
    let pending = inside(vec![held]).await;
    let record = store.get(pending.ids()[0]).await.unwrap().unwrap();
    assert_eq!(
        (record.next_attempt_at, record.not_before),
        (Some(AT), Some(AT))
    );
    assert!(record.is_scheduled());
    assert_eq!(store.stats().await.unwrap().scheduled, 1);
}

mod sqlx_driver {
    use super::*;
    use sqlx::{Connection, SqliteConnection};

    async fn connect(path: &Path) -> SqliteConnection {
        SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("sqlx opens the file")
    }

    /// The enqueue and its commit can run in a spawned task or an axum handler (checked at
    /// compile time: the closure is never called).
    #[test]
    fn the_sqlx_enqueue_and_commit_are_send() {
        fn send<T: Send>(_: T) {}
        let _ = |store: &SqliteStore, conn: &mut SqliteConnection| {
            send(store.enqueue_sqlx(conn, Vec::new(), 0));
        };
        let _ = |pending: PendingEnqueue,
                 tx: sqlx::Transaction<'static, sqlx::Sqlite>,
                 outbox: &outbox_core::Outbox| {
            send(pending.commit_sqlx(tx, outbox));
        };
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_wakes_the_runner_and_a_rollback_leaves_nothing() {
        let (_dir, path, store, mut runner) = app().await;
        let mut conn = connect(&path).await;

        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
        sqlx::query("INSERT INTO docs VALUES (1)")
            .execute(&mut *tx)
            .await
            .unwrap();
        let dropped = store
            .enqueue_sqlx(
                &mut tx,
                vec![NewRecord::new(b"gone".to_vec())],
                runner.outbox.now(),
            )
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        runner.expect_nothing_announced().await;
        assert!(store.get(dropped.ids()[0]).await.unwrap().is_none());

        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
        sqlx::query("INSERT INTO docs VALUES (7)")
            .execute(&mut *tx)
            .await
            .unwrap();
        let pending = store
            .enqueue_sqlx(&mut tx, WakeOnlyRunner::batch("doc-7"), runner.outbox.now())
            .await
            .unwrap();
        let ids = pending.ids().to_vec();
        let enqueued = pending.commit_sqlx(tx, &runner.outbox).await.unwrap();
        runner.expect_announced(&ids, &enqueued, "doc-7").await;
        assert_eq!(docs(&path), 1);
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_batches_and_foreign_files_are_typed_errors_before_any_write() {
        let (dir, path, store, runner) = app().await;
        let mut conn = connect(&path).await;
        assert!(
            matches!(
                store
                    .enqueue_sqlx(&mut conn, vec![NewRecord::new(b"x".to_vec())], 1)
                    .await,
                Err(Error::InvalidConfig(_))
            ),
            "outside a transaction: refused"
        );
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
        sqlx::query("INSERT INTO docs VALUES (8)")
            .execute(&mut *tx)
            .await
            .unwrap();
        for batch in bad_batches() {
            assert_refused(store.enqueue_sqlx(&mut tx, batch, 1).await);
        }
        tx.commit().await.unwrap();
        assert_eq!(docs(&path), 1, "the business write committed");

        let (foreign, newer) = foreign_and_newer(dir.path(), &path);
        let one = || vec![NewRecord::new(b"x".to_vec())];
        let mut conn = connect(&foreign).await;
        let mut tx = conn.begin().await.unwrap();
        let refused = store.enqueue_sqlx(&mut tx, one(), 1).await;
        assert!(
            matches!(refused, Err(Error::NotAnOutbox { .. })),
            "{refused:?}"
        );
        let mut conn = connect(&newer).await;
        let mut tx = conn.begin().await.unwrap();
        let refused = store.enqueue_sqlx(&mut tx, one(), 1).await;
        assert!(
            matches!(refused, Err(Error::SchemaTooNew { .. })),
            "{refused:?}"
        );
        assert_eq!(store.stats().await.unwrap().undelivered(), 0);
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coalescing_write_in_a_transaction_merges_as_outside() {
        let (_dir, path, store, runner) = app().await;
        // No runner may claim the waiting edit first: a record in flight is not replaced.
        runner.shutdown().await;
        let mut conn = connect(&path).await;
        check_coalescing(&store, |batch| async {
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
            let pending = store.enqueue_sqlx(&mut tx, batch, 2).await.unwrap();
            tx.commit().await.unwrap();
            pending
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_held_for_later_keeps_its_time_in_a_transaction() {
        let (_dir, path, store, runner) = app().await;
        let mut conn = connect(&path).await;
        check_held(&store, |batch| async {
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
            let pending = store.enqueue_sqlx(&mut tx, batch, 2).await.unwrap();
            tx.commit().await.unwrap();
            pending
        })
        .await;
        runner.shutdown().await;
    }
}

mod diesel_driver {
    use super::*;
    use diesel::{Connection, RunQueryDsl, SqliteConnection};

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    fn connect(path: &Path) -> SqliteConnection {
        let mut conn = SqliteConnection::establish(&path.display().to_string())
            .expect("diesel opens the file");
        diesel::sql_query("PRAGMA busy_timeout = 5000")
            .execute(&mut conn)
            .unwrap();
        conn
    }

    /// Runs `work` on a blocking thread, as a diesel application does.
    async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
        tokio::task::spawn_blocking(work)
            .await
            .expect("the blocking task")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_wakes_the_runner_and_a_rollback_leaves_nothing() {
        let (_dir, path, store, mut runner) = app().await;
        let now = runner.outbox.now();
        let (p, st) = (path.clone(), store.clone());
        let (dropped, pending) = blocking(move || {
            let mut conn = connect(&p);
            let mut dropped = None;
            let rolled_back = conn.immediate_transaction(|conn| {
                diesel::sql_query("INSERT INTO docs VALUES (1)").execute(conn)?;
                dropped =
                    Some(st.enqueue_diesel(conn, vec![NewRecord::new(b"gone".to_vec())], now)?);
                Err::<(), BoxError>("roll back".into())
            });
            assert!(rolled_back.is_err());
            let pending = conn
                .immediate_transaction(|conn| {
                    diesel::sql_query("INSERT INTO docs VALUES (7)").execute(conn)?;
                    Ok::<_, BoxError>(st.enqueue_diesel(
                        conn,
                        WakeOnlyRunner::batch("doc-7"),
                        now,
                    )?)
                })
                .expect("committed");
            (dropped.expect("enqueued before the rollback"), pending)
        })
        .await;
        // The rolled-back id was handed out again (the id counter rolled back too): whatever
        // holds it now is not the rolled-back record, and the stats below count no third one.
        let reused = store.get(dropped.ids()[0]).await.unwrap();
        assert!(reused.is_none_or(|r| r.payload != b"gone"));
        let ids = pending.ids().to_vec();
        let enqueued = pending.committed(&runner.outbox);
        runner.expect_announced(&ids, &enqueued, "doc-7").await;
        assert_eq!(docs(&path), 1);
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_batches_and_foreign_files_are_typed_errors_before_any_write() {
        let (dir, path, store, runner) = app().await;
        let (foreign, newer) = foreign_and_newer(dir.path(), &path);
        let (p, st) = (path.clone(), store.clone());
        blocking(move || {
            let mut conn = connect(&p);
            assert!(
                matches!(
                    st.enqueue_diesel(&mut conn, vec![NewRecord::new(b"x".to_vec())], 1),
                    Err(Error::InvalidConfig(_))
                ),
                "outside a transaction: refused"
            );
            conn.immediate_transaction(|conn| {
                diesel::sql_query("INSERT INTO docs VALUES (8)").execute(conn)?;
                for batch in bad_batches() {
                    assert_refused(st.enqueue_diesel(conn, batch, 1));
                }
                Ok::<_, BoxError>(())
            })
            .expect("the business write commits");
            let one = || vec![NewRecord::new(b"x".to_vec())];
            let refused = connect(&foreign)
                .transaction(|conn| st.enqueue_diesel(conn, one(), 1).map_err(BoxError::from));
            assert!(refused.is_err_and(|e| matches!(
                e.downcast_ref::<Error>(),
                Some(Error::NotAnOutbox { .. })
            )));
            let refused = connect(&newer)
                .transaction(|conn| st.enqueue_diesel(conn, one(), 1).map_err(BoxError::from));
            assert!(refused.is_err_and(|e| matches!(
                e.downcast_ref::<Error>(),
                Some(Error::SchemaTooNew { .. })
            )));
        })
        .await;
        assert_eq!(docs(&path), 1);
        assert_eq!(store.stats().await.unwrap().undelivered(), 0);
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coalescing_write_in_a_transaction_merges_as_outside() {
        let (_dir, path, store, runner) = app().await;
        // No runner may claim the waiting edit first: a record in flight is not replaced.
        runner.shutdown().await;
        let st = store.clone();
        check_coalescing(&store, |batch| {
            blocking(move || {
                connect(&path)
                    .immediate_transaction(|conn| {
                        Ok::<_, BoxError>(st.enqueue_diesel(conn, batch, 2)?)
                    })
                    .expect("committed")
            })
        })
        .await;
    }

    #[tokio::test]
    async fn a_record_held_for_later_keeps_its_time_in_a_transaction() {
        let (_dir, path, store, runner) = app().await;
        let st = store.clone();
        check_held(&store, |batch| {
            blocking(move || {
                connect(&path)
                    .immediate_transaction(|conn| {
                        Ok::<_, BoxError>(st.enqueue_diesel(conn, batch, 2)?)
                    })
                    .expect("committed")
            })
        })
        .await;
        runner.shutdown().await;
    }
}
