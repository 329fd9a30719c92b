//! A record's row: the raw columns read as they are, then checked into a
//! [`Record`](outbox_core::Record) (a value out of range is a typed error, a damaged history
//! or trace context reads as none), and the integer forms times and counts are stored in.

use outbox_core::{History, Lease, Millis, Record, RecordId, Result, State, TraceContext};
use rusqlite::types::ValueRef;
use rusqlite::Row;

use crate::error::corrupt;

/// Millisecond times are stored as SQLite integers (signed 64-bit); times past year 292 million
/// are stored as the largest one.
pub(crate) fn ms(value: Millis) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Lease tokens are compared for equality only, so they are stored bit for bit.
pub(crate) fn token(value: u64) -> i64 {
    value as i64
}

pub(crate) fn read_ms(value: i64, field: &str) -> Result<Millis> {
    u64::try_from(value).map_err(|_| corrupt(format!("negative {field} {value}")))
}

pub(crate) fn read_u32(value: i64, field: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| corrupt(format!("{field} {value} out of range")))
}

/// The raw columns of a row, converted after the query so that a value out of range is a
/// typed error rather than an engine error.
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub(crate) id: i64,
    pub(crate) group: Option<String>,
    pub(crate) payload: Vec<u8>,
    pub(crate) key: String,
    pub(crate) created_at: i64,
    pub(crate) state: i64,
    pub(crate) attempts: i64,
    pub(crate) unanswered: i64,
    pub(crate) interrupted: i64,
    pub(crate) last_attempt_at: Option<i64>,
    pub(crate) next_attempt_at: Option<i64>,
    pub(crate) last_error: Option<String>,
    pub(crate) lease_token: Option<i64>,
    pub(crate) lease_until: Option<i64>,
    pub(crate) expected_version: Option<String>,
    pub(crate) replaces: Option<String>,
    pub(crate) not_before: Option<i64>,
    /// The encoded [`History`] (`NULL` for none); a value of another type reads as damaged.
    pub(crate) history: History,
    /// The trace context ([`TraceContext::decode`]); damaged text, or a value of another
    /// type, reads as none.
    pub(crate) trace: Option<TraceContext>,
}

impl RawRecord {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(RawRecord {
            id: row.get(0)?,
            group: row.get(1)?,
            payload: row.get(2)?,
            key: row.get(3)?,
            created_at: row.get(4)?,
            state: row.get(5)?,
            attempts: row.get(6)?,
            unanswered: row.get(7)?,
            interrupted: row.get(8)?,
            last_attempt_at: row.get(9)?,
            next_attempt_at: row.get(10)?,
            last_error: row.get(11)?,
            lease_token: row.get(12)?,
            lease_until: row.get(13)?,
            expected_version: row.get(14)?,
            replaces: row.get(15)?,
            not_before: row.get(16)?,
            history: history_at(row, 17)?,
            trace: trace_at(row, 18)?,
        })
    }

    /// The record, once every value is in range.
    pub(crate) fn into_record(self) -> Result<Record> {
        let checked = Scalars {
            id: self.id,
            created_at: self.created_at,
            state: self.state,
            attempts: self.attempts,
            unanswered: self.unanswered,
            interrupted: self.interrupted,
            last_attempt_at: self.last_attempt_at,
            next_attempt_at: self.next_attempt_at,
            lease_token: self.lease_token,
            lease_until: self.lease_until,
            not_before: self.not_before,
        }
        .check()?;
        Ok(Record {
            id: checked.id,
            group: self.group,
            payload: self.payload,
            key: self.key,
            created_at: checked.created_at,
            state: checked.state,
            attempts: checked.attempts,
            unanswered: checked.unanswered,
            interrupted: checked.interrupted,
            last_attempt_at: checked.last_attempt_at,
            next_attempt_at: checked.next_attempt_at,
            last_error: self.last_error,
            lease: checked.lease,
            expected_version: self.expected_version,
            replaces: self.replaces,
            not_before: checked.not_before,
            history: self.history,
            trace: self.trace,
        })
    }

    /// Whether [`RawRecord::from_row`] and then [`RawRecord::into_record`] succeed for
    /// `row`, found without copying anything out of it: the same column types (a text is
    /// UTF-8), then the same range checks. What a search for undecodable rows runs on every
    /// row; only a row it fails is decoded, for its reason.
    pub(crate) fn decodes(row: &Row<'_>) -> bool {
        let scalars = || -> Option<Scalars> {
            let value = |i: usize| row.get_ref(i).ok();
            let int = |i: usize| value(i)?.as_i64().ok();
            let int_or_null = |i: usize| value(i)?.as_i64_or_null().ok();
            let text = |i: usize| value(i)?.as_str().ok().map(drop);
            let text_or_null = |i: usize| value(i)?.as_str_or_null().ok().map(drop);
            text_or_null(1)?;
            value(2)?.as_blob().ok()?;
            text(3)?;
            text_or_null(11)?;
            text_or_null(14)?;
            text_or_null(15)?;
            // The history (17) and trace (18) columns read as none when damaged.
            Some(Scalars {
                id: int(0)?,
                created_at: int(4)?,
                state: int(5)?,
                attempts: int(6)?,
                unanswered: int(7)?,
                interrupted: int(8)?,
                last_attempt_at: int_or_null(9)?,
                next_attempt_at: int_or_null(10)?,
                lease_token: int_or_null(12)?,
                lease_until: int_or_null(13)?,
                not_before: int_or_null(16)?,
            })
        };
        scalars().is_some_and(|s| s.check().is_ok())
    }
}

