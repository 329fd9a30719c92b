//! Conversions between the record model and PostgreSQL's column types.
//!
//! PostgreSQL has no unsigned integers. Ids and counters always fit in `bigint`. Times are
//! stored as plain `bigint` milliseconds so they stay readable in `psql`; a time past
//! `i64::MAX` ms (some 292 million years out) is stored as `i64::MAX`, which orders the same
//! way against every real clock reading. Lease tokens are opaque, so their 64 bits are stored
//! as they are. A trace context is stored as the text of [`TraceContext::encode`], NULL for
//! none.

use outbox_core::{
    History, Lease, Millis, Record, RecordId, Result, State, Tombstone, TraceContext,
};
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::Row;

use crate::error::{corrupt, pg};

/// Run on every pooled session as it opens: in a database of encoding `SQL_ASCII` the session
/// takes text as stored. The server keeps such a database's text unchecked, so a text column
/// may hold bytes that are not UTF-8, and a session whose client encoding is UTF-8 (the
/// driver's) has every statement that would send one fail (SQLSTATE 22021), a claim meeting the
/// row included: the queue would stop at it. Taken as stored, such a row fails only its own
/// decoding ([`RawText`]) and is set aside like any row that cannot be read. Other
/// databases keep their client encoding: their text is converted to UTF-8 on the way out.
pub(crate) const TEXT_AS_STORED: &str = "SELECT set_config('client_encoding', 'SQL_ASCII', false) \
     WHERE current_setting('server_encoding') = 'SQL_ASCII'";

/// A text column's bytes as the server sent them, not yet checked to be UTF-8 (see
/// [`TEXT_AS_STORED`]).
pub(crate) struct RawText<'a>(pub(crate) &'a [u8]);

impl<'a> FromSql<'a> for RawText<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawText(raw))
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

impl RawText<'_> {
    /// The text, or corruption naming `column` when it is not UTF-8.
    pub(crate) fn utf8(&self, column: &str) -> Result<String> {
        std::str::from_utf8(self.0)
            .map(str::to_owned)
            .map_err(|_| corrupt(format!("{column} is not UTF-8")))
    }

    /// The text, any byte sequence that is not UTF-8 replaced by U+FFFD: for what only tells
    /// (a tombstone's group, key and reason).
    pub(crate) fn lossy(&self) -> String {
        String::from_utf8_lossy(self.0).into_owned()
    }
}

/// The text column `index` of `row`, checked to be UTF-8 (`column` names it in the error).
fn text_column(row: &Row, index: usize, column: &str) -> Result<Option<String>> {
    let raw: Option<RawText<'_>> = row.try_get(index).map_err(pg)?;
    raw.map(|raw| raw.utf8(column)).transpose()
}

/// [`text_column`] for a column that must not be NULL.
fn required_text(row: &Row, index: usize, column: &str) -> Result<String> {
    text_column(row, index, column)?.ok_or_else(|| corrupt(format!("{column} is NULL")))
}

/// The text column `index` of `row`, read with [`RawText::lossy`].
fn lossy_column(row: &Row, index: usize) -> Result<Option<String>> {
    let raw: Option<RawText<'_>> = row.try_get(index).map_err(pg)?;
    Ok(raw.map(|raw| raw.lossy()))
}

/// The record columns every read selects, in the order [`record`] reads them.
pub(crate) const RECORD_COLUMNS: &str = "id, grp, payload, key, created_at, state, attempts, \
     unanswered, interrupted, last_attempt_at, next_attempt_at, last_error, lease_token, \
     lease_until, expected_version, replaces, not_before, history, trace";

/// The tombstone columns, in the order [`tombstone`] reads them.
pub(crate) const TOMBSTONE_COLUMNS: &str = "id, grp, key, reason, discarded_at, attempts";

/// A time, or any count the schema keeps in a `bigint`, as stored: saturating at `i64::MAX`.
pub(crate) fn millis(at: Millis) -> i64 {
    i64::try_from(at).unwrap_or(i64::MAX)
}

/// An id as stored. Ids come from a `bigint` sequence, so a larger one matches no row.
pub(crate) fn id(id: RecordId) -> i64 {
    i64::try_from(id.0).unwrap_or(i64::MAX)
}

/// A lease token as stored: the same 64 bits.
pub(crate) fn token(token: u64) -> i64 {
    i64::from_ne_bytes(token.to_ne_bytes())
}

