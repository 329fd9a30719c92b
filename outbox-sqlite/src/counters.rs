//! The counters stats read (schema version 5), kept by the store's own writes.
//!
//! `meta` holds, under `state N` (`N` a state's code), the number of records in that state,
//! a record set aside as unreadable excluded (in flight without a lease deadline, see
//! [`unreadable`](crate::unreadable)); and under `tombstones` the number of tombstones.
//! `error_counts` holds the number of records carrying each error among those retrying,
//! needing attention or rejected (the states of
//! [`ErrorCount::STATES`](outbox_core::ErrorCount::STATES)); an error whose count reaches zero
//! loses its row. Under `payload_bytes` (schema version 7) it holds the payload bytes of the
//! records the state counters count (rejected ones included, a row set aside not): what stats
//! report and a size cap ([`Cap`](outbox_core::Cap)) reads.
//!
//! Every write that moves a record between states works out its net change as a [`Tally`]
//! and writes it with one statement for the states and one per error that changed: the
//! enqueue (whose statements every driver runs, so a caller's own transaction keeps them
//! too; it adds the payloads it writes, less those a coalescing write replaced), the claim, a
//! batch of transitions (a delivery or a discard removes its record's payload bytes), the
//! set-aside and discard of an unreadable row and the prune. The state counters share `meta`'s page with the id counter and the
//! delivered count, which an enqueue and a delivery write anyway, so they add no page to a
//! commit. Triggers would keep them as well, but SQLite runs a trigger as a sub-program with
//! its own allocations for every row, which cost a drained record about five microseconds
//! here; the batch's own tally costs one statement per write.
//!
//! A row changed outside the store (a damaged state code, say) stays counted as it was
//! written: the counters follow the store's writes, not the bytes of the file.

use std::collections::BTreeMap;

use outbox_core::{Record, Result, State};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql};

use crate::error::db;

/// Adds `?2` to the counter `?1` of `meta`: one statement per counter that changed, which
/// reads one row by its key (a join with a JSON array of changes cost several times more).
const COUNTER_SQL: &str = "UPDATE meta SET value = value + ?2 WHERE name = ?1";

/// The names of the state counters in `meta`, by state code.
const STATE_NAMES: [&str; 5] = ["state 0", "state 1", "state 2", "state 3", "state 4"];

/// The name of the payload bytes counter in `meta`.
pub(crate) const PAYLOAD_BYTES: &str = "payload_bytes";

/// Adds `?2` to the count of the error `?1`.
const ERROR_SQL: &str = "INSERT INTO error_counts (error, n) VALUES (?1, ?2) \
     ON CONFLICT (error) DO UPDATE SET n = n + excluded.n";

/// Removes the error `?1` once no record carries it.
const ERROR_GONE_SQL: &str = "DELETE FROM error_counts WHERE error = ?1 AND n <= 0";

/// Whether a record in the state of code `state` counts under its error.
fn failed(state: i64) -> bool {
    matches!(state, 1 | 3 | 4)
}

/// The counter bucket of a decoded record: its state's code, or none for a record set aside.
pub(crate) fn bucket(record: &Record) -> Option<i64> {
    let aside = record.state == State::InFlight && record.lease.is_none();
    (!aside).then(|| i64::from(record.state.code()))
}

/// What a record counts under: its bucket (see [`bucket`]) and, in a failed state, its error.
pub(crate) type Mark = (Option<i64>, Option<Vec<u8>>);

/// The [`Mark`] of a decoded record; the error is copied only for a failed record.
pub(crate) fn mark(record: &Record) -> Mark {
    let state = bucket(record);
    let error = match (state, &record.last_error) {
        (Some(code), Some(error)) if failed(code) => Some(error.as_bytes().to_vec()),
        _ => None,
    };
    (state, error)
}

/// A text bound byte for byte: an error read from a damaged row may not be UTF-8, and must
/// still meet its own row in `error_counts`.
struct TextBytes<'a>(&'a [u8]);

impl ToSql for TextBytes<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self.0)))
    }
}

/// The net change a write makes to the counters.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    states: [i64; 5],
    tombstones: i64,
    delivered: i64,
    bytes: i64,
    errors: BTreeMap<Vec<u8>, i64>,
}

