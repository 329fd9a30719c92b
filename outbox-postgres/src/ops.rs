//! The store's operations as SQL: what each [`Store`](outbox_core::Store) method sends, on
//! which connection, in which transaction.
//!
//! Only pending or retrying *group heads* with a deadline carry the `claimable` flag (a head
//! in flight keeps it, passed over by its lease token), so "what is due" is one range scan of
//! a partial index. Every change that can move a group's head (an enqueue into the group, a
//! record leaving it) runs under that group's advisory lock, taken in key order, and refreshes
//! the flags before it commits. An enqueue with coalescing
//! keys also takes a lock per key, in the same statement and the same order, so the enqueues
//! of one key are decided one after the other.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::Pool;
use outbox_core::{
    Applied, Change, Claim, Enqueued, Halt, Lease, ListQuery, Millis, NewRecord, Record, RecordId,
    Result, Round, Stats, Tombstone, Transition,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::clock::ServerClock;
use crate::codec::{self, millis, state, text, token};
use crate::config::PgConfig;
use crate::enqueue::{self, Target};
use crate::error::{corrupt, pg, pool as pool_error};
use crate::exec::{Exec, Params, Pipelined};
use crate::plan::{self, Plan};
use crate::seen;
use crate::sql::Sql;
use crate::unreadable;

/// What every operation needs: the pool, the statements, the settings and the server's clock.
pub(crate) struct Core {
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) config: PgConfig,
    /// Seeds the group lock keys of this schema (see `schema::group_seed`).
    pub(crate) group_seed: i64,
    /// Seeds the coalescing key lock keys of this schema (see `schema::coalesce_seed`).
    pub(crate) coalesce_seed: i64,
    /// Follows the server's clock; every claim and round measures it again.
    pub(crate) clock: Arc<ServerClock>,
    /// Whether a leased round plans its writes generically (`leased::generic_plans`).
    pub(crate) generic_plans: bool,
}

type Param<'a> = &'a (dyn ToSql + Sync);

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn time(value: Option<i64>, what: &str) -> Result<Option<Millis>> {
    value.map(|v| codec::unsigned(v, what)).transpose()
}

impl Core {
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Measures the server's clock once on a pooled connection (at connect).
    pub(crate) async fn measure_clock(&self) -> Result<()> {
        let client = self.client().await?;
        let ex = Exec::Pooled(&client);
        let statement = ex.prepare(&self.sql.server_time).await.map_err(pg)?;
        let sent = self.clock.host_now();
        let rows = ex.query(&statement, &[]).await.map_err(pg)?;
        self.observe(sent, &rows)
    }

    pub(crate) fn observe(&self, sent: Millis, rows: &[Row]) -> Result<()> {
        let received = self.clock.host_now();
        let row = rows
            .first()
            .ok_or_else(|| corrupt("the server's clock reading returned no row"))?;
        self.clock
            .observe(sent, received, row.try_get(0).map_err(pg)?);
        Ok(())
    }

    async fn records(&self, sql: &str, params: Params<'_>) -> Result<Vec<Record>> {
        let client = self.client().await?;
        let rows = Exec::Pooled(&client).rows(sql, params).await.map_err(pg)?;
        // A row that cannot be decoded is passed by (see `unreadable`).
        Ok(unreadable::split(&rows)?.records)
    }

    /// Enqueues inside `tx`, a transaction the caller commits: the one enqueue
    /// (`enqueue::enqueue`), its statements run by tokio-postgres, pipelined.
    pub(crate) async fn insert(
        &self,
        tx: &Exec<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        enqueue::enqueue(&self.target(), &mut Pipelined::new(tx), records, now).await
    }

