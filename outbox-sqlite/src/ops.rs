//! The store's operations as SQL on one connection, each run inside a transaction the caller
//! holds. Both the group-commit writer and [`enqueue_in`](crate::SqliteStore::enqueue_in) (the
//! caller's own transaction) write through here (an enqueue through `enqueue`, which every
//! driver runs), so a row's `member` and `claimable` columns are kept right by every path.
//!
//! `member` is 1 while a grouped record holds its group's order (every state but rejected);
//! the group's head is its member with the lowest id. `claimable` is 1 for a pending or
//! retrying record with a deadline that is not held back by its group. The deadline index
//! holds every pending and retrying record by `(claimable, next_attempt_at)`: a claim reads its
//! claimable part from the start and stops after `limit` rows, and the records scheduled after
//! a moment are a range of it, so neither reads the backlog of the other.
//!
//! A claim is one statement over its batch; transitions are in [`apply`](crate::apply).

use outbox_core::{
    Cap, Claim, Enqueued, Halt, Lease, ListQuery, Millis, NewRecord, Record, RecordId, Result,
    State, Stats, Tombstone,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};

use crate::counters::{self, Tally};
use crate::enqueue::{self, Rusqlite};
use crate::error::db;
use crate::json::json_ids;
use crate::unreadable;

/// The columns a [`RawRecord`] is read from, in its order, with `$lease` for its two lease
/// columns (`lease_token, lease_until`).
macro_rules! columns_with_lease {
    ($lease:literal) => {
        concat!(
            "id, grp, payload, key, created_at, state, attempts, unanswered, interrupted, \
             last_attempt_at, next_attempt_at, last_error, ",
            $lease,
            ", expected_version, replaces, not_before, history, trace"
        )
    };
}

/// The columns a [`RawRecord`] is read from, in its order.
macro_rules! columns {
    () => {
        $crate::ops::columns_with_lease!("lease_token, lease_until")
    };
}
pub(crate) use {columns, columns_with_lease};

/// How many columns [`columns!`] names: the index of the first column a query adds after them.
pub(crate) const COLUMN_COUNT: usize = 19;

const COLUMNS: &str = columns!();

// Every `LIMIT` here is a bound value plus zero. SQLite's planner reads a bare bound `LIMIT`
// value, and a statement whose plan read a bound value is parsed and planned again each time
// that value is bound: every claim would pay a fresh prepare. The sum is opaque to the
// planner, and these plans do not depend on the limit.

/// The rows a claim has not set aside as unreadable (see [`unreadable`](crate::unreadable)).
macro_rules! readable {
    () => {
        "NOT (state = 2 AND lease_until IS NULL)"
    };
}

/// The due query's rows: the first `limit` (`?2`) claimable rows of the deadline index at or
/// before `now` (`?1`).
macro_rules! due_rows {
    () => {
        "FROM records WHERE state IN (0, 1) AND claimable = 1 \
         AND next_attempt_at <= ?1 ORDER BY next_attempt_at, id LIMIT ?2 + 0"
    };
}

/// The due query: the ids of [`due_rows!`].
#[cfg(test)]
macro_rules! due_sql {
    () => {
        concat!("SELECT id ", due_rows!())
    };
}

/// The due query on its own, for its query plan.
#[cfg(test)]
pub(crate) const DUE_SQL: &str = due_sql!();

/// A claim's read: the due query's rows, whole, each with the state it is claimed from (the
/// column after [`columns!`]). [`CLAIM_SQL`] then puts them in flight, in the same
/// transaction on the one writer connection, so it changes exactly these rows. Read first
/// rather than returned by the update: an `UPDATE … RETURNING` collects every row it returns
/// in a table of its own before handing back the first, which cost a drain about a tenth of
/// its time. The lease columns are not read: the claim writes them, so whatever a waiting
/// row holds there (a value damaged on disk, say) is never decoded, as it never was when the
/// claim returned the rows it had written.
pub(crate) const CLAIM_READ_SQL: &str = concat!(
    "SELECT ",
    columns_with_lease!("NULL, NULL"),
    ", state ",
    due_rows!()
);

