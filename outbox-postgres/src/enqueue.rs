//! The enqueue as data: which statements an enqueue sends (their text from [`Sql`], their
//! parameters typed as the statements cast them), in which batches, and how the answers map
//! back into ids and records. Written once; whichever driver runs the caller's transaction
//! (tokio-postgres, sqlx, diesel) only carries statements to the server and rows back, through
//! [`Execute`].
//!
//! Every change that can move a group's head runs under that group's advisory lock, taken in
//! key order; an enqueue with coalescing keys also takes a lock per key, in the same statement
//! and the same order, so the enqueues of one key are decided one after the other. The
//! `NOTIFY` goes out in the same transaction, so listeners hear of the records when it commits,
//! and only then.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;

use outbox_core::{Cap, Enqueued, Millis, NewRecord, Result, State};

use crate::cap;
use crate::coalesce::{self, Slot};
use crate::codec::{self, millis, RawRecord};
use crate::error::corrupt;
use crate::sql::Sql;

/// One parameter, typed as its placeholder is cast in the statement.
#[derive(Debug)]
pub(crate) enum Param<'a> {
    /// `bigint`
    Int(i64),
    /// `text`
    Text(&'a str),
    /// `bigint[]`
    Ints(Vec<i64>),
    /// `bigint[]` with NULLs
    OptInts(Vec<Option<i64>>),
    /// `text[]` without NULLs
    Texts(Vec<&'a str>),
    /// `text[]` with NULLs
    OptTexts(Vec<Option<&'a str>>),
    /// `bytea[]`
    Blobs(Vec<&'a [u8]>),
    /// `boolean[]`
    Bools(Vec<bool>),
}

/// What a statement returns, so a driver knows how to read its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Nothing to read.
    Done,
    /// One `bigint` column, `id`.
    Ids,
    /// One `text` column, `grp`.
    Groups,
    /// A `text` column `grp` and a nullable `bigint` column `id`.
    Tails,
    /// The record columns ([`RECORD_COLUMNS`](crate::codec::RECORD_COLUMNS)).
    Records,
    /// Two `bigint` columns, `records` and `bytes`: what a size cap counts.
    Usage,
}

/// One statement: its text, its parameters (`$1` first) and what it returns.
#[derive(Debug)]
pub(crate) struct Stmt<'a> {
    pub(crate) sql: &'a str,
    pub(crate) params: Vec<Param<'a>>,
    pub(crate) shape: Shape,
}

impl<'a> Stmt<'a> {
    pub(crate) fn new(sql: &'a str, params: Vec<Param<'a>>, shape: Shape) -> Self {
        Stmt { sql, params, shape }
    }
}

/// The rows of one statement, read as its [`Shape`] says.
#[derive(Debug)]
pub(crate) enum Answer {
    Done,
    Ids(Vec<i64>),
    Groups(Vec<String>),
    Tails(Vec<(String, Option<i64>)>),
    Records(Vec<RawRecord>),
    Usage(Vec<(i64, i64)>),
}

/// What an enqueue needs of its outbox: the statements, the channel its `NOTIFY` goes to, the
/// seeds of its lock keys, its payload limit and its size cap.
pub(crate) struct Target<'a> {
    pub(crate) sql: &'a Sql,
    pub(crate) channel: &'a str,
    pub(crate) group_seed: i64,
    pub(crate) coalesce_seed: i64,
    pub(crate) max_payload: usize,
    pub(crate) cap: Cap,
}

/// Runs statements in the caller's transaction: all a driver has to provide.
pub(crate) trait Execute: Send {
    /// A hint, before the first batch, of every statement the enqueue may send: a driver that
    /// prepares statements can prepare them all in one round trip.
    fn prepare(&mut self, _texts: &[&str]) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Runs `batch` in order and returns one answer per statement, in the same order. A driver
    /// may pipeline the batch; the statements run one after the other on the server either way.
    fn run(&mut self, batch: Vec<Stmt<'_>>) -> impl Future<Output = Result<Vec<Answer>>> + Send;
}

/// The answers of a batch, taken in order.
pub(crate) struct Answers(std::vec::IntoIter<Answer>);

impl Answers {
    fn next(&mut self) -> Result<Answer> {
        self.0
            .next()
            .ok_or_else(|| corrupt("a statement of the enqueue returned no answer"))
    }

