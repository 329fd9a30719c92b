//! The enqueue as data: which statements an enqueue runs (their text, their parameters typed),
//! in which order, and how their rows map back into ids and records. Written once; the store's
//! own writer and every driver of a caller's transaction (rusqlite, sqlx, diesel) only carry
//! one statement at a time to SQLite and its rows back, through [`Execute`].
//!
//! A caller's transaction is checked first ([`caller`]): the batch as every enqueue checks it,
//! then the file's header, so a database the store never created, or one of a newer schema, is
//! refused with a typed error before anything is written.
//!
//! Under a size cap ([`Cap`]) every enqueue, on every path, reads what the file holds from the
//! counters in `meta` inside its own transaction (SQLite serializes writers, so the count is
//! exact) and asks [`Cap::admit`] about the batch's net addition before it keeps anything (see
//! [`insert_many`]). Without a cap none of that runs.

use std::collections::HashSet;
use std::future::Future;

use outbox_core::{Cap, Enqueued, Error, Millis, NewRecord, RecordId, Result, TraceContext, Usage};
use rusqlite::Connection;

use crate::error::{corrupt, db};
use crate::ops::{count, ms, read_ms, RawRecord, FOLLOWED_SQL, HEAD_SQL, LATEST_SQL};
use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};

/// Hands out ids from the counter in `meta`: returns the last one taken.
const TAKE_IDS_SQL: &str =
    "UPDATE meta SET value = value + ?1 WHERE name = 'last_id' RETURNING value";

/// A fresh record: due at `?10`, its enqueue time or its later not-before time `?11`, with
/// its trace context `?12` ([`TraceContext::encode`](outbox_core::TraceContext::encode)).
const INSERT_SQL: &str = "INSERT INTO records (id, grp, payload, key, created_at, state, \
     next_attempt_at, member, claimable, expected_version, replaces, not_before, trace) \
     VALUES (?1, ?2, ?3, ?4, ?5, 0, ?10, ?6, ?7, ?8, ?9, ?11, ?12)";

/// Rewrites a record that a later write of its coalescing key replaced; the new write's
/// not-before time may move its deadline (see [`Record::supersede`](outbox_core::Record)).
/// The deadline index is on `next_attempt_at`, so the row moves within it. The trace context
/// becomes the new write's (none when it has none).
const SUPERSEDE_SQL: &str =
    "UPDATE records SET payload = ?2, key = ?3, expected_version = ?4, created_at = ?5, \
     next_attempt_at = ?6, not_before = ?7, trace = ?8 WHERE id = ?1";

/// Counts the fresh records among the pending (`?1`) and the payload bytes the enqueue added
/// (`?2`, less what coalescing writes replaced; see [`counters`](crate::counters)): two rows of
/// `meta`, each found by its key, in one statement.
const COUNT_SQL: &str = "UPDATE meta SET value = value + \
     CASE name WHEN 'state 0' THEN ?1 ELSE ?2 END WHERE name IN ('state 0', 'payload_bytes')";

/// The records a size cap counts: every state's counter (a counter driven below zero by hand
/// counts as zero, as stats read it).
const HELD_RECORDS_SQL: &str = "SELECT coalesce(sum(max(value, 0)), 0) AS value FROM meta \
     WHERE name IN ('state 0', 'state 1', 'state 2', 'state 3', 'state 4')";

/// The payload bytes a size cap counts.
const HELD_BYTES_SQL: &str =
    "SELECT coalesce(sum(max(value, 0)), 0) AS value FROM meta WHERE name = 'payload_bytes'";

/// Around an enqueue under a cap whose net addition is known only once it is written (some of
/// its records may replace waiting ones): undone when the cap refuses it, so none of the batch
/// is kept and the transaction it runs in (a caller's own, say) stays usable.
const CAP_SAVEPOINT_SQL: &str = "SAVEPOINT outbox_cap";
const CAP_RELEASE_SQL: &str = "RELEASE outbox_cap";
const CAP_UNDO_SQL: &str = "ROLLBACK TO outbox_cap";

