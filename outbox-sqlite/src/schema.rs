//! The file's layout, how an existing file is recognised before anything is written to it, and
//! the guarded migrations that bring an older file to the current layout.
//!
//! The schema version lives in the file's header (`PRAGMA user_version`), next to an
//! `application_id` that marks the file as an outbox. Opening reads both, and checks the file,
//! before it alters anything; each migration step runs in its own immediate transaction that
//! re-reads the version, inspects the tables and only then alters them, so two processes
//! opening an old file at once, or a step interrupted by a crash, converge on the same layout.

use std::path::Path;

use outbox_core::{Error, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::config::SqliteConfig;
use crate::error::db;
use crate::worker::Room;

/// Marks a file as an outbox (`PRAGMA application_id`): the bytes "obx1".
pub const APPLICATION_ID: i32 = 0x6f62_7831;

/// The schema version this build writes and understands (`PRAGMA user_version`).
///
/// - 1: records, tombstones and the delivered counter; the due index covered every pending
///   and retrying record, and the head of a group was found at claim time.
/// - 2: group membership and claimability are kept on each row, so the due index holds only
///   records that can be claimed now or later (group heads), plus indexes for group heads,
///   leases and listing by state.
/// - 3: fewer pages written per record: ids come from a counter in `meta` instead of
///   `AUTOINCREMENT` (whose `sqlite_sequence` row every insert rewrote), the index on the state
///   that only stats used is gone, and one deadline index holds every pending and retrying
///   record, claimable ones first; the runner's halt is kept in a `halt` table.
/// - 4: each record keeps the version its write was made against (`expected_version`) and its
///   coalescing key (`replaces`), a partial index on the key finds the latest record with it,
///   and `meta` counts the writes merged by coalescing (`superseded`).
/// - 5: stats read counters instead of scanning: `meta` holds the number of readable records
///   in each state and of tombstones, and `error_counts` the number of failed records per
///   error, all kept by the store's own writes (the enqueue's statements included, which
///   every driver of a caller's transaction runs); each record keeps the state it was claimed
///   from (`claimed_from`). An index
///   on `created_at` gives the oldest undelivered record, and a partial index on the records
///   that need attention finds the groups they hold.
/// - 6: each record keeps the time it is not to be delivered before (`not_before`, `NULL` on
///   the records already there), and a partial index holds the records still waiting for it
///   (stats count them as scheduled). The deadline stays in `next_attempt_at`, in the one
///   deadline index: a record held for later costs a claim nothing.
/// - 7: each record keeps its last attempts (`history`, the bytes of
///   [`History::encode`](outbox_core::History::encode), `NULL` for none and on the records
///   already there), and `meta` counts the payload bytes of the records the state counters
///   count (`payload_bytes`: every readable record, rejected ones included; filled from the
///   rows already there and kept by the store's writes as the other counters are): stats
///   report it and a size cap ([`Cap`](outbox_core::Cap)) reads it. Each record also keeps
///   the trace context of the span its write was made in (`trace`, the text of
///   [`TraceContext::encode`](outbox_core::TraceContext::encode), `NULL` for none and on the
///   records already there).
pub const SCHEMA_VERSION: u32 = 7;

/// The tables every version has.
const TABLES: [&str; 3] = ["records", "tombstones", "meta"];

/// Opens a connection with the flags for `config`, never creating the file.
pub(crate) fn connect(path: &Path, read_only: bool) -> Result<Connection> {
    let access = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
    };
    Connection::open_with_flags(path, access | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(db)
}

/// Sets the per-connection settings: WAL (on a writable connection), the durability level
/// (its pragmas: `synchronous`, and `fullfsync` where it matters), the busy timeout and the
/// size limit.
pub(crate) fn configure(conn: &Connection, config: &SqliteConfig) -> Result<()> {
    conn.busy_timeout(config.busy_timeout).map_err(db)?;
    if !config.read_only {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(db)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Backend {
                detail: format!("SQLite refused WAL mode (journal_mode is {mode})"),
                source: None,
            });
        }
    }
    for (name, value) in config.durability.pragmas() {
        conn.pragma_update(None, name, value).map_err(db)?;
    }
    if let Some(bytes) = config.size_limit {
        let page_size: i64 = conn
            .pragma_query_value(None, "page_size", |row| row.get(0))
            .map_err(db)?;
        let pages = (bytes / page_size.max(1) as u64).max(1);
        conn.pragma_update(
            None,
            "max_page_count",
            i64::try_from(pages).unwrap_or(i64::MAX),
        )
        .map_err(db)?;
    }
    Ok(())
}

