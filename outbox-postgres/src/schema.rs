//! The tables of an outbox schema, their version, and the guarded migrations that bring any
//! earlier version up to [`SCHEMA_VERSION`].
//!
//! Migrations run in one transaction under a transaction-level advisory lock keyed by the
//! schema name, so two processes starting at the same moment do not race: the second waits,
//! then finds the schema current and changes nothing. DDL is transactional in PostgreSQL, so a
//! migration that fails leaves the previous version intact.

use deadpool_postgres::Object;
use outbox_core::{Error, Result};

use crate::error::pg;
use crate::migrations::MIGRATIONS;

/// The schema version this build writes and understands (the steps are in `migrations`).
pub const SCHEMA_VERSION: u32 = 7;

/// How many rows the counters of version 4 are spread over: enough that the sessions of a
/// fleet (a few pooled connections per host) seldom share one, few enough that summing them
/// costs nothing. Fixed: the triggers and statements use it.
pub(crate) const SHARDS: i32 = 64;

/// A migration step's SQL for the schema `quoted` (already quoted).
fn step_sql(step: &str, quoted: &str) -> String {
    step.replace("{s}", quoted)
        .replace("{shards}", &SHARDS.to_string())
}

/// The shard a session's counter changes go to, as SQL: the same expression as the triggers'.
pub(crate) fn shard_sql() -> String {
    format!("pg_backend_pid() % {SHARDS}")
}

/// Checks that `name` is a plain lowercase identifier, so it can be spliced into SQL quoted
/// and means the same schema to every tool (`psql`, dumps) without quoting surprises.
///
/// ```
/// use outbox_postgres::schema::check_schema_name;
/// assert!(check_schema_name("orders_outbox").is_ok());
/// assert!(check_schema_name("Orders").is_err());
/// assert!(check_schema_name("").is_err());
/// ```
pub fn check_schema_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 63 && !name.starts_with("pg_") {
        Ok(())
    } else {
        Err(Error::InvalidConfig(format!(
            "schema name {name:?} must be 1 to 63 lowercase letters, digits or '_', start with a \
             letter or '_', and not start with 'pg_'"
        )))
    }
}

/// A stable 64-bit FNV-1a hash: the same key in every process and every build, as advisory
/// locks shared between hosts need (the standard library's hasher promises no such thing).
fn fnv1a(parts: &[&[u8]]) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// The advisory lock key that serializes migrations of one schema.
pub(crate) fn migration_lock(schema: &str) -> i64 {
    fnv1a(&[b"outbox-migrate", schema.as_bytes()])
}

/// The seed of the server-side hash (`hashtextextended(group, seed)`) that keys the advisory
/// lock serializing changes to one group's head: per schema, so outboxes in other schemas of
/// the same database never contend for a group of the same name.
pub(crate) fn group_seed(schema: &str) -> i64 {
    fnv1a(&[b"outbox-group", schema.as_bytes()])
}

/// The seed of the server-side hash (`hashtextextended(key, seed)`) that keys the advisory
/// lock serializing the enqueues of one coalescing key: per schema, and distinct from the
/// group seed, so a group and a coalescing key of the same name are different locks.
pub(crate) fn coalesce_seed(schema: &str) -> i64 {
    fnv1a(&[b"outbox-coalesce", schema.as_bytes()])
}

