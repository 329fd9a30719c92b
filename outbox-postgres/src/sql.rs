//! The statements of one outbox schema, and where they run.
//!
//! Every statement is written once here with the schema name spliced in (it was checked to be
//! a plain identifier), then prepared once per pooled connection and cached.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::codec::{RECORD_COLUMNS, TOMBSTONE_COLUMNS};

/// The SQL text of every statement of one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) lock_named_groups: String,
    pub(crate) lock_groups_of: String,
    pub(crate) allocate_ids: String,
    pub(crate) members: String,
    pub(crate) insert: String,
    pub(crate) notify: String,
    pub(crate) claim: String,
    pub(crate) renew: String,
    pub(crate) lock_rows: String,
    pub(crate) update: String,
    pub(crate) delete: String,
    pub(crate) discard: String,
    pub(crate) refresh_group: String,
    pub(crate) count_delivered: String,
    pub(crate) expired: String,
    pub(crate) scheduled_after: String,
    pub(crate) get: String,
    pub(crate) list: String,
    pub(crate) tombstones: String,
    pub(crate) stats: String,
    pub(crate) next_due: String,
    pub(crate) prune_rejected: String,
    pub(crate) prune_tombstones: String,
}

impl Sql {
    pub(crate) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let r = format!("{s}.records");
        // A pending or retrying record with a deadline that heads its group (or has none).
        let claimable_here = format!(
            "(r.state IN (0, 1) AND r.next_attempt_at IS NOT NULL AND r.id = \
             coalesce((SELECT min(h.id) FROM {r} h WHERE h.grp = $1 AND h.state <> 4), -1))"
        );
        Sql {
            // Group locks are keyed by the server's own stable text hash seeded per schema
            // ($2), so every client computes the same key, and taken in key order, so two
            // transactions locking overlapping groups never wait on each other in a cycle.
            lock_named_groups: "SELECT pg_advisory_xact_lock(k) FROM \
                 (SELECT DISTINCT hashtextextended(g, $2) AS k FROM unnest($1::text[]) AS g \
                 ORDER BY k) AS keys"
                .into(),
            lock_groups_of: format!(
                "SELECT pg_advisory_xact_lock(k) FROM \
                 (SELECT DISTINCT hashtextextended(grp, $2) AS k FROM {r} \
                 WHERE id = ANY($1::bigint[]) AND grp IS NOT NULL ORDER BY k) AS keys"
            ),
            allocate_ids: format!(
                "SELECT nextval('{s}.record_ids') FROM generate_series(1, $1::bigint)"
            ),
            members: format!(
                "SELECT DISTINCT grp FROM {r} WHERE grp = ANY($1::text[]) AND state <> 4"
            ),
            insert: format!(
                "INSERT INTO {r} (id, grp, payload, key, created_at, state, next_attempt_at, \
                 claimable) \
                 SELECT i, g, p, k, $5, 0, $5, c FROM unnest($1::bigint[], $2::text[], \
                 $3::bytea[], $4::text[], $6::boolean[]) AS t(i, g, p, k, c)"
            ),
            notify: "SELECT pg_notify($1, '')".into(),
            claim: format!(
                "WITH picked AS (SELECT id FROM {r} WHERE claimable AND next_attempt_at <= $1 \
                 ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 UPDATE {r} AS r SET state = 2, claimable = false, lease_token = $3, \
                 lease_until = $4 FROM picked WHERE r.id = picked.id \
                 RETURNING {}",
                prefixed("r", RECORD_COLUMNS)
            ),
            renew: format!(
                "UPDATE {r} SET lease_until = $3 WHERE id = ANY($1::bigint[]) AND state = 2 \
                 AND lease_token = $2"
            ),
            lock_rows: format!(
                "SELECT id, grp, state, lease_token FROM {r} WHERE id = ANY($1::bigint[]) \
                 ORDER BY id FOR UPDATE"
            ),
            update: format!(
                "UPDATE {r} SET state = $2, attempts = $3, unanswered = $4, interrupted = $5, \
                 last_attempt_at = $6, next_attempt_at = $7, last_error = $8, \
                 lease_token = NULL, lease_until = NULL, \
                 claimable = (grp IS NULL AND $2::smallint IN (0, 1) AND $7::bigint IS NOT NULL) \
                 WHERE id = $1"
            ),
            delete: format!("DELETE FROM {r} WHERE id = $1"),
            discard: format!(
                "WITH gone AS (DELETE FROM {r} WHERE id = $1 RETURNING id, grp, key) \
                 INSERT INTO {s}.tombstones ({TOMBSTONE_COLUMNS}) \
                 SELECT id, grp, key, $2, $3, $4 FROM gone"
            ),
            // Run after changes to the records $2 of group $1: they and the group's head get
            // the flag the head rule gives them.
            refresh_group: format!(
                "UPDATE {r} AS r SET claimable = {claimable_here} \
                 WHERE (r.id = ANY($2::bigint[]) OR r.id = (SELECT min(h.id) FROM {r} h \
                 WHERE h.grp = $1 AND h.state <> 4)) \
                 AND r.claimable IS DISTINCT FROM {claimable_here}"
            ),
            count_delivered: format!("UPDATE {s}.meta SET delivered = delivered + $1"),
            expired: format!(
                "SELECT {RECORD_COLUMNS} FROM {r} WHERE state = 2 AND lease_until <= $1 \
                 ORDER BY lease_until, id LIMIT $2"
            ),
            scheduled_after: format!(
                "SELECT {RECORD_COLUMNS} FROM {r} WHERE state IN (0, 1) \
                 AND next_attempt_at > $1 ORDER BY id LIMIT $2"
            ),
            get: format!("SELECT {RECORD_COLUMNS} FROM {r} WHERE id = $1"),
            list: format!(
                "SELECT {RECORD_COLUMNS} FROM {r} WHERE id > $1 \
                 AND ($2::smallint IS NULL OR state = $2) AND ($3::text IS NULL OR grp = $3) \
                 ORDER BY id LIMIT $4"
            ),
            tombstones: format!(
                "SELECT {TOMBSTONE_COLUMNS} FROM {s}.tombstones WHERE id > $1 ORDER BY id LIMIT $2"
            ),
            // One statement, so every figure comes from the same snapshot.
            stats: format!(
                "SELECT count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1), \
                 count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 3), \
                 count(*) FILTER (WHERE state = 4), min(created_at) FILTER (WHERE state <> 4), \
                 (SELECT count(*) FROM {s}.tombstones), \
                 (SELECT delivered FROM {s}.meta), \
                 (SELECT coalesce(sum(g.n - 1), 0)::bigint FROM \
                   (SELECT count(*) AS n, min(id) AS head FROM {r} \
                    WHERE grp IS NOT NULL AND state <> 4 GROUP BY grp) AS g \
                   JOIN {r} AS h ON h.id = g.head WHERE h.state = 3), \
                 (SELECT next_attempt_at FROM {r} WHERE claimable \
                  ORDER BY next_attempt_at LIMIT 1) \
                 FROM {r}"
            ),
            next_due: format!(
                "SELECT next_attempt_at FROM {r} WHERE claimable ORDER BY next_attempt_at LIMIT 1"
            ),
            prune_rejected: format!("DELETE FROM {r} WHERE state = 4 AND last_attempt_at < $1"),
            prune_tombstones: format!("DELETE FROM {s}.tombstones WHERE discarded_at < $1"),
        }
    }
}

