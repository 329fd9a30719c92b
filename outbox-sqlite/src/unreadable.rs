//! Rows that cannot be decoded (a text that is not UTF-8, a value of the wrong type, an
//! unknown state code): read row by row so one never fails a call that reads many.
//!
//! A claim that meets such a row *sets it aside*: it stays in flight with neither lease
//! token nor lease deadline (`claimable = 0`). So the deadline index no longer holds it
//! (`next_due` stops reporting it) and the lease index never reports it expired. A grouped
//! row keeps its place in its group's order (`member` as it was): the group's head, in
//! flight, it holds back the later records of its group (and only those) until it is
//! discarded, as a record in flight does, so no write of the group overtakes it. Stats pass
//! such rows by. [`list`] finds every undecodable row by reading each one;
//! [`discard`] removes one and keeps a tombstone with what could be read.

use outbox_core::{Millis, Record, RecordId, Result, Unreadable};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::counters::{Mark, Tally};
use crate::error::db;
use crate::json::json_ids;
use crate::ops::{columns, ms, RawRecord, COLUMN_COUNT};

/// The names of the columns of [`columns!`], in its order, for reasons.
const NAMES: [&str; COLUMN_COUNT] = [
    "id",
    "grp",
    "payload",
    "key",
    "created_at",
    "state",
    "attempts",
    "unanswered",
    "interrupted",
    "last_attempt_at",
    "next_attempt_at",
    "last_error",
    "lease_token",
    "lease_until",
    "expected_version",
    "replaces",
    "not_before",
    "history",
    "trace",
];

/// Why an engine error left a column undecodable, in words.
fn reason(err: &rusqlite::Error) -> String {
    match err {
        rusqlite::Error::Utf8Error(i, _) => format!("{} is not UTF-8", name(*i)),
        rusqlite::Error::FromSqlConversionFailure(i, _, source)
            if source.downcast_ref::<std::str::Utf8Error>().is_some() =>
        {
            format!("{} is not UTF-8", name(*i))
        }
        rusqlite::Error::FromSqlConversionFailure(i, ty, _) => {
            format!("{} holds an unexpected {ty} value", name(*i))
        }
        rusqlite::Error::InvalidColumnType(i, _, ty) => {
            format!("{} holds a value of type {ty}", name(*i))
        }
        rusqlite::Error::IntegralValueOutOfRange(i, value) => {
            format!("{} is out of range: {value}", name(*i))
        }
        other => other.to_string(),
    }
}

fn name(i: usize) -> &'static str {
    NAMES.get(i).copied().unwrap_or("a column")
}

/// One row decoded, or why it cannot be. The id is read as the integer key SQLite keeps.
pub(crate) fn decode(row: &Row<'_>) -> rusqlite::Result<std::result::Result<Record, Unreadable>> {
    let id = RecordId(u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0));
    Ok(match RawRecord::from_row(row) {
        Err(err) => Err(Unreadable::new(id, reason(&err))),
        Ok(raw) => raw.into_record().map_err(|err| {
            let detail = match err {
                outbox_core::Error::Corrupted { detail, .. } => detail,
                other => other.to_string(),
            };
            Unreadable::new(id, detail)
        }),
    })
}