/// A claim's write: the rows [`CLAIM_READ_SQL`] read (ids in the JSON array `?1`) go in flight
/// under the lease `?2` until `?3`. `OR FAIL`, so SQLite keeps no statement journal for it
/// (see the writer's docs, `worker`).
pub(crate) const CLAIM_SQL: &str = "UPDATE OR FAIL records SET state = 2, lease_token = ?2, \
     lease_until = ?3, claimable = 0, claimed_from = state \
     WHERE id IN (SELECT value FROM json_each(?1))";

/// The head of a group: the first entry of the group index.
pub(crate) const HEAD_SQL: &str =
    "SELECT id AS value FROM records WHERE grp = ?1 AND member = 1 ORDER BY id LIMIT 1";

/// Expired leases, earliest first, from the lease index. Named, because without statistics
/// the planner may prefer another index and then sort every in-flight record.
pub(crate) const EXPIRED_SQL: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM records INDEXED BY records_lease WHERE state = 2 AND lease_until <= ?1 \
     ORDER BY lease_until, id LIMIT ?2 + 0"
);

/// The earliest deadline among claimable rows: the first claimable entry of the deadline index.
pub(crate) const NEXT_DUE_SQL: &str = "SELECT next_attempt_at FROM records \
     WHERE state IN (0, 1) AND claimable = 1 ORDER BY next_attempt_at LIMIT 1";

/// Pending and retrying records scheduled from a time after `now` (see
/// [`Store::stepped_back`](outbox_core::Store::stepped_back)): the part of the deadline index
/// after `now`, claimable or not, so the due backlog is never read. A never-reported record
/// waiting for its not-before time is left out ([`Record::needs_rebase`]): that time is
/// absolute.
pub(crate) const STEPPED_BACK_SQL: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM records INDEXED BY records_deadline \
     WHERE state IN (0, 1) AND claimable IN (0, 1) AND next_attempt_at > ?1 \
     AND (last_attempt_at > ?1 OR (last_attempt_at IS NULL           AND (not_before IS NULL OR next_attempt_at > not_before)))      ORDER BY id LIMIT ?2 + 0"
);

/// The latest record (highest id) with a coalescing key: the last entry of the coalescing
/// index for the key, which holds only the records that have one.
pub(crate) const LATEST_SQL: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM records WHERE replaces = ?1 ORDER BY id DESC LIMIT 1"
);

/// Whether a record of the group `?1` with an id above `?2` holds the group's order (any
/// state but rejected): a range of the group index.
pub(crate) const FOLLOWED_SQL: &str =
    "SELECT EXISTS (SELECT 1 FROM records WHERE grp = ?1 AND member = 1 AND id > ?2) AS value";

pub(crate) use crate::row::{count, ms, read_ms, RawRecord};
use crate::row::{read_u32, token};

