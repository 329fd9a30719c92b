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

    pub(crate) fn into_record(self) -> Result<Record> {
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
        Ok(Record {
            id: RecordId(read_ms(self.id, "id")?),
            group: self.group,
            payload: self.payload,
            key: self.key,
            created_at: read_ms(self.created_at, "created_at")?,
            state,
            attempts: read_u32(self.attempts, "attempts")?,
            unanswered: read_u32(self.unanswered, "unanswered")?,
            interrupted: read_u32(self.interrupted, "interrupted")?,
            last_attempt_at: self
                .last_attempt_at
                .map(|t| read_ms(t, "last_attempt_at"))
                .transpose()?,
            next_attempt_at: self
                .next_attempt_at
                .map(|t| read_ms(t, "next_attempt_at"))
                .transpose()?,
            last_error: self.last_error,
            lease,
            expected_version: self.expected_version,
            replaces: self.replaces,
            not_before: self
                .not_before
                .map(|t| read_ms(t, "not_before"))
                .transpose()?,
            history: self.history,
            trace: self.trace,
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
