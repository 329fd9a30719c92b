//! Files written with every earlier schema, built here by hand (frozen copies of versions 1 to
//! 5, not the crate's own migration code), filled, and upgraded by `open` with nothing lost:
//! ids still above every id ever handed out, the current indexes, no halt, no precondition,
//! coalescing key or not-before time on the records already there, no merged writes counted,
//! and stats' counters (the payload bytes among them) filled from the rows that were there (and
//! kept by the writes after the upgrade).

use std::path::Path;

use outbox_core::{Claim, Enqueued, Lease, ListQuery, Record, RecordId, State, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore, APPLICATION_ID, SCHEMA_VERSION};
use rusqlite::{params, Connection};

/// The layout version 1 of this crate wrote.
const FIRST_SCHEMA: &str = "
    PRAGMA journal_mode = WAL;
    CREATE TABLE records (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        grp TEXT,
        payload BLOB NOT NULL,
        key TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        state INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        unanswered INTEGER NOT NULL DEFAULT 0,
        interrupted INTEGER NOT NULL DEFAULT 0,
        last_attempt_at INTEGER,
        next_attempt_at INTEGER,
        last_error TEXT,
        lease_token INTEGER,
        lease_until INTEGER
    );
    CREATE INDEX records_due ON records(next_attempt_at, id) WHERE state IN (0, 1);
    CREATE TABLE tombstones (
        id INTEGER PRIMARY KEY,
        grp TEXT,
        key TEXT NOT NULL,
        reason TEXT NOT NULL,
        discarded_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL
    );
    CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO meta (name, value) VALUES ('delivered', 7);
    PRAGMA user_version = 1;
";

/// What version 2 of this crate added to a version 1 file.
const SECOND_SCHEMA: &str = "
    ALTER TABLE records ADD COLUMN member INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE records ADD COLUMN claimable INTEGER NOT NULL DEFAULT 0;
    UPDATE records SET member = (grp IS NOT NULL AND state <> 4);
    CREATE INDEX records_group ON records(grp, id) WHERE member = 1;
    UPDATE records SET claimable = (
        state IN (0, 1) AND next_attempt_at IS NOT NULL AND (
            grp IS NULL OR (member = 1 AND id = (
                SELECT h.id FROM records AS h
                WHERE h.grp = records.grp AND h.member = 1
                ORDER BY h.id LIMIT 1)))
    );
    DROP INDEX records_due;
    CREATE INDEX records_claimable ON records(next_attempt_at, id) WHERE claimable = 1;
    CREATE INDEX records_lease ON records(lease_until, id) WHERE state = 2;
    CREATE INDEX records_state ON records(state, id);
    PRAGMA user_version = 2;
";