/// Counts the writes merged by coalescing.
const SUPERSEDED_SQL: &str = "INSERT INTO meta (name, value) VALUES ('superseded', ?1) \
     ON CONFLICT (name) DO UPDATE SET value = value + excluded.value";

/// The file's marks, as rows any driver can read.
const APPLICATION_ID_SQL: &str = "SELECT application_id AS value FROM pragma_application_id";
const USER_VERSION_SQL: &str = "SELECT user_version AS value FROM pragma_user_version";

/// One parameter (`?1` first).
#[derive(Debug)]
pub(crate) enum Param<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'a str),
    OptText(Option<&'a str>),
    Blob(&'a [u8]),
    Bool(bool),
}

/// What a statement returns, so a driver knows how to read its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Nothing to read.
    Done,
    /// One integer column, `value`.
    Ints,
    /// The record columns ([`columns!`](crate::ops::columns)).
    Records,
}

/// One statement: its text, its parameters and what it returns.
#[derive(Debug)]
pub(crate) struct Stmt<'a> {
    pub(crate) sql: &'static str,
    pub(crate) params: Vec<Param<'a>>,
    pub(crate) shape: Shape,
}

/// The rows of one statement, read as its [`Shape`] says.
#[derive(Debug)]
pub(crate) enum Answer {
    Done,
    Ints(Vec<i64>),
    Records(Vec<RawRecord>),
}

