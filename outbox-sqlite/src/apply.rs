//! Transitions as set-based writes: a batch is read in one query, worked out in memory in
//! order (each guard checked with [`Guard::admits`](outbox_core::Guard::admits) against the
//! record as the earlier transitions of the batch left it), and its net effect written with one
//! statement per kind of write (the rows to delete, the delivered counter, the group heads to
//! promote), whatever the batch's size, and one prepared statement run for each row to
//! rewrite and each tombstone. The batch's values travel as one JSON array, read with
//! `json_each`. No statement keeps a statement journal (`UPDATE OR FAIL`, no `RETURNING` on a
//! `DELETE`, rows rewritten and tombstones written one by one: see the writer's docs,
//! `worker`).

use std::collections::{BTreeSet, HashMap};

use outbox_core::{
    Applied, Change, Claim, Record, RecordId, Result, Round, State, Tombstone, Transition,
};
use rusqlite::Connection;

use crate::counters::{mark, Tally};
use crate::error::db;
use crate::json::{json_ids, json_texts};
use crate::ops::{claim_counted, ms, RawRecord, COLUMN_COUNT};

mod leased;

/// Sets `claimable` on the rows whose ids are in the JSON array `?1` and on the heads of the
/// groups in the JSON array `?2`, from each row's state, deadline and place in its group.
pub(crate) const REFRESH_SQL: &str = "UPDATE OR FAIL records SET claimable = (
        state IN (0, 1) AND next_attempt_at IS NOT NULL AND (
            grp IS NULL OR (member = 1 AND id = (
                SELECT h.id FROM records AS h
                WHERE h.grp = records.grp AND h.member = 1
                ORDER BY h.id LIMIT 1)))
    ) WHERE id IN (
        SELECT value FROM json_each(?1)
        UNION
        SELECT (SELECT h.id FROM records AS h WHERE h.grp = g.value AND h.member = 1
                ORDER BY h.id LIMIT 1)
        FROM json_each(?2) AS g)";

/// The rows a batch of transitions names (the JSON array `?1`), with their group membership
/// and their payload's length. The payload is read as an empty blob: no transition reads or
/// writes it (a tombstone keeps no payload), and reading it would copy every delivered
/// record's payload once more; its length (which SQLite keeps in the row's header) is what a
/// delivery or a discard takes off the payload bytes counter.
const LOAD_SQL: &str = "SELECT id, grp, x'', key, created_at, state, attempts, unanswered, \
     interrupted, last_attempt_at, next_attempt_at, last_error, lease_token, lease_until, \
     expected_version, replaces, not_before, history, trace, member, length(payload) \
     FROM records WHERE id IN (SELECT value FROM json_each(?1))";

/// A row as a transition sees it: the record, whether it still holds its group's order, and
/// its payload's length in bytes (the record's payload itself is not read).
struct Entry {
    record: Record,
    member: bool,
    bytes: i64,
}

/// The net effect of a batch of transitions, worked out on the rows in memory and then
/// written with one statement per kind of write.
#[derive(Default)]
struct Batch {
    /// Every row the batch looked at, as it is now: `None` once removed (or never there).
    rows: HashMap<RecordId, Option<Entry>>,
    /// Rows of the file to rewrite.
    changed: BTreeSet<RecordId>,
    /// Rows of the file to delete.
    deleted: BTreeSet<RecordId>,
    /// Groups that lost or gained a member: their heads may have changed.
    groups: BTreeSet<String>,
    /// Groups a requeued record joined again: their former head must stop being claimable.
    rejoined: BTreeSet<String>,
    tombstones: Vec<Tombstone>,
    /// What the transitions do to stats' counters (the delivered count among them).
    tally: Tally,
}