/// What version 3 of this crate did to a version 2 file: ids from a counter in `meta` (the
/// table copied without `AUTOINCREMENT`), no state index, one deadline index, the halt table.
const THIRD_SCHEMA: &str = "
    INSERT INTO meta (name, value) VALUES ('last_id', max(
        coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'records'), 0),
        coalesce((SELECT max(id) FROM records), 0),
        coalesce((SELECT max(id) FROM tombstones), 0)));
    CREATE TABLE records_v3 (
        id INTEGER PRIMARY KEY,
        grp TEXT,
        payload BLOB NOT NULL,
        key TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        state INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        unanswered INTEGER NOT NULL DEFAULT 0,
        interrupted INTEGER NOT NULL DEFAULT 0,
        last_attempt_at INTEGER,
        next_attempt_at INTEGER,
        last_error TEXT,
        lease_token INTEGER,
        lease_until INTEGER,
        member INTEGER NOT NULL DEFAULT 0,
        claimable INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO records_v3 (id, grp, payload, key, created_at, state, attempts,
        unanswered, interrupted, last_attempt_at, next_attempt_at, last_error,
        lease_token, lease_until, member, claimable)
    SELECT id, grp, payload, key, created_at, state, attempts, unanswered,
        interrupted, last_attempt_at, next_attempt_at, last_error, lease_token,
        lease_until, member, claimable FROM records;
    DROP TABLE records;
    ALTER TABLE records_v3 RENAME TO records;
    CREATE INDEX records_group ON records(grp, id) WHERE member = 1;
    CREATE INDEX records_deadline ON records(claimable, next_attempt_at) WHERE state IN (0, 1);
    CREATE INDEX records_lease ON records(lease_until, id) WHERE state = 2;
    CREATE TABLE halt (
        only INTEGER PRIMARY KEY CHECK (only = 1),
        reason TEXT NOT NULL,
        since INTEGER NOT NULL
    );
    PRAGMA user_version = 3;
";

/// What version 4 of this crate did to a version 3 file: the precondition and coalescing key
/// columns, their index, and the count of merged writes.
const FOURTH_SCHEMA: &str = "
    ALTER TABLE records ADD COLUMN expected_version TEXT;
    ALTER TABLE records ADD COLUMN replaces TEXT;
    CREATE INDEX records_replaces ON records(replaces, id) WHERE replaces IS NOT NULL;
    INSERT OR IGNORE INTO meta (name, value) VALUES ('superseded', 0);
    PRAGMA user_version = 4;
";

/// What version 5 of this crate did to a version 4 file: the claimed-from column, the counters
/// filled from the rows, the error tally and the indexes stats read.
const FIFTH_SCHEMA: &str = "
    ALTER TABLE records ADD COLUMN claimed_from INTEGER;
    CREATE TABLE IF NOT EXISTS error_counts (
        error TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS error_counts_common ON error_counts(n DESC, error);
    INSERT OR REPLACE INTO meta (name, value)
        SELECT 'state ' || s.value, (SELECT count(*) FROM records
                         WHERE state = s.value AND NOT (state = 2 AND lease_until IS NULL))
        FROM json_each('[0, 1, 2, 3, 4]') AS s;
    DELETE FROM error_counts;
    INSERT INTO error_counts (error, n)
        SELECT last_error, count(*) FROM records
        WHERE state IN (1, 3, 4) AND last_error IS NOT NULL GROUP BY last_error;
    INSERT OR REPLACE INTO meta (name, value)
        VALUES ('tombstones', (SELECT count(*) FROM tombstones));
    CREATE INDEX IF NOT EXISTS records_created ON records(created_at);
    CREATE INDEX IF NOT EXISTS records_attention ON records(grp, id)
        WHERE state = 3 AND member = 1;
    PRAGMA user_version = 5;
";

/// What version 6 added: the not-before time and the index of the records waiting for it.
const SIXTH_SCHEMA: &str = "
    ALTER TABLE records ADD COLUMN not_before INTEGER;
    CREATE INDEX records_scheduled ON records(not_before)
        WHERE state = 0 AND not_before = next_attempt_at;
    PRAGMA user_version = 6;
";

/// One row of the first schema, in column order from `grp` on.
struct Row {
    group: Option<&'static str>,
    state: State,
    attempts: u32,
    last_attempt_at: Option<u64>,
    next_attempt_at: Option<u64>,
    last_error: Option<&'static str>,
    lease: Option<Lease>,
}

fn row(group: Option<&'static str>, state: State, next: Option<u64>) -> Row {
    Row {
        group,
        state,
        attempts: 0,
        last_attempt_at: None,
        next_attempt_at: next,
        last_error: None,
        lease: None,
    }
}

/// What the store must return for `row` with id `id`.
fn expected(id: u64, row: &Row) -> Record {
    Record {
        id: RecordId(id),
        group: row.group.map(str::to_owned),
        payload: format!("payload {id}").into_bytes(),
        key: format!("key-{id}"),
        created_at: 100 + id,
        state: row.state,
        attempts: row.attempts,
        unanswered: 0,
        interrupted: 0,
        last_attempt_at: row.last_attempt_at,
        next_attempt_at: row.next_attempt_at,
        last_error: row.last_error.map(str::to_owned),
        lease: row.lease,
        // Unknown before version 4: none on every record already there.
        expected_version: None,
        replaces: None,
        // Unknown before version 6: no record already there was held for later.
        not_before: None,
        // Unknown before version 7: the history starts with the next attempt.
        history: outbox_core::History::default(),
        // Unknown before version 7: the records carry no trace context.
        trace: None,
    }
}

fn rows() -> Vec<Row> {
    vec![
        // 1: ungrouped, due.
        row(None, State::Pending, Some(101)),
        // 2, 3: group g parked at its head; 3 is held behind it.
        Row {
            attempts: 5,
            last_attempt_at: Some(150),
            last_error: Some("gave up"),
            ..row(Some("g"), State::NeedsAttention, None)
        },
        row(Some("g"), State::Pending, Some(103)),
        // 4, 5: group h, its first record rejected, so 5 is the head and due.
        Row {
            attempts: 1,
            last_attempt_at: Some(160),
            last_error: Some("400"),
            ..row(Some("h"), State::Rejected, None)
        },
        row(Some("h"), State::Pending, Some(105)),
        // 6: retrying, due later.
        Row {
            attempts: 1,
            last_attempt_at: Some(170),
            last_error: Some("503"),
            ..row(None, State::Retrying, Some(5_000))
        },
        // 7, 8: group k in flight at its head (lease expired at 900), 8 waits.
        Row {
            lease: Some(Lease {
                token: u64::MAX - 3,
                until: 900,
            }),
            ..row(Some("k"), State::InFlight, Some(107))
        },
        row(Some("k"), State::Pending, Some(108)),
    ]
}

fn build_first_schema(path: &Path) -> Vec<Record> {
    let conn = Connection::open(path).expect("open");
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .expect("application id");
    conn.execute_batch(FIRST_SCHEMA).expect("first schema");
    let mut records = Vec::new();
    for (i, row) in rows().iter().enumerate() {
        let id = i as u64 + 1;
        let record = expected(id, row);
        conn.execute(
            "INSERT INTO records (grp, payload, key, created_at, state, attempts, \
             last_attempt_at, next_attempt_at, last_error, lease_token, lease_until) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                record.group,
                record.payload,
                record.key,
                record.created_at as i64,
                record.state.code(),
                record.attempts,
                record.last_attempt_at.map(|t| t as i64),
                record.next_attempt_at.map(|t| t as i64),
                record.last_error,
                record.lease.map(|l| l.token as i64),
                record.lease.map(|l| l.until as i64),
            ],
        )
        .expect("insert");
        records.push(record);
    }
    // A record that was delivered: its id must never be handed out again.
    conn.execute_batch(
        "INSERT INTO records (id, payload, key, created_at, state) VALUES (9, x'00', 'gone', 1, 0);
         DELETE FROM records WHERE id = 9;
         INSERT INTO tombstones VALUES (3, NULL, 'key-t', 'by a person', 400, 2);",
    )
    .expect("history");
    records
}

/// A version 2 file: the version 1 file, upgraded as version 2 of this crate did.
fn build_second_schema(path: &Path) -> Vec<Record> {
    let records = build_first_schema(path);
    Connection::open(path)
        .expect("open")
        .execute_batch(SECOND_SCHEMA)
        .expect("second schema");
    records
}

/// A version 3 file: the version 2 file, upgraded as version 3 of this crate did.
fn build_third_schema(path: &Path) -> Vec<Record> {
    let records = build_second_schema(path);
    let mut conn = Connection::open(path).expect("open");
    // Version 3 ran each step in one transaction.
    let tx = conn.transaction().expect("begin");
    tx.execute_batch(THIRD_SCHEMA).expect("third schema");
    tx.commit().expect("commit");
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("version");
    assert_eq!(version, 3);
    records
}

/// A version 4 file: the version 3 file, upgraded as version 4 of this crate did.
fn build_fourth_schema(path: &Path) -> Vec<Record> {
    let records = build_third_schema(path);
    let mut conn = Connection::open(path).expect("open");
    let tx = conn.transaction().expect("begin");
    tx.execute_batch(FOURTH_SCHEMA).expect("fourth schema");
    tx.commit().expect("commit");
    records
}

/// A version 5 file: the version 4 file, upgraded as version 5 of this crate did.
fn build_fifth_schema(path: &Path) -> Vec<Record> {
    let records = build_fourth_schema(path);
    let mut conn = Connection::open(path).expect("open");
    let tx = conn.transaction().expect("begin");
    tx.execute_batch(FIFTH_SCHEMA).expect("fifth schema");
    tx.commit().expect("commit");
    records
}

/// A version 6 file: the version 5 file, upgraded as version 6 of this crate did.
fn build_sixth_schema(path: &Path) -> Vec<Record> {
    let records = build_fifth_schema(path);
    let mut conn = Connection::open(path).expect("open");
    let tx = conn.transaction().expect("begin");
    tx.execute_batch(SIXTH_SCHEMA).expect("sixth schema");
    tx.commit().expect("commit");
    records
}

/// The layout of the current version, read from the file's schema.
fn check_layout(path: &Path) {
    let conn = Connection::open(path).expect("open");
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'records'",
            [],
            |row| row.get(0),
        )
        .expect("records table");
    assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
    let mut indexes: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'records'")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("indexes")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    indexes.sort();
    assert_eq!(
        indexes,
        [
            "records_attention",
            "records_created",
            "records_deadline",
            "records_group",
            "records_lease",
            "records_replaces",
            "records_scheduled"
        ],
        "no state index: stats read counters"
    );
    let triggers: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'",
            [],
            |row| row.get(0),
        )
        .expect("triggers");
    assert_eq!(
        triggers, 0,
        "the store's writes keep the counters, no trigger"
    );
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('records')")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("columns")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    for column in [
        "expected_version",
        "replaces",
        "claimed_from",
        "not_before",
        "history",
        "trace",
    ] {
        assert!(columns.iter().any(|c| c == column), "{column}: {columns:?}");
    }
}