/// The distinct lease tokens of `leases`, as stored, in order: the lease rows a batch may end.
pub(crate) fn tokens(leases: impl IntoIterator<Item = u64>) -> Vec<i64> {
    let mut tokens: Vec<i64> = leases.into_iter().map(token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    tokens
}

/// A lease token as read back.
pub(crate) fn untoken(stored: i64) -> u64 {
    u64::from_ne_bytes(stored.to_ne_bytes())
}

/// Free text as stored (a failure's message, a discard or halt reason): PostgreSQL text cannot
/// hold a NUL character, so one is stored as U+FFFD instead of failing the whole write.
pub(crate) fn text(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// A state as stored: its stable code.
pub(crate) fn state(state: State) -> i16 {
    i16::from(state.code())
}

/// The state of a row whose state code is `code` and which holds a lease token or not
/// (`leased`).
///
/// A claim writes only the lease (schema version 7): the row keeps its code, pending or
/// retrying, and is in flight while it holds a token, so the claim changes no indexed column
/// and its row version stays heap-only. A row in state 2 is one set aside as unreadable: it
/// holds no token (the schema refuses one, see `migrations`), and reads as in flight without
/// a lease, which does not decode.
pub(crate) fn stored_state(code: i16, leased: bool) -> Result<State> {
    let state = unstate(code)?;
    Ok(match state {
        State::Pending | State::Retrying if leased => State::InFlight,
        other => other,
    })
}

fn unstate(code: i16) -> Result<State> {
    u8::try_from(code)
        .ok()
        .and_then(State::from_code)
        .ok_or_else(|| corrupt(format!("unknown state code {code}")))
}

/// An id as read back.
pub(crate) fn record_id(id: i64) -> Result<RecordId> {
    unsigned(id, "id").map(RecordId)
}

/// A stored `bigint` that must not be negative (an id, a time, a counter).
pub(crate) fn unsigned(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(format!("negative {what}: {value}")))
}

fn counter(value: i64, what: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| corrupt(format!("{what} out of range: {value}")))
}

/// A history as stored: its encoded bytes, or NULL for no attempts.
pub(crate) fn history(history: &History) -> Option<Vec<u8>> {
    let bytes = history.encode();
    (!bytes.is_empty()).then_some(bytes)
}

/// A trace context as stored: its encoded text, or NULL for none.
pub(crate) fn trace(trace: Option<&TraceContext>) -> Option<String> {
    trace.map(TraceContext::encode)
}

/// A counter as stored.
pub(crate) fn count(value: u32) -> i64 {
    i64::from(value)
}

/// Reads a record from a row selected with [`RECORD_COLUMNS`].
pub(crate) fn record(row: &Row) -> Result<Record> {
    RawRecord::from_row(row)?.into_record()
}

/// A record's columns as the server returns them, in [`RECORD_COLUMNS`] order, before any
/// check: each driver reads its rows into this, and [`RawRecord::into_record`] is the one
/// conversion into the model, whichever driver ran the statement.
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub(crate) id: i64,
    pub(crate) grp: Option<String>,
    pub(crate) payload: Vec<u8>,
    pub(crate) key: String,
    pub(crate) created_at: i64,
    pub(crate) state: i16,
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
    pub(crate) history: Option<Vec<u8>>,
    pub(crate) trace: Option<String>,
}

impl RawRecord {
    /// The columns of a tokio-postgres row.
    pub(crate) fn from_row(row: &Row) -> Result<Self> {
        Ok(RawRecord {
            id: row.try_get(0).map_err(pg)?,
            grp: text_column(row, 1, "grp")?,
            payload: row.try_get(2).map_err(pg)?,
            key: required_text(row, 3, "key")?,
            created_at: row.try_get(4).map_err(pg)?,
            state: row.try_get(5).map_err(pg)?,
            attempts: row.try_get(6).map_err(pg)?,
            unanswered: row.try_get(7).map_err(pg)?,
            interrupted: row.try_get(8).map_err(pg)?,
            last_attempt_at: row.try_get(9).map_err(pg)?,
            next_attempt_at: row.try_get(10).map_err(pg)?,
            last_error: text_column(row, 11, "last_error")?,
            lease_token: row.try_get(12).map_err(pg)?,
            lease_until: row.try_get(13).map_err(pg)?,
            expected_version: text_column(row, 14, "expected_version")?,
            replaces: text_column(row, 15, "replaces")?,
            not_before: row.try_get(16).map_err(pg)?,
            history: row.try_get(17).map_err(pg)?,
            // Forgiven, as damaged text is (`into_record`): read as no context.
            trace: row
                .try_get::<_, Option<RawText<'_>>>(18)
                .map_err(pg)?
                .and_then(|raw| raw.utf8("trace").ok()),
        })
    }

    /// The record, with every value checked against its field's range.
    pub(crate) fn into_record(self) -> Result<Record> {
        let state = stored_state(self.state, self.lease_token.is_some())?;
        let time = |value: Option<i64>, what: &str| value.map(|v| unsigned(v, what)).transpose();
        // Every other field first, so a row a claim set aside (in flight without a lease, see
        // `unreadable`) still names what made it unreadable in the first place.
        let mut record = Record {
            id: record_id(self.id)?,
            group: self.grp,
            payload: self.payload,
            key: self.key,
            created_at: unsigned(self.created_at, "created_at")?,
            state,
            attempts: counter(self.attempts, "attempts")?,
            unanswered: counter(self.unanswered, "unanswered")?,
            interrupted: counter(self.interrupted, "interrupted")?,
            last_attempt_at: time(self.last_attempt_at, "last_attempt_at")?,
            next_attempt_at: time(self.next_attempt_at, "next_attempt_at")?,
            last_error: self.last_error,
            lease: None,
            expected_version: self.expected_version,
            replaces: self.replaces,
            not_before: time(self.not_before, "not_before")?,
            // Never an error: damaged bytes read as an empty history that says so.
            history: self
                .history
                .as_deref()
                .map(History::decode)
                .unwrap_or_default(),
            // Never an error either: damaged text reads as no context (the delivery is only
            // not linked).
            trace: self.trace.as_deref().and_then(TraceContext::decode),
        };
        record.lease = match (state, self.lease_token, self.lease_until) {
            (State::InFlight, Some(token), Some(until)) => Some(Lease {
                token: untoken(token),
                until: unsigned(until, "lease expiry")?,
            }),
            (State::InFlight, _, _) => return Err(corrupt("an in-flight record has no lease")),
            _ => None,
        };
        Ok(record)
    }
}