/// A row's integer columns as stored, before their ranges are checked.
struct Scalars {
    id: i64,
    created_at: i64,
    state: i64,
    attempts: i64,
    unanswered: i64,
    interrupted: i64,
    last_attempt_at: Option<i64>,
    next_attempt_at: Option<i64>,
    lease_token: Option<i64>,
    lease_until: Option<i64>,
    not_before: Option<i64>,
}

/// [`Scalars`] in range, as a [`Record`] holds them.
struct Checked {
    id: RecordId,
    created_at: Millis,
    state: State,
    attempts: u32,
    unanswered: u32,
    interrupted: u32,
    last_attempt_at: Option<Millis>,
    next_attempt_at: Option<Millis>,
    lease: Option<Lease>,
    not_before: Option<Millis>,
}

impl Scalars {
    /// The range rules of a row: a known state code, times and ids not negative, counts
    /// that fit a `u32`; a lease needs both its token and its deadline.
    fn check(self) -> Result<Checked> {
        let state = u8::try_from(self.state)
            .ok()
            .and_then(State::from_code)
            .ok_or_else(|| corrupt(format!("unknown state code {}", self.state)))?;
        let lease = match (self.lease_token, self.lease_until) {
            (Some(token), Some(until)) => Some(Lease {
                token: token as u64,
                until: read_ms(until, "lease_until")?,
            }),
            _ => None,
        };
        let time = |value: Option<i64>, field| value.map(|t| read_ms(t, field)).transpose();
        Ok(Checked {
            id: RecordId(read_ms(self.id, "id")?),
            created_at: read_ms(self.created_at, "created_at")?,
            state,
            attempts: read_u32(self.attempts, "attempts")?,
            unanswered: read_u32(self.unanswered, "unanswered")?,
            interrupted: read_u32(self.interrupted, "interrupted")?,
            last_attempt_at: time(self.last_attempt_at, "last_attempt_at")?,
            next_attempt_at: time(self.next_attempt_at, "next_attempt_at")?,
            lease,
            not_before: time(self.not_before, "not_before")?,
        })
    }
}

