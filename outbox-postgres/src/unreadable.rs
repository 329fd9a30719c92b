//! Rows that cannot be decoded (an unknown state code, a negative counter or time, an
//! in-flight row without a lease): read row by row, so one never fails a call that reads many.
//!
//! A claim that meets such a row *sets it aside*: it is put in state 2 with neither lease
//! token nor lease deadline and `claimable` false, so the due index (`WHERE claimable`) no
//! longer holds it, `next_due` stops reporting it and `expired` never reports it (it holds no
//! lease); stats do not count it. It keeps its place in its group (the group index holds
//! every row that is not rejected), so a group's later records wait until it is discarded.
//! [`list`] finds them in one read of the table on the server;
//! [`discard`] removes one and keeps a tombstone.

use outbox_core::{Millis, Record, RecordId, Result, Unreadable};
use tokio_postgres::Row;

use crate::codec::{self, RawText, RECORD_COLUMNS};
use crate::error::{corrupt, pg};
use crate::exec::Exec;
use crate::ops::Core;

/// What a row decodes to, or why it does not.
pub(crate) fn decode(row: &Row) -> Result<std::result::Result<Record, Unreadable>> {
    let id: i64 = row.try_get(0).map_err(pg)?;
    let id = RecordId(u64::try_from(id).map_err(|_| corrupt(format!("negative id {id}")))?);
    Ok(decode_as(row, id))
}

/// [`decode`] of a row whose id was read already.
fn decode_as(row: &Row, id: RecordId) -> std::result::Result<Record, Unreadable> {
    codec::record(row).map_err(|err| {
        let reason = match err {
            outbox_core::Error::Corrupted { detail, .. } => detail,
            other => other.to_string(),
        };
        Unreadable::new(id, reason)
    })
}

/// Rows read back, decoded one by one.
#[derive(Debug, Default)]
pub(crate) struct Split {
    /// The rows that decode.
    pub(crate) records: Vec<Record>,
    /// The rows that do not, with why.
    pub(crate) unreadable: Vec<Unreadable>,
    /// The stored id of every row that does not decode: what a claim sets aside. A negative
    /// id (a hand edit: ids come from a sequence that starts at 1) is here and nowhere else,
    /// since no [`RecordId`] names it.
    pub(crate) bad_ids: Vec<i64>,
}

/// The rows decoded one by one: one that does not decode never fails the others.
pub(crate) fn split(rows: &[Row]) -> Result<Split> {
    let mut split = Split {
        records: Vec::with_capacity(rows.len()),
        ..Split::default()
    };
    for row in rows {
        let id: i64 = row.try_get(0).map_err(pg)?;
        let Ok(named) = u64::try_from(id) else {
            tracing::warn!(id, "a row with a negative id cannot be named nor delivered");
            split.bad_ids.push(id);
            continue;
        };
        match decode_as(row, RecordId(named)) {
            Ok(record) => split.records.push(record),
            Err(row) => {
                split.bad_ids.push(id);
                split.unreadable.push(row);
            }
        }
    }
    Ok(split)
}

fn table(core: &Core) -> String {
    format!("\"{}\".records", core.config.schema)
}

/// Sets claimed rows that cannot be decoded aside (see the module documentation), on `ex`
/// inside the claim's own transaction or statement sequence.
pub(crate) async fn set_aside(core: &Core, ex: &Exec<'_>, ids: &[i64]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE {} SET state = 2, lease_token = NULL, lease_until = NULL, claimable = false \
         WHERE id = ANY($1::bigint[])",
        table(core)
    );
    ex.run(&sql, &[&ids]).await.map_err(pg)?;
    Ok(())
}

/// True only for a row that [`codec::record`] decodes: its rules as SQL (a known state code, ids,
/// times and counters in range, an in-flight row with its lease, the columns a record needs
/// not NULL). In a database of encoding `SQL_ASCII` the server keeps text as it was given, so
/// a text column may not be UTF-8: there a row with a byte past ASCII in a text column does
/// not pass either, and its decode decides. The rule may refuse a row that decodes (that row
/// is then decoded), never pass one that does not.
const DECODES: &str = "id >= 0 AND created_at >= 0 AND state BETWEEN 0 AND 4 \
     AND attempts BETWEEN 0 AND 4294967295 AND unanswered BETWEEN 0 AND 4294967295 \
     AND interrupted BETWEEN 0 AND 4294967295 \
     AND coalesce(last_attempt_at, 0) >= 0 AND coalesce(next_attempt_at, 0) >= 0 \
     AND coalesce(not_before, 0) >= 0 \
     AND (state <> 2 OR lease_token IS NOT NULL) \
     AND (lease_token IS NULL OR state > 2 OR lease_until >= 0) \
     AND payload IS NOT NULL AND key IS NOT NULL \
     AND (current_setting('server_encoding') <> 'SQL_ASCII' \
          OR concat(grp, key, last_error, expected_version, replaces, trace) ~ '^[\\x01-\\x7f]*$')";