    fn skip(&mut self) -> Result<()> {
        self.next().map(drop)
    }

    pub(crate) fn ids(&mut self) -> Result<Vec<i64>> {
        match self.next()? {
            Answer::Ids(ids) => Ok(ids),
            other => Err(mismatch("ids", &other)),
        }
    }

    fn groups(&mut self) -> Result<Vec<String>> {
        match self.next()? {
            Answer::Groups(groups) => Ok(groups),
            other => Err(mismatch("groups", &other)),
        }
    }

    fn tails(&mut self) -> Result<Vec<(String, Option<i64>)>> {
        match self.next()? {
            Answer::Tails(tails) => Ok(tails),
            other => Err(mismatch("group tails", &other)),
        }
    }

    fn records(&mut self) -> Result<Vec<RawRecord>> {
        match self.next()? {
            Answer::Records(records) => Ok(records),
            other => Err(mismatch("records", &other)),
        }
    }

    pub(crate) fn usage(&mut self) -> Result<Vec<(i64, i64)>> {
        match self.next()? {
            Answer::Usage(rows) => Ok(rows),
            other => Err(mismatch("usage", &other)),
        }
    }
}

fn mismatch(wanted: &str, got: &Answer) -> outbox_core::Error {
    corrupt(format!(
        "expected {wanted} from the enqueue's statement, got {got:?}"
    ))
}

async fn run<E: Execute>(ex: &mut E, batch: Vec<Stmt<'_>>) -> Result<Answers> {
    Ok(Answers(ex.run(batch).await?.into_iter()))
}

/// The distinct values among `values`, sorted (the order the lock statements take them in).
fn distinct<'a>(values: impl Iterator<Item = Option<&'a str>>) -> Vec<&'a str> {
    values
        .flatten()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The ids the sequence handed out, ascending: `expected` of them.
fn allocated(mut ids: Vec<i64>, expected: usize) -> Result<Vec<i64>> {
    ids.sort_unstable();
    if ids.len() != expected {
        return Err(corrupt("the id sequence returned too few values"));
    }
    Ok(ids)
}

