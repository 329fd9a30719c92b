//! [`Store::common_errors`](outbox_core::Store::common_errors) on PostgreSQL: one grouped
//! query over the failed records' `last_error` column, which never reads a payload.

use std::sync::Arc;

use outbox_core::{ErrorCount, Result};

use crate::codec::{state, unsigned};
use crate::error::pg;
use crate::ops::Core;
use crate::sql::Exec;

/// The statement for the schema `schema` (a checked plain identifier). Ties are ordered by
/// the text's bytes (`COLLATE "C"`), as every backend orders them, whatever the database's
/// collation.
pub(crate) fn statement(schema: &str) -> String {
    format!(
        "SELECT last_error, count(*) FROM \"{schema}\".records \
         WHERE state = ANY($1::smallint[]) AND last_error IS NOT NULL \
         GROUP BY last_error ORDER BY count(*) DESC, last_error COLLATE \"C\" LIMIT $2"
    )
}

impl Core {
    pub(crate) async fn common_errors(self: Arc<Self>, limit: usize) -> Result<Vec<ErrorCount>> {
        let client = self.client().await?;
        let states: Vec<i16> = ErrorCount::STATES.iter().map(|&s| state(s)).collect();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = Exec::Pooled(&client)
            .rows(&statement(&self.config.schema), &[&states, &limit])
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                let count: i64 = row.try_get(1).map_err(pg)?;
                Ok(ErrorCount {
                    error: row.try_get(0).map_err(pg)?,
                    count: unsigned(count, "count")?,
                })
            })
            .collect()
    }
}
