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

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = 3;

/// The steps from version `n` to `n + 1`, in order; `{s}` stands for the quoted schema name.
///
/// Version 1: the records with their `claimable` flag (set only on pending or retrying group
/// heads with a deadline, so "what is due" is one partial-index range scan), the tombstones,
/// and the persisted delivered counter.
///
/// Version 2: the runner's persisted halt (reason and since) in `meta`, and the deadline index
/// of pending and retrying records that `stepped_back` reads. Written to run again harmlessly
/// (`IF NOT EXISTS`), so a step half done by hand still converges.
///
/// Version 3: each record's expected version (`expected_version`, the precondition a sink
/// sends) and coalescing key (`replaces`), NULL for the records already there; the index
/// `records_replaces` on `(replaces, id)` of the records that have a coalescing key, so the
/// latest record of a key is one backward index seek; and the count of writes merged by
/// coalescing, kept in two parts so that no enqueue contends for one counter row: each
/// record's `absorbed` (the writes it took in, raised with the rewrite of the row the enqueue
/// locks anyway) and `meta.superseded` (what deleted records had absorbed, moved there by the
/// statement that deletes them). `Stats::superseded` is their sum; both start at 0. Written
/// to run again harmlessly, like version 2.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE {s}.meta (
    id smallint PRIMARY KEY CHECK (id = 1),
    delivered bigint NOT NULL
);
INSERT INTO {s}.meta (id, delivered) VALUES (1, 0);
CREATE SEQUENCE {s}.record_ids AS bigint MINVALUE 1 START 1;
CREATE TABLE {s}.records (
    id bigint PRIMARY KEY,
    grp text,
    payload bytea NOT NULL,
    key text NOT NULL,
    created_at bigint NOT NULL,
    state smallint NOT NULL,
    attempts bigint NOT NULL DEFAULT 0,
    unanswered bigint NOT NULL DEFAULT 0,
    interrupted bigint NOT NULL DEFAULT 0,
    last_attempt_at bigint,
    next_attempt_at bigint,
    last_error text,
    lease_token bigint,
    lease_until bigint,
    claimable boolean NOT NULL DEFAULT false
);
CREATE INDEX records_due ON {s}.records (next_attempt_at, id) WHERE claimable;
CREATE INDEX records_leases ON {s}.records (lease_until, id) WHERE state = 2;
CREATE INDEX records_groups ON {s}.records (grp, id) WHERE grp IS NOT NULL AND state <> 4;
CREATE TABLE {s}.tombstones (
    id bigint PRIMARY KEY,
    grp text,
    key text NOT NULL,
    reason text NOT NULL,
    discarded_at bigint NOT NULL,
    attempts bigint NOT NULL
);
"#,
    r#"
ALTER TABLE {s}.meta ADD COLUMN IF NOT EXISTS halt_reason text;
ALTER TABLE {s}.meta ADD COLUMN IF NOT EXISTS halt_since bigint;
CREATE INDEX IF NOT EXISTS records_deadline ON {s}.records (next_attempt_at)
    WHERE state IN (0, 1);
"#,
    r#"
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS expected_version text;
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS replaces text;
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS absorbed bigint NOT NULL DEFAULT 0;
ALTER TABLE {s}.meta ADD COLUMN IF NOT EXISTS superseded bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS records_replaces ON {s}.records (replaces, id)
    WHERE replaces IS NOT NULL;
"#,
];

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
    let tx = client.transaction().await.map_err(pg)?;
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
        tx.batch_execute(&step.replace("{s}", &quoted))
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
    tx.commit().await.map_err(pg)?;
    Ok(found)
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
    fn schema_names_that_need_quoting_are_refused() {
        for bad in ["", "A", "a-b", "a b", "pg_x", "x\"y", &"a".repeat(64)] {
            assert!(check_schema_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "_x1", "outbox_2024", &"a".repeat(63)] {
            assert!(check_schema_name(good).is_ok(), "{good:?} refused");
        }
    }
}