async fn check_upgraded(store: &SqliteStore, records: &[Record]) {
    let settings = store.effective_settings().await.expect("settings");
    assert_eq!(settings.schema_version, SCHEMA_VERSION);
    check_layout(store.path());
    assert_eq!(store.halt().await.expect("halt"), None);
    let listed = store.list(&ListQuery::new(100)).await.expect("list");
    assert_eq!(listed, records, "every record kept as it was");

    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.pending, 4);
    assert_eq!(stats.retrying, 1);
    assert_eq!(stats.in_flight, 1);
    assert_eq!(stats.needs_attention, 1);
    assert_eq!(stats.rejected, 1);
    assert_eq!(stats.discarded, 1);
    assert_eq!(stats.delivered, 7);
    assert_eq!(stats.superseded, 0, "no merged writes before the upgrade");
    let payloads: u64 = records.iter().map(|r| r.payload.len() as u64).sum();
    assert_eq!(
        stats.payload_bytes, payloads,
        "the payload bytes counted from the rows that were there"
    );
    assert_eq!(stats.held, 1);
    assert_eq!(
        stats.scheduled, 0,
        "no record was held for later before the upgrade"
    );
    assert_eq!(stats.next_due, Some(101));
    assert_eq!(stats.oldest_created_at, Some(101));
    let errors = store.common_errors(10).await.expect("errors");
    let errors: Vec<(&str, u64)> = errors.iter().map(|e| (e.error.as_str(), e.count)).collect();
    assert_eq!(errors, [("400", 1), ("503", 1), ("gave up", 1)]);

    let expired = store.expired(1_000, 10).await.expect("expired");
    assert_eq!(expired, vec![records[6].clone()]);
    let tombstones = store.tombstones(None, 10).await.expect("tombstones");
    assert_eq!(tombstones.len(), 1);
    assert_eq!(tombstones[0].reason, "by a person");
}

