//! The size cap on the SQLite store, on every path that enqueues: the store's own writer, the
//! caller's transaction through rusqlite, sqlx and diesel, and several stores on one file. A
//! cap of 1,000 records refuses the 1,001st enqueue with `QueueFull` and keeps nothing of it;
//! in a business transaction the outbox part is refused and the business write still commits;
//! a delivery makes room; a write replacing a waiting one counts only what it adds; and
//! `stats().payload_bytes` equals the payloads held after every kind of write. (The sqlx and
//! diesel paths are tested with the driver features, on in this workspace's tests.)

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_core::{
    Cap, CapLimit, Change, Claim, Error, Guard, Lease, NewRecord, Progress, RecordId, State, Stats,
    Store, Transition, Usage,
};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::{Connection, TransactionBehavior};

const MAX: u64 = 1_000;

/// The coalescing key of the one keyed record among the 1,000.
const TITLE: &str = "doc-1/title";

fn rec(body: &str) -> NewRecord {
    NewRecord::new(body.as_bytes().to_vec())
}

fn title(body: &str) -> NewRecord {
    rec(body).in_group("doc-1").replacing(TITLE)
}

/// A store on a new file in `dir` capped at 1,000 records and holding 1,000 (the last one
/// with the coalescing key [`TITLE`]), with a business table `docs` in the same file.
async fn full(dir: &Path) -> (PathBuf, SqliteStore) {
    let path = dir.join("app.db");
    let config = SqliteConfig::default().with_cap(Cap::none().with_max_records(MAX));
    let store = SqliteStore::create(&path, config).await.expect("create");
    for batch in 0..10 {
        let mut records: Vec<NewRecord> = (0..100)
            .map(|i| rec(&format!("r{:04}", batch * 100 + i)))
            .collect();
        if batch == 9 {
            records[99] = title("t1");
        }
        store.enqueue(records, 1_000).await.expect("fits");
    }
    Connection::open(&path)
        .expect("open")
        .execute_batch("CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT)")
        .expect("business table");
    (path, store)
}

/// The result is the refusal of a cap of [`MAX`] records holding `used`, adding `adding`.
fn assert_refused<T: Debug>(result: outbox_core::Result<T>, used: u64, adding: u64) {
    match result {
        Err(Error::QueueFull {
            limit: CapLimit::Records,
            max: MAX,
            used: u,
            adding: a,
        }) if (u, a) == (used, adding) => {}
        other => panic!("expected QueueFull (used {used}, adding {adding}), got {other:?}"),
    }
}

fn docs(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).expect("open");
    let mut stmt = conn
        .prepare("SELECT title FROM docs ORDER BY id")
        .expect("prepare");
    let titles = stmt
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    titles
}

/// The payload bytes the file holds, summed over its rows (a row set aside as unreadable is
/// out of stats, its payload too).
fn held_bytes(path: &Path) -> u64 {
    Connection::open(path)
        .expect("open")
        .query_row(
            "SELECT coalesce(sum(length(payload)), 0) FROM records \
             WHERE NOT (state = 2 AND lease_until IS NULL)",
            [],
            |row| row.get::<_, i64>(0),
        )
        .expect("sum") as u64
}

/// What the store holds: its stats and the payload of the keyed record.
async fn held(store: &SqliteStore) -> (Stats, Vec<u8>) {
    let stats = store.stats().await.expect("stats");
    let keyed = store.get(RecordId(MAX)).await.expect("get").expect("keyed");
    (stats, keyed.payload)
}