impl Tally {
    /// A record in the bucket `state` (see [`bucket`]) carrying `error` leaves its counters.
    pub(crate) fn leave(&mut self, state: Option<i64>, error: Option<&[u8]>) {
        self.add(state, error, -1);
    }

    /// A record enters the counters of the bucket `state` with `error`.
    pub(crate) fn enter(&mut self, state: Option<i64>, error: Option<&[u8]>) {
        self.add(state, error, 1);
    }

    /// A record counted under `mark` leaves its counters.
    pub(crate) fn leave_mark(&mut self, mark: &Mark) {
        self.leave(mark.0, mark.1.as_deref());
    }

    /// A record enters the counters of `mark`.
    pub(crate) fn enter_mark(&mut self, mark: &Mark) {
        self.enter(mark.0, mark.1.as_deref());
    }

    /// `n` payload bytes were written (negative: removed with their records).
    pub(crate) fn bytes(&mut self, n: i64) {
        self.bytes += n;
    }

    /// `n` tombstones were written (negative: pruned).
    pub(crate) fn buried(&mut self, n: i64) {
        self.tombstones += n;
    }

    fn add(&mut self, state: Option<i64>, error: Option<&[u8]>, by: i64) {
        let Some(state) = state else {
            return;
        };
        if let Some(slot) = usize::try_from(state)
            .ok()
            .and_then(|s| self.states.get_mut(s))
        {
            *slot += by;
        }
        if let (true, Some(error)) = (failed(state), error) {
            *self.errors.entry(error.to_vec()).or_default() += by;
        }
    }

    /// Adds another write's change to this one.
    pub(crate) fn merge(&mut self, other: Tally) {
        for (mine, theirs) in self.states.iter_mut().zip(other.states) {
            *mine += theirs;
        }
        self.tombstones += other.tombstones;
        self.delivered += other.delivered;
        self.bytes += other.bytes;
        for (error, n) in other.errors {
            *self.errors.entry(error).or_default() += n;
        }
    }

    /// Records delivered (and so deleted) by the write.
    pub(crate) fn delivered(&mut self, n: i64) {
        self.delivered += n;
    }

    /// The counters of `meta` that changed, by name, with their change.
    fn named(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        STATE_NAMES
            .iter()
            .copied()
            .zip(self.states)
            .chain([
                ("tombstones", self.tombstones),
                ("delivered", self.delivered),
                (PAYLOAD_BYTES, self.bytes),
            ])
            .filter(|&(_, n)| n != 0)
    }

    /// Writes the change: one statement per counter, one or two per error that changed.
    pub(crate) fn write(&self, conn: &Connection) -> Result<()> {
        for (name, n) in self.named() {
            conn.prepare_cached(COUNTER_SQL)
                .map_err(db)?
                .execute(rusqlite::params![name, n])
                .map_err(db)?;
        }
        for (error, &n) in self.errors.iter().filter(|&(_, &n)| n != 0) {
            conn.prepare_cached(ERROR_SQL)
                .map_err(db)?
                .execute(rusqlite::params![TextBytes(error), n])
                .map_err(db)?;
            if n < 0 {
                conn.prepare_cached(ERROR_GONE_SQL)
                    .map_err(db)?
                    .execute([TextBytes(error)])
                    .map_err(db)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counted_states_are_the_failed_states_of_common_errors() {
        let codes: Vec<i64> = outbox_core::ErrorCount::STATES
            .iter()
            .map(|s| i64::from(s.code()))
            .collect();
        assert!(codes.iter().all(|&c| failed(c)));
        assert_eq!((0..5).filter(|&c| failed(c)).count(), codes.len());
    }

    #[test]
    fn a_tally_writes_only_what_changed() {
        let mut tally = Tally::default();
        assert_eq!(tally.named().count(), 0);
        tally.leave(Some(1), Some(b"503"));
        tally.enter(Some(2), Some(b"503"));
        tally.enter(Some(1), Some(b"503"));
        tally.leave(Some(2), None);
        tally.buried(2);
        tally.bytes(-7);
        let named: Vec<_> = tally.named().collect();
        assert_eq!(named, [("tombstones", 2), ("payload_bytes", -7)]);
        assert_eq!(tally.errors.get(b"503".as_slice()), Some(&0));
    }
}