/// Opens the old file at `path` holding `records`, twice, and checks the upgrade.
/// Two stores open a file of an earlier schema at once: both upgrade it, neither fails, and
/// both see every record as it was.
async fn converge_at_once(build: fn(&Path) -> Vec<Record>, name: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    let records = build(&path);
    let (a, b) = tokio::join!(
        SqliteStore::open(&path, SqliteConfig::default()),
        SqliteStore::open(&path, SqliteConfig::default()),
    );
    let (a, b) = (a.expect("first"), b.expect("second"));
    check_upgraded(&a, &records).await;
    check_upgraded(&b, &records).await;
}

async fn upgraded_with_nothing_lost(path: &Path, records: &[Record]) {
    let path = path.to_path_buf();

    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("open and migrate");
    check_upgraded(&store, records).await;
    store.close().await;

    // Opening again is idempotent: same version, same data.
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("reopen");
    check_upgraded(&store, records).await;

    // The upgraded file claims by the current rules: heads only, in deadline order.
    let lease = Lease {
        token: 1,
        until: 60_000,
    };
    let claimed = store
        .claim(Claim {
            now: 1_000,
            limit: 10,
            lease,
        })
        .await
        .expect("claim");
    let ids: Vec<u64> = claimed.iter().map(|r| r.id.0).collect();
    assert_eq!(ids, vec![1, 5]);
    // Ids are never reused, not even the one delivered before the upgrade.
    let new = store
        .enqueue(vec![outbox_core::NewRecord::new(b"new".to_vec())], 2_000)
        .await
        .expect("enqueue");
    assert_eq!(new, vec![RecordId(10)]);
    // Nor the highest id, once its record is gone, after a reopen.
    let discard = outbox_core::Transition {
        id: new[0],
        guard: outbox_core::Guard::Idle,
        change: outbox_core::Change::Discard {
            reason: "test".into(),
            at: 2_000,
            attempts: 0,
        },
    };
    store.apply(vec![discard]).await.expect("discard");
    store.close().await;
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("reopen");
    let next = store
        .enqueue(vec![outbox_core::NewRecord::new(b"next".to_vec())], 3_000)
        .await
        .expect("enqueue");
    assert_eq!(next, vec![RecordId(11)]);

    // The upgraded file coalesces: a second edit of a key replaces the first, and the count
    // of merged writes survives a reopen.
    let edit = |body: &str| {
        outbox_core::NewRecord::new(body.as_bytes().to_vec())
            .in_group("g2")
            .replacing("g2/body")
            .expecting("1")
    };
    let first = store
        .enqueue(vec![edit("v1")], 4_000)
        .await
        .expect("enqueue");
    assert_eq!(
        (first.clone(), first.superseded.len()),
        (Enqueued::fresh(vec![RecordId(12)]), 0)
    );
    let second = store
        .enqueue(vec![edit("v2")], 4_001)
        .await
        .expect("enqueue");
    assert_eq!(second.ids, vec![RecordId(12)]);
    assert_eq!(second.superseded, vec![0]);
    store.close().await;
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .expect("reopen");
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.superseded, 1);
    // The counters filled by the upgrade moved with every write since: two claimed, one
    // discarded, two enqueued (11 and 12, once merged).
    assert_eq!(
        (
            stats.pending,
            stats.retrying,
            stats.in_flight,
            stats.needs_attention,
            stats.rejected,
            stats.discarded
        ),
        (4, 1, 3, 1, 1, 2)
    );
    // And the payload bytes: `new` came and went, `next` and the edit `v2` stayed.
    let payloads: u64 = records.iter().map(|r| r.payload.len() as u64).sum();
    assert_eq!(stats.payload_bytes, payloads + 4 + 2);
    let record = store
        .get(RecordId(12))
        .await
        .expect("get")
        .expect("the coalesced record");
    assert_eq!(
        (
            record.payload.as_slice(),
            record.expected_version.as_deref(),
            record.replaces.as_deref(),
            record.created_at
        ),
        (b"v2".as_slice(), Some("1"), Some("g2/body"), 4_001)
    );
    // The records from before the upgrade still carry neither.
    let old = store
        .get(RecordId(1))
        .await
        .expect("get")
        .expect("record 1");
    assert_eq!(
        (old.expected_version, old.replaces, old.not_before),
        (None, None, None)
    );

    // The upgraded file holds a record for later: due at its time, counted as scheduled, and
    // passed by a re-base after a step back (its time is absolute).
    let later = store
        .enqueue(
            vec![outbox_core::NewRecord::new(b"later".to_vec()).not_before(90_000)],
            5_000,
        )
        .await
        .expect("enqueue");
    let record = store.get(later.ids[0]).await.expect("get").expect("later");
    assert_eq!(
        (record.next_attempt_at, record.not_before),
        (Some(90_000), Some(90_000))
    );
    assert_eq!(store.stats().await.expect("stats").scheduled, 1);
    let stepped = store.stepped_back(1_000, 100).await.expect("stepped back");
    assert!(!stepped.iter().any(|r| r.id == later.ids[0]), "{stepped:?}");

    // The upgraded file keeps attempt histories: a failed delivery of a record from before
    // the upgrade leaves its first attempt.
    let claimed = store
        .claim(Claim {
            now: 100_000,
            limit: 1,
            lease: Lease {
                token: 9,
                until: 200_000,
            },
        })
        .await
        .expect("claim");
    let mut rng = outbox_core::fastrand::Rng::with_seed(1);
    let step = outbox_core::machine::on_outcome(
        &claimed[0],
        &outbox_core::Outcome::transient("HTTP 503", None),
        &outbox_core::RetryPolicy::default(),
        100_001,
        &mut rng,
    );
    store.apply(vec![step.transition]).await.expect("apply");
    let failed = store
        .get(claimed[0].id)
        .await
        .expect("get")
        .expect("record");
    let kept: Vec<_> = failed
        .history
        .attempts()
        .iter()
        .map(|a| (a.at, a.status))
        .collect();
    assert_eq!(kept, [(100_001, Some(503))]);

    // The upgraded file keeps trace contexts.
    let cx = outbox_core::TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("congo=t61rcWkgMzE".into()),
    )
    .expect("trace context");
    let traced = store
        .enqueue(
            vec![outbox_core::NewRecord::new(b"traced".to_vec()).trace_context(cx.clone())],
            5_000,
        )
        .await
        .expect("enqueue");
    let record = store
        .get(traced.ids[0])
        .await
        .expect("get")
        .expect("traced");
    assert_eq!(record.trace, Some(cx));
}