/// Pages above the size limit that draining writes may use besides one largest record's
/// overflow chain: for index and table pages that split while a round is written.
const SPARE_PAGES: u64 = 16;

/// The size limit in pages and the headroom a draining write may use above it (see
/// [`Room`]): enough for one record of the largest payload accepted to be rewritten with a
/// new overflow chain before its old one is freed, plus [`SPARE_PAGES`].
pub(crate) fn room(conn: &Connection, config: &SqliteConfig) -> Result<Option<Room>> {
    let Some(bytes) = config.size_limit else {
        return Ok(None);
    };
    let page_size: i64 = conn
        .pragma_query_value(None, "page_size", |row| row.get(0))
        .map_err(db)?;
    let page_size = u64::try_from(page_size).unwrap_or(1).max(1);
    let payload = u64::try_from(config.max_payload).unwrap_or(u64::MAX);
    Ok(Some(Room {
        limit: (bytes / page_size).max(1),
        headroom: payload.div_ceil(page_size).saturating_add(SPARE_PAGES),
    }))
}

/// The schema version of the outbox file at `path`, read without writing to it: the file is
/// checked as an open checks it ([`Error::NotFound`], [`Error::NotAnOutbox`],
/// [`Error::SchemaTooNew`]), without its integrity check. A version below
/// [`SCHEMA_VERSION`] is a file an older build wrote, which a read-only open refuses and
/// [`SqliteStore::open_copy`](crate::SqliteStore::open_copy) reads. It blocks on the file.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_sqlite::{schema, SqliteConfig, SqliteStore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("outbox.db");
/// SqliteStore::create(&path, SqliteConfig::default()).await?.close().await;
/// assert_eq!(schema::version_of(&path)?, schema::SCHEMA_VERSION);
/// # Ok(())
/// # }
/// ```
pub fn version_of(path: &Path) -> Result<u32> {
    check_file(path)?;
    inspect(&connect(path, true)?, false)
}

/// [`Error::NotFound`] when nothing is at `path`, [`Error::NotAnOutbox`] when it is no file.
pub(crate) fn check_file(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(Error::NotAnOutbox {
            detail: format!("{} is not a file", path.display()),
            source: None,
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(Error::NotFound {
            path: path.display().to_string(),
        }),
        Err(err) => Err(Error::backend(err)),
    }
}

/// Reads what the file is without writing to it, and returns its schema version.
pub(crate) fn inspect(conn: &Connection, check: bool) -> Result<u32> {
    let app: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(db)?;
    let version: i32 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(db)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(db)?;
    if app != APPLICATION_ID {
        let detail = if app == 0 && objects == 0 {
            "the file is empty (a zero-byte file or an empty SQLite database)".to_owned()
        } else {
            format!("an SQLite database of another application (application_id {app:#x})")
        };
        return Err(Error::NotAnOutbox {
            detail,
            source: None,
        });
    }
    let version = u32::try_from(version).unwrap_or(0);
    if version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version == 0 {
        return Err(Error::NotAnOutbox {
            detail: "the file is marked as an outbox but records no schema version".into(),
            source: None,
        });
    }
    if check {
        quick_check(conn)?;
    }
    for table in TABLES {
        if !has_table(conn, table)? {
            return Err(Error::Corrupted {
                detail: format!("the outbox table {table:?} is missing"),
                source: None,
            });
        }
    }
    let later = [(3, "halt"), (5, "error_counts")];
    for (since, table) in later {
        if version >= since && !has_table(conn, table)? {
            return Err(Error::Corrupted {
                detail: format!("the outbox table {table:?} is missing"),
                source: None,
            });
        }
    }
    Ok(version)
}

fn quick_check(conn: &Connection) -> Result<()> {
    let mut stmt = conn.prepare("PRAGMA quick_check(5)").map_err(db)?;
    let problems: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    if problems.len() == 1 && problems[0] == "ok" {
        return Ok(());
    }
    Err(Error::Corrupted {
        detail: problems.join("; "),
        source: None,
    })
}

fn has_table(conn: &Connection, table: &str) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [table],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(db)
}

fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(db)
}