/// Reads a tombstone from a row selected with [`TOMBSTONE_COLUMNS`]. Its group, key and reason
/// only tell, so text that is not UTF-8 (a discarded row's, see [`TEXT_AS_STORED`]) is read
/// with [`RawText::lossy`] rather than failing every listing of tombstones.
pub(crate) fn tombstone(row: &Row) -> Result<Tombstone> {
    Ok(Tombstone {
        id: record_id(row.try_get(0).map_err(pg)?)?,
        group: lossy_column(row, 1)?,
        key: lossy_column(row, 2)?.ok_or_else(|| corrupt("a tombstone's key is NULL"))?,
        reason: lossy_column(row, 3)?.ok_or_else(|| corrupt("a tombstone's reason is NULL"))?,
        discarded_at: unsigned(row.try_get(4).map_err(pg)?, "discarded_at")?,
        attempts: counter(row.try_get(5).map_err(pg)?, "attempts")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_or_retrying_row_with_a_lease_token_is_in_flight() {
        let pending = state(State::Pending);
        let retrying = state(State::Retrying);
        let in_flight = state(State::InFlight);
        assert_eq!(stored_state(pending, false).unwrap(), State::Pending);
        assert_eq!(stored_state(retrying, false).unwrap(), State::Retrying);
        assert_eq!(stored_state(pending, true).unwrap(), State::InFlight);
        assert_eq!(stored_state(retrying, true).unwrap(), State::InFlight);
        // Set aside: in flight, which then fails for want of a lease (and with one, which
        // the schema refuses, still in flight).
        assert_eq!(stored_state(in_flight, true).unwrap(), State::InFlight);
        assert_eq!(stored_state(in_flight, false).unwrap(), State::InFlight);
        // A stray token does not move a row that needs attention or was rejected.
        for kept in [State::NeedsAttention, State::Rejected] {
            assert_eq!(stored_state(state(kept), true).unwrap(), kept);
        }
        assert!(stored_state(9, true).is_err());
    }

    #[test]
    fn a_batchs_tokens_are_listed_once_each_in_order() {
        assert_eq!(tokens([9, 7, 9, 8, 7]), vec![7, 8, 9]);
        assert_eq!(tokens([u64::MAX, 1]), vec![token(u64::MAX), 1]);
        assert!(tokens([]).is_empty());
    }

    #[test]
    fn tokens_keep_all_64_bits() {
        for t in [0, 1, u64::MAX, 1 << 63, 0x1234_5678_9abc_def0] {
            assert_eq!(untoken(token(t)), t);
        }
    }

    #[test]
    fn a_nul_in_free_text_is_replaced_not_refused() {
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
        assert_eq!(text("plain"), "plain");
    }

    #[test]
    fn an_empty_history_is_stored_as_null_and_others_round_trip() {
        assert_eq!(history(&History::default()), None);
        let mut kept = History::default();
        kept.push(outbox_core::Attempt::new(
            5,
            outbox_core::AttemptClass::Later,
            "HTTP 503",
        ));
        let stored = history(&kept).expect("bytes for one attempt");
        assert_eq!(History::decode(&stored), kept);
    }

    #[test]
    fn a_trace_context_round_trips_and_damaged_text_reads_as_none() {
        assert_eq!(trace(None), None);
        let cx = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("congo=t61rcWkgMzE".into()),
        )
        .expect("a valid context");
        let stored = trace(Some(&cx)).expect("text for a context");
        assert_eq!(TraceContext::decode(&stored), Some(cx));
        assert_eq!(TraceContext::decode("garbage"), None);
    }

    #[test]
    fn far_times_saturate_and_keep_their_order() {
        assert_eq!(millis(5), 5);
        assert_eq!(millis(u64::MAX), i64::MAX);
        assert!(millis(u64::MAX) >= millis(1_700_000_000_000));
    }

    #[test]
    fn states_round_trip_and_bad_codes_are_corruption() {
        for s in State::ALL {
            assert_eq!(unstate(state(s)).ok(), Some(s));
        }
        assert!(matches!(
            unstate(77),
            Err(outbox_core::Error::Corrupted { .. })
        ));
        assert!(unsigned(-1, "id").is_err());
        assert!(counter(i64::from(u32::MAX) + 1, "attempts").is_err());
    }
}