/// The records a query returns; a row that cannot be decoded is passed by (see
/// [`unreadable`](crate::unreadable)).
fn records(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Record>> {
    Ok(unreadable::rows(conn, sql, params)?.0)
}

/// One record by id.
pub(crate) fn get(conn: &Connection, id: RecordId) -> Result<Option<Record>> {
    Ok(records(conn, GET_SQL, [ms(id.0)])?.pop())
}

/// One row by id, every column.
pub(crate) const GET_SQL: &str = concat!("SELECT ", columns!(), " FROM records WHERE id = ?1");

/// Enqueues records due at `now` on `conn` (in the transaction it holds), held to `cap`; the
/// caller validated them. The one enqueue, [`enqueue::insert`], run by rusqlite.
pub(crate) fn enqueue(
    conn: &Connection,
    records: Vec<NewRecord>,
    now: Millis,
    cap: Cap,
) -> Result<Enqueued> {
    enqueue::at_once(enqueue::insert(&mut Rusqlite(conn), records, now, cap))
}

/// [`enqueue`] without a cap.
#[cfg(test)]
pub(crate) fn insert(conn: &Connection, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
    enqueue(conn, records, now, Cap::none())
}

/// Enqueues several callers' batches, each due at its own time, in one go, held to `cap` (see
/// [`enqueue::insert_many`]), run by rusqlite.
pub(crate) fn insert_many(
    conn: &Connection,
    batches: &[(&[NewRecord], Millis)],
    cap: Cap,
) -> Result<Vec<Enqueued>> {
    enqueue::at_once(enqueue::insert_many(&mut Rusqlite(conn), batches, cap))
}

/// Claims up to `limit` due records under the lease, in `(next_attempt_at, id)` order.
pub(crate) fn claim(conn: &Connection, claim: Claim) -> Result<Vec<Record>> {
    let mut tally = Tally::default();
    let claimed = claim_counted(conn, claim, &mut tally)?;
    tally.write(conn)?;
    Ok(claimed)
}

/// [`claim`], leaving its change to the counters in `tally` for the caller to write.
pub(crate) fn claim_counted(
    conn: &Connection,
    claim: Claim,
    tally: &mut Tally,
) -> Result<Vec<Record>> {
    if claim.limit == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(CLAIM_READ_SQL).map_err(db)?;
    let mut rows = stmt
        .query(params![ms(claim.now), count(claim.limit)])
        .map_err(db)?;
    let mut ids = Vec::new();
    // Each row leaves the counters of the state it was claimed from (read raw, so a row that
    // cannot be decoded leaves them too) and enters the in-flight count unless set aside.
    let mut claimed = Vec::new();
    let mut unreadable = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        ids.push(row.get::<_, i64>(0).map_err(db)?);
        let from = row.get::<_, Option<i64>>(COLUMN_COUNT).ok().flatten();
        let error = match row.get_ref(11).map_err(db)? {
            ValueRef::Text(bytes) => Some(bytes),
            _ => None,
        };
        tally.leave(from, error);
        match unreadable::decode(row).map_err(db)? {
            Ok(mut record) => {
                // As the claim leaves it: in flight under the lease.
                record.state = State::InFlight;
                record.lease = Some(claim.lease);
                tally.enter(counters::bucket(&record), None);
                claimed.push(record);
            }
            Err(row) => unreadable.push(row),
        }
    }
    drop(rows);
    drop(stmt);
    if !ids.is_empty() {
        conn.prepare_cached(CLAIM_SQL)
            .map_err(db)?
            .execute(params![
                json_ids(ids),
                token(claim.lease.token),
                ms(claim.lease.until)
            ])
            .map_err(db)?;
    }
    unreadable::set_aside(conn, &unreadable, tally)?;
    Ok(claimed)
}

/// Moves the lease of the records still held under `lease.token`.
pub(crate) fn renew(conn: &Connection, ids: &[RecordId], lease: Lease) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    conn.prepare_cached(
        "UPDATE records SET lease_until = ?3 \
         WHERE id IN (SELECT value FROM json_each(?1)) AND state = 2 AND lease_token = ?2",
    )
    .map_err(db)?
    .execute(params![
        json_ids(ids.iter().map(|id| ms(id.0))),
        token(lease.token),
        ms(lease.until)
    ])
    .map_err(db)?;
    Ok(())
}