/// The history in column `index`: a blob is decoded (damaged bytes read as an unreadable,
/// empty history), `NULL` is none, and a value of any other type is damaged too: the record
/// itself stays readable either way.
pub(crate) fn history_at(row: &Row<'_>, index: usize) -> rusqlite::Result<History> {
    Ok(match row.get_ref(index)? {
        ValueRef::Null => History::default(),
        ValueRef::Blob(bytes) => History::decode(bytes),
        _ => History::decode(DAMAGED),
    })
}

/// The trace context in column `index`: text is decoded ([`TraceContext::decode`], damaged
/// text reads as none), and `NULL` or a value of any other type is none: the record itself
/// stays readable either way.
pub(crate) fn trace_at(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<TraceContext>> {
    Ok(match row.get_ref(index)? {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(TraceContext::decode),
        _ => None,
    })
}

/// Bytes that are no history: what a history column of the wrong type reads as.
const DAMAGED: &[u8] = &[0];

#[cfg(test)]
mod tests {
    use outbox_core::NewRecord;
    use rusqlite::Connection;

    use super::*;
    use crate::ops::{columns, insert};
    use crate::unreadable::decode;

    /// The values a damaged column may hold: each type SQLite has, in and out of the ranges
    /// a record's fields take, and text that is not UTF-8.
    const DAMAGE: &[&str] = &[
        "NULL",
        "-1",
        "0",
        "5",
        "4294967296",
        "1.5",
        "'text'",
        "CAST(x'c328ff' AS TEXT)",
        "x'00ff'",
    ];

    /// For every column of a row and every kind of damage, the in-place check says what a
    /// full decode says: a row it passes decodes, a row it fails does not.
    #[test]
    fn the_in_place_check_agrees_with_decoding_on_every_damage() {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::schema::migrate(&mut conn, 0).expect("schema");
        let record = NewRecord {
            group: Some("g".into()),
            ..NewRecord::new(b"payload".to_vec()).with_key("k")
        };
        let ids = insert(&conn, vec![record.clone(), record], 1)
            .expect("insert")
            .ids;
        // The second row is in flight with its lease: a lease column's damage is met on a
        // row whose state needs one, as well as on one whose state ignores it.
        let in_flight = ms(ids[1].0);
        let leased = conn
            .execute(
                "UPDATE records SET state = ?1, lease_token = 7, lease_until = 100 WHERE id = ?2",
                [i64::from(outbox_core::State::InFlight.code()), in_flight],
            )
            .expect("lease");
        assert_eq!(leased, 1);
        let sql = concat!("SELECT ", columns!(), " FROM records WHERE id = ?1");
        let sound = conn
            .query_row(sql, [in_flight], |row| {
                Ok(RawRecord::decodes(row) && decode(row)?.is_ok())
            })
            .expect("read");
        assert!(sound, "the in-flight row decodes before any damage");
        let columns: Vec<&str> = columns!().split(", ").map(str::trim).collect();
        let (mut damaged, mut failing) = (0, 0);
        for (id, column) in [ms(ids[0].0), in_flight]
            .into_iter()
            .flat_map(|id| columns.iter().map(move |c| (id, *c)))
            .filter(|&(_, c)| c != "id")
        {
            for value in DAMAGE {
                let tx = conn.transaction().expect("begin");
                let planted = tx.execute(
                    &format!("UPDATE records SET {column} = {value} WHERE id = ?1"),
                    [id],
                );
                if planted.is_ok() {
                    damaged += 1;
                    let (fast, full) = tx
                        .query_row(sql, [id], |row| {
                            Ok((RawRecord::decodes(row), decode(row)?.is_ok()))
                        })
                        .expect("read");
                    assert_eq!(fast, full, "row {id}: {column} = {value}");
                    failing += usize::from(!full);
                }
                // Rolled back: one damage at a time.
                drop(tx);
            }
        }
        // The corpus reaches both answers, many times over.
        assert!(
            damaged > 200 && failing > 100,
            "{damaged} damaged, {failing} fail"
        );
    }
}