fn prefixed(alias: &str, columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parameters as tokio-postgres takes them.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Where statements run: a pooled connection or transaction (statements prepared once per
/// connection and cached), or the caller's own transaction (prepared on the spot).
#[async_trait]
pub(crate) trait Exec: Send + Sync {
    /// The prepared statement for `sql`.
    async fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error>;

    /// Runs `sql` and returns its rows.
    async fn rows(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, tokio_postgres::Error>;

    /// Runs `sql` and returns how many rows it changed.
    async fn run(&self, sql: &str, params: Params<'_>) -> Result<u64, tokio_postgres::Error>;

    /// Runs a prepared statement. Nothing is sent before the first poll, so futures polled in
    /// order are executed in that order (pipelined on one connection).
    async fn execute_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error>;

    /// Runs a prepared statement and returns its rows (see [`Exec::execute_prepared`]).
    async fn query_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error>;
}

#[async_trait]
impl Exec for deadpool_postgres::Transaction<'_> {
    async fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        self.prepare_cached(sql).await
    }

    async fn rows(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.query(&statement, params).await
    }

    async fn run(&self, sql: &str, params: Params<'_>) -> Result<u64, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.execute(&statement, params).await
    }

    async fn execute_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        self.execute(statement, params).await
    }

    async fn query_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.query(statement, params).await
    }
}
#[async_trait]
impl Exec for deadpool_postgres::Object {
    async fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        self.prepare_cached(sql).await
    }

    async fn rows(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.query(&statement, params).await
    }

    async fn run(&self, sql: &str, params: Params<'_>) -> Result<u64, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.execute(&statement, params).await
    }

    async fn execute_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        self.execute(statement, params).await
    }

    async fn query_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.query(statement, params).await
    }
}
#[async_trait]
impl Exec for tokio_postgres::Transaction<'_> {
    async fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        self.prepare(sql).await
    }

    async fn rows(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.query(sql, params).await
    }

    async fn run(&self, sql: &str, params: Params<'_>) -> Result<u64, tokio_postgres::Error> {
        self.execute(sql, params).await
    }

    async fn execute_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        self.execute(statement, params).await
    }

    async fn query_prepared(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.query(statement, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_returns_every_record_column_of_the_updated_row() {
        assert_eq!(prefixed("r", "id, grp,  payload"), "r.id, r.grp, r.payload");
        let sql = Sql::new("s");
        assert!(sql.claim.contains(&prefixed("r", RECORD_COLUMNS)));
        assert!(sql.claim.contains("FOR UPDATE SKIP LOCKED"));
    }

    #[test]
    fn every_statement_names_the_schema_quoted() {
        let sql = Sql::new("my_outbox");
        for text in [
            &sql.insert,
            &sql.claim,
            &sql.update,
            &sql.stats,
            &sql.refresh_group,
        ] {
            assert!(text.contains("\"my_outbox\".records"), "{text}");
        }
    }
}