/// Enqueues `records` due at `now` inside the transaction `ex` runs in, which the caller
/// commits: the batch is checked first ([`NewRecord::validate_all`]), so a refused batch sends
/// nothing and leaves the transaction as it was. A batch with no coalescing key takes the
/// set-based path; one with a coalescing key is decided under its keys' locks.
pub(crate) async fn enqueue<E: Execute>(
    core: &Target<'_>,
    ex: &mut E,
    records: Vec<NewRecord>,
    now: Millis,
) -> Result<Enqueued> {
    NewRecord::validate_all(&records, core.max_payload)?;
    if records.is_empty() {
        return Ok(Enqueued::default());
    }
    if records.iter().any(|r| r.replaces.is_some()) {
        return enqueue_coalescing(core, ex, records, now).await;
    }
    let sql = core.sql;
    let mut texts = cap::texts(core);
    texts.extend([
        sql.lock_named_groups.as_str(),
        &sql.members,
        &sql.allocate_ids,
        &sql.insert,
        &sql.notify,
    ]);
    ex.prepare(&texts).await?;
    let groups = distinct(records.iter().map(|r| r.group.as_deref()));
    // A capped enqueue takes its turn and reads the usage first (see `cap`). Group locks
    // come next: a group's ids are then allocated and committed in the same order, so no
    // runner can see a later record of a group before an earlier one.
    let mut first = cap::turn(core);
    first.extend([
        Stmt::new(
            &sql.lock_named_groups,
            vec![Param::Texts(groups.clone()), Param::Int(core.group_seed)],
            Shape::Done,
        ),
        Stmt::new(&sql.members, vec![Param::Texts(groups)], Shape::Groups),
        Stmt::new(
            &sql.allocate_ids,
            vec![Param::Int(records.len() as i64)],
            Shape::Ids,
        ),
    ]);
    let mut answers = run(ex, first).await?;
    // Held to the cap before anything is written (see `cap`): a refusal sent no write.
    if let Some(used) = cap::used(core, &mut answers)? {
        let (count, bytes) = cap::added(&records);
        core.cap.admit(used, count, bytes)?;
    }
    answers.skip()?;
    let mut occupied: BTreeSet<String> = answers.groups()?.into_iter().collect();
    let ids = allocated(answers.ids()?, records.len())?;
    // Only the first record of a group with no member left is its head.
    let claimable: Vec<bool> = records
        .iter()
        .map(|record| match &record.group {
            None => true,
            Some(group) => occupied.insert(group.clone()),
        })
        .collect();
    let traces: Vec<Option<String>> = records
        .iter()
        .map(|r| codec::trace(r.trace.as_ref()))
        .collect();
    let insert = Stmt::new(
        &sql.insert,
        vec![
            Param::Ints(ids.clone()),
            Param::OptTexts(records.iter().map(|r| r.group.as_deref()).collect()),
            Param::Blobs(records.iter().map(|r| r.payload.as_slice()).collect()),
            Param::Texts(records.iter().map(|r| r.key.as_str()).collect()),
            Param::Int(millis(now)),
            Param::Bools(claimable),
            Param::OptTexts(
                records
                    .iter()
                    .map(|r| r.expected_version.as_deref())
                    .collect(),
            ),
            Param::OptTexts(vec![None; records.len()]),
            Param::Ints(vec![0; records.len()]),
            Param::Ints(
                records
                    .iter()
                    .map(|r| millis(now.max(r.not_before.unwrap_or(0))))
                    .collect(),
            ),
            Param::OptInts(records.iter().map(|r| r.not_before.map(millis)).collect()),
            Param::OptTexts(traces.iter().map(Option::as_deref).collect()),
        ],
        Shape::Done,
    );
    run(ex, vec![insert, notify(core)]).await?;
    Ok(Enqueued::fresh(
        ids.into_iter()
            .map(codec::record_id)
            .collect::<Result<_>>()?,
    ))
}

/// The `NOTIFY` on the outbox's channel: it reaches listeners when the transaction commits.
fn notify<'a>(core: &Target<'a>) -> Stmt<'a> {
    Stmt::new(
        &core.sql.notify,
        vec![Param::Text(core.channel)],
        Shape::Done,
    )
}