impl Batch {
    /// Reads the rows the transitions name, in one query (without their payloads).
    fn load(conn: &Connection, transitions: &[Transition]) -> Result<Self> {
        let ids = json_ids(transitions.iter().map(|t| ms(t.id.0)));
        let mut stmt = conn.prepare_cached(LOAD_SQL).map_err(db)?;
        let raws = stmt
            .query_map([ids], |row| {
                Ok((
                    RawRecord::from_row(row)?,
                    row.get(COLUMN_COUNT)?,
                    row.get::<_, Option<i64>>(COLUMN_COUNT + 1)?.unwrap_or(0),
                ))
            })
            .map_err(db)?
            .collect::<rusqlite::Result<Vec<(RawRecord, bool, i64)>>>()
            .map_err(db)?;
        let mut batch = Batch {
            rows: HashMap::with_capacity(raws.len()),
            ..Batch::default()
        };
        for (raw, member, bytes) in raws {
            let record = raw.into_record()?;
            let entry = Entry {
                record,
                member,
                bytes,
            };
            batch.rows.insert(entry.record.id, Some(entry));
        }
        Ok(batch)
    }

    /// The row `id` if the guard admits the transition on it.
    fn admitted(&mut self, transition: &Transition) -> Option<&mut Entry> {
        self.rows
            .get_mut(&transition.id)?
            .as_mut()
            .filter(|e| transition.guard.admits(&e.record))
    }

    /// Takes the row out of the file and out of its group's order.
    fn remove(&mut self, id: RecordId) -> Option<Entry> {
        let entry = self.rows.get_mut(&id)?.take()?;
        self.changed.remove(&id);
        self.deleted.insert(id);
        if entry.member {
            if let Some(group) = &entry.record.group {
                self.groups.insert(group.clone());
            }
        }
        Some(entry)
    }

    /// Works out one transition: the record's id, or `None` when it is skipped.
    fn step(&mut self, conn: &Connection, transition: Transition) -> Result<Option<RecordId>> {
        let id = transition.id;
        let Some(entry) = self.admitted(&transition) else {
            return Ok(None);
        };
        match transition.change {
            Change::Delivered => {
                if let Some(gone) = self.remove(id) {
                    self.tally.leave_mark(&mark(&gone.record));
                    self.tally.bytes(-gone.bytes);
                }
                self.tally.delivered(1);
            }
            Change::Discard {
                reason,
                at,
                attempts,
            } => {
                if let Some(entry) = self.remove(id) {
                    self.tally.leave_mark(&mark(&entry.record));
                    self.tally.bytes(-entry.bytes);
                    self.tally.buried(1);
                    let tombstone = Tombstone::of(entry.record, reason, at, attempts);
                    self.tombstones.push(tombstone);
                }
            }
            Change::Requeue { at } => {
                // Back in its own place, unless its group has a record in flight: two of a
                // group must never be in flight.
                let busy = match &entry.record.group {
                    Some(group) if entry.record.state == State::Rejected => conn
                        .prepare_cached(
                            "SELECT EXISTS (SELECT 1 FROM records WHERE grp = ?1 AND state = 2)",
                        )
                        .map_err(db)?
                        .query_row([group], |row| row.get(0))
                        .map_err(db)?,
                    _ => false,
                };
                if !outbox_core::machine::admits_requeue(&entry.record, busy) {
                    return Ok(None);
                }
                let before = mark(&entry.record);
                entry.record.requeue(at);
                let after = mark(&entry.record);
                entry.member = entry.record.group.is_some();
                let group = entry.record.group.clone();
                self.groups.extend(group.clone());
                self.rejoined.extend(group);
                self.changed.insert(id);
                self.tally.leave_mark(&before);
                self.tally.enter_mark(&after);
            }
            Change::Update(progress) => {
                if !outbox_core::machine::admits_update(&entry.record, &progress) {
                    return Ok(None);
                }
                let before = mark(&entry.record);
                entry.record.set_progress(progress);
                let after = mark(&entry.record);
                // A rejected record stops holding its group's order; nothing puts it back.
                let left = entry.member && !entry.record.state.holds_group();
                if left {
                    entry.member = false;
                }
                let group = left.then(|| entry.record.group.clone()).flatten();
                self.groups.extend(group);
                self.changed.insert(id);
                self.tally.leave_mark(&before);
                self.tally.enter_mark(&after);
            }
        }
        Ok(Some(id))
    }

