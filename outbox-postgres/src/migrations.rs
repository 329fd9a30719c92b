//! The migration steps of an outbox schema, from version 1 to
//! [`SCHEMA_VERSION`](crate::SCHEMA_VERSION): SQL text run by `schema::migrate`, in one
//! transaction for all the steps a schema needs.

/// The records' trigger function (`tally_records`) as versions 6 and 7 write it, with the
/// predicates that sort a row into a state's count, into the payload bytes and into the failed
/// records (counted per error), and the lease column those predicates read: version 6 knew an
/// in-flight row by its state code, version 7 by its lease token (see `MIGRATIONS`).
macro_rules! tally_records {
    (
        $pending:literal,
        $retrying:literal,
        $in_flight:literal,
        $weighed:literal,
        $failed:literal,
        $lease:literal
    ) => {
        concat!(
            r#"CREATE OR REPLACE FUNCTION {s}.tally_records() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    me integer := pg_backend_pid() % {shards};
    d record;
    zeroed text[];
BEGIN
    -- A row counts (and its payload bytes with it) in every state, an in-flight one while
    -- it holds a lease: one set aside as unreadable does not.
    IF TG_OP = 'INSERT' THEN
        SELECT count(*) FILTER (WHERE "#, $pending, r#") AS pending,
            count(*) FILTER (WHERE "#, $retrying, r#") AS retrying,
            count(*) FILTER (WHERE "#, $in_flight, r#") AS in_flight,
            count(*) FILTER (WHERE state = 3) AS attention,
            count(*) FILTER (WHERE state = 4) AS rejected,
            coalesce(sum(absorbed), 0) AS absorbed,
            coalesce(sum(octet_length(payload))
                FILTER (WHERE "#, $weighed, r#"), 0) AS bytes,
            count(*) FILTER (WHERE "#, $failed, r#") AS failed
        INTO d FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT -count(*) FILTER (WHERE "#, $pending, r#") AS pending,
            -count(*) FILTER (WHERE "#, $retrying, r#") AS retrying,
            -count(*) FILTER (WHERE "#, $in_flight, r#") AS in_flight,
            -count(*) FILTER (WHERE state = 3) AS attention,
            -count(*) FILTER (WHERE state = 4) AS rejected,
            -coalesce(sum(absorbed), 0) AS absorbed,
            -coalesce(sum(octet_length(payload))
                FILTER (WHERE "#, $weighed, r#"), 0) AS bytes,
            count(*) FILTER (WHERE "#, $failed, r#") AS failed
        INTO d FROM old_rows;
    ELSE
        SELECT coalesce(sum(sign) FILTER (WHERE "#, $pending, r#"), 0) AS pending,
            coalesce(sum(sign) FILTER (WHERE "#, $retrying, r#"), 0) AS retrying,
            coalesce(sum(sign) FILTER (WHERE "#, $in_flight, r#"), 0)
                AS in_flight,
            coalesce(sum(sign) FILTER (WHERE state = 3), 0) AS attention,
            coalesce(sum(sign) FILTER (WHERE state = 4), 0) AS rejected,
            coalesce(sum(sign * absorbed), 0) AS absorbed,
            coalesce(sum(sign * octet_length(payload))
                FILTER (WHERE "#, $weighed, r#"), 0) AS bytes,
            count(*) FILTER (WHERE "#, $failed, r#") AS failed
        INTO d FROM (SELECT 1 AS sign, state, "#, $lease, r#", absorbed, payload, last_error
                FROM new_rows
            UNION ALL SELECT -1, state, "#, $lease, r#", absorbed, payload, last_error
                FROM old_rows) AS x;
    END IF;
    IF d.pending = 0 AND d.retrying = 0 AND d.in_flight = 0 AND d.attention = 0
        AND d.rejected = 0 AND d.absorbed = 0 AND d.bytes = 0 AND d.failed = 0 THEN
        RETURN NULL;
    END IF;
    -- This shard's row first, always: see the schema's version 4 notes.
    INSERT INTO {s}.tallies AS t (shard, pending, retrying, in_flight, attention, rejected,
        absorbed, payload_bytes)
    VALUES (me, d.pending, d.retrying, d.in_flight, d.attention, d.rejected, d.absorbed,
        d.bytes)
    ON CONFLICT (shard) DO UPDATE SET pending = t.pending + excluded.pending,
        retrying = t.retrying + excluded.retrying, in_flight = t.in_flight + excluded.in_flight,
        attention = t.attention + excluded.attention, rejected = t.rejected + excluded.rejected,
        absorbed = t.absorbed + excluded.absorbed,
        payload_bytes = t.payload_bytes + excluded.payload_bytes;
    IF d.failed = 0 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, count(*) FROM new_rows
            WHERE "#, $failed, r#"
            GROUP BY last_error ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    ELSIF TG_OP = 'DELETE' THEN
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, -count(*) FROM old_rows
            WHERE "#, $failed, r#"
            GROUP BY last_error ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    ELSE
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, sum(sign) FROM
                (SELECT 1 AS sign, state, "#, $lease, r#", last_error FROM new_rows
                 UNION ALL SELECT -1, state, "#, $lease, r#", last_error FROM old_rows) AS x
            WHERE "#, $failed, r#"
            GROUP BY last_error HAVING sum(sign) <> 0 ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    END IF;
    IF zeroed IS NOT NULL THEN
        DELETE FROM {s}.error_tallies WHERE shard = me AND digest = ANY(zeroed) AND n = 0;
    END IF;
    RETURN NULL;
END
$fn$;
"#
        )
    };
}

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
///
/// Version 4: counts that `stats` reads instead of scanning the records, and no counter row that
/// every runner's rounds wait for. `tallies` holds one row per *shard* (the session's backend
/// process id modulo [`SHARDS`](crate::schema::SHARDS)), so concurrent sessions add to different
/// rows and the stats add the rows up: the records per state (an in-flight record counts while it
/// holds a lease; one set aside as unreadable does not), the writes the live records absorbed, the
/// tombstones, and the delivered records and superseded writes counted on top of `meta`'s (which
/// stay the base, so a process of the previous build that still runs after the upgrade keeps
/// counting right). `error_tallies` counts the failed records (retrying, needs-attention, rejected)
/// per `last_error`, keyed by the text's MD5, per shard. Statement triggers with transition tables
/// keep both exact in the transaction of every change, whichever driver or hand made it. A session
/// touches only its own shard's rows, and always its `tallies` row before its `error_tallies` rows,
/// so two sessions either share nothing or wait for each other on that one row: never a deadlock.
/// Two partial indexes serve what the counts do not: `records_attention` (needs-attention records,
/// few) for the held count and `records_age` (records not rejected, by enqueue time) for the oldest
/// one. The step locks the tables, folds what a half-done earlier run counted into `meta`, and
/// counts everything once: it runs again harmlessly.
///
/// Version 5: each record's not-before time (`not_before`, NULL for the records already
/// there: none was held for later). The deadline stays in `next_attempt_at`, in the indexes
/// the claim and the re-base read, so a record held for later costs a claim nothing; the
/// partial index `records_scheduled` holds the pending records still waiting for their time,
/// which stats count. Written to run again harmlessly, like version 2.
///
/// Version 6: each record's last attempts (`history`, the bytes of
/// [`History::encode`](outbox_core::History::encode); NULL for no attempts, so the records
/// already there read with an empty history), each record's trace context (`trace`, the text
/// of [`TraceContext::encode`](outbox_core::TraceContext::encode); NULL for none, so the
/// records already there read with none), and what a size cap ([`Cap`](outbox_core::Cap))
/// counts. `tallies` gains `payload_bytes`: the payload bytes of the records it counts (every
/// state; an in-flight record while it holds a lease), kept by the same statement triggers,
/// which now also weigh the payloads of the rows an update changes (a coalescing rewrite
/// replaces a payload), so `Stats::payload_bytes` is read, never scanned. `cap_turn` is one row
/// that every enqueue of a store opened with a cap updates first: it serializes capped enqueues
/// (the turn is held until the enqueue's transaction ends), and in a REPEATABLE READ or
/// SERIALIZABLE transaction whose snapshot is older than another capped enqueue's commit the
/// update fails with a serialization error, so no enqueue is ever admitted on counts it could
/// not see (see `cap`). The step locks the tables, replaces the records' trigger function and
/// counts the payload bytes once, into shard 0, from the records: it runs again harmlessly.
///
/// Version 7: a claim that writes no indexed column, so PostgreSQL keeps its new row version
/// heap-only (no index entry, only the changed bytes in the write-ahead log). A claimed row
/// keeps its state code (pending or retrying) and its `claimable` flag; it is in flight while
/// it holds a lease token. State code 2 is left to mark a row set aside as unreadable, and a
/// check (`records_set_aside_unleased`) refuses it with a token: the records an earlier build
/// left in flight take code 0 or 1 under their lease, and a process of an earlier build still
/// running after the upgrade cannot claim (its claim writes code 2 with a token and fails),
/// so it never takes a record a current runner holds; its reports on the records it held are
/// skipped, and those records are delivered again once their leases expire. The lease index
/// `records_leases` goes, since `lease_until` may not be indexed; `leases` lists each claim's
/// lease instead (its token, its expiry, its records' ids, one row per claim or renewal), and
/// its `until` index is where `expired` starts. A record in flight is not counted among the
/// failed ones while it is delivered, as before. The step locks the tables, lists the leases
/// already held, moves the records in flight to their new form, folds the delivered and
/// superseded counts into `meta` and counts everything else again by the new rule (as version
/// 4 did), and rewrites the trigger function with it: it runs again harmlessly.
pub(crate) const MIGRATIONS: &[&str] = &[
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
    r#"
LOCK TABLE {s}.records, {s}.tombstones, {s}.meta IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE IF NOT EXISTS {s}.tallies (
    shard integer PRIMARY KEY,
    pending bigint NOT NULL DEFAULT 0,
    retrying bigint NOT NULL DEFAULT 0,
    in_flight bigint NOT NULL DEFAULT 0,
    attention bigint NOT NULL DEFAULT 0,
    rejected bigint NOT NULL DEFAULT 0,
    absorbed bigint NOT NULL DEFAULT 0,
    discarded bigint NOT NULL DEFAULT 0,
    delivered bigint NOT NULL DEFAULT 0,
    superseded bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS {s}.error_tallies (
    shard integer NOT NULL,
    digest text NOT NULL,
    error text NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (shard, digest)
);
CREATE OR REPLACE FUNCTION {s}.tally_records() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    me integer := pg_backend_pid() % {shards};
    d record;
    zeroed text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT count(*) FILTER (WHERE state = 0) AS pending,
            count(*) FILTER (WHERE state = 1) AS retrying,
            count(*) FILTER (WHERE state = 2 AND lease_until IS NOT NULL) AS in_flight,
            count(*) FILTER (WHERE state = 3) AS attention,
            count(*) FILTER (WHERE state = 4) AS rejected,
            coalesce(sum(absorbed), 0) AS absorbed,
            count(*) FILTER (WHERE state IN (1, 3, 4) AND last_error IS NOT NULL) AS failed
        INTO d FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT -count(*) FILTER (WHERE state = 0) AS pending,
            -count(*) FILTER (WHERE state = 1) AS retrying,
            -count(*) FILTER (WHERE state = 2 AND lease_until IS NOT NULL) AS in_flight,
            -count(*) FILTER (WHERE state = 3) AS attention,
            -count(*) FILTER (WHERE state = 4) AS rejected,
            -coalesce(sum(absorbed), 0) AS absorbed,
            count(*) FILTER (WHERE state IN (1, 3, 4) AND last_error IS NOT NULL) AS failed
        INTO d FROM old_rows;
    ELSE
        SELECT coalesce(sum(sign) FILTER (WHERE state = 0), 0) AS pending,
            coalesce(sum(sign) FILTER (WHERE state = 1), 0) AS retrying,
            coalesce(sum(sign) FILTER (WHERE state = 2 AND lease_until IS NOT NULL), 0)
                AS in_flight,
            coalesce(sum(sign) FILTER (WHERE state = 3), 0) AS attention,
            coalesce(sum(sign) FILTER (WHERE state = 4), 0) AS rejected,
            coalesce(sum(sign * absorbed), 0) AS absorbed,
            count(*) FILTER (WHERE state IN (1, 3, 4) AND last_error IS NOT NULL) AS failed
        INTO d FROM (SELECT 1 AS sign, state, lease_until, absorbed, last_error FROM new_rows
            UNION ALL SELECT -1, state, lease_until, absorbed, last_error FROM old_rows) AS x;
    END IF;
    IF d.pending = 0 AND d.retrying = 0 AND d.in_flight = 0 AND d.attention = 0
        AND d.rejected = 0 AND d.absorbed = 0 AND d.failed = 0 THEN
        RETURN NULL;
    END IF;
    -- This shard's row first, always: see the schema's version 4 notes.
    INSERT INTO {s}.tallies AS t (shard, pending, retrying, in_flight, attention, rejected,
        absorbed)
    VALUES (me, d.pending, d.retrying, d.in_flight, d.attention, d.rejected, d.absorbed)
    ON CONFLICT (shard) DO UPDATE SET pending = t.pending + excluded.pending,
        retrying = t.retrying + excluded.retrying, in_flight = t.in_flight + excluded.in_flight,
        attention = t.attention + excluded.attention, rejected = t.rejected + excluded.rejected,
        absorbed = t.absorbed + excluded.absorbed;
    IF d.failed = 0 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, count(*) FROM new_rows
            WHERE state IN (1, 3, 4) AND last_error IS NOT NULL
            GROUP BY last_error ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    ELSIF TG_OP = 'DELETE' THEN
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, -count(*) FROM old_rows
            WHERE state IN (1, 3, 4) AND last_error IS NOT NULL
            GROUP BY last_error ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    ELSE
        WITH up AS (INSERT INTO {s}.error_tallies AS e (shard, digest, error, n)
            SELECT me, md5(last_error), last_error, sum(sign) FROM
                (SELECT 1 AS sign, state, last_error FROM new_rows
                 UNION ALL SELECT -1, state, last_error FROM old_rows) AS x
            WHERE state IN (1, 3, 4) AND last_error IS NOT NULL
            GROUP BY last_error HAVING sum(sign) <> 0 ORDER BY 2
            ON CONFLICT (shard, digest) DO UPDATE SET n = e.n + excluded.n
            RETURNING e.digest, e.n)
        SELECT array_agg(digest) FILTER (WHERE n = 0) INTO zeroed FROM up;
    END IF;
    IF zeroed IS NOT NULL THEN
        DELETE FROM {s}.error_tallies WHERE shard = me AND digest = ANY(zeroed) AND n = 0;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.tally_tombstones() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    me integer := pg_backend_pid() % {shards};
    n bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT count(*) INTO n FROM new_rows;
    ELSE
        SELECT -count(*) INTO n FROM old_rows;
    END IF;
    IF n <> 0 THEN
        INSERT INTO {s}.tallies AS t (shard, discarded) VALUES (me, n)
        ON CONFLICT (shard) DO UPDATE SET discarded = t.discarded + excluded.discarded;
    END IF;
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS tally_inserted ON {s}.records;
DROP TRIGGER IF EXISTS tally_updated ON {s}.records;
DROP TRIGGER IF EXISTS tally_deleted ON {s}.records;
DROP TRIGGER IF EXISTS tally_buried ON {s}.tombstones;
DROP TRIGGER IF EXISTS tally_unburied ON {s}.tombstones;
CREATE TRIGGER tally_inserted AFTER INSERT ON {s}.records
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.tally_records();
CREATE TRIGGER tally_updated AFTER UPDATE ON {s}.records
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.tally_records();
CREATE TRIGGER tally_deleted AFTER DELETE ON {s}.records
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.tally_records();
CREATE TRIGGER tally_buried AFTER INSERT ON {s}.tombstones
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.tally_tombstones();
CREATE TRIGGER tally_unburied AFTER DELETE ON {s}.tombstones
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.tally_tombstones();
UPDATE {s}.meta SET
    delivered = delivered + (SELECT coalesce(sum(delivered), 0) FROM {s}.tallies),
    superseded = superseded + (SELECT coalesce(sum(superseded), 0) FROM {s}.tallies);
DELETE FROM {s}.tallies;
DELETE FROM {s}.error_tallies;
INSERT INTO {s}.tallies (shard, pending, retrying, in_flight, attention, rejected, absorbed,
    discarded)
SELECT 0, count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1),
    count(*) FILTER (WHERE state = 2 AND lease_until IS NOT NULL),
    count(*) FILTER (WHERE state = 3), count(*) FILTER (WHERE state = 4),
    coalesce(sum(absorbed), 0), (SELECT count(*) FROM {s}.tombstones)
FROM {s}.records;
INSERT INTO {s}.error_tallies (shard, digest, error, n)
SELECT 0, md5(last_error), last_error, count(*) FROM {s}.records
WHERE state IN (1, 3, 4) AND last_error IS NOT NULL GROUP BY last_error;
CREATE INDEX IF NOT EXISTS records_attention ON {s}.records (grp, id) WHERE state = 3;
CREATE INDEX IF NOT EXISTS records_age ON {s}.records (created_at) WHERE state <> 4;
"#,
    r#"
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS not_before bigint;
CREATE INDEX IF NOT EXISTS records_scheduled ON {s}.records (not_before)
    WHERE state = 0 AND not_before = next_attempt_at;
"#,
    concat!(
        r#"
LOCK TABLE {s}.records, {s}.tombstones, {s}.meta IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS history bytea;
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS trace text;
ALTER TABLE {s}.tallies ADD COLUMN IF NOT EXISTS payload_bytes bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS {s}.cap_turn (
    id smallint PRIMARY KEY CHECK (id = 1),
    turns bigint NOT NULL
);
INSERT INTO {s}.cap_turn (id, turns) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
"#,
        tally_records!(
            "state = 0",
            "state = 1",
            "state = 2 AND lease_until IS NOT NULL",
            "state <> 2 OR lease_until IS NOT NULL",
            "state IN (1, 3, 4) AND last_error IS NOT NULL",
            "lease_until"
        ),
        r#"UPDATE {s}.tallies SET payload_bytes = 0 WHERE payload_bytes <> 0;
INSERT INTO {s}.tallies AS t (shard, payload_bytes)
SELECT 0, coalesce(sum(octet_length(payload)), 0) FROM {s}.records
WHERE state <> 2 OR lease_until IS NOT NULL
ON CONFLICT (shard) DO UPDATE SET payload_bytes = excluded.payload_bytes;
"#
    ),
    concat!(
        r#"
LOCK TABLE {s}.records, {s}.tombstones, {s}.meta IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE IF NOT EXISTS {s}.leases (
    token bigint NOT NULL,
    until bigint NOT NULL,
    ids bigint[] NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_until ON {s}.leases (until);
CREATE INDEX IF NOT EXISTS leases_token ON {s}.leases (token);
DELETE FROM {s}.leases;
INSERT INTO {s}.leases (token, until, ids)
SELECT lease_token, min(lease_until), array_agg(id ORDER BY id) FROM {s}.records
WHERE lease_token IS NOT NULL AND lease_until IS NOT NULL AND state < 3 GROUP BY lease_token;
UPDATE {s}.records SET state = CASE WHEN last_attempt_at IS NULL THEN 0 ELSE 1 END
WHERE state = 2 AND lease_token IS NOT NULL;
ALTER TABLE {s}.records DROP CONSTRAINT IF EXISTS records_set_aside_unleased;
ALTER TABLE {s}.records ADD CONSTRAINT records_set_aside_unleased
    CHECK (state <> 2 OR lease_token IS NULL);
UPDATE {s}.meta SET
    delivered = delivered + (SELECT coalesce(sum(delivered), 0) FROM {s}.tallies),
    superseded = superseded + (SELECT coalesce(sum(superseded), 0) FROM {s}.tallies);
DELETE FROM {s}.tallies;
DELETE FROM {s}.error_tallies;
INSERT INTO {s}.tallies (shard, pending, retrying, in_flight, attention, rejected, absorbed,
    discarded, payload_bytes)
SELECT 0, count(*) FILTER (WHERE state = 0 AND lease_token IS NULL),
    count(*) FILTER (WHERE state = 1 AND lease_token IS NULL),
    count(*) FILTER (WHERE lease_token IS NOT NULL AND state < 3),
    count(*) FILTER (WHERE state = 3), count(*) FILTER (WHERE state = 4),
    coalesce(sum(absorbed), 0), (SELECT count(*) FROM {s}.tombstones),
    coalesce(sum(octet_length(payload)) FILTER (WHERE state <> 2 OR lease_token IS NOT NULL), 0)
FROM {s}.records;
INSERT INTO {s}.error_tallies (shard, digest, error, n)
SELECT 0, md5(last_error), last_error, count(*) FROM {s}.records
WHERE (state IN (3, 4) OR (state = 1 AND lease_token IS NULL)) AND last_error IS NOT NULL
GROUP BY last_error;
DROP INDEX IF EXISTS {s}.records_leases;
"#,
        tally_records!(
            "state = 0 AND lease_token IS NULL",
            "state = 1 AND lease_token IS NULL",
            "lease_token IS NOT NULL AND state < 3",
            "state <> 2 OR lease_token IS NOT NULL",
            "(state IN (3, 4) OR (state = 1 AND lease_token IS NULL)) AND last_error IS NOT NULL",
            "lease_token"
        ),
    ),
];