/// The persisted halt.
pub(crate) fn halt(conn: &Connection) -> Result<Option<Halt>> {
    conn.prepare_cached("SELECT reason, since FROM halt WHERE only = 1")
        .map_err(db)?
        .query_row([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .optional()
        .map_err(db)?
        .map(|(reason, since)| {
            Ok(Halt {
                reason,
                since: read_ms(since, "halt since")?,
            })
        })
        .transpose()
}

/// Persists the halt, or clears it.
pub(crate) fn set_halt(conn: &Connection, halt: Option<&Halt>) -> Result<()> {
    match halt {
        Some(halt) => conn
            .prepare_cached("INSERT OR REPLACE INTO halt (only, reason, since) VALUES (1, ?1, ?2)")
            .map_err(db)?
            .execute(params![halt.reason, ms(halt.since)]),
        None => conn
            .prepare_cached("DELETE FROM halt")
            .map_err(db)?
            .execute([]),
    }
    .map_err(db)?;
    Ok(())
}

/// Clears the halt if it is `seen`, in the caller's write transaction; returns the halt found.
pub(crate) fn clear_halt_if(conn: &Connection, seen: &Halt) -> Result<Option<Halt>> {
    let found = halt(conn)?;
    if found.as_ref() == Some(seen) {
        set_halt(conn, None)?;
    }
    Ok(found)
}

/// In-flight records whose lease expired at or before `now`.
pub(crate) fn expired(conn: &Connection, now: Millis, limit: usize) -> Result<Vec<Record>> {
    records(conn, EXPIRED_SQL, params![ms(now), count(limit)])
}

/// Pending or retrying records scheduled from a time after `now`, lowest id first.
pub(crate) fn stepped_back(conn: &Connection, now: Millis, limit: usize) -> Result<Vec<Record>> {
    records(conn, STEPPED_BACK_SQL, params![ms(now), count(limit)])
}

/// A page of records in id order.
pub(crate) fn list(conn: &Connection, query: &ListQuery) -> Result<Vec<Record>> {
    let mut sql = format!("SELECT {COLUMNS} FROM records WHERE id > :after");
    if query.state.is_some() {
        sql.push_str(" AND state = :state");
    }
    if query.group.is_some() {
        sql.push_str(" AND grp = :grp");
    }
    sql.push_str(" ORDER BY id LIMIT :limit + 0");
    let after = query.after.map_or(0, |id| ms(id.0));
    let state = query.state.map(State::code);
    let limit = count(query.limit);
    let mut params: Vec<(&str, &dyn rusqlite::ToSql)> =
        vec![(":after", &after), (":limit", &limit)];
    if let Some(state) = &state {
        params.push((":state", state));
    }
    if let Some(group) = &query.group {
        params.push((":grp", group));
    }
    records(conn, &sql, params.as_slice())
}

/// A page of tombstones in id order.
pub(crate) fn tombstones(
    conn: &Connection,
    after: Option<RecordId>,
    limit: usize,
) -> Result<Vec<Tombstone>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, grp, key, reason, discarded_at, attempts FROM tombstones \
             WHERE id > ?1 ORDER BY id LIMIT ?2 + 0",
        )
        .map_err(db)?;
    let raws = stmt
        .query_map(
            params![after.map_or(0, |id| ms(id.0)), count(limit)],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, i64>(4)?,
                    row.get::<_, i64>(5)?,
                ))
            },
        )
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    raws.into_iter()
        .map(|(id, group, key, reason, at, attempts)| {
            Ok(Tombstone {
                id: RecordId(read_ms(id, "tombstone id")?),
                group,
                key,
                reason,
                discarded_at: read_ms(at, "discarded_at")?,
                attempts: read_u32(attempts, "attempts")?,
            })
        })
        .collect()
}

/// The earliest deadline of a claimable record, due or not.
pub(crate) fn next_due(conn: &Connection) -> Result<Option<Millis>> {
    conn.prepare_cached(NEXT_DUE_SQL)
        .map_err(db)?
        .query_row([], |row| row.get::<_, i64>(0))
        .optional()
        .map_err(db)?
        .map(|t| read_ms(t, "next_attempt_at"))
        .transpose()
}

/// Every counter of `meta` (a handful of rows): the records in each state, the delivered, the
/// merged writes, the tombstones and the payload bytes held.
pub(crate) const COUNTERS_SQL: &str = "SELECT name, value FROM meta";

/// The held records: the members of each group whose head needs attention, heads excluded.
/// It starts from the records that need attention (a partial index) and counts the rest of
/// each of their groups that they head (a range of the group index), so it reads the held
/// records' index entries and nothing else.
pub(crate) const HELD_SQL: &str = "SELECT count(*) FROM records AS a INDEXED BY records_attention \
     JOIN records AS r ON r.grp = a.grp AND r.member = 1 AND r.id > a.id \
     WHERE a.state = 3 AND a.member = 1 AND NOT EXISTS ( \
         SELECT 1 FROM records AS h WHERE h.grp = a.grp AND h.member = 1 AND h.id < a.id)";

/// The scheduled records ([`Record::is_scheduled`]): pending, with the deadline at the
/// not-before time. The partial index `records_scheduled` holds exactly these rows, so the
/// count reads as many index entries as there are scheduled records, and nothing else.
pub(crate) const SCHEDULED_SQL: &str = "SELECT count(*) FROM records INDEXED BY records_scheduled \
     WHERE state = 0 AND not_before = next_attempt_at";