    fn entries<'a>(&'a self, ids: &'a BTreeSet<RecordId>) -> impl Iterator<Item = &'a Entry> {
        ids.iter()
            .filter_map(|id| self.rows.get(id).and_then(Option::as_ref))
    }

    /// Writes the batch's net effect on the rows, and hands back its change to the counters.
    fn write(self, conn: &Connection) -> Result<Tally> {
        if !self.deleted.is_empty() {
            conn.prepare_cached(
                "DELETE FROM records WHERE id IN (SELECT value FROM json_each(?1))",
            )
            .map_err(db)?
            .execute([json_ids(self.deleted.iter().map(|id| ms(id.0)))])
            .map_err(db)?;
        }
        if !self.changed.is_empty() {
            rewrite(conn, self.entries(&self.changed))?;
        }
        if !self.tombstones.is_empty() {
            bury(conn, &self.tombstones)?;
        }
        let touched: Vec<i64> = self.changed.iter().map(|id| ms(id.0)).collect();
        refresh(conn, touched, &self.groups)?;
        if !self.rejoined.is_empty() {
            conn.prepare_cached(
                "UPDATE OR FAIL records SET claimable = (
                    state IN (0, 1) AND next_attempt_at IS NOT NULL AND member = 1 AND id = (
                        SELECT h.id FROM records AS h
                        WHERE h.grp = records.grp AND h.member = 1
                        ORDER BY h.id LIMIT 1))
                 WHERE grp IN (SELECT value FROM json_each(?1))",
            )
            .map_err(db)?
            .execute([json_texts(self.rejoined.iter().map(String::as_str))])
            .map_err(db)?;
        }
        Ok(self.tally)
    }
}

/// Sets `claimable` on the rows `touched` and on the heads of `groups` ([`REFRESH_SQL`]).
fn refresh(conn: &Connection, touched: Vec<i64>, groups: &BTreeSet<String>) -> Result<()> {
    if touched.is_empty() && groups.is_empty() {
        return Ok(());
    }
    conn.prepare_cached(REFRESH_SQL)
        .map_err(db)?
        .execute([
            json_ids(touched),
            json_texts(groups.iter().map(String::as_str)),
        ])
        .map_err(db)?;
    Ok(())
}

/// Rewrites the progress of one row; [`rewrite`] runs it for each row of a batch.
const REWRITE_SQL: &str = "UPDATE records SET state = ?2, attempts = ?3, unanswered = ?4, \
     interrupted = ?5, last_attempt_at = ?6, next_attempt_at = ?7, last_error = ?8, \
     member = ?9, history = ?10, lease_token = NULL, lease_until = NULL WHERE id = ?1";

/// Rewrites the progress of rows, one prepared statement run for each. Not one `UPDATE …
/// FROM` over the batch: SQLite keeps a statement journal for that form, written to a
/// temporary file once the rows pass 64 KiB (see the writer's docs, `worker`); an update of
/// one row by its key keeps none.
fn rewrite<'a>(conn: &Connection, entries: impl Iterator<Item = &'a Entry>) -> Result<()> {
    let mut stmt = conn.prepare_cached(REWRITE_SQL).map_err(db)?;
    for entry in entries {
        let r = &entry.record;
        // The history's encoding, `NULL` for none.
        let history = (!r.history.is_empty()).then(|| r.history.encode());
        stmt.execute(rusqlite::params![
            ms(r.id.0),
            r.state.code(),
            r.attempts,
            r.unanswered,
            r.interrupted,
            r.last_attempt_at.map(ms),
            r.next_attempt_at.map(ms),
            r.last_error,
            entry.member,
            history,
        ])
        .map_err(db)?;
    }
    Ok(())
}

/// Writes one tombstone; [`bury`] runs it for each.
const BURY_SQL: &str = "INSERT INTO tombstones (id, grp, key, reason, discarded_at, attempts) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Writes tombstones, one prepared statement run for each. Not one `INSERT … SELECT` over the
/// batch: SQLite keeps a statement journal for an insert of many rows that sets the row's key
/// (in a transaction that has just freed pages, a copy of each reused page), written to a
/// temporary file once past 64 KiB (see the writer's docs, `worker`).
fn bury(conn: &Connection, tombstones: &[Tombstone]) -> Result<()> {
    let mut stmt = conn.prepare_cached(BURY_SQL).map_err(db)?;
    for t in tombstones {
        stmt.execute(rusqlite::params![
            ms(t.id.0),
            t.group,
            t.key,
            t.reason,
            ms(t.discarded_at),
            t.attempts,
        ])
        .map_err(db)?;
    }
    Ok(())
}

