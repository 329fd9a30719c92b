//! [`Store::common_errors`](outbox_core::Store::common_errors) on SQLite: the first rows of
//! the per-error counters (`error_counts`), so its cost does not grow with the queue.
//!
//! Ties are ordered by the text's bytes (SQLite's default `BINARY` collation), as every
//! backend orders them.

use outbox_core::{ErrorCount, Result};
use rusqlite::Connection;

use crate::error::db;
use crate::ops::read_ms;

/// The most common errors: the first entries of the counters' index, which the store's writes
/// keep for the records in [`ErrorCount::STATES`] (see [`counters`](crate::counters)).
pub(crate) const COMMON_ERRORS_SQL: &str =
    "SELECT error, n FROM error_counts INDEXED BY error_counts_common \
     WHERE n > 0 ORDER BY n DESC, error LIMIT ?1 + 0";

/// The `limit` most common errors (see the trait).
pub(crate) fn common_errors(conn: &Connection, limit: usize) -> Result<Vec<ErrorCount>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<(String, i64)> = conn
        .prepare_cached(COMMON_ERRORS_SQL)
        .map_err(db)?
        .query_map([limit], |row| Ok((row.get(0)?, row.get(1)?)))
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    rows.into_iter()
        .map(|(error, n)| {
            Ok(ErrorCount {
                error,
                count: read_ms(n, "count")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counted_states_are_the_failed_states() {
        // The migration that fills the counters spells the failed states' codes out.
        let codes: Vec<u8> = ErrorCount::STATES.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [1, 3, 4]);
    }
}