/// Creates the schema if it is missing and migrates it to [`SCHEMA_VERSION`]; returns the
/// version found before.
///
/// Refuses, changing nothing, a schema from a newer build ([`Error::SchemaTooNew`]) and a
/// schema that holds tables but no outbox version ([`Error::NotAnOutbox`]).
pub(crate) async fn migrate(client: &mut Object, schema: &str) -> Result<u32> {
    check_schema_name(schema)?;
    let quoted = format!("\"{schema}\"");
    let mut tx = client.transaction().await.map_err(pg)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&migration_lock(schema)],
    )
    .await
    .map_err(pg)?;
    let exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .map_err(pg)?
        .is_some();
    if !exists {
        tx.batch_execute(&format!("CREATE SCHEMA {quoted}"))
            .await
            .map_err(pg)?;
    }
    let versioned = tx
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("{quoted}.schema_version")],
        )
        .await
        .map_err(pg)?
        .try_get::<_, bool>(0)
        .map_err(pg)?;
    let found = if versioned {
        let row = tx
            .query_opt(&format!("SELECT version FROM {quoted}.schema_version"), &[])
            .await
            .map_err(pg)?;
        let version: i32 = match row {
            Some(row) => row.try_get(0).map_err(pg)?,
            None => {
                return Err(Error::NotAnOutbox {
                    detail: format!("schema {schema} has an empty schema_version table"),
                    source: None,
                })
            }
        };
        u32::try_from(version).map_err(|_| Error::Corrupted {
            detail: format!("schema {schema} records the impossible version {version}"),
            source: None,
        })?
    } else {
        let foreign: i64 = tx
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1",
                &[&schema],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        if foreign > 0 {
            return Err(Error::NotAnOutbox {
                detail: format!(
                    "schema {schema} holds {foreign} relations but no outbox schema_version table"
                ),
                source: None,
            });
        }
        tx.batch_execute(&format!(
            "CREATE TABLE {quoted}.schema_version (version integer NOT NULL); \
             INSERT INTO {quoted}.schema_version (version) VALUES (0);"
        ))
        .await
        .map_err(pg)?;
        0
    };
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for (index, step) in MIGRATIONS.iter().enumerate() {
        let to = index as u32 + 1;
        if to <= found {
            continue;
        }
        tx.batch_execute(&step_sql(step, &quoted))
            .await
            .map_err(pg)?;
        tx.execute(
            &format!("UPDATE {quoted}.schema_version SET version = $1"),
            &[&(to as i32)],
        )
        .await
        .map_err(pg)?;
        tracing::info!(schema, from = to - 1, to, "outbox schema migrated");
    }
    storage_settings(&mut tx, schema, &quoted).await?;
    tx.commit().await.map_err(pg)?;
    Ok(found)
}

/// How full inserts fill the records' pages, in percent.
///
/// Half a page is left free so that the row version a claim or an outcome writes lands on the
/// page of the row it replaces: PostgreSQL then logs only the bytes that changed, not the whole
/// row with its payload, and takes no second row lock for the move. Measured with `pg-fleet`
/// (20,000 records of 256 bytes, one runner): 746 WAL bytes per drained record with full
/// pages, 500 with half-filled ones. Half a page is room for every row of a page to be claimed
/// once before a delete or a prune frees space; the table takes up to twice the pages while it
/// holds a backlog.
pub(crate) const FILLFACTOR: u32 = 50;

/// How the id list of a lease row (`leases.ids`) is stored: out of line and uncompressed.
///
/// A claim or a renewal writes one lease row listing its records: 8 bytes an id, so a round of
/// 256 records or more passes the size past which PostgreSQL compresses a value. Its default
/// compression (`pglz`) took 0.9 to 1.4 ms for 256 ids and 2.1 to 3.3 ms for 1,024
/// (`EXPLAIN ANALYZE` of the lease row's insert on a warm session), a fifth of a 1,024-record
/// claim; stored uncompressed it takes 0.4 to 0.6 ms, for about 5 more WAL bytes an id. A
/// runner's rounds that claimed 1,024 records took 17.22 ms against 17.96 (median of 108, the
/// two storages alternating on one schema), and 25.10 against 27.46 in a second run; with four
/// runners sharing the two cores the difference was lost in their contention. The rows live
/// for one round, so what compression saves on disk is never kept.
pub(crate) const LEASE_IDS_STORAGE: &str = "EXTERNAL";

/// The longest an open waits for a table's lock to make a storage setting.
///
/// Changing how the lease ids are stored takes the lease table's exclusive lock (it may add a
/// table for out-of-line values), which every claim, round and renewal of every runner also
/// needs: while the open waits for it behind a running round, the other runners' next claims
/// wait behind the open. The records' fill waits for any `VACUUM` or `ALTER` of the table.
/// Bounded by this rather than by the store's `lock_timeout` (5 s by default, or none), an
/// open never waits long for a setting, nor makes a busy fleet wait, and a setting that does
/// not get its lock in time is made at a later open.
pub(crate) const STORAGE_LOCK_WAIT: &str = "50ms";