/// The earliest creation time of an undelivered readable record: the first entry of the
/// creation index whose record is neither rejected nor set aside (a rejected record older
/// than every undelivered one is passed by, one index entry each).
pub(crate) const OLDEST_SQL: &str = concat!(
    "SELECT created_at FROM records INDEXED BY records_created \
     WHERE state IN (0, 1, 2, 3) AND ",
    readable!(),
    " ORDER BY created_at LIMIT 1"
);

/// Counts and ages, from the counters the store's writes keep (see
/// [`counters`](crate::counters)) and the first entries of indexes; the caller runs it inside one
/// read transaction.
pub(crate) fn stats(conn: &Connection) -> Result<Stats> {
    let mut stats = Stats::default();
    let counters: Vec<(String, i64)> = conn
        .prepare_cached(COUNTERS_SQL)
        .map_err(db)?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    for (name, n) in counters {
        // A counter below zero means rows were removed behind the store's back (by hand, say):
        // stats still answer, with zero, rather than fail the inspector.
        let n = u64::try_from(n).unwrap_or_else(|_| {
            tracing::warn!(counter = %name, value = n, "an outbox counter is below zero");
            0
        });
        let field = match name.as_str() {
            "delivered" => &mut stats.delivered,
            "superseded" => &mut stats.superseded,
            "tombstones" => &mut stats.discarded,
            counters::PAYLOAD_BYTES => &mut stats.payload_bytes,
            _ => match name
                .strip_prefix("state ")
                .and_then(|code| code.parse::<u8>().ok())
                .and_then(State::from_code)
            {
                Some(State::Pending) => &mut stats.pending,
                Some(State::Retrying) => &mut stats.retrying,
                Some(State::InFlight) => &mut stats.in_flight,
                Some(State::NeedsAttention) => &mut stats.needs_attention,
                Some(State::Rejected) => &mut stats.rejected,
                None => continue,
            },
        };
        *field = n;
    }
    let single = |sql: &str| -> Result<Option<i64>> {
        conn.prepare_cached(sql)
            .map_err(db)?
            .query_row([], |row| row.get::<_, Option<i64>>(0))
            .optional()
            .map_err(db)
            .map(Option::flatten)
    };
    stats.held = read_ms(single(HELD_SQL)?.unwrap_or(0), "held")?;
    stats.scheduled = read_ms(single(SCHEDULED_SQL)?.unwrap_or(0), "scheduled")?;
    stats.oldest_created_at = single(OLDEST_SQL)?
        .map(|t| read_ms(t, "created_at"))
        .transpose()?;
    stats.next_due = next_due(conn)?;
    stats.halt = halt(conn)?;
    Ok(stats)
}

/// The rejected records a prune removes: last tried before `?1`. Written once, for the read
/// of what the counters lose and the delete, which in one transaction see the same rows.
macro_rules! pruned_rows {
    () => {
        "FROM records WHERE state = 4 AND last_attempt_at < ?1"
    };
}

/// Removes rejected records and tombstones older than `older_than`.
pub(crate) fn prune(conn: &Connection, older_than: Millis) -> Result<u64> {
    let mut tally = Tally::default();
    let mut rejected = 0;
    {
        // Read, then deleted: a `DELETE … RETURNING` keeps a statement journal (see the
        // writer's docs, `worker`).
        let mut stmt = conn
            .prepare_cached(concat!(
                "SELECT last_error, length(payload) ",
                pruned_rows!()
            ))
            .map_err(db)?;
        let mut rows = stmt.query([ms(older_than)]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let error = match row.get_ref(0).map_err(db)? {
                ValueRef::Text(bytes) => Some(bytes),
                _ => None,
            };
            tally.leave(Some(i64::from(State::Rejected.code())), error);
            tally.bytes(-row.get::<_, Option<i64>>(1).map_err(db)?.unwrap_or(0));
            rejected += 1;
        }
    }
    conn.prepare_cached(concat!("DELETE ", pruned_rows!()))
        .map_err(db)?
        .execute([ms(older_than)])
        .map_err(db)?;
    let tombstones = conn
        .prepare_cached("DELETE FROM tombstones WHERE discarded_at < ?1")
        .map_err(db)?
        .execute([ms(older_than)])
        .map_err(db)?;
    tally.buried(-count(tombstones));
    tally.write(conn)?;
    Ok((rejected + tombstones) as u64)
}