#[tokio::test]
async fn a_first_schema_file_is_upgraded_with_nothing_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v1.db");
    let records = build_first_schema(&path);
    upgraded_with_nothing_lost(&path, &records).await;
}

#[tokio::test]
async fn a_second_schema_file_is_upgraded_with_nothing_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v2.db");
    let records = build_second_schema(&path);
    upgraded_with_nothing_lost(&path, &records).await;
}

#[tokio::test]
async fn a_third_schema_file_is_upgraded_with_nothing_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v3.db");
    let records = build_third_schema(&path);
    upgraded_with_nothing_lost(&path, &records).await;
}

#[tokio::test]
async fn a_fourth_schema_file_is_upgraded_with_nothing_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v4.db");
    let records = build_fourth_schema(&path);
    upgraded_with_nothing_lost(&path, &records).await;
}

#[tokio::test]
async fn a_fifth_schema_file_is_upgraded_with_nothing_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v5.db");
    let records = build_fifth_schema(&path);
    upgraded_with_nothing_lost(&path, &records).await;
}

#[tokio::test]
async fn a_sixth_schema_file_is_upgraded_with_nothing_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v6.db");
    let records = build_sixth_schema(&path);
    upgraded_with_nothing_lost(&path, &records).await;
}

#[tokio::test]
async fn two_stores_upgrading_a_sixth_schema_file_at_once_converge() {
    converge_at_once(build_sixth_schema, "v6.db").await;
}

