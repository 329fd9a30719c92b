//! The statements of one outbox schema.
//!
//! Every statement is written once here with the schema name spliced in (it was checked to be
//! a plain identifier), then prepared once per pooled connection and cached (`exec`, where
//! they run).
//!
//! Writes are set-based: a round's outcomes are one statement over the whole batch (arrays in,
//! `unnest` inside), the groups' head flags one more, the claim one more, all sent together
//! on one connection. (The head flags cannot join the outcomes' statement: the parts of one
//! statement do not see each other's changes.)

use crate::codec::{RECORD_COLUMNS, TOMBSTONE_COLUMNS};

/// The SQL text of every statement of one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) lock_named_groups: String,
    pub(crate) lock_groups_of: String,
    pub(crate) lock_groups_and_keys: String,
    pub(crate) allocate_ids: String,
    pub(crate) members: String,
    pub(crate) insert: String,
    pub(crate) group_tails: String,
    pub(crate) latest_by_key: String,
    pub(crate) lock_candidates: String,
    pub(crate) rewrite: String,
    pub(crate) notify: String,
    pub(crate) cap_turn: String,
    pub(crate) usage: String,
    pub(crate) claim: String,
    pub(crate) server_time: String,
    pub(crate) renew: String,
    /// The lease rows of the tokens `$1` that no record holds any more, deleted.
    pub(crate) forget_leases: String,
    pub(crate) lock_rows: String,
    pub(crate) apply: String,
    pub(crate) lock_busy: String,
    pub(crate) refresh_groups: String,
    pub(crate) refresh_group_of_tombstone: String,
    pub(crate) expired: String,
    pub(crate) stepped_back: String,
    pub(crate) get: String,
    pub(crate) list: String,
    pub(crate) tombstones: String,
    pub(crate) stats: String,
    pub(crate) next_due: String,
    pub(crate) halt: String,
    /// The halt, its row locked until the transaction ends (a compare-and-clear).
    pub(crate) halt_locked: String,
    pub(crate) set_halt: String,
    pub(crate) prune_rejected: String,
    pub(crate) prune_tombstones: String,
    /// The statements of a runner's round on its own leases (see `leased`).
    pub(crate) leased: crate::leased::LeasedSql,
}

/// Sets `claimable` on the heads of the groups `groups` gives (a set of `text` in SQL, named `g`)
/// and on the records `$2` (ids): true exactly for a group's head that is pending or retrying
/// with a deadline (in flight too, then: a claim leaves the flag and passes over its token).
fn refresh_groups(r: &str, groups: &str) -> String {
    format!(
        "WITH heads AS MATERIALIZED (SELECT g, (SELECT min(h.id) FROM {r} AS h \
           WHERE h.grp = g AND h.state <> 4) AS head FROM {groups} AS g(g)), \
         candidates AS (SELECT head AS id FROM heads WHERE head IS NOT NULL \
           UNION SELECT unnest($2::bigint[])), \
         target AS (SELECT r.id, (r.state IN (0, 1) AND r.next_attempt_at IS NOT NULL \
           AND r.id = heads.head) AS want FROM candidates AS c \
           JOIN {r} AS r ON r.id = c.id JOIN heads ON heads.g = r.grp) \
         UPDATE {r} AS r SET claimable = t.want FROM target AS t \
         WHERE r.id = t.id AND r.claimable IS DISTINCT FROM t.want"
    )
}

/// A row that holds no lease token (not in flight), as the due index's readers test it.
///
/// Written so the planner does not read it as a null test: on a table without statistics
/// (a new one, or one autovacuum has not analyzed yet) PostgreSQL takes `lease_token IS NULL`
/// to pass half a percent of the rows, expects a claim to find fewer rows than its limit, and
/// sorts every due row instead of walking the due index in order. A claim of 32 out of 10,000
/// took 13 to 26 ms so (`auto_explain` of a `pg-fleet` drain). An expression it knows nothing
/// of passes half the rows by its default, whatever the statistics say, and the claim walks
/// the index.
const NOT_LEASED: &str = "CASE WHEN lease_token IS NULL THEN true ELSE false END";