/// Brings the file from `from` to [`SCHEMA_VERSION`], one step per transaction.
pub(crate) fn migrate(conn: &mut Connection, from: u32) -> Result<()> {
    for step in from + 1..=SCHEMA_VERSION {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        // Another process may have run this step between our inspection and our lock.
        let now: i32 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(db)?;
        if u32::try_from(now).unwrap_or(0) >= step {
            continue;
        }
        match step {
            1 => to_v1(&tx)?,
            2 => to_v2(&tx)?,
            3 => to_v3(&tx)?,
            4 => to_v4(&tx)?,
            5 => to_v5(&tx)?,
            6 => to_v6(&tx)?,
            7 => to_v7(&tx)?,
            _ => unreachable_step(step)?,
        }
        tx.pragma_update(None, "user_version", step).map_err(db)?;
        tx.commit().map_err(db)?;
        tracing::info!(version = step, "outbox schema migrated");
    }
    Ok(())
}

fn unreachable_step(step: u32) -> Result<()> {
    Err(Error::Backend {
        detail: format!("no migration to schema version {step}"),
        source: None,
    })
}

/// Version 1: the first layout.
fn to_v1(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(db)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (
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
        CREATE INDEX IF NOT EXISTS records_due ON records(next_attempt_at, id)
            WHERE state IN (0, 1);
        CREATE TABLE IF NOT EXISTS tombstones (
            id INTEGER PRIMARY KEY,
            grp TEXT,
            key TEXT NOT NULL,
            reason TEXT NOT NULL,
            discarded_at INTEGER NOT NULL,
            attempts INTEGER NOT NULL
        );
        CREATE TABLE IF NOT EXISTS meta (
            name TEXT PRIMARY KEY,
            value INTEGER NOT NULL
        ) WITHOUT ROWID;
        INSERT OR IGNORE INTO meta (name, value) VALUES ('delivered', 0);",
    )
    .map_err(db)
}

/// Version 2: membership and claimability kept on each row, and the indexes that use them.
fn to_v2(conn: &Connection) -> Result<()> {
    for column in ["member", "claimable"] {
        if !has_column(conn, "records", column)? {
            conn.execute_batch(&format!(
                "ALTER TABLE records ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
            ))
            .map_err(db)?;
        }
    }
    conn.execute_batch(
        "UPDATE records SET member = (grp IS NOT NULL AND state <> 4);
        CREATE INDEX IF NOT EXISTS records_group ON records(grp, id) WHERE member = 1;
        UPDATE records SET claimable = (
            state IN (0, 1) AND next_attempt_at IS NOT NULL AND (
                grp IS NULL OR (member = 1 AND id = (
                    SELECT h.id FROM records AS h
                    WHERE h.grp = records.grp AND h.member = 1
                    ORDER BY h.id LIMIT 1)))
        );
        DROP INDEX IF EXISTS records_due;
        CREATE INDEX IF NOT EXISTS records_claimable ON records(next_attempt_at, id)
            WHERE claimable = 1;
        CREATE INDEX IF NOT EXISTS records_lease ON records(lease_until, id) WHERE state = 2;
        CREATE INDEX IF NOT EXISTS records_state ON records(state, id);",
    )
    .map_err(db)
}

/// The records table of version 3: an id without `AUTOINCREMENT`, assigned from the
/// `last_id` counter in `meta`.
const RECORDS_V3: &str = "CREATE TABLE records_v3 (
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
)";

/// True while the records table still assigns its ids with `AUTOINCREMENT`.
fn autoincrement(conn: &Connection) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'records' \
         AND sql LIKE '%AUTOINCREMENT%'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(db)
}

/// Version 3: ids from a counter in `meta`, no state index, one deadline index over every
/// pending and retrying record, and the halt table.
fn to_v3(conn: &Connection) -> Result<()> {
    // The counter starts above every id ever handed out: the highest the sequence recorded
    // (a delivered record may have held it), or any id still in a table.
    let sequence = if has_table(conn, "sqlite_sequence")? {
        "(SELECT seq FROM sqlite_sequence WHERE name = 'records')"
    } else {
        "NULL"
    };
    conn.execute_batch(&format!(
        "INSERT OR IGNORE INTO meta (name, value) VALUES ('last_id', max(
            coalesce({sequence}, 0),
            coalesce((SELECT max(id) FROM records), 0),
            coalesce((SELECT max(id) FROM tombstones), 0)));"
    ))
    .map_err(db)?;
    if autoincrement(conn)? {
        // SQLite cannot drop AUTOINCREMENT from a table: copy the rows into the new layout.
        // The step's transaction makes the swap all or nothing.
        conn.execute_batch(&format!(
            "{RECORDS_V3};
            INSERT INTO records_v3 (id, grp, payload, key, created_at, state, attempts,
                unanswered, interrupted, last_attempt_at, next_attempt_at, last_error,
                lease_token, lease_until, member, claimable)
            SELECT id, grp, payload, key, created_at, state, attempts, unanswered,
                interrupted, last_attempt_at, next_attempt_at, last_error, lease_token,
                lease_until, member, claimable FROM records;
            DROP TABLE records;
            ALTER TABLE records_v3 RENAME TO records;"
        ))
        .map_err(db)?;
    }
    conn.execute_batch(
        "DROP INDEX IF EXISTS records_state;
        DROP INDEX IF EXISTS records_claimable;
        CREATE INDEX IF NOT EXISTS records_group ON records(grp, id) WHERE member = 1;
        CREATE INDEX IF NOT EXISTS records_deadline ON records(claimable, next_attempt_at)
            WHERE state IN (0, 1);
        CREATE INDEX IF NOT EXISTS records_lease ON records(lease_until, id) WHERE state = 2;
        CREATE TABLE IF NOT EXISTS halt (
            only INTEGER PRIMARY KEY CHECK (only = 1),
            reason TEXT NOT NULL,
            since INTEGER NOT NULL
        );",
    )
    .map_err(db)
}