/// Claims the first due record and reports it delivered.
async fn deliver_one(store: &SqliteStore, now: u64) {
    let lease = Lease {
        token: now,
        until: now + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now,
            limit: 1,
            lease,
        })
        .await
        .expect("claim");
    let delivered = Transition {
        id: claimed[0].id,
        guard: Guard::Lease(lease.token),
        change: Change::Delivered,
    };
    let applied = store.apply(vec![delivered]).await.expect("apply");
    assert!(applied.skipped.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_1001st_enqueue_is_refused_and_a_delivery_makes_room() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, store) = full(dir.path()).await;
    let before = held(&store).await;
    assert_eq!(before.0.usage().records, MAX);
    assert_eq!(before.0.payload_bytes, held_bytes(&path));

    assert_refused(store.enqueue(vec![rec("r1000")], 2_000).await, MAX, 1);
    // A batch whose one keyed record finds nothing to replace is a fresh record too.
    let unkeyed = rec("x").replacing("no-such-key");
    assert_refused(store.enqueue(vec![unkeyed], 2_000).await, MAX, 1);
    assert_eq!(
        held(&store).await,
        before,
        "nothing written, nothing touched"
    );

    // A write replacing the waiting keyed record adds no record: it goes in.
    let edit = store.enqueue(vec![title("t2 longer")], 2_001).await;
    let edit = edit.expect("an edit adds nothing");
    assert_eq!(
        (edit.ids.clone(), edit.replaced(0)),
        (vec![RecordId(MAX)], true)
    );
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.usage().records, MAX);
    assert_eq!(stats.payload_bytes, before.0.payload_bytes + 7);

    deliver_one(&store, 3_000).await;
    let fits = store
        .enqueue(vec![rec("r1000")], 3_001)
        .await
        .expect("room");
    // The refused enqueues took no id.
    assert_eq!(fits.ids, [RecordId(MAX + 1)]);
    assert_refused(store.enqueue(vec![rec("r1001")], 3_002).await, MAX, 1);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_rusqlite_transaction_the_outbox_part_is_refused_and_the_business_write_commits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, store) = full(dir.path()).await;
    let before = held(&store).await;
    let mut conn = Connection::open(&path).expect("open");
    conn.busy_timeout(Duration::from_secs(5)).expect("timeout");
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .expect("begin");
    tx.execute("INSERT INTO docs (title) VALUES ('draft')", [])
        .expect("business write");
    assert_refused(store.enqueue_in(&tx, vec![rec("r1000")], 2_000), MAX, 1);
    // Written, counted and undone inside the transaction: a keyed record with nothing to
    // replace.
    let unkeyed = rec("x").replacing("no-such-key");
    assert_refused(store.enqueue_pending(&tx, vec![unkeyed], 2_000), MAX, 1);
    // An edit of the waiting record adds nothing and goes in, in the same transaction.
    let edit = store
        .enqueue_in(&tx, vec![title("t2")], 2_001)
        .expect("edit");
    assert_eq!(edit.ids, [RecordId(MAX)]);
    tx.execute("INSERT INTO docs (title) VALUES ('final')", [])
        .expect("the transaction is still usable");
    tx.commit().expect("commit");

    assert_eq!(docs(&path), ["draft", "final"]);
    let after = held(&store).await;
    assert_eq!(after.0.usage().records, MAX);
    assert_eq!(after.1, b"t2");
    assert_eq!(after.0.payload_bytes, before.0.payload_bytes);
    assert_eq!(after.0.payload_bytes, held_bytes(&path));
    store.close().await;
}

// A build without the driver features (the rusqlite range's newest end) has none to go
// through.
#[cfg(feature = "sqlx")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_sqlx_transaction_the_outbox_part_is_refused_and_the_business_write_commits() {
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, store) = full(dir.path()).await;
    let before = held(&store).await;
    let url = format!("sqlite://{}", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("sqlx");
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
    sqlx::query("INSERT INTO docs (title) VALUES ('draft')")
        .execute(&mut *tx)
        .await
        .expect("business write");
    let refused = store.enqueue_sqlx(&mut tx, vec![rec("r1000")], 2_000).await;
    assert_refused(refused, MAX, 1);
    let unkeyed = rec("x").replacing("no-such-key");
    let refused = store.enqueue_sqlx(&mut tx, vec![unkeyed], 2_000).await;
    assert_refused(refused, MAX, 1);
    let edit = store.enqueue_sqlx(&mut tx, vec![title("t2")], 2_001).await;
    assert_eq!(edit.expect("edit").ids(), [RecordId(MAX)]);
    sqlx::query("INSERT INTO docs (title) VALUES ('final')")
        .execute(&mut *tx)
        .await
        .expect("the transaction is still usable");
    tx.commit().await.expect("commit");

    assert_eq!(docs(&path), ["draft", "final"]);
    let after = held(&store).await;
    assert_eq!(after.0.usage().records, MAX);
    assert_eq!(after.1, b"t2");
    assert_eq!(after.0.payload_bytes, before.0.payload_bytes);
    store.close().await;
}

