//! A runner's round in two round trips: its reports on its own claims written by statements
//! guarded by the lease token, with no row read or locked first.
//!
//! Most rounds carry only what a runner reports on records it claimed itself (delivered,
//! failed, discarded by the ceiling), each under its lease. [`Guard::Lease`] admits exactly
//! the record that is still in flight under that token, and `admits_update` holds for every
//! record in flight, so the guard is a `WHERE lease_token = $token` on the write itself (a
//! row holds a token only while it is in flight), and the rows the writes return are the
//! transitions that applied. The general path (`Core::round`) first locks the rows with
//! `SELECT … FOR UPDATE` and decides in Rust: one round trip more, and a lock record per row
//! in the write-ahead log.
//!
//! The round goes out as two pipelines on one pooled connection:
//! 1. `BEGIN` and the groups' advisory locks, which also name the groups of the records;
//! 2. the guarded writes, the lease rows they ended, the groups' head flags, the claim, the
//!    server's clock and `COMMIT`.
//!
//! A connection whose pipeline failed part way is rolled back before it returns to the pool
//! (or dropped, when even that fails), so no later caller finds it inside this transaction.

use std::collections::HashSet;
use std::sync::Arc;

use outbox_core::{Applied, Change, Claim, Error, Guard, Record, Result, Round, Transition};
use tokio_postgres::types::ToSql;

use crate::codec::{self, count, millis, state, text, token};
use crate::error::pg;
use crate::exec::Exec;
use crate::ops::Core;
use crate::unreadable;

type Param<'a> = &'a (dyn ToSql + Sync);

/// Whether `outcomes` can take this path: every one a runner's report under its lease, no
/// requeue, no record twice.
pub(crate) fn eligible(outcomes: &[Transition]) -> bool {
    let mut seen = HashSet::with_capacity(outcomes.len());
    outcomes.iter().all(|t| {
        matches!(t.guard, Guard::Lease(_))
            && !matches!(t.change, Change::Requeue { .. })
            && seen.insert(t.id)
    })
}

/// The statement's arrays, one list per kind of change, each with the lease tokens.
#[derive(Default)]
struct Arrays {
    delivered: Vec<i64>,
    delivered_tokens: Vec<i64>,
    discard: Vec<i64>,
    discard_tokens: Vec<i64>,
    reasons: Vec<String>,
    discarded_at: Vec<i64>,
    spent: Vec<i64>,
    update: Vec<i64>,
    update_tokens: Vec<i64>,
    states: Vec<i16>,
    attempts: Vec<i64>,
    unanswered: Vec<i64>,
    interrupted: Vec<i64>,
    last_at: Vec<Option<i64>>,
    next_at: Vec<Option<i64>>,
    errors: Vec<Option<String>>,
    histories: Vec<Option<Vec<u8>>>,
}

impl Arrays {
    fn of(outcomes: &[Transition]) -> Arrays {
        let mut a = Arrays::default();
        for t in outcomes {
            let Guard::Lease(lease) = t.guard else {
                continue;
            };
            let (id, lease) = (codec::id(t.id), token(lease));
            match &t.change {
                Change::Delivered => {
                    a.delivered.push(id);
                    a.delivered_tokens.push(lease);
                }
                Change::Discard {
                    reason,
                    at,
                    attempts,
                } => {
                    a.discard.push(id);
                    a.discard_tokens.push(lease);
                    a.reasons.push(text(reason));
                    a.discarded_at.push(millis(*at));
                    a.spent.push(count(*attempts));
                }
                Change::Update(p) => {
                    a.update.push(id);
                    a.update_tokens.push(lease);
                    a.states.push(state(p.state));
                    a.attempts.push(count(p.attempts));
                    a.unanswered.push(count(p.unanswered));
                    a.interrupted.push(count(p.interrupted));
                    a.last_at.push(p.last_attempt_at.map(millis));
                    a.next_at.push(p.next_attempt_at.map(millis));
                    a.errors.push(p.last_error.as_deref().map(text));
                    a.histories.push(codec::history(&p.history));
                }
                // Not eligible; never reached.
                Change::Requeue { .. } => {}
            }
        }
        a
    }

    /// In the order of the statement's `$1` to `$17`.
    fn params(&self) -> [Param<'_>; 17] {
        [
            &self.delivered,
            &self.delivered_tokens,
            &self.discard,
            &self.discard_tokens,
            &self.reasons,
            &self.discarded_at,
            &self.spent,
            &self.update,
            &self.update_tokens,
            &self.states,
            &self.attempts,
            &self.unanswered,
            &self.interrupted,
            &self.last_at,
            &self.next_at,
            &self.errors,
            &self.histories,
        ]
    }
}