/// Deletes the lease rows that `which` picks (a condition on `l`, a row of `leases`) and
/// that no record holds any more: none of their records is still in flight under their token.
///
/// Each id is looked up on its own, by equality on the primary key. Written as `h.id =
/// ANY(l.ids)`, the generic plan a round runs with read the whole records table instead:
/// 4.9 ms a round over 10,000 records (section 8's drain, statements logged), where the
/// lookups take a tenth of that.
fn forget_leases(s: &str, r: &str, which: &str) -> String {
    format!(
        "DELETE FROM {s}.leases AS l WHERE {which} AND NOT EXISTS (SELECT 1 \
         FROM unnest(l.ids) AS i(id) WHERE EXISTS (SELECT 1 FROM {r} AS h \
         WHERE h.id = i.id AND h.lease_token = l.token))"
    )
}

/// The server's wall clock in Unix milliseconds. `clock_timestamp()`, not `now()`: the time
/// the statement runs, not the time its transaction began.
pub(crate) const SERVER_TIME: &str =
    "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

impl Sql {
    pub(crate) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let r = format!("{s}.records");
        let shard = crate::schema::shard_sql();
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
            // An enqueue with coalescing keys locks its groups and its keys ($3, hashed with
            // their own seed $4) in one statement, all in key order: the same global order as
            // every other lock statement takes, so no two transactions wait in a cycle.
            lock_groups_and_keys: "SELECT pg_advisory_xact_lock(k) FROM \
                 (SELECT DISTINCT k FROM (SELECT hashtextextended(g, $2) AS k \
                 FROM unnest($1::text[]) AS g UNION ALL SELECT hashtextextended(c, $4) \
                 FROM unnest($3::text[]) AS c) AS wanted ORDER BY k) AS keys"
                .into(),
            allocate_ids: format!(
                "SELECT nextval('{s}.record_ids') AS id FROM generate_series(1, $1::bigint)"
            ),
            members: format!(
                "SELECT DISTINCT grp FROM {r} WHERE grp = ANY($1::text[]) AND state <> 4"
            ),
            // Each record is due at $10: its enqueue time $5, or its later not-before time
            // $11 (kept, NULL for none). $12 is its trace context as text (NULL for none).
            insert: format!(
                "INSERT INTO {r} (id, grp, payload, key, created_at, state, next_attempt_at, \
                 claimable, expected_version, replaces, absorbed, not_before, trace) \
                 SELECT i, g, p, k, $5, 0, n, c, v, x, a, b, tr FROM unnest($1::bigint[], \
                 $2::text[], $3::bytea[], $4::text[], $6::boolean[], $7::text[], $8::text[], \
                 $9::bigint[], $10::bigint[], $11::bigint[], $12::text[]) \
                 AS t(i, g, p, k, c, v, x, a, n, b, tr)"
            ),
            // The last record of each group $1 that holds its place (rejected ones aside):
            // one backward seek of the group index each. NULL for a group with no member.
            //
            // The key is matched as a range (`>= AND <=`, the same rows as `=`) and ordered
            // by: with `=`, the planner drops the key from the order and may walk the primary
            // key backwards filtering by group, which for a group whose last member is old
            // reads the whole backlog. As written, only the group index gives the order.
            group_tails: format!(
                "SELECT g AS grp, (SELECT h.id FROM {r} AS h WHERE h.grp >= g AND h.grp <= g \
                 AND h.state <> 4 ORDER BY h.grp DESC, h.id DESC LIMIT 1) AS id \
                 FROM unnest($1::text[]) AS g"
            ),
            // The latest record (any state) of each coalescing key $1: one backward seek of
            // the key index (records_replaces) each, never a scan (the key as a range, for
            // the reason given at `group_tails`).
            latest_by_key: format!(
                "SELECT {} FROM unnest($1::text[]) AS c CROSS JOIN LATERAL \
                 (SELECT * FROM {r} WHERE replaces >= c AND replaces <= c \
                 ORDER BY replaces DESC, id DESC LIMIT 1) AS l",
                prefixed("l", RECORD_COLUMNS)
            ),
            // The candidates a write may replace, locked in id order and read again as they
            // are now: a claim committed meanwhile shows as in flight, a claim after this
            // skips the locked row until the rewrite commits.
            lock_candidates: format!(
                "SELECT {RECORD_COLUMNS} FROM {r} WHERE id = ANY($1::bigint[]) \
                 ORDER BY id FOR UPDATE"
            ),
            // Replaced records take the last write's payload, idempotency key, expected
            // version, enqueue time ($6), not-before time, with the deadline that time gives
            // them, and trace context (NULL when the last write has none: `Record::supersede`),
            // and count the writes they absorbed; id, group, state and history stay.
            rewrite: format!(
                "UPDATE {r} AS r SET payload = u.p, key = u.k, expected_version = u.v, \
                 created_at = $6, absorbed = r.absorbed + u.n, next_attempt_at = u.d, \
                 not_before = u.b, trace = u.t \
                 FROM unnest($1::bigint[], $2::bytea[], $3::text[], $4::text[], $5::bigint[], \
                 $7::bigint[], $8::bigint[], $9::text[]) AS u(id, p, k, v, n, d, b, t) \
                 WHERE r.id = u.id"
            ),
            notify: "SELECT pg_notify($1, '')".into(),
            // A capped enqueue's turn (see `cap`): the one row every capped enqueue updates
            // first, held until its transaction ends. Returns the count as `id`, one row.
            cap_turn: format!(
                "UPDATE {s}.cap_turn SET turns = turns + 1 WHERE id = 1 RETURNING turns AS id"
            ),
            // What a size cap counts, added up over the shards (run after the turn, as a
            // statement of its own, so it reads what the turn's previous holder committed).
            usage: format!(
                "SELECT coalesce(sum(pending + retrying + in_flight + attention + rejected), 0)\
                 ::bigint AS records, coalesce(sum(payload_bytes), 0)::bigint AS bytes \
                 FROM {s}.tallies"
            ),
            // The ids picked (and locked) first, as one array the update then finds through
            // the primary key. A join of the picked rows with the table instead lets the planner
            // hash the whole table, which it prefers for a round of a thousand rows out of tens
            // of thousands: every claim then read every row, and slowed as the table grew.
            //
            // The claim writes the lease and nothing else: no column an index holds or its
            // predicate reads, so each new row version is heap-only (schema version 7). A
            // claimed row stays in the due index, passed over by its token; the claim's lease
            // is listed in `leases`, where `expired` finds it.
            claim: format!(
                "WITH claimed AS (UPDATE {r} AS r SET lease_token = $3, lease_until = $4 \
                 WHERE r.id = ANY(ARRAY(SELECT id FROM {r} \
                 WHERE claimable AND next_attempt_at <= $1 AND {NOT_LEASED} \
                 ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)) \
                 RETURNING {}), \
                 held AS (INSERT INTO {s}.leases (token, until, ids) \
                 SELECT $3, $4, array_agg(id) FROM claimed HAVING count(*) > 0) \
                 SELECT * FROM claimed",
                prefixed("r", RECORD_COLUMNS)
            ),
            server_time: SERVER_TIME.into(),
            // The records still held under the token get the new expiry, listed in a lease
            // row of their own; a lease row whose every record is among them goes.
            renew: format!(
                "WITH moved AS (UPDATE {r} SET lease_until = $3 WHERE id = ANY($1::bigint[]) \
                   AND lease_token = $2 RETURNING id), \
                 covered AS (DELETE FROM {s}.leases WHERE token = $2 AND ids <@ $1::bigint[]) \
                 INSERT INTO {s}.leases (token, until, ids) \
                 SELECT $2, $3, array_agg(id) FROM moved HAVING count(*) > 0"
            ),
            // Run after a round's writes, as a statement of its own so that it sees them.
            forget_leases: forget_leases(&s, &r, "l.token = ANY($1::bigint[])"),
            lock_rows: format!(
                "SELECT id, grp, state, lease_token, lease_until, history FROM {r} \
                 WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
            ),
            // A batch's writes, one statement: every id appears in at most one of the lists
            // (the plan keeps each record's last change), so the parts touch disjoint rows.
            // A requeue is an update here: the record keeps its id (and its history, which
            // every update writes whole: NULL for none).
            // The writes the deleted records had absorbed by coalescing move into the
            // persisted counter in the same statement, so `stats` always adds up the same.
            // The delivered records are counted in this session's shard of `tallies` (see
            // `schema`), not in one row every runner's rounds would wait for.
            apply: format!(
                "WITH delivered AS (DELETE FROM {r} WHERE id = ANY($1::bigint[]) \
                   RETURNING absorbed), \
                 discarded AS (DELETE FROM {r} AS r USING unnest($2::bigint[], $3::text[], \
                   $4::bigint[], $5::bigint[]) AS d(id, reason, at, attempts) \
                   WHERE r.id = d.id RETURNING r.id, r.grp, r.key, d.reason, d.at, d.attempts, \
                   r.absorbed), \
                 counted AS (INSERT INTO {s}.tallies AS t (shard, delivered, superseded) \
                   SELECT {shard}, c.n, c.m \
                   FROM (SELECT (SELECT count(*) FROM delivered) AS n, \
                     ((SELECT coalesce(sum(absorbed), 0) FROM delivered) \
                     + (SELECT coalesce(sum(absorbed), 0) FROM discarded))::bigint AS m) AS c \
                   WHERE c.n > 0 OR c.m > 0 \
                   ON CONFLICT (shard) DO UPDATE SET delivered = t.delivered + excluded.delivered, \
                   superseded = t.superseded + excluded.superseded), \
                 buried AS (INSERT INTO {s}.tombstones ({TOMBSTONE_COLUMNS}) \
                   SELECT id, grp, key, reason, at, attempts FROM discarded) \
                 UPDATE {r} AS r SET state = u.state, attempts = u.attempts, \
                   unanswered = u.unanswered, interrupted = u.interrupted, \
                   last_attempt_at = u.last_at, next_attempt_at = u.next_at, \
                   last_error = u.error, history = u.history, lease_token = NULL, \
                   lease_until = NULL, \
                   claimable = (r.grp IS NULL AND u.state IN (0, 1) AND u.next_at IS NOT NULL) \
                 FROM unnest($6::bigint[], $7::smallint[], $8::bigint[], $9::bigint[], \
                   $10::bigint[], $11::bigint[], $12::bigint[], $13::text[], $14::bytea[]) \
                   AS u(id, state, attempts, unanswered, interrupted, last_at, next_at, error, \
                     history) \
                 WHERE r.id = u.id"
            ),
            // Before a requeue: the records of the outcomes' groups that are in flight or
            // claimable, locked, so a claim running meanwhile either finished (its record is
            // seen in flight) or skips the locked head. The claimable ones are refreshed
            // after the writes: a requeued record may take their place.
            // The third column says whether the row is in flight (or set aside: state 2).
            lock_busy: format!(
                "SELECT id, grp, (state = 2 OR lease_token IS NOT NULL) FROM {r} \
                 WHERE grp IN (SELECT grp FROM {r} \
                 WHERE id = ANY($1::bigint[]) AND grp IS NOT NULL) AND state <> 4 \
                 AND (state = 2 OR lease_token IS NOT NULL OR claimable) ORDER BY id FOR UPDATE"
            ),
            // Run after a batch's writes: the records $2 of the groups $1 and each group's
            // head get the flag the head rule gives them (a pending or retrying group head
            // with a deadline is claimable, nothing else of the group is). Every row is found
            // by key (heads through the group index, the rest by id), never by a scan; a head
            // that a requeue displaced is among $2.
            refresh_groups: refresh_groups(&r, "unnest($1::text[])"),
            // The same, for the group of the tombstone $1 (a row discarded in this
            // transaction): read on the server, since it may not be UTF-8
            // (`codec::TEXT_AS_STORED`).
            refresh_group_of_tombstone: refresh_groups(
                &r,
                &format!("(SELECT grp FROM {s}.tombstones WHERE id = $1 AND grp IS NOT NULL)"),
            ),
            // The records of the lease rows due by $1 (every in-flight record is listed in a
            // row that expires no later than it does) whose own lease has expired; the lease
            // rows due that no record holds any more go in the same statement.
            expired: format!(
                "WITH spent AS ({}) \
                 SELECT {RECORD_COLUMNS} FROM {r} WHERE id = ANY(ARRAY(SELECT unnest(ids) \
                 FROM {s}.leases WHERE until <= $1)) AND lease_token IS NOT NULL \
                 AND lease_until <= $1 ORDER BY lease_until, id LIMIT $2",
                forget_leases(&s, &r, "l.until <= $1")
            ),
            // Read through the deadline index (records_deadline): only records whose deadline
            // lies after $1 are looked at, never the due backlog. A never-reported record
            // waiting for its not-before time is left out: that time is absolute
            // (`Record::needs_rebase`).
            stepped_back: format!(
                "WITH later AS MATERIALIZED (SELECT {RECORD_COLUMNS} FROM {r} \
                 WHERE state IN (0, 1) AND lease_token IS NULL AND next_attempt_at > $1 \
                 AND (last_attempt_at > $1 OR (last_attempt_at IS NULL \
                   AND (not_before IS NULL OR next_attempt_at > not_before))) \
                 ORDER BY next_attempt_at) \
                 SELECT * FROM later ORDER BY id LIMIT $2"
            ),
            get: format!("SELECT {RECORD_COLUMNS} FROM {r} WHERE id = $1"),
            list: format!(
                "SELECT {RECORD_COLUMNS} FROM {r} WHERE id > $1 \
                 AND ($2::smallint IS NULL OR $2 = CASE WHEN lease_token IS NOT NULL \
                   AND state < 3 THEN 2 ELSE state END) AND ($3::text IS NULL OR grp = $3) \
                 ORDER BY id LIMIT $4"
            ),
            tombstones: format!(
                "SELECT {TOMBSTONE_COLUMNS} FROM {s}.tombstones WHERE id > $1 ORDER BY id LIMIT $2"
            ),
            // One statement, so every figure comes from the same snapshot, and none scans the
            // records: the counts are the shards of `tallies` (kept by the triggers) added
            // up on top of `meta`'s base; the held records are counted behind each
            // needs-attention head (an index of few rows) through the group index; the oldest
            // record is the first entry of the enqueue-time index.
            stats: format!(
                "SELECT t.pending, t.retrying, t.in_flight, t.attention, t.rejected, \
                 (SELECT created_at FROM {r} WHERE state <> 4 \
                   AND (state <> 2 OR lease_token IS NOT NULL) ORDER BY created_at LIMIT 1), \
                 t.discarded, m.delivered + t.delivered, \
                 (SELECT coalesce(sum((SELECT count(*) FROM {r} AS g \
                     WHERE g.grp = h.grp AND g.state <> 4) - 1), 0)::bigint \
                   FROM {r} AS h WHERE h.state = 3 AND h.grp IS NOT NULL \
                   AND NOT EXISTS (SELECT 1 FROM {r} AS e WHERE e.grp = h.grp \
                     AND e.state <> 4 AND e.id < h.id)), \
                 (SELECT next_attempt_at FROM {r} WHERE claimable AND {NOT_LEASED} \
                  ORDER BY next_attempt_at LIMIT 1), \
                 m.halt_reason, m.halt_since, m.superseded + t.superseded + t.absorbed, \
                 (SELECT count(*) FROM {r} WHERE state = 0 \
                   AND not_before = next_attempt_at AND lease_token IS NULL), \
                 t.payload_bytes \
                 FROM {s}.meta AS m, \
                 (SELECT coalesce(sum(pending), 0)::bigint AS pending, \
                   coalesce(sum(retrying), 0)::bigint AS retrying, \
                   coalesce(sum(in_flight), 0)::bigint AS in_flight, \
                   coalesce(sum(attention), 0)::bigint AS attention, \
                   coalesce(sum(rejected), 0)::bigint AS rejected, \
                   coalesce(sum(absorbed), 0)::bigint AS absorbed, \
                   coalesce(sum(discarded), 0)::bigint AS discarded, \
                   coalesce(sum(delivered), 0)::bigint AS delivered, \
                   coalesce(sum(superseded), 0)::bigint AS superseded, \
                   coalesce(sum(payload_bytes), 0)::bigint AS payload_bytes \
                   FROM {s}.tallies) AS t"
            ),
            next_due: format!(
                "SELECT next_attempt_at FROM {r} WHERE claimable AND {NOT_LEASED} \
                 ORDER BY next_attempt_at LIMIT 1"
            ),
            halt: format!("SELECT halt_reason, halt_since FROM {s}.meta"),
            halt_locked: format!("SELECT halt_reason, halt_since FROM {s}.meta FOR UPDATE"),
            set_halt: format!("UPDATE {s}.meta SET halt_reason = $1, halt_since = $2"),
            // Returns how many records it removed; what they had absorbed is counted on.
            prune_rejected: format!(
                "WITH gone AS (DELETE FROM {r} WHERE state = 4 AND last_attempt_at < $1 \
                   RETURNING absorbed), \
                 counted AS (INSERT INTO {s}.tallies AS t (shard, superseded) \
                   SELECT {shard}, g.m \
                   FROM (SELECT coalesce(sum(absorbed), 0)::bigint AS m FROM gone) AS g \
                   WHERE g.m > 0 \
                   ON CONFLICT (shard) DO UPDATE SET superseded = t.superseded + excluded.superseded) \
                 SELECT count(*) FROM gone"
            ),
            prune_tombstones: format!("DELETE FROM {s}.tombstones WHERE discarded_at < $1"),
            leased: crate::leased::LeasedSql::new(&s, &r, &shard, TOMBSTONE_COLUMNS),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_returns_every_record_column_of_the_updated_row() {
        assert_eq!(prefixed("r", "id, grp,  payload"), "r.id, r.grp, r.payload");
        let sql = Sql::new("s");
        assert!(sql.claim.contains(&prefixed("r", RECORD_COLUMNS)));
        assert!(sql.claim.contains("FOR UPDATE SKIP LOCKED"));
        // The picked ids reach the update as one array, through the primary key: no join
        // the planner could turn into a read of the whole table.
        assert!(sql.claim.contains("WHERE r.id = ANY(ARRAY(SELECT id FROM"));
        assert!(!sql.claim.contains(" FROM picked"));
        // The claim writes the lease alone, no indexed column (see the claim's notes).
        assert!(sql
            .claim
            .contains("SET lease_token = $3, lease_until = $4 WHERE"));
        assert!(!sql.claim.contains("state ="));
        assert!(!sql.claim.contains("claimable ="));
        // Never a null test the planner would take for a rare row (see `NOT_LEASED`).
        for text in [&sql.claim, &sql.next_due, &sql.stats] {
            assert!(text.contains(NOT_LEASED), "{text}");
        }
        assert!(!sql.claim.contains("lease_token IS NULL AND"));
    }

    #[test]
    fn every_statement_names_the_schema_quoted() {
        let sql = Sql::new("my_outbox");
        for text in [
            &sql.insert,
            &sql.claim,
            &sql.apply,
            &sql.stats,
            &sql.refresh_groups,
            &sql.stepped_back,
            &sql.group_tails,
            &sql.latest_by_key,
            &sql.lock_candidates,
            &sql.rewrite,
        ] {
            assert!(text.contains("\"my_outbox\".records"), "{text}");
        }
    }
}