/// Applies each transition whose guard holds, in order, as one set of writes.
pub(crate) fn apply(conn: &Connection, transitions: Vec<Transition>) -> Result<Applied> {
    let mut tally = Tally::default();
    let applied = apply_counted(conn, transitions, &mut tally)?;
    tally.write(conn)?;
    Ok(applied)
}

/// [`apply`], leaving its change to the counters in `tally` for the caller to write.
fn apply_counted(
    conn: &Connection,
    transitions: Vec<Transition>,
    tally: &mut Tally,
) -> Result<Applied> {
    let mut applied = Applied::default();
    if transitions.is_empty() {
        return Ok(applied);
    }
    if let Some(token) = leased::delivered_under_one_lease(&transitions) {
        return leased::deliver(conn, &transitions, token, tally);
    }
    let mut batch = Batch::load(conn, &transitions)?;
    for transition in transitions {
        let id = transition.id;
        if batch.step(conn, transition)?.is_none() {
            applied.skipped.push(id);
        }
    }
    tally.merge(batch.write(conn)?);
    Ok(applied)
}

/// A round: the outcomes, then the claim, in the caller's one transaction; their changes to
/// the counters are written once.
pub(crate) fn round(
    conn: &Connection,
    outcomes: Vec<Transition>,
    next: Option<Claim>,
) -> Result<Round> {
    let mut tally = Tally::default();
    let applied = apply_counted(conn, outcomes, &mut tally)?;
    let claimed = match next {
        Some(next) => claim_counted(conn, next, &mut tally)?,
        None => Vec::new(),
    };
    tally.write(conn)?;
    Ok(Round { applied, claimed })
}

#[cfg(test)]
mod tests {
    use outbox_core::{Guard, NewRecord, Progress};

    use super::*;
    use crate::ops::{get, insert, tombstones};

    #[test]
    fn the_load_reads_the_record_columns_in_order_but_the_payload() {
        let expected = format!(
            "SELECT {}, member, length(payload) FROM",
            crate::ops::columns!().replace("payload", "x''")
        );
        let load = LOAD_SQL.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(load.starts_with(&expected), "{load}");
    }

    #[test]
    fn text_travels_through_json_byte_for_byte() {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::schema::migrate(&mut conn, 0).expect("schema");
        let ids = insert(&conn, vec![NewRecord::new(b"x".to_vec())], 1).expect("insert");
        let error = "nul \0 \"quote\" \\ \u{1} é ✓".to_owned();
        let progress = Progress {
            state: State::Retrying,
            attempts: 1,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: Some(2),
            next_attempt_at: Some(3),
            last_error: Some(error.clone()),
            history: {
                let mut history = outbox_core::History::default();
                history.push(outbox_core::Attempt::new(
                    2,
                    outbox_core::AttemptClass::Later,
                    &error,
                ));
                history
            },
        };
        let history = progress.history.clone();
        let update = Transition {
            id: ids[0],
            guard: Guard::Idle,
            change: Change::Update(progress),
        };
        apply(&conn, vec![update]).expect("update");
        let record = get(&conn, ids[0]).expect("get").expect("record");
        assert_eq!(record.last_error, Some(error.clone()));
        assert_eq!(record.history, history, "the history's bytes kept exactly");

        let discard = Transition {
            id: ids[0],
            guard: Guard::Idle,
            change: Change::Discard {
                reason: error.clone(),
                at: 4,
                attempts: 1,
            },
        };
        apply(&conn, vec![discard]).expect("discard");
        let tombstone = &tombstones(&conn, None, 1).expect("tombstones")[0];
        assert_eq!(tombstone.reason, error);
    }
}