/// The statements of this path for the schema `s` (quoted) and its records table `r`.
#[derive(Debug)]
pub(crate) struct LeasedSql {
    /// The groups of the records `$1`, each locked (in key order, as every group lock is
    /// taken) and returned.
    pub(crate) lock_groups: String,
    /// The guarded writes; returns the id of every record written.
    pub(crate) apply: String,
}

impl LeasedSql {
    pub(crate) fn new(s: &str, r: &str, shard: &str, tombstone_columns: &str) -> LeasedSql {
        LeasedSql {
            lock_groups: format!(
                "SELECT grp, pg_advisory_xact_lock(k) FROM \
                 (SELECT DISTINCT grp, hashtextextended(grp, $2) AS k FROM {r} \
                 WHERE id = ANY($1::bigint[]) AND grp IS NOT NULL ORDER BY k) AS keys"
            ),
            // As the general `apply`, with each part guarded by the lease it reports under.
            apply: format!(
                "WITH delivered AS (DELETE FROM {r} AS r \
                   USING unnest($1::bigint[], $2::bigint[]) AS d(id, token) \
                   WHERE r.id = d.id AND r.lease_token = d.token \
                   RETURNING r.id, r.absorbed), \
                 discarded AS (DELETE FROM {r} AS r USING unnest($3::bigint[], $4::bigint[], \
                   $5::text[], $6::bigint[], $7::bigint[]) AS d(id, token, reason, at, attempts) \
                   WHERE r.id = d.id AND r.lease_token = d.token \
                   RETURNING r.id, r.grp, r.key, d.reason, d.at, d.attempts, r.absorbed), \
                 counted AS (INSERT INTO {s}.tallies AS t (shard, delivered, superseded) \
                   SELECT {shard}, c.n, c.m \
                   FROM (SELECT (SELECT count(*) FROM delivered) AS n, \
                     ((SELECT coalesce(sum(absorbed), 0) FROM delivered) \
                     + (SELECT coalesce(sum(absorbed), 0) FROM discarded))::bigint AS m) AS c \
                   WHERE c.n > 0 OR c.m > 0 \
                   ON CONFLICT (shard) DO UPDATE SET delivered = t.delivered + excluded.delivered, \
                   superseded = t.superseded + excluded.superseded), \
                 buried AS (INSERT INTO {s}.tombstones ({tombstone_columns}) \
                   SELECT id, grp, key, reason, at, attempts FROM discarded), \
                 updated AS (UPDATE {r} AS r SET state = u.state, attempts = u.attempts, \
                   unanswered = u.unanswered, interrupted = u.interrupted, \
                   last_attempt_at = u.last_at, next_attempt_at = u.next_at, \
                   last_error = u.error, history = u.history, lease_token = NULL, \
                   lease_until = NULL, \
                   claimable = (r.grp IS NULL AND u.state IN (0, 1) AND u.next_at IS NOT NULL) \
                   FROM unnest($8::bigint[], $9::bigint[], $10::smallint[], $11::bigint[], \
                     $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::text[], \
                     $17::bytea[]) \
                   AS u(id, token, state, attempts, unanswered, interrupted, last_at, next_at, \
                     error, history) \
                   WHERE r.id = u.id AND r.lease_token = u.token \
                   RETURNING r.id) \
                 SELECT id FROM delivered UNION ALL SELECT id FROM discarded \
                 UNION ALL SELECT id FROM updated"
            ),
        }
    }
}

/// What opens a round's transaction: where the server has `plan_cache_mode`
/// ([`generic_plans`]), with the round's statements planned for any batch (generic plans).
///
/// Every write of a round reaches its rows through the primary key, by the ids of its batch.
/// Planned for the batch at hand (a custom plan, which PostgreSQL chooses for a statement's
/// first executions on a connection), a batch of a few hundred ids out of a table of tens of
/// thousands looked cheaper to the planner as a read of the whole table, hashed: such a round
/// read every row, and its time grew with the backlog. The generic plan finds each id through
/// the primary key whatever the batch's size, and is made once per connection rather than
/// once per round. The claim, which reads a range of the due index, is planned for its values
/// ([`PLAN_FOR_VALUES`]). PostgreSQL 11 has no `plan_cache_mode`; its rounds plan as before.
pub(crate) fn begin_round(generic_plans: bool) -> &'static str {
    if generic_plans {
        "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"
    } else {
        "BEGIN"
    }
}