    /// What an enqueue needs of this outbox.
    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            sql: &self.sql,
            channel: &self.config.schema,
            group_seed: self.group_seed,
            coalesce_seed: self.coalesce_seed,
            max_payload: self.config.max_payload,
            cap: self.config.cap,
        }
    }

    pub(crate) async fn enqueue(
        self: Arc<Self>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        if records.is_empty() {
            return Ok(Enqueued::default());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let enqueued = self.insert(&Exec::Transaction(&tx), records, now).await?;
        tx.commit().await.map_err(pg)?;
        Ok(enqueued)
    }

    /// A claim on its own: one statement, with the server's clock read beside it.
    pub(crate) async fn claim(self: Arc<Self>, claim: Claim) -> Result<Vec<Record>> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        self.claim_on(&Exec::Pooled(&client), claim).await
    }

    /// Claims on `ex` and measures the server's clock in the same pipeline.
    async fn claim_on(&self, ex: &Exec<'_>, claim: Claim) -> Result<Vec<Record>> {
        let (statement, clock) = futures::try_join!(
            ex.prepare(&self.sql.claim),
            ex.prepare(&self.sql.server_time)
        )
        .map_err(pg)?;
        let params: [Param<'_>; 4] = [
            &millis(claim.now),
            &limit(claim.limit),
            &token(claim.lease.token),
            &millis(claim.lease.until),
        ];
        let sent = self.clock.host_now();
        let (rows, reading) =
            futures::try_join!(ex.query(&statement, &params), ex.query(&clock, &[])).map_err(pg)?;
        self.observe(sent, &reading)?;
        let (records, bad) = claimed(&rows)?;
        unreadable::set_aside(self, ex, &bad).await?;
        Ok(records)
    }

    /// A round: the outcomes as one set-based statement, the groups' head flags refreshed,
    /// then the claim, in one transaction and one commit. A runner's reports on its own
    /// claims take the shorter path of `leased`; the rest (a person's verbs, requeues, a
    /// record changed twice in one batch) lock the rows and decide with the core's rules.
    pub(crate) async fn round(
        self: Arc<Self>,
        outcomes: Vec<Transition>,
        claim: Option<Claim>,
    ) -> Result<Round> {
        let claim = claim.filter(|c| c.limit > 0);
        if outcomes.is_empty() {
            let claimed = match claim {
                Some(claim) => Arc::clone(&self).claim(claim).await?,
                None => Vec::new(),
            };
            return Ok(Round {
                applied: Applied::default(),
                claimed,
            });
        }
        if crate::leased::eligible(&outcomes) {
            // A runner's reports on its own claims: guarded writes, two round trips.
            return crate::leased::round(self, outcomes, claim).await;
        }
        let sql = &self.sql;
        let ids: Vec<i64> = outcomes.iter().map(|t| codec::id(t.id)).collect();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let ex = Exec::Transaction(&tx);
        let requeues = outcomes
            .iter()
            .any(|t| matches!(t.change, Change::Requeue { .. }));
        // A person's compare-and-set repair reads the whole row; the runner's batches do not.
        let wide = seen::any(&outcomes);
        let lock_rows_sql: std::borrow::Cow<'_, str> = if wide {
            seen::lock_statement(&self.config.schema).into()
        } else {
            sql.lock_rows.as_str().into()
        };
        let (lock_groups, lock_rows, lock_busy, apply, forget, refresh, claim_st, clock, notify) =
            futures::try_join!(
                ex.prepare(&sql.lock_groups_of),
                ex.prepare(&lock_rows_sql),
                ex.prepare(&sql.lock_busy),
                ex.prepare(&sql.apply),
                ex.prepare(&sql.forget_leases),
                ex.prepare(&sql.refresh_groups),
                ex.prepare(&sql.claim),
                ex.prepare(&sql.server_time),
                ex.prepare(&sql.notify),
            )
            .map_err(pg)?;
        // The groups' locks first (a record's group never changes, so it can be read before
        // them), then the rows, then (for a requeue) the groups' busy records; sent together,
        // run in order.
        let lock_params: [Param<'_>; 2] = [&ids, &self.group_seed];
        let row_params: [Param<'_>; 1] = [&ids];
        let busy = async {
            if requeues {
                ex.query(&lock_busy, &row_params).await
            } else {
                Ok(Vec::new())
            }
        };
        let (_, locked, busy) = futures::try_join!(
            ex.query(&lock_groups, &lock_params),
            ex.query(&lock_rows, &row_params),
            busy,
        )
        .map_err(pg)?;
        let rows = locked
            .iter()
            .map(if wide { seen::locked } else { plan::locked })
            .collect::<Result<HashMap<_, _>>>()?;
        let mut in_flight: HashMap<String, HashSet<i64>> = HashMap::new();
        let mut heads_before = Vec::new();
        for row in &busy {
            let id: i64 = row.try_get(0).map_err(pg)?;
            let taken: bool = row.try_get(2).map_err(pg)?;
            if taken {
                let group: String = row.try_get(1).map_err(pg)?;
                in_flight.entry(group).or_default().insert(id);
            } else {
                heads_before.push(id);
            }
        }
        // The leases the batch may end: their rows go once no record holds them.
        let tokens = codec::tokens(
            rows.values()
                .filter_map(|record| record.lease.map(|lease| lease.token)),
        );
        let plan = Plan::new(rows, in_flight, outcomes);
        let arrays = plan.arrays();
        let apply_params = arrays.params();
        let (groups, mut members) = plan.groups();
        members.extend(heads_before);
        let refresh_params: [Param<'_>; 2] = [&groups, &members];
        let claim_params = claim.map(|c| {
            (
                millis(c.now),
                limit(c.limit),
                token(c.lease.token),
                millis(c.lease.until),
            )
        });
        let writes = async {
            if plan.is_empty() {
                Ok(0)
            } else {
                ex.execute(&apply, &apply_params).await
            }
        };
        let forget_params: [Param<'_>; 1] = [&tokens];
        let forgotten = async {
            if tokens.is_empty() || plan.is_empty() {
                Ok(0)
            } else {
                ex.execute(&forget, &forget_params).await
            }
        };
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
                    let params: [Param<'_>; 4] = [now, n, t, until];
                    let rows = ex.query(&claim_st, &params).await?;
                    Ok(Some(rows))
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
        // A person's change (a retry, requeue or discard, from this process or any other)
        // may make a record due or free a group: every runner listening on the outbox hears
        // it when this transaction commits, as it hears an enqueue, instead of at its next
        // safety poll. A runner's reports on its own claims need no such word.
        let channel = [&self.config.schema as Param<'_>];
        let announce = async {
            if plan.wakes {
                ex.query(&notify, &channel).await.map(Some)
            } else {
                Ok(None)
            }
        };
        let sent = self.clock.host_now();
        // Sent together, run in order: the writes, the leases they ended, the head flags they
        // moved, the claim.
        let (_, _, _, claimed_rows, reading, _) =
            futures::try_join!(writes, forgotten, promote, take, read_clock, announce)
                .map_err(pg)?;
        if let Some(reading) = reading {
            self.observe(sent, &reading)?;
        }
        let claimed = match claimed_rows {
            Some(rows) => {
                let (records, bad) = claimed(&rows)?;
                unreadable::set_aside(&self, &ex, &bad).await?;
                records
            }
            None => Vec::new(),
        };
        tx.commit().await.map_err(pg)?;
        Ok(Round {
            applied: Applied {
                skipped: plan.skipped,
            },
            claimed,
        })
    }

    pub(crate) async fn renew(self: Arc<Self>, ids: Vec<RecordId>, lease: Lease) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = ids.into_iter().map(codec::id).collect();
        let client = self.client().await?;
        Exec::Pooled(&client)
            .run(
                &self.sql.renew,
                &[&ids, &token(lease.token), &millis(lease.until)],
            )
            .await
            .map_err(pg)?;
        Ok(())
    }

    pub(crate) async fn expired(self: Arc<Self>, now: Millis, n: usize) -> Result<Vec<Record>> {
        self.records(&self.sql.expired, &[&millis(now), &limit(n)])
            .await
    }

    pub(crate) async fn stepped_back(
        self: Arc<Self>,
        now: Millis,
        n: usize,
    ) -> Result<Vec<Record>> {
        self.records(&self.sql.stepped_back, &[&millis(now), &limit(n)])
            .await
    }

    pub(crate) async fn get(self: Arc<Self>, id: RecordId) -> Result<Option<Record>> {
        if i64::try_from(id.0).is_err() {
            return Ok(None);
        }
        let records = self.records(&self.sql.get, &[&codec::id(id)]).await?;
        Ok(records.into_iter().next())
    }

    pub(crate) async fn list(self: Arc<Self>, query: ListQuery) -> Result<Vec<Record>> {
        let after = query.after.map_or(0, codec::id);
        let state = query.state.map(state);
        self.records(
            &self.sql.list,
            &[&after, &state, &query.group, &limit(query.limit)],
        )
        .await
    }

    pub(crate) async fn tombstones(
        self: Arc<Self>,
        after: Option<RecordId>,
        n: usize,
    ) -> Result<Vec<Tombstone>> {
        let after = after.map_or(0, codec::id);
        let client = self.client().await?;
        let rows = Exec::Pooled(&client)
            .rows(&self.sql.tombstones, &[&after, &limit(n)])
            .await
            .map_err(pg)?;
        rows.iter().map(codec::tombstone).collect()
    }

    pub(crate) async fn stats(self: Arc<Self>) -> Result<Stats> {
        let client = self.client().await?;
        let rows = Exec::Pooled(&client)
            .rows(&self.sql.stats, &[])
            .await
            .map_err(pg)?;
        let row = rows
            .first()
            .ok_or_else(|| corrupt("the stats query returned no row"))?;
        let n = |i: usize| -> Result<u64> {
            let v: Option<i64> = row.try_get(i).map_err(pg)?;
            u64::try_from(v.unwrap_or(0)).map_err(|_| corrupt("a negative count"))
        };
        let t = |i: usize| -> Result<Option<Millis>> { time(row.try_get(i).map_err(pg)?, "time") };
        Ok(Stats {
            pending: n(0)?,
            retrying: n(1)?,
            in_flight: n(2)?,
            needs_attention: n(3)?,
            rejected: n(4)?,
            oldest_created_at: t(5)?,
            discarded: n(6)?,
            delivered: n(7)?,
            held: n(8)?,
            next_due: t(9)?,
            halt: halt(row.try_get(10).map_err(pg)?, row.try_get(11).map_err(pg)?)?,
            superseded: n(12)?,
            scheduled: n(13)?,
            payload_bytes: n(14)?,
            link: None,
        })
    }

    pub(crate) async fn next_due(self: Arc<Self>) -> Result<Option<Millis>> {
        let client = self.client().await?;
        let rows = Exec::Pooled(&client)
            .rows(&self.sql.next_due, &[])
            .await
            .map_err(pg)?;
        match rows.first() {
            None => Ok(None),
            Some(row) => time(row.try_get(0).map_err(pg)?, "deadline"),
        }
    }

    pub(crate) async fn halt(self: Arc<Self>) -> Result<Option<Halt>> {
        let client = self.client().await?;
        let rows = Exec::Pooled(&client)
            .rows(&self.sql.halt, &[])
            .await
            .map_err(pg)?;
        let row = rows
            .first()
            .ok_or_else(|| corrupt("the meta table has no row"))?;
        halt(row.try_get(0).map_err(pg)?, row.try_get(1).map_err(pg)?)
    }

    pub(crate) async fn set_halt(self: Arc<Self>, halt: Option<Halt>) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        self.write_halt(&Exec::Transaction(&tx), halt.as_ref())
            .await?;
        tx.commit().await.map_err(pg)
    }

    /// Clears the halt if it is `seen`: the meta row is read locked, so no halt is written
    /// between the comparison and the clearing. Returns `seen` when it cleared it, else the
    /// halt found (in its stored form).
    pub(crate) async fn clear_halt_if(self: Arc<Self>, seen: Halt) -> Result<Option<Halt>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let ex = Exec::Transaction(&tx);
        let rows = ex.rows(&self.sql.halt_locked, &[]).await.map_err(pg)?;
        let row = rows
            .first()
            .ok_or_else(|| corrupt("the meta table has no row"))?;
        let found = halt(row.try_get(0).map_err(pg)?, row.try_get(1).map_err(pg)?)?;
        // The halt shown is compared in the form it is stored in (its reason may have held a
        // NUL, which the column cannot): a runner clearing the halt it wrote finds it, and is
        // answered with the halt as it gave it.
        let stored = Halt {
            reason: text(&seen.reason),
            since: seen.since,
        };
        let cleared = found.as_ref() == Some(&stored);
        if cleared {
            self.write_halt(&ex, None).await?;
        }
        tx.commit().await.map_err(pg)?;
        Ok(if cleared { Some(seen) } else { found })
    }

    /// Writes the halt, or clears it, in the caller's transaction.
    async fn write_halt(&self, ex: &Exec<'_>, halt: Option<&Halt>) -> Result<()> {
        let (reason, since) = match halt {
            Some(h) => (Some(text(&h.reason)), Some(millis(h.since))),
            None => (None, None),
        };
        let set = ex.prepare(&self.sql.set_halt).await.map_err(pg)?;
        ex.execute(&set, &[&reason, &since]).await.map_err(pg)?;
        if halt.is_none() {
            // A resume: the runners of other processes are told, as of a person's retry, in
            // the clearing's transaction (a clearing that returned an error was not made).
            let notify = ex.prepare(&self.sql.notify).await.map_err(pg)?;
            ex.query(&notify, &[&self.config.schema])
                .await
                .map_err(pg)?;
        }
        Ok(())
    }

    pub(crate) async fn prune(self: Arc<Self>, older_than: Millis) -> Result<u64> {
        let sql = &self.sql;
        let at = millis(older_than);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let ex = Exec::Transaction(&tx);
        // Rejected records hold no place in their group, so removing them promotes no one.
        let rows = ex.rows(&sql.prune_rejected, &[&at]).await.map_err(pg)?;
        let rejected: i64 = rows
            .first()
            .ok_or_else(|| corrupt("the prune returned no count"))?
            .try_get(0)
            .map_err(pg)?;
        let rejected = u64::try_from(rejected).map_err(|_| corrupt("a negative count"))?;
        let buried = ex.run(&sql.prune_tombstones, &[&at]).await.map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        // Tidying the error counts is a transaction of its own, holding no record; when a
        // counter row is busy it is left for the next prune (see `compaction`).
        let tx = client.transaction().await.map_err(pg)?;
        let ex = Exec::Transaction(&tx);
        let mut tidied = Ok(());
        for statement in crate::common_errors::compaction(&self.config.schema) {
            tidied = ex.run(&statement, &[]).await.map(|_| ());
            if tidied.is_err() {
                break;
            }
        }
        match tidied {
            Ok(()) => tx.commit().await.map_err(pg)?,
            Err(err) if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                tx.rollback().await.map_err(pg)?;
            }
            Err(err) => return Err(pg(err)),
        }
        Ok(rejected + buried)
    }
}

/// Claimed records in the contract's order, `(deadline, id)` (`RETURNING` follows none).
/// The stored ids of the rows that cannot be decoded come apart, to be set aside.
pub(crate) fn claimed(rows: &[Row]) -> Result<(Vec<Record>, Vec<i64>)> {
    let unreadable::Split {
        mut records,
        bad_ids,
        ..
    } = unreadable::split(rows)?;
    records.sort_by_key(|r| (r.next_attempt_at, r.id));
    Ok((records, bad_ids))
}

fn halt(reason: Option<String>, since: Option<i64>) -> Result<Option<Halt>> {
    match (reason, since) {
        (Some(reason), Some(since)) => Ok(Some(Halt {
            reason,
            since: u64::try_from(since).map_err(|_| corrupt("a negative halt time"))?,
        })),
        _ => Ok(None),
    }
}