#[cfg(feature = "diesel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_diesel_transaction_the_outbox_part_is_refused_and_the_business_write_commits() {
    use diesel::{Connection as _, RunQueryDsl};
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, store) = full(dir.path()).await;
    let before = held(&store).await;
    let mut conn =
        diesel::SqliteConnection::establish(&path.display().to_string()).expect("diesel");
    diesel::sql_query("PRAGMA busy_timeout = 5000")
        .execute(&mut conn)
        .expect("timeout");
    let edit = conn
        .immediate_transaction(|conn| {
            diesel::sql_query("INSERT INTO docs (title) VALUES ('draft')").execute(conn)?;
            assert_refused(
                store.enqueue_diesel(conn, vec![rec("r1000")], 2_000),
                MAX,
                1,
            );
            let unkeyed = rec("x").replacing("no-such-key");
            assert_refused(store.enqueue_diesel(conn, vec![unkeyed], 2_000), MAX, 1);
            let edit = store.enqueue_diesel(conn, vec![title("t2")], 2_001)?;
            diesel::sql_query("INSERT INTO docs (title) VALUES ('final')").execute(conn)?;
            Ok::<_, BoxError>(edit)
        })
        .expect("committed");
    assert_eq!(edit.ids(), [RecordId(MAX)]);

    assert_eq!(docs(&path), ["draft", "final"]);
    let after = held(&store).await;
    assert_eq!(after.0.usage().records, MAX);
    assert_eq!(after.1, b"t2");
    assert_eq!(after.0.payload_bytes, before.0.payload_bytes);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bytes_cap_counts_what_a_replacing_write_adds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let config = SqliteConfig::default().with_cap(Cap::none().with_max_bytes(10));
    let store = SqliteStore::create(&path, config).await.expect("create");
    let ids = store
        .enqueue(vec![title("aaaa"), rec("bbbbb")], 1_000)
        .await
        .expect("nine bytes");
    let refused = store.enqueue(vec![title("cccccc")], 1_001).await;
    assert!(
        matches!(
            refused,
            Err(Error::QueueFull {
                limit: CapLimit::Bytes,
                max: 10,
                used: 9,
                adding: 2
            })
        ),
        "{refused:?}"
    );
    let kept = store.get(ids.ids[0]).await.expect("get").expect("record");
    assert_eq!(kept.payload, b"aaaa", "the waiting record untouched");
    store
        .enqueue(vec![title("ccccc")], 1_002)
        .await
        .expect("exactly full");
    // A smaller payload adds nothing: it goes in even when full.
    store
        .enqueue(vec![title("dd"), rec("")], 1_003)
        .await
        .expect("smaller");
    let stats = store.stats().await.expect("stats");
    assert_eq!(
        stats.usage(),
        Usage {
            records: 3,
            bytes: 7
        }
    );
    assert_eq!(stats.payload_bytes, held_bytes(&path));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_racing_on_one_file_never_pass_the_cap() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let config = SqliteConfig::default().with_cap(Cap::none().with_max_records(50));
    let a = SqliteStore::create(&path, config.clone())
        .await
        .expect("create");
    let b = SqliteStore::open(&path, config).await.expect("open");
    let mut tasks = tokio::task::JoinSet::new();
    for store in [a, b].map(std::sync::Arc::new) {
        for i in 0..40u8 {
            let store = store.clone();
            tasks.spawn(async move { store.enqueue(vec![NewRecord::new(vec![i])], 1_000).await });
        }
    }
    let mut accepted = 0;
    while let Some(result) = tasks.join_next().await {
        match result.expect("task") {
            Ok(_) => accepted += 1,
            Err(Error::QueueFull { max: 50, .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(accepted, 50);
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open");
    let stats = store.stats().await.expect("stats");
    assert_eq!((stats.pending, stats.payload_bytes), (50, 50));
    store.close().await;
}

/// Stats' payload bytes against the file's rows and against the records listed.
async fn check_bytes(store: &SqliteStore, path: &Path, step: &str) {
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.payload_bytes, held_bytes(path), "after {step}");
    assert_eq!(stats.usage().bytes, stats.payload_bytes, "after {step}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_bytes_equal_the_payloads_held_after_every_kind_of_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    check_bytes(&store, &path, "nothing").await;
    let records = (0..6).map(|i| rec(&"x".repeat(i * 10))).collect();
    store.enqueue(records, 1_000).await.expect("enqueue");
    check_bytes(&store, &path, "enqueue").await;
    store
        .enqueue(vec![title("a first title")], 1_001)
        .await
        .expect("title");
    store
        .enqueue(vec![title("longer, a second title")], 1_002)
        .await
        .expect("edit");
    check_bytes(&store, &path, "a larger replacement").await;
    store
        .enqueue(vec![title("short")], 1_003)
        .await
        .expect("edit");
    check_bytes(&store, &path, "a smaller replacement").await;

    let lease = Lease {
        token: 7,
        until: 60_000,
    };
    let claimed = store
        .claim(Claim {
            now: 5_000,
            limit: 4,
            lease,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 4);
    let step = |id, change| Transition {
        id,
        guard: Guard::Lease(lease.token),
        change,
    };
    let rejected = Progress {
        state: State::Rejected,
        attempts: 1,
        unanswered: 0,
        interrupted: 0,
        last_attempt_at: Some(5_001),
        next_attempt_at: None,
        last_error: Some("HTTP 422".into()),
        history: Default::default(),
    };
    let discard = Change::Discard {
        reason: "by a person".into(),
        at: 5_001,
        attempts: 1,
    };
    store
        .apply(vec![
            step(claimed[0].id, Change::Delivered),
            step(claimed[1].id, discard),
            step(claimed[2].id, Change::Update(rejected)),
            step(claimed[3].id, Change::Update(Progress::requeued(5_001))),
        ])
        .await
        .expect("apply");
    check_bytes(
        &store,
        &path,
        "a delivery, a discard, a rejection, a requeue",
    )
    .await;
    assert_eq!(store.stats().await.expect("stats").rejected, 1);
    store.prune(u64::MAX).await.expect("prune");
    check_bytes(&store, &path, "the prune of the rejected record").await;

    // A row that cannot be decoded: counted until a claim sets it aside, as stats count it.
    let counted = store.stats().await.expect("stats").payload_bytes;
    let bad = claimed[3].id;
    Connection::open(&path)
        .expect("open")
        .execute(
            "UPDATE records SET key = CAST(x'c328ff' AS TEXT) WHERE id = ?1",
            [bad.0 as i64],
        )
        .expect("plant");
    store
        .claim(Claim {
            now: 10_000,
            limit: 100,
            lease: Lease {
                token: 8,
                until: 60_000,
            },
        })
        .await
        .expect("claim around it");
    check_bytes(&store, &path, "the bad row set aside").await;
    let bad_bytes = store.stats().await.expect("stats").payload_bytes;
    assert!(bad_bytes < counted, "{bad_bytes} < {counted}");
    assert!(store
        .discard_unreadable(bad, 10_001)
        .await
        .expect("discard"));
    check_bytes(&store, &path, "the bad row discarded").await;
    store.close().await;
}