/// Version 4: the precondition and the coalescing key on each record (`NULL` on the records
/// already there), the coalescing index, and the count of merged writes.
///
/// The index is partial: a record without a coalescing key adds no index entry, so an enqueue
/// that does not coalesce writes no more pages than before.
fn to_v4(conn: &Connection) -> Result<()> {
    for column in ["expected_version", "replaces"] {
        if !has_column(conn, "records", column)? {
            conn.execute_batch(&format!("ALTER TABLE records ADD COLUMN {column} TEXT"))
                .map_err(db)?;
        }
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS records_replaces ON records(replaces, id)
            WHERE replaces IS NOT NULL;
        INSERT OR IGNORE INTO meta (name, value) VALUES ('superseded', 0);",
    )
    .map_err(db)
}

/// The counters of version 5, filled from the rows (see [`counters`](crate::counters) for what
/// they count and how the store's writes keep them), and the indexes stats read.
///
/// The statements are frozen with the version: a later change of these rules is a new version.
const COUNTERS_V5: &str = "
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
";

/// Version 5: the counters stats read, the indexes for the oldest undelivered record and the
/// held groups (see [`COUNTERS_V5`]), and the state each in-flight record was claimed from
/// (`claimed_from`), which the claim returns so it can move the counters.
///
/// Every statement either creates what is missing or fills the counters afresh from the
/// rows, inside the step's transaction, so a step interrupted by a crash, or run again,
/// converges on the same counters.
fn to_v5(conn: &Connection) -> Result<()> {
    if !has_column(conn, "records", "claimed_from")? {
        conn.execute_batch("ALTER TABLE records ADD COLUMN claimed_from INTEGER")
            .map_err(db)?;
    }
    conn.execute_batch(COUNTERS_V5).map_err(db)
}

/// Version 6: the not-before time on each record (`NULL` on the records already there: none
/// was held for later) and the partial index of the records still waiting for it.
///
/// The index holds only pending rows whose deadline is their not-before time, so an enqueue
/// without one adds no entry to it, and counting the scheduled records reads only theirs.
fn to_v6(conn: &Connection) -> Result<()> {
    if !has_column(conn, "records", "not_before")? {
        conn.execute_batch("ALTER TABLE records ADD COLUMN not_before INTEGER")
            .map_err(db)?;
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS records_scheduled ON records(not_before)
            WHERE state = 0 AND not_before = next_attempt_at;",
    )
    .map_err(db)
}

/// Version 7: the last attempts of each record (`history`, `NULL` on the records already
/// there: their history starts with their next attempt), its trace context (`trace`, `NULL`
/// on the records already there: they carry none), and the payload bytes counter (see
/// [`counters`](crate::counters)), filled afresh from the rows inside the step's transaction,
/// so a step run again converges on the same count.
fn to_v7(conn: &Connection) -> Result<()> {
    for (column, ty) in [("history", "BLOB"), ("trace", "TEXT")] {
        if !has_column(conn, "records", column)? {
            conn.execute_batch(&format!("ALTER TABLE records ADD COLUMN {column} {ty}"))
                .map_err(db)?;
        }
    }
    conn.execute_batch(
        "INSERT OR REPLACE INTO meta (name, value)
            VALUES ('payload_bytes', (SELECT coalesce(sum(length(payload)), 0) FROM records
                                      WHERE NOT (state = 2 AND lease_until IS NULL)));",
    )
    .map_err(db)
}