#[tokio::test]
async fn two_stores_upgrading_a_fifth_schema_file_at_once_converge() {
    converge_at_once(build_fifth_schema, "v5.db").await;
}

#[tokio::test]
async fn two_stores_upgrading_a_fourth_schema_file_at_once_converge() {
    converge_at_once(build_fourth_schema, "v4.db").await;
}

#[tokio::test]
async fn two_stores_upgrading_a_third_schema_file_at_once_converge() {
    converge_at_once(build_third_schema, "v3.db").await;
}

#[tokio::test]
async fn two_stores_upgrading_a_second_schema_file_at_once_converge() {
    converge_at_once(build_second_schema, "v2.db").await;
}

#[tokio::test]
async fn two_stores_upgrading_one_file_at_once_converge() {
    converge_at_once(build_first_schema, "v1.db").await;
}

#[tokio::test]
async fn a_first_schema_file_opened_read_only_is_not_altered_and_reads_through_a_copy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v1.db");
    let records = build_first_schema(&path);
    // Fold the WAL into the file so its bytes are the whole story.
    Connection::open(&path)
        .expect("open")
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("checkpoint");
    let before = std::fs::read(&path).expect("read");
    let result = SqliteStore::open(&path, SqliteConfig::default().read_only(true)).await;
    assert!(
        matches!(result, Err(outbox_core::Error::ReadOnly { .. })),
        "{result:?}"
    );
    assert!(std::fs::read(&path).expect("read") == before);
    // Read through an upgraded copy instead: every record as it was, the file untouched, and
    // the copy gone with the store.
    let copy = SqliteStore::open_copy(&path, SqliteConfig::default().read_only(true))
        .await
        .expect("a copy");
    check_upgraded(&copy, &records).await;
    let copied = copy.path().to_path_buf();
    assert_ne!(copied, path);
    copy.close().await;
    assert!(!copied.exists(), "the copy is removed");
    assert!(std::fs::read(&path).expect("read") == before);
}

#[tokio::test]
async fn open_or_create_upgrades_an_old_file_as_open_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v1.db");
    let records = build_first_schema(&path);
    let store = SqliteStore::open_or_create(&path, SqliteConfig::default())
        .await
        .expect("open and migrate");
    check_upgraded(&store, &records).await;
    store.close().await;
    // Converged: the next start opens it as it is.
    let store = SqliteStore::open_or_create(&path, SqliteConfig::default())
        .await
        .expect("reopen");
    check_upgraded(&store, &records).await;
}