/// Whether a server of version `server_version_num` plans a round's writes generically
/// (PostgreSQL 12 and later have `plan_cache_mode`; see [`begin_round`]).
pub(crate) fn generic_plans(server_version_num: i32) -> bool {
    server_version_num >= 120_000
}

/// Sent before a round's claim: back to the server's own choice of plan (`auto`), so the
/// claim is planned for its deadline and limit. Sent only where [`begin_round`] set generic
/// plans (PostgreSQL 11 knows no such setting).
const PLAN_FOR_VALUES: &str = "SET LOCAL plan_cache_mode = auto";

/// The round of `outcomes` (all [`eligible`]) and then `claim`, in one transaction sent as
/// two pipelines.
pub(crate) async fn round(
    core: Arc<Core>,
    outcomes: Vec<Transition>,
    claim: Option<Claim>,
) -> Result<Round> {
    let connection = InRound(Some(core.client().await?));
    let (result, ended) = {
        let Some(client) = connection.0.as_ref() else {
            return Err(Error::Stopped);
        };
        let result = run(&core, client, &outcomes, claim).await;
        // A failed round may have left its transaction open: it ends here, or the connection
        // is not handed back.
        let ended = result.is_ok() || client.batch_execute("ROLLBACK").await.is_ok();
        (result, ended)
    };
    if ended {
        connection.settle();
    }
    result
}

/// A pooled connection inside a round's transaction. Unless settled once the transaction has
/// ended, dropping it takes the connection out of the pool: a round whose rollback failed
/// too, and a round whose future is dropped part way (a panic unwinding through it; the
/// runner's deadline on a store call does not drop it, since the store's calls run to their
/// end on a thread of their own), so no later caller finds the connection inside that
/// transaction, holding its locks.
struct InRound(Option<deadpool_postgres::Object>);

impl InRound {
    /// The transaction has ended: the connection goes back to the pool.
    fn settle(mut self) {
        drop(self.0.take());
    }
}