/// Runs one statement in the transaction the enqueue is made in: all a driver provides.
pub(crate) trait Execute {
    fn run(&mut self, stmt: Stmt<'_>) -> impl Future<Output = Result<Answer>>;
}

async fn ints<E: Execute>(
    ex: &mut E,
    sql: &'static str,
    params: Vec<Param<'_>>,
) -> Result<Vec<i64>> {
    match ex
        .run(Stmt {
            sql,
            params,
            shape: Shape::Ints,
        })
        .await?
    {
        Answer::Ints(values) => Ok(values),
        other => Err(corrupt(format!(
            "expected integers from {sql:?}, got {other:?}"
        ))),
    }
}

async fn records<E: Execute>(
    ex: &mut E,
    sql: &'static str,
    params: Vec<Param<'_>>,
) -> Result<Vec<RawRecord>> {
    match ex
        .run(Stmt {
            sql,
            params,
            shape: Shape::Records,
        })
        .await?
    {
        Answer::Records(rows) => Ok(rows),
        other => Err(corrupt(format!(
            "expected records from {sql:?}, got {other:?}"
        ))),
    }
}

async fn done<E: Execute>(ex: &mut E, sql: &'static str, params: Vec<Param<'_>>) -> Result<()> {
    ex.run(Stmt {
        sql,
        params,
        shape: Shape::Done,
    })
    .await
    .map(drop)
}

/// The enqueue inside a caller's transaction, whichever driver holds it: the batch checked
/// ([`NewRecord::validate_all`]), the file checked to be an outbox of this build's schema
/// ([`check`]), then the records inserted ([`insert`]) and held to `cap`. A refusal writes
/// nothing, and leaves the caller's transaction as it was, free to commit its own writes.
pub(crate) async fn caller<E: Execute>(
    ex: &mut E,
    records: Vec<NewRecord>,
    now: Millis,
    max_payload: usize,
    cap: Cap,
) -> Result<Enqueued> {
    NewRecord::validate_all(&records, max_payload)?;
    check(ex).await?;
    insert(ex, records, now, cap).await
}

/// Refuses a transaction on a database that is not an outbox of this build's schema.
pub(crate) async fn check<E: Execute>(ex: &mut E) -> Result<()> {
    let app = ints(ex, APPLICATION_ID_SQL, Vec::new()).await?;
    if app.first().copied() != Some(i64::from(APPLICATION_ID)) {
        return Err(Error::NotAnOutbox {
            detail: "the transaction's database is not an outbox".into(),
            source: None,
        });
    }
    let version = ints(ex, USER_VERSION_SQL, Vec::new()).await?;
    let version = version
        .first()
        .and_then(|v| u32::try_from(*v).ok())
        .unwrap_or(0);
    if version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < SCHEMA_VERSION {
        return Err(Error::InvalidConfig(format!(
            "the outbox schema is at version {version}: open it with SqliteStore::open first"
        )));
    }
    Ok(())
}

/// Hands out `n` fresh ids from the counter in `meta` and returns the first: ids only grow,
/// whatever was deleted since.
async fn take_ids<E: Execute>(ex: &mut E, n: usize) -> Result<u64> {
    let last = ints(ex, TAKE_IDS_SQL, vec![Param::Int(count(n))])
        .await?
        .first()
        .copied()
        .ok_or_else(|| corrupt("the id counter is missing from the meta table"))?;
    Ok(read_ms(last, "last_id")? + 1 - n as u64)
}

/// Enqueues records due at `now`; the caller validated them. A record with a coalescing key
/// replaces the latest record with that key where
/// [`Record::replaceable_by`](outbox_core::Record::replaceable_by) allows it (see
/// [`coalesce`]); every other record is inserted fresh. A batch without coalescing keys takes
/// its ids in one step and runs no query but its inserts (and the group-head lookups). Held to
/// `cap` as [`insert_many`] says.
pub(crate) async fn insert<E: Execute>(
    ex: &mut E,
    records: Vec<NewRecord>,
    now: Millis,
    cap: Cap,
) -> Result<Enqueued> {
    let mut enqueued = insert_many(ex, &[(records.as_slice(), now)], cap).await?;
    Ok(enqueued.pop().unwrap_or_default())
}

/// Enqueues several callers' batches in one go, in order, each due at its own time, with one
/// answer per batch: as [`insert`] of each in turn would, but taking the ids of them all in one
/// step (when none coalesces) and counting the new pending records once. The group-commit
/// writer merges the enqueues waiting together through this (and, when the cap refuses them
/// together, runs each alone, so only those that do not fit are refused).
///
/// Under a cap, what the file holds is read from the counters first. When the batches would
/// fit even if every record were fresh and every payload added, they are written as without a
/// cap; when they would not and none coalesces, that is their net addition and they are
/// refused before anything is written. Otherwise (a coalescing write may add nothing) they are
/// written inside a savepoint, their net addition counted, and the savepoint undone if the
/// cap refuses it.
pub(crate) async fn insert_many<E: Execute>(
    ex: &mut E,
    batches: &[(&[NewRecord], Millis)],
    cap: Cap,
) -> Result<Vec<Enqueued>> {
    let total: usize = batches.iter().map(|(records, _)| records.len()).sum();
    if total == 0 || cap.is_none() {
        return Ok(write(ex, batches).await?.0);
    }
    let used = usage(ex).await?;
    let bytes: u64 = batches
        .iter()
        .flat_map(|(records, _)| records.iter())
        .map(|r| r.payload.len() as u64)
        .sum();
    match cap.admit(used, total as u64, bytes) {
        Ok(()) => Ok(write(ex, batches).await?.0),
        Err(full) if !coalesces(batches) => Err(full),
        Err(_) => written_if_admitted(ex, batches, cap, used).await,
    }
}

/// What the file holds, as a size cap counts it, from the counters in `meta`.
async fn usage<E: Execute>(ex: &mut E) -> Result<Usage> {
    let read = |values: Vec<i64>| values.first().map_or(0, |&n| n.max(0) as u64);
    let records = read(ints(ex, HELD_RECORDS_SQL, Vec::new()).await?);
    let bytes = read(ints(ex, HELD_BYTES_SQL, Vec::new()).await?);
    Ok(Usage { records, bytes })
}

/// Whether a record of the batches has a coalescing key.
fn coalesces(batches: &[(&[NewRecord], Millis)]) -> bool {
    batches
        .iter()
        .any(|(records, _)| records.iter().any(|r| r.replaces.is_some()))
}

/// Writes the batches inside a savepoint and keeps them if their net addition to `used` is
/// within `cap`; otherwise (or if a statement fails) undoes them and returns the error.
async fn written_if_admitted<E: Execute>(
    ex: &mut E,
    batches: &[(&[NewRecord], Millis)],
    cap: Cap,
    used: Usage,
) -> Result<Vec<Enqueued>> {
    done(ex, CAP_SAVEPOINT_SQL, Vec::new()).await?;
    let kept = async {
        let (answers, added) = write(ex, batches).await?;
        let bytes = u64::try_from(added.bytes).unwrap_or(0);
        cap.admit(used, added.records, bytes)?;
        done(ex, CAP_RELEASE_SQL, Vec::new()).await?;
        Ok(answers)
    }
    .await;
    if kept.is_err() {
        for sql in [CAP_UNDO_SQL, CAP_RELEASE_SQL] {
            if let Err(err) = done(ex, sql, Vec::new()).await {
                // SQLite may have rolled the whole transaction back already (a full disk can).
                tracing::warn!(error = %err, "could not undo a refused outbox enqueue");
            }
        }
    }
    kept
}

/// What batches added to the file, net: fresh records, and payload bytes (fewer, even below
/// zero, when coalescing writes replaced larger payloads).
#[derive(Debug, Default)]
struct Added {
    records: u64,
    bytes: i64,
}

/// Writes the batches (see [`insert_many`]) with no cap, and counts what they added.
async fn write<E: Execute>(
    ex: &mut E,
    batches: &[(&[NewRecord], Millis)],
) -> Result<(Vec<Enqueued>, Added)> {
    let total: usize = batches.iter().map(|(records, _)| records.len()).sum();
    let mut answers = Vec::with_capacity(batches.len());
    if total == 0 {
        answers.resize_with(batches.len(), Enqueued::default);
        return Ok((answers, Added::default()));
    }
    // Without coalescing every record gets a fresh id, known up front; with it, a fresh id is
    // taken as each record turns out to need one, so ids still grow in enqueue order.
    let coalescing = coalesces(batches);
    let mut next = if coalescing {
        None
    } else {
        Some(take_ids(ex, total).await?)
    };
    // Groups that already have a member, in the file or earlier in these batches.
    let mut held: HashSet<&str> = HashSet::new();
    let (mut fresh, mut merged, mut bytes) = (0, 0, 0);
    for &(records, now) in batches {
        let mut enqueued = Enqueued::fresh(Vec::with_capacity(records.len()));
        for (index, record) in records.iter().enumerate() {
            if let Some((id, grown)) = coalesce(ex, record, now).await? {
                // The replaced record keeps its place: its group had a member already.
                enqueued.ids.push(id);
                enqueued.superseded.push(index);
                bytes += grown;
                continue;
            }
            let id = match &mut next {
                Some(next) => {
                    let id = *next;
                    *next += 1;
                    id
                }
                None => take_ids(ex, 1).await?,
            };
            // A record is its group's head when no earlier record holds the group.
            let claimable = match record.group.as_deref() {
                None => true,
                Some(group) if held.contains(group) => false,
                Some(group) => {
                    held.insert(group);
                    ints(ex, HEAD_SQL, vec![Param::Text(group)])
                        .await?
                        .is_empty()
                }
            };
            let trace = record.trace.as_ref().map(TraceContext::encode);
            let params = vec![
                Param::Int(ms(id)),
                Param::OptText(record.group.as_deref()),
                Param::Blob(&record.payload),
                Param::Text(&record.key),
                Param::Int(ms(now)),
                Param::Bool(record.group.is_some()),
                Param::Bool(claimable),
                Param::OptText(record.expected_version.as_deref()),
                Param::OptText(record.replaces.as_deref()),
                Param::Int(ms(now.max(record.not_before.unwrap_or(0)))),
                Param::OptInt(record.not_before.map(ms)),
                Param::OptText(trace.as_deref()),
            ];
            done(ex, INSERT_SQL, params).await?;
            enqueued.ids.push(RecordId(id));
            fresh += 1;
            bytes += count(record.payload.len());
        }
        merged += enqueued.superseded.len();
        answers.push(enqueued);
    }
    if fresh > 0 || bytes != 0 {
        let params = vec![Param::Int(count(fresh)), Param::Int(bytes)];
        done(ex, COUNT_SQL, params).await?;
    }
    if merged > 0 {
        done(ex, SUPERSEDED_SQL, vec![Param::Int(count(merged))]).await?;
    }
    let added = Added {
        records: fresh as u64,
        bytes,
    };
    Ok((answers, added))
}

/// Replaces the latest record with `new`'s coalescing key by `new` when
/// [`Record::replaceable_by`](outbox_core::Record::replaceable_by) allows it and returns its
/// id and how many payload bytes the replacement added (below zero when the new payload is
/// the smaller); otherwise `None`, and `new` is to be inserted. A record without a coalescing
/// key costs no query.
///
/// The latest record is the last entry of the coalescing index for the key; whether it is the
/// last of its group is a range of the group index.
async fn coalesce<E: Execute>(
    ex: &mut E,
    new: &NewRecord,
    now: Millis,
) -> Result<Option<(RecordId, i64)>> {
    let Some(key) = new.replaces.as_deref() else {
        return Ok(None);
    };
    let latest = records(ex, LATEST_SQL, vec![Param::Text(key)]).await?.pop();
    let Some(latest) = latest else {
        return Ok(None);
    };
    let mut latest = latest.into_record()?;
    let last_of_group = match &latest.group {
        None => true,
        Some(group) => {
            let params = vec![Param::Text(group), Param::Int(ms(latest.id.0))];
            ints(ex, FOLLOWED_SQL, params).await?.first() != Some(&1)
        }
    };
    if !latest.replaceable_by(new, last_of_group) {
        return Ok(None);
    }
    let before = count(latest.payload.len());
    latest.supersede(new.clone(), now);
    let grown = count(latest.payload.len()) - before;
    let trace = latest.trace.as_ref().map(TraceContext::encode);
    let params = vec![
        Param::Int(ms(latest.id.0)),
        Param::Blob(&latest.payload),
        Param::Text(&latest.key),
        Param::OptText(latest.expected_version.as_deref()),
        Param::Int(ms(latest.created_at)),
        Param::OptInt(latest.next_attempt_at.map(ms)),
        Param::OptInt(latest.not_before.map(ms)),
        Param::OptText(trace.as_deref()),
    ];
    done(ex, SUPERSEDE_SQL, params).await?;
    Ok(Some((latest.id, grown)))
}

/// Runs a future whose every step is ready at once (a synchronous driver's: rusqlite's, or
/// diesel's), on the calling thread, without a runtime.
pub(crate) fn at_once<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(Error::Backend {
            detail: "a synchronous driver's statement did not complete at once".into(),
            source: None,
        }),
    }
}