/// The storage settings an open makes where they are missing: the records' [`FILLFACTOR`]
/// where no fill is set, and the lease rows' [`LEASE_IDS_STORAGE`] where the column keeps its
/// type's default. Settings, not changes of layout, so they carry no schema version and a
/// build that does not know them still opens the schema. A setting an operator chose (any
/// `fillfactor`, any storage but the default) stands. Rows written before keep how they were
/// written.
///
/// Only the tables' owner (or a member of the owning role) may change them: a role that may
/// not (an application's restricted role, a reader), or a read-only session, opens the outbox
/// all the same without trying, so neither the server's log nor the application's gets a
/// refused `ALTER` at every open; one `info` line says what the owner can run. An attempt that
/// fails anyway (its table's lock did not come within [`STORAGE_LOCK_WAIT`]) is undone, logged,
/// and made again at the next open; the other setting is made all the same.
async fn storage_settings(
    tx: &mut deadpool_postgres::Transaction<'_>,
    schema: &str,
    quoted: &str,
) -> Result<()> {
    let found = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%'), \
                    coalesce((SELECT a.attstorage <> 'x' FROM pg_attribute a \
                      JOIN pg_class l ON l.oid = a.attrelid \
                      WHERE l.relnamespace = n.oid AND l.relname = 'leases' \
                      AND a.attname = 'ids'), true), \
                    pg_has_role(c.relowner, 'USAGE') \
                    AND current_setting('transaction_read_only') = 'off' \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'records'",
            &[&schema],
        )
        .await
        .map_err(pg)?;
    let fill_set: bool = found.try_get(0).map_err(pg)?;
    let ids_set: bool = found.try_get(1).map_err(pg)?;
    let may_alter: bool = found.try_get(2).map_err(pg)?;
    let mut missing = Vec::with_capacity(2);
    if !fill_set {
        missing.push((
            "records' fill",
            format!("ALTER TABLE {quoted}.records SET (fillfactor = {FILLFACTOR})"),
        ));
    }
    if !ids_set {
        missing.push((
            "lease ids' storage",
            format!("ALTER TABLE {quoted}.leases ALTER COLUMN ids SET STORAGE {LEASE_IDS_STORAGE}"),
        ));
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !may_alter {
        let alters: Vec<&str> = missing.iter().map(|(_, alter)| alter.as_str()).collect();
        tracing::info!(
            schema,
            "outbox storage settings left as they are: this session may not alter the tables; \
             their owner's next open makes them, or run: {}",
            alters.join("; ")
        );
        return Ok(());
    }
    for (setting, alter) in missing {
        let attempt = tx.savepoint("outbox_storage").await.map_err(pg)?;
        // The brief wait is set for the `ALTER` alone, then back to the store's own (the
        // session's default: the store sets it when it connects).
        let altered = attempt
            .batch_execute(&format!(
                "SET LOCAL lock_timeout = '{STORAGE_LOCK_WAIT}'; {alter}; \
                 SET LOCAL lock_timeout TO DEFAULT"
            ))
            .await;
        match altered {
            Ok(()) => {
                attempt.commit().await.map_err(pg)?;
                tracing::info!(schema, setting, "outbox storage setting made");
            }
            Err(err) => {
                attempt.rollback().await.map_err(pg)?;
                tracing::warn!(
                    schema,
                    setting,
                    error = %err,
                    "outbox storage setting left as it is: tried again at the next open"
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_are_stable_and_distinct() {
        // Pinned: a key that changed between builds would let an old and a new process
        // migrate or promote at the same time.
        assert_eq!(migration_lock("outbox"), migration_lock("outbox"));
        assert_ne!(migration_lock("a"), migration_lock("b"));
        assert_ne!(group_seed("ab"), group_seed("a"));
        assert_ne!(group_seed("outbox"), migration_lock("outbox"));
        assert_ne!(coalesce_seed("outbox"), group_seed("outbox"));
        assert_ne!(coalesce_seed("a"), coalesce_seed("b"));
        assert_eq!(
            fnv1a(&[]),
            i64::from_ne_bytes(0xcbf2_9ce4_8422_2325u64.to_ne_bytes())
        );
    }

    #[test]
    fn migrations_match_the_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }

    #[test]
    fn every_placeholder_of_a_step_is_filled() {
        for step in MIGRATIONS {
            let sql = step_sql(step, "\"x\"");
            assert!(!sql.contains("{s}") && !sql.contains("{shards}"), "{sql}");
        }
        assert!(step_sql(MIGRATIONS[3], "\"x\"").contains(&shard_sql()));
    }

    #[test]
    fn schema_names_that_need_quoting_are_refused() {
        for bad in ["", "A", "a-b", "a b", "pg_x", "x\"y", &"a".repeat(64)] {
            assert!(check_schema_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "_x1", "outbox_2024", &"a".repeat(63)] {
            assert!(check_schema_name(good).is_ok(), "{good:?} refused");
        }
    }
}