/// An enqueue with coalescing keys. Under the advisory locks of its groups and of its
/// coalescing keys (one statement, all in key order), so enqueues of one key run one after
/// the other, and each reads what the one before committed:
///
/// 1. the last member of each group of the batch and the latest record of each key (one
///    index seek each), sent together with the locks;
/// 2. the candidates the batch could replace (pending or retrying, with the key and the
///    group of a write of the batch, so ungrouped or in a group whose lock this
///    transaction holds) locked `FOR UPDATE` and read again as they are now: a record
///    claimed meanwhile is seen in flight and left alone, and a claim after this skips it
///    until the rewrite commits. A candidate deleted meanwhile (delivered, discarded)
///    sends the lookup round again; no record of the keys can appear meanwhile, since
///    only an enqueue holding the key's lock writes one. The other candidates are not
///    locked (so an enqueue never waits for a delivery's report): they are left alone as
///    the lookup saw them, which is the outcome of this enqueue ordered before whatever
///    changes them meanwhile;
/// 3. the batch decided in memory (`coalesce::decide`, with the core's
///    [`Record::replaceable_by`](outbox_core::Record::replaceable_by)), held to the size cap
///    if there is one (see `cap`: nothing is written yet), then ids allocated for the fresh
///    records only;
/// 4. the fresh records inserted and the replaced ones rewritten, each counting the writes
///    it absorbed (no shared counter row, which would make every coalescing enqueue and
///    every delivering round wait on each other's commit), and the NOTIFY sent, together.
async fn enqueue_coalescing<E: Execute>(
    core: &Target<'_>,
    ex: &mut E,
    records: Vec<NewRecord>,
    now: Millis,
) -> Result<Enqueued> {
    let sql = core.sql;
    let mut texts = cap::texts(core);
    texts.extend([
        sql.lock_groups_and_keys.as_str(),
        &sql.group_tails,
        &sql.latest_by_key,
        &sql.lock_candidates,
        &sql.allocate_ids,
        &sql.insert,
        &sql.rewrite,
        &sql.notify,
    ]);
    ex.prepare(&texts).await?;
    let groups = distinct(records.iter().map(|r| r.group.as_deref()));
    let coalescing = distinct(records.iter().map(|r| r.replaces.as_deref()));
    let latest = || {
        Stmt::new(
            &sql.latest_by_key,
            vec![Param::Texts(coalescing.clone())],
            Shape::Records,
        )
    };
    let mut first = cap::turn(core);
    first.extend([
        Stmt::new(
            &sql.lock_groups_and_keys,
            vec![
                Param::Texts(groups.clone()),
                Param::Int(core.group_seed),
                Param::Texts(coalescing.clone()),
                Param::Int(core.coalesce_seed),
            ],
            Shape::Done,
        ),
        Stmt::new(&sql.group_tails, vec![Param::Texts(groups)], Shape::Tails),
        latest(),
    ]);
    let mut answers = run(ex, first).await?;
    let used = cap::used(core, &mut answers)?;
    answers.skip()?;
    let mut last_members = HashMap::new();
    for (group, id) in answers.tails()? {
        if let Some(id) = id {
            last_members.insert(group, codec::record_id(id)?);
        }
    }
    let mut latest_rows = answers.records()?;
    // The (key, group) pairs of the batch: a record can only be replaced by a write with
    // its key and its group.
    let wanted: HashSet<(&str, Option<&str>)> = records
        .iter()
        .filter_map(|r| Some((r.replaces.as_deref()?, r.group.as_deref())))
        .collect();
    let candidates = loop {
        let found = latest_rows
            .into_iter()
            .map(RawRecord::into_record)
            .collect::<Result<Vec<_>>>()?;
        let lockable: Vec<i64> = found
            .iter()
            .filter(|r| {
                matches!(r.state, State::Pending | State::Retrying)
                    && r.replaces
                        .as_deref()
                        .is_some_and(|key| wanted.contains(&(key, r.group.as_deref())))
            })
            .map(|r| codec::id(r.id))
            .collect();
        if lockable.is_empty() {
            break found;
        }
        let expected = lockable.len();
        let lock = Stmt::new(
            &sql.lock_candidates,
            vec![Param::Ints(lockable)],
            Shape::Records,
        );
        let locked_rows = run(ex, vec![lock]).await?.records()?;
        if locked_rows.len() == expected {
            let mut locked = locked_rows
                .into_iter()
                .map(|raw| raw.into_record().map(|r| (r.id, r)))
                .collect::<Result<HashMap<_, _>>>()?;
            break found
                .into_iter()
                .map(|r| locked.remove(&r.id).unwrap_or(r))
                .collect();
        }
        // A candidate left meanwhile: look again, from a snapshot without it.
        latest_rows = run(ex, vec![latest()]).await?.records()?;
    };
    // Under a cap, the payload sizes of the records the batch may rewrite, as locked: what
    // the rewrites change is then known before anything is written.
    let sizes = used.map(|_| cap::sizes(&candidates));
    let decided = coalesce::decide(records, now, candidates, last_members);
    if let (Some(used), Some(sizes)) = (used, sizes) {
        let (count, bytes) = cap::added_by(&decided, &sizes);
        core.cap.admit(used, count, bytes)?;
    }
    let fresh_ids = if decided.fresh.is_empty() {
        Vec::new()
    } else {
        let n = decided.fresh.len();
        let allocate = Stmt::new(&sql.allocate_ids, vec![Param::Int(n as i64)], Shape::Ids);
        allocated(run(ex, vec![allocate]).await?.ids()?, n)?
    };
    let at = millis(now);
    let mut writes = Vec::with_capacity(3);
    let fresh = &decided.fresh;
    let rewritten = &decided.rewritten;
    // The trace contexts as stored, kept here for the statements to borrow.
    let fresh_traces: Vec<Option<String>> = fresh
        .iter()
        .map(|f| codec::trace(f.record.trace.as_ref()))
        .collect();
    let rewritten_traces: Vec<Option<String>> = rewritten
        .values()
        .map(|(r, _)| codec::trace(r.trace.as_ref()))
        .collect();
    if !fresh.is_empty() {
        writes.push(Stmt::new(
            &sql.insert,
            vec![
                Param::Ints(fresh_ids.clone()),
                Param::OptTexts(fresh.iter().map(|f| f.record.group.as_deref()).collect()),
                Param::Blobs(fresh.iter().map(|f| f.record.payload.as_slice()).collect()),
                Param::Texts(fresh.iter().map(|f| f.record.key.as_str()).collect()),
                Param::Int(at),
                Param::Bools(fresh.iter().map(|f| f.head).collect()),
                Param::OptTexts(
                    fresh
                        .iter()
                        .map(|f| f.record.expected_version.as_deref())
                        .collect(),
                ),
                Param::OptTexts(fresh.iter().map(|f| f.record.replaces.as_deref()).collect()),
                Param::Ints(fresh.iter().map(|f| millis(f.absorbed)).collect()),
                Param::Ints(
                    fresh
                        .iter()
                        .map(|f| millis(f.record.next_attempt_at.unwrap_or(now)))
                        .collect(),
                ),
                Param::OptInts(
                    fresh
                        .iter()
                        .map(|f| f.record.not_before.map(millis))
                        .collect(),
                ),
                Param::OptTexts(fresh_traces.iter().map(Option::as_deref).collect()),
            ],
            Shape::Done,
        ));
    }
    if !rewritten.is_empty() {
        writes.push(Stmt::new(
            &sql.rewrite,
            vec![
                Param::Ints(rewritten.keys().map(|id| codec::id(*id)).collect()),
                Param::Blobs(
                    rewritten
                        .values()
                        .map(|(r, _)| r.payload.as_slice())
                        .collect(),
                ),
                Param::Texts(rewritten.values().map(|(r, _)| r.key.as_str()).collect()),
                Param::OptTexts(
                    rewritten
                        .values()
                        .map(|(r, _)| r.expected_version.as_deref())
                        .collect(),
                ),
                Param::Ints(rewritten.values().map(|(_, n)| millis(*n)).collect()),
                Param::Int(at),
                Param::OptInts(
                    rewritten
                        .values()
                        .map(|(r, _)| r.next_attempt_at.map(millis))
                        .collect(),
                ),
                Param::OptInts(
                    rewritten
                        .values()
                        .map(|(r, _)| r.not_before.map(millis))
                        .collect(),
                ),
                Param::OptTexts(rewritten_traces.iter().map(Option::as_deref).collect()),
            ],
            Shape::Done,
        ));
    }
    writes.push(notify(core));
    run(ex, writes).await?;
    let ids = decided
        .slots
        .iter()
        .map(|slot| match slot {
            Slot::Stored(id) => Ok(*id),
            Slot::Fresh(n) => fresh_ids
                .get(*n)
                .copied()
                .ok_or_else(|| corrupt("a fresh record without an id"))
                .and_then(codec::record_id),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Enqueued {
        ids,
        superseded: decided.superseded,
    })
}

/// Runs a future whose every step is ready at once (a synchronous driver's), on the calling
/// thread, without a runtime.
#[cfg(any(feature = "diesel", test))]
pub(crate) fn now<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(outbox_core::Error::Backend {
            detail: "a synchronous driver's statement did not complete at once".into(),
            source: None,
        }),
    }
}

#[cfg(test)]
mod tests;