/// The store's own driver, and the one of a caller's rusqlite transaction: every statement
/// prepared once per connection (rusqlite's statement cache).
pub(crate) struct Rusqlite<'c>(pub(crate) &'c Connection);

fn to_sql<'p>(param: &'p Param<'_>) -> &'p dyn rusqlite::ToSql {
    match param {
        Param::Int(v) => v,
        Param::OptInt(v) => v,
        Param::Text(v) => v,
        Param::OptText(v) => v,
        Param::Blob(v) => v,
        Param::Bool(v) => v,
    }
}

impl Execute for Rusqlite<'_> {
    async fn run(&mut self, stmt: Stmt<'_>) -> Result<Answer> {
        let mut statement = self.0.prepare_cached(stmt.sql).map_err(db)?;
        let params = rusqlite::params_from_iter(stmt.params.iter().map(to_sql));
        Ok(match stmt.shape {
            Shape::Done => {
                statement.execute(params).map_err(db)?;
                Answer::Done
            }
            Shape::Ints => Answer::Ints(
                statement
                    .query_map(params, |row| row.get(0))
                    .map_err(db)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(db)?,
            ),
            Shape::Records => Answer::Records(
                statement
                    .query_map(params, RawRecord::from_row)
                    .map_err(db)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(db)?,
            ),
        })
    }
}
