//! [`Store::common_errors`](outbox_core::Store::common_errors) on SQLite: one grouped query
//! over the failed records' `last_error` column.
//!
//! Ties are ordered by the text's bytes (SQLite's default `BINARY` collation), as every
//! backend orders them.

use outbox_core::{ErrorCount, Result};
use rusqlite::Connection;

use crate::error::db;
use crate::ops::read_ms;

/// The statement, with the failed states' codes spliced in (small integers, never input).
fn statement() -> String {
    let codes: Vec<String> = ErrorCount::STATES
        .iter()
        .map(|s| s.code().to_string())
        .collect();
    format!(
        "SELECT last_error, count(*) AS n FROM records \
         WHERE state IN ({}) AND last_error IS NOT NULL \
         GROUP BY last_error ORDER BY n DESC, last_error LIMIT ?1",
        codes.join(", ")
    )
}

/// The `limit` most common errors (see the trait).
pub(crate) fn common_errors(conn: &Connection, limit: usize) -> Result<Vec<ErrorCount>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<(String, i64)> = conn
        .prepare_cached(&statement())
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
    fn the_statement_counts_the_failed_states_only() {
        let sql = statement();
        assert!(sql.contains("state IN (1, 3, 4)"), "{sql}");
    }
}