/// The most rows [`list`] reads back at a time.
const PAGE: usize = 256;

/// Every row that cannot be decoded, lowest id first, at most `limit`. The server passes by
/// the rows [`DECODES`] says decode, so only the others travel, a page at a time, to be
/// decoded here: the look costs one read of the table on the server and no more memory
/// here than a page, however large the backlog.
pub(crate) async fn list(core: &Core, limit: usize) -> Result<Vec<Unreadable>> {
    let client = core.client().await?;
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM {} \
         WHERE id > $1 AND ({DECODES}) IS NOT TRUE ORDER BY id LIMIT $2",
        table(core)
    );
    let mut found = Vec::new();
    // Ids are taken from a sequence that starts at 1.
    let mut after: i64 = -1;
    while found.len() < limit {
        let page = (limit - found.len()).min(PAGE);
        let rows = Exec::Pooled(&client)
            .rows(&sql, &[&after, &(page as i64)])
            .await
            .map_err(pg)?;
        let Some(last) = rows.last() else {
            break;
        };
        after = last.try_get(0).map_err(pg)?;
        found.extend(split(&rows)?.unreadable);
        if rows.len() < page {
            break;
        }
    }
    found.truncate(limit);
    Ok(found)
}

/// The row `id` if it is there and cannot be decoded: one read by its key.
pub(crate) async fn one(core: &Core, id: RecordId) -> Result<Option<Unreadable>> {
    let Ok(stored) = i64::try_from(id.0) else {
        return Ok(None);
    };
    let client = core.client().await?;
    let rows = Exec::Pooled(&client)
        .rows(&core.sql.get, &[&stored])
        .await
        .map_err(pg)?;
    Ok(split(&rows)?.unreadable.pop())
}

/// Removes the row `id` if it cannot be decoded, keeping a tombstone with its group and key as
/// stored (copied on the server: in a `SQL_ASCII` database they may not be UTF-8, see
/// `codec::TEXT_AS_STORED`); returns whether it went.
pub(crate) async fn discard(core: &Core, id: RecordId, now: Millis) -> Result<bool> {
    if i64::try_from(id.0).is_err() {
        return Ok(false);
    }
    let r = table(core);
    let mut client = core.client().await?;
    let tx = client.transaction().await.map_err(pg)?;
    let ex = Exec::Transaction(&tx);
    let select = format!("SELECT {RECORD_COLUMNS} FROM {r} WHERE id = $1 FOR UPDATE");
    let id = codec::id(id);
    let rows = ex.rows(&select, &[&id]).await.map_err(pg)?;
    let Some(row) = rows.first() else {
        return Ok(false);
    };
    let Err(unreadable) = decode(row)? else {
        return Ok(false);
    };
    let grouped = row
        .try_get::<_, Option<RawText<'_>>>(1)
        .map_err(pg)?
        .is_some();
    let bury = format!(
        "INSERT INTO \"{}\".tombstones (id, grp, key, reason, discarded_at, attempts) \
         SELECT id, grp, key, $2, $3, 0 FROM {r} WHERE id = $1",
        core.config.schema
    );
    let reason = codec::text(&unreadable.tombstone_reason());
    ex.run(&bury, &[&id, &reason, &codec::millis(now)])
        .await
        .map_err(pg)?;
    ex.run(&format!("DELETE FROM {r} WHERE id = $1"), &[&id])
        .await
        .map_err(pg)?;
    if grouped {
        let members: Vec<i64> = Vec::new();
        ex.run(&core.sql.refresh_group_of_tombstone, &[&id, &members])
            .await
            .map_err(pg)?;
        // The group's later records may now be due: tell every listening runner.
        ex.run(&core.sql.notify, &[&core.config.schema])
            .await
            .map_err(pg)?;
    }
    tx.commit().await.map_err(pg)?;
    Ok(true)
}