/// The rows a query returns, decoded one by one: the records, and the rows that failed.
pub(crate) fn rows(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<(Vec<Record>, Vec<Unreadable>)> {
    let mut stmt = conn.prepare_cached(sql).map_err(db)?;
    let decoded = stmt
        .query_map(params, decode)
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let mut records = Vec::with_capacity(decoded.len());
    let mut unreadable = Vec::new();
    for row in decoded {
        match row {
            Ok(record) => records.push(record),
            Err(row) => unreadable.push(row),
        }
    }
    Ok((records, unreadable))
}

/// Sets claimed rows that cannot be decoded aside (see the module documentation); each
/// stays its group's head. Their payload bytes leave the counter in `tally` as the rows leave
/// the state counters (the caller takes them out of those).
pub(crate) fn set_aside(conn: &Connection, rows: &[Unreadable], tally: &mut Tally) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let ids = json_ids(rows.iter().map(|row| ms(row.id.0)));
    let bytes: i64 = conn
        .prepare_cached(
            "SELECT coalesce(sum(length(payload)), 0) FROM records \
             WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .map_err(db)?
        .query_row([&ids], |row| row.get(0))
        .map_err(db)?;
    tally.bytes(-bytes);
    conn.prepare_cached(
        "UPDATE records SET lease_token = NULL, lease_until = NULL, claimable = 0 \
         WHERE id IN (SELECT value FROM json_each(?1))",
    )
    .map_err(db)?
    .execute([&ids])
    .map_err(db)?;
    Ok(())
}

/// Makes the head of each group of the rows `ids` (a JSON array) claimable when due-kind.
/// Groups are compared as stored, so a group key that is not UTF-8 works too.
fn promote(conn: &Connection, ids: &str) -> Result<()> {
    conn.prepare_cached(
        "UPDATE records SET claimable = (state IN (0, 1) AND next_attempt_at IS NOT NULL) \
         WHERE id IN (SELECT (SELECT h.id FROM records AS h \
                              WHERE h.grp = b.grp AND h.member = 1 ORDER BY h.id LIMIT 1) \
                      FROM records AS b \
                      WHERE b.id IN (SELECT value FROM json_each(?1)) AND b.grp IS NOT NULL)",
    )
    .map_err(db)?
    .execute([ids])
    .map_err(db)?;
    Ok(())
}

/// Every row that cannot be decoded, lowest id first, at most `limit`: reads each row.
pub(crate) fn list(conn: &Connection, limit: usize) -> Result<Vec<Unreadable>> {
    let sql = concat!("SELECT ", columns!(), " FROM records ORDER BY id");
    let mut stmt = conn.prepare_cached(sql).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut found = Vec::new();
    while found.len() < limit {
        let Some(row) = rows.next().map_err(db)? else {
            break;
        };
        // Most rows decode: only one that does not is copied out, for its reason.
        if RawRecord::decodes(row) {
            continue;
        }
        if let Err(unreadable) = decode(row).map_err(db)? {
            found.push(unreadable);
        }
    }
    Ok(found)
}

/// The row `id` if it is there and cannot be decoded: one read by its key.
pub(crate) fn one(conn: &Connection, id: RecordId) -> Result<Option<Unreadable>> {
    let (_, mut unreadable) = rows(conn, crate::ops::GET_SQL, [ms(id.0)])?;
    Ok(unreadable.pop())
}

/// Text as far as it can be read: UTF-8 with the bad bytes replaced, numbers written out.
fn lossy(value: ValueRef<'_>) -> Option<String> {
    match value {
        ValueRef::Null => None,
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            Some(String::from_utf8_lossy(bytes).into_owned())
        }
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(x) => Some(x.to_string()),
    }
}

/// What a row counts under in stats' counters, read raw (see [`counters`](crate::counters)):
/// a row set aside counts nowhere; any other counts under its stored state code, and in a
/// failed state under its error's bytes.
fn counted(row: &Row<'_>) -> rusqlite::Result<Mark> {
    let state = match row.get_ref(5)? {
        ValueRef::Integer(code) => code,
        _ => return Ok((None, None)),
    };
    if state == 2 && row.get_ref(13)? == ValueRef::Null {
        return Ok((None, None));
    }
    let error = match row.get_ref(11)? {
        ValueRef::Text(bytes) if matches!(state, 1 | 3 | 4) => Some(bytes.to_vec()),
        _ => None,
    };
    Ok((Some(state), error))
}

/// Removes the row `id` if it cannot be decoded, keeping a tombstone with its group and key
/// as far as they read and its attempts if they do; returns whether it went.
pub(crate) fn discard(conn: &Connection, id: RecordId, now: Millis) -> Result<bool> {
    let sql = concat!(
        "SELECT ",
        columns!(),
        ", length(payload) FROM records WHERE id = ?1"
    );
    let found = conn
        .prepare_cached(sql)
        .map_err(db)?
        .query_row([ms(id.0)], |row| {
            Ok(match decode(row)? {
                Ok(_) => None,
                Err(unreadable) => Some((
                    unreadable,
                    lossy(row.get_ref(1)?),
                    lossy(row.get_ref(3)?).unwrap_or_default(),
                    row.get::<_, i64>(6)
                        .ok()
                        .and_then(|n| u32::try_from(n).ok()),
                    counted(row)?,
                    row.get::<_, Option<i64>>(COLUMN_COUNT)?.unwrap_or(0),
                )),
            })
        })
        .optional()
        .map_err(db)?
        .flatten();
    let Some((unreadable, group, key, attempts, mark, bytes)) = found else {
        return Ok(false);
    };
    let mut tally = Tally::default();
    // A row set aside left the counters, its payload bytes too, when it was set aside.
    if mark.0.is_some() {
        tally.bytes(-bytes);
    }
    tally.leave_mark(&mark);
    tally.buried(1);
    tally.write(conn)?;
    let ids = json_ids([ms(id.0)]);
    conn.prepare_cached(
        "INSERT INTO tombstones (id, grp, key, reason, discarded_at, attempts) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db)?
    .execute(params![
        ms(id.0),
        group,
        key,
        unreadable.tombstone_reason(),
        ms(now),
        attempts.unwrap_or(0)
    ])
    .map_err(db)?;
    // Leave the group's order first, so its next record becomes the head.
    conn.prepare_cached("UPDATE records SET member = 0 WHERE id = ?1")
        .map_err(db)?
        .execute([ms(id.0)])
        .map_err(db)?;
    promote(conn, &ids)?;
    conn.prepare_cached("DELETE FROM records WHERE id = ?1")
        .map_err(db)?
        .execute([ms(id.0)])
        .map_err(db)?;
    Ok(true)
}
