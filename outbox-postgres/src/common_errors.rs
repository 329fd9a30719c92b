//! [`Store::common_errors`](outbox_core::Store::common_errors) on PostgreSQL: the failed
//! records counted per `last_error` in `error_tallies` (kept by the schema's triggers, one row
//! per text and shard), added up over the shards: it reads neither a payload nor a record.

use std::sync::Arc;

use outbox_core::{ErrorCount, Result};

use crate::codec::{unsigned, RawText};
use crate::error::pg;
use crate::exec::Exec;
use crate::ops::Core;

/// The statement for the schema `schema` (a checked plain identifier). Ties are ordered by
/// the text's bytes (`COLLATE "C"`), as every backend orders them, whatever the database's
/// collation. A text whose shards add up to nothing names no failed record.
pub(crate) fn statement(schema: &str) -> String {
    format!(
        "SELECT error, sum(n)::bigint AS count FROM \"{schema}\".error_tallies \
         GROUP BY digest, error HAVING sum(n) > 0 \
         ORDER BY sum(n) DESC, error COLLATE \"C\" LIMIT $1"
    )
}

/// Removes the texts whose shards add up to nothing (what is left when records failed in one
/// session's shard and recovered in another's), so the table keeps to the texts of failed
/// records. Every `tallies` row is locked first, in shard order: a session changing a text's
/// count holds its own shard's `tallies` row, so none does while the texts are read and
/// deleted. The locks are taken without waiting (`NOWAIT`): a busy row means the tidying is
/// left for the next prune, rather than holding some shards while waiting for a session that
/// may itself wait for a lock of a session held here.
pub(crate) fn compaction(schema: &str) -> [String; 2] {
    [
        format!("SELECT shard FROM \"{schema}\".tallies ORDER BY shard FOR UPDATE NOWAIT"),
        format!(
            "DELETE FROM \"{schema}\".error_tallies WHERE digest IN \
             (SELECT digest FROM \"{schema}\".error_tallies GROUP BY digest HAVING sum(n) = 0)"
        ),
    ]
}

impl Core {
    pub(crate) async fn common_errors(self: Arc<Self>, limit: usize) -> Result<Vec<ErrorCount>> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = Exec::Pooled(&client)
            .rows(&statement(&self.config.schema), &[&limit])
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                let count: i64 = row.try_get(1).map_err(pg)?;
                // Read as stored: in a `SQL_ASCII` database an error text may not be UTF-8
                // (`codec::TEXT_AS_STORED`), and one such record must not fail the tally.
                let error: RawText<'_> = row.try_get(0).map_err(pg)?;
                Ok(ErrorCount {
                    error: error.lossy(),
                    count: unsigned(count, "count")?,
                })
            })
            .collect()
    }
}