impl Drop for InRound {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

async fn run(
    core: &Core,
    client: &deadpool_postgres::Object,
    outcomes: &[Transition],
    claim: Option<Claim>,
) -> Result<Round> {
    let sql = &core.sql;
    let ex = Exec::Pooled(client);
    let (lock_groups, apply, forget, refresh, claim_st, clock) = futures::try_join!(
        ex.prepare(&sql.leased.lock_groups),
        ex.prepare(&sql.leased.apply),
        ex.prepare(&sql.forget_leases),
        ex.prepare(&sql.refresh_groups),
        ex.prepare(&sql.claim),
        ex.prepare(&sql.server_time),
    )
    .map_err(pg)?;
    let ids: Vec<i64> = outcomes.iter().map(|t| codec::id(t.id)).collect();

    // First pipeline: the transaction and the groups' locks (a record's group never changes,
    // so it can be read before the locks).
    let lock_params: [Param<'_>; 2] = [&ids, &core.group_seed];
    let (_, locked) = futures::try_join!(
        client.batch_execute(begin_round(core.generic_plans)),
        ex.query(&lock_groups, &lock_params)
    )
    .map_err(pg)?;
    let groups: Vec<String> = locked
        .iter()
        .map(|row| row.try_get(0).map_err(pg))
        .collect::<Result<_>>()?;

    // Second pipeline: the writes, the lease rows they ended, the head flags they moved, the
    // claim, the clock, COMMIT.
    let arrays = Arrays::of(outcomes);
    let apply_params = arrays.params();
    let tokens = codec::tokens(outcomes.iter().filter_map(|t| match t.guard {
        Guard::Lease(lease) => Some(lease),
        _ => None,
    }));
    let forget_params: [Param<'_>; 1] = [&tokens];
    let refresh_params: [Param<'_>; 2] = [&groups, &ids];
    let claim_params = claim.map(|c| {
        (
            millis(c.now),
            i64::try_from(c.limit).unwrap_or(i64::MAX),
            token(c.lease.token),
            millis(c.lease.until),
        )
    });
    let promote = async {
        if groups.is_empty() {
            Ok(0)
        } else {
            ex.execute(&refresh, &refresh_params).await
        }
    };
    let take = async {
        match &claim_params {
            Some((now, n, t, until)) => {
                // The claim reads a range of the due index by its deadline and limit, which a
                // generic plan cannot see: it is planned for its values, as outside a round.
                if core.generic_plans {
                    client.batch_execute(PLAN_FOR_VALUES).await?;
                }
                let params: [Param<'_>; 4] = [now, n, t, until];
                ex.query(&claim_st, &params).await.map(Some)
            }
            None => Ok(None),
        }
    };
    let read_clock = async {
        if claim.is_some() {
            ex.query(&clock, &[]).await.map(Some)
        } else {
            Ok(None)
        }
    };
    let sent = core.clock.host_now();
    let (written, _, _, claimed_rows, reading, _) = futures::try_join!(
        ex.query(&apply, &apply_params),
        ex.execute(&forget, &forget_params),
        promote,
        take,
        read_clock,
        client.batch_execute("COMMIT"),
    )
    .map_err(pg)?;
    if let Some(reading) = reading {
        core.observe(sent, &reading)?;
    }
    let written: HashSet<i64> = written
        .iter()
        .map(|row| row.try_get(0).map_err(pg))
        .collect::<Result<_>>()?;
    let skipped = outcomes
        .iter()
        .filter(|t| !written.contains(&codec::id(t.id)))
        .map(|t| t.id)
        .collect();
    let claimed: Vec<Record> = match claimed_rows {
        Some(rows) => {
            let (records, bad) = crate::ops::claimed(&rows)?;
            // Committed already, so set aside on its own. Should this fail, the round reports
            // the failure, and its claimed records come back when their lease expires.
            unreadable::set_aside(core, &ex, &bad).await?;
            records
        }
        None => Vec::new(),
    };
    Ok(Round {
        applied: Applied { skipped },
        claimed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Attempt, AttemptClass, History, Progress, RecordId, State};

    fn report(id: u64, guard: Guard, change: Change) -> Transition {
        Transition {
            id: RecordId(id),
            guard,
            change,
        }
    }

    #[test]
    fn rounds_plan_generically_where_the_server_can() {
        for version in [150_020, 120_000] {
            assert_eq!(
                begin_round(generic_plans(version)),
                "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"
            );
        }
        assert_eq!(begin_round(generic_plans(110_022)), "BEGIN");
    }

    #[test]
    fn only_a_runners_reports_on_distinct_records_take_the_leased_path() {
        let failed = Change::Update(Progress::requeued(5));
        assert!(eligible(&[
            report(1, Guard::Lease(7), Change::Delivered),
            report(2, Guard::Lease(8), failed.clone()),
        ]));
        assert!(eligible(&[]));
        assert!(!eligible(&[report(1, Guard::Idle, Change::Delivered)]));
        assert!(!eligible(&[
            report(1, Guard::Lease(7), failed),
            report(1, Guard::Lease(7), Change::Delivered),
        ]));
        assert!(!eligible(&[report(
            1,
            Guard::Lease(7),
            Change::Requeue { at: 5 }
        )]));
    }

    #[test]
    fn each_change_goes_to_its_list_with_its_token() {
        let mut history = History::default();
        history.push(Attempt::new(4, AttemptClass::Later, "HTTP 503"));
        let outcomes = [
            report(1, Guard::Lease(7), Change::Delivered),
            report(
                2,
                Guard::Lease(8),
                Change::Discard {
                    reason: "ceiling".into(),
                    at: 9,
                    attempts: 3,
                },
            ),
            report(
                3,
                Guard::Lease(9),
                Change::Update(Progress {
                    state: State::Retrying,
                    attempts: 1,
                    unanswered: 0,
                    interrupted: 0,
                    last_attempt_at: Some(4),
                    next_attempt_at: Some(6),
                    last_error: Some("HTTP 503".into()),
                    history: history.clone(),
                }),
            ),
        ];
        let a = Arrays::of(&outcomes);
        assert_eq!((a.delivered, a.delivered_tokens), (vec![1], vec![token(7)]));
        assert_eq!((a.discard, a.discard_tokens), (vec![2], vec![token(8)]));
        assert_eq!((a.spent, a.discarded_at), (vec![3], vec![9]));
        assert_eq!((a.update, a.update_tokens), (vec![3], vec![token(9)]));
        assert_eq!(a.next_at, vec![Some(6)]);
        assert_eq!(a.errors, vec![Some("HTTP 503".to_owned())]);
        assert_eq!(a.histories, vec![Some(history.encode())]);
    }
}
