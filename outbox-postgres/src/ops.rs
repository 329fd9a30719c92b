//! The store's operations as SQL: what each [`Store`](outbox_core::Store) method sends, on
//! which connection, in which transaction.
//!
//! Only pending or retrying *group heads* with a deadline carry the `claimable` flag, so "what
//! is due" is one range scan of a partial index. Every change that can move a group's head
//! (an enqueue into the group, a record leaving it) runs under that group's advisory lock,
//! taken in key order, and refreshes the flags before it commits. An enqueue with coalescing
//! keys also takes a lock per key, in the same statement and the same order, so the enqueues
//! of one key are decided one after the other.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::Pool;
use outbox_core::{
    Applied, Change, Claim, Enqueued, Halt, Lease, ListQuery, Millis, NewRecord, Record, RecordId,
    Result, Round, State, Stats, Tombstone, Transition, Unreadable,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::clock::ServerClock;
use crate::coalesce::{self, Slot};
use crate::codec::{self, millis, state, text, token};
use crate::config::PgConfig;
use crate::error::{corrupt, pg, pool as pool_error};
use crate::plan::{self, Plan};
use crate::seen;
use crate::sql::{Exec, Params, Sql};
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
}

type Param<'a> = &'a (dyn ToSql + Sync);

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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
fn allocated(rows: &[Row], expected: usize) -> Result<Vec<i64>> {
    let mut ids = rows
        .iter()
        .map(|row| row.try_get(0).map_err(pg))
        .collect::<Result<Vec<i64>>>()?;
    ids.sort_unstable();
    if ids.len() != expected {
        return Err(corrupt("the id sequence returned too few values"));
    }
    Ok(ids)
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

    fn observe(&self, sent: Millis, rows: &[Row]) -> Result<()> {
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
        Ok(unreadable::split(&rows)?.0)
    }

    /// The enqueue itself, inside a transaction that the caller commits: the batch is checked
    /// first ([`NewRecord::validate_all`]), so a refused batch writes nothing. A batch with no
    /// coalescing key takes the set-based path (no statement more than before coalescing
    /// existed); one with a coalescing key is decided under its keys' locks
    /// ([`Core::insert_coalescing`]).
    pub(crate) async fn insert(
        &self,
        tx: &Exec<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        NewRecord::validate_all(&records, self.config.max_payload)?;
        if records.is_empty() {
            return Ok(Enqueued::default());
        }
        if records.iter().any(|r| r.replaces.is_some()) {
            return self.insert_coalescing(tx, records, now).await;
        }
        let sql = &self.sql;
        // Cached on pooled connections; prepared together (one round trip) in a caller's
        // transaction.
        let (lock, members, allocate, insert, notify) = futures::try_join!(
            tx.prepare(&sql.lock_named_groups),
            tx.prepare(&sql.members),
            tx.prepare(&sql.allocate_ids),
            tx.prepare(&sql.insert),
            tx.prepare(&sql.notify),
        )
        .map_err(pg)?;
        let groups = distinct(records.iter().map(|r| r.group.as_deref()));
        let n = records.len() as i64;
        // Group locks come first: a group's ids are then allocated and committed in the same
        // order, so no runner can see a later record of a group before an earlier one. The
        // three statements go out together and run in order.
        let lock_params: [Param<'_>; 2] = [&groups, &self.group_seed];
        let member_params: [Param<'_>; 1] = [&groups];
        let allocate_params: [Param<'_>; 1] = [&n];
        let (_, member_rows, id_rows) = futures::try_join!(
            tx.query(&lock, &lock_params),
            tx.query(&members, &member_params),
            tx.query(&allocate, &allocate_params),
        )
        .map_err(pg)?;
        let mut occupied: BTreeSet<String> = BTreeSet::new();
        for row in member_rows {
            occupied.insert(row.try_get(0).map_err(pg)?);
        }
        let ids = allocated(&id_rows, records.len())?;
        // Only the first record of a group with no member left is its head.
        let claimable: Vec<bool> = records
            .iter()
            .map(|record| match &record.group {
                None => true,
                Some(group) => occupied.insert(group.clone()),
            })
            .collect();
        let grps: Vec<Option<&str>> = records.iter().map(|r| r.group.as_deref()).collect();
        let payloads: Vec<&[u8]> = records.iter().map(|r| r.payload.as_slice()).collect();
        let keys: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
        let versions: Vec<Option<&str>> = records
            .iter()
            .map(|r| r.expected_version.as_deref())
            .collect();
        let replaces: Vec<Option<&str>> = vec![None; records.len()];
        let absorbed: Vec<i64> = vec![0; records.len()];
        let at = millis(now);
        // The NOTIFY reaches listeners when the transaction commits, and only then.
        let insert_params: [Param<'_>; 9] = [
            &ids, &grps, &payloads, &keys, &at, &claimable, &versions, &replaces, &absorbed,
        ];
        let notify_params: [Param<'_>; 1] = [&self.config.schema];
        futures::try_join!(
            tx.execute(&insert, &insert_params),
            tx.query(&notify, &notify_params),
        )
        .map_err(pg)?;
        Ok(Enqueued::fresh(
            ids.into_iter()
                .map(codec::record_id)
                .collect::<Result<_>>()?,
        ))
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
    ///    [`Record::replaceable_by`](outbox_core::Record::replaceable_by)), then ids allocated
    ///    for the fresh records only;
    /// 4. the fresh records inserted and the replaced ones rewritten, each counting the writes
    ///    it absorbed (no shared counter row, which would make every coalescing enqueue and
    ///    every delivering round wait on each other's commit), and the NOTIFY sent, together.
    async fn insert_coalescing(
        &self,
        tx: &Exec<'_>,
        records: Vec<NewRecord>,
        now: Millis,
    ) -> Result<Enqueued> {
        let sql = &self.sql;
        let (lock, tails, latest, lock_candidates, allocate, insert, rewrite, notify) =
            futures::try_join!(
                tx.prepare(&sql.lock_groups_and_keys),
                tx.prepare(&sql.group_tails),
                tx.prepare(&sql.latest_by_key),
                tx.prepare(&sql.lock_candidates),
                tx.prepare(&sql.allocate_ids),
                tx.prepare(&sql.insert),
                tx.prepare(&sql.rewrite),
                tx.prepare(&sql.notify),
            )
            .map_err(pg)?;
        let groups = distinct(records.iter().map(|r| r.group.as_deref()));
        let coalescing = distinct(records.iter().map(|r| r.replaces.as_deref()));
        let lock_params: [Param<'_>; 4] =
            [&groups, &self.group_seed, &coalescing, &self.coalesce_seed];
        let group_params: [Param<'_>; 1] = [&groups];
        let key_params: [Param<'_>; 1] = [&coalescing];
        let (_, tail_rows, mut latest_rows) = futures::try_join!(
            tx.query(&lock, &lock_params),
            tx.query(&tails, &group_params),
            tx.query(&latest, &key_params),
        )
        .map_err(pg)?;
        let mut last_members = HashMap::new();
        for row in &tail_rows {
            let group: String = row.try_get(0).map_err(pg)?;
            if let Some(id) = row.try_get::<_, Option<i64>>(1).map_err(pg)? {
                last_members.insert(group, codec::record_id(id)?);
            }
        }
        // The (key, group) pairs of the batch: a record can only be replaced by a write with
        // its key and its group.
        let wanted: HashSet<(&str, Option<&str>)> = records
            .iter()
            .filter_map(|r| Some((r.replaces.as_deref()?, r.group.as_deref())))
            .collect();
        let candidates = loop {
            let found = latest_rows
                .iter()
                .map(codec::record)
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
            let lock_params: [Param<'_>; 1] = [&lockable];
            let locked_rows = tx.query(&lock_candidates, &lock_params).await.map_err(pg)?;
            if locked_rows.len() == lockable.len() {
                let mut locked = locked_rows
                    .iter()
                    .map(|row| codec::record(row).map(|r| (r.id, r)))
                    .collect::<Result<HashMap<_, _>>>()?;
                break found
                    .into_iter()
                    .map(|r| locked.remove(&r.id).unwrap_or(r))
                    .collect();
            }
            // A candidate left meanwhile: look again, from a snapshot without it.
            latest_rows = tx.query(&latest, &key_params).await.map_err(pg)?;
        };
        let decided = coalesce::decide(records, now, candidates, last_members);
        let fresh_ids = if decided.fresh.is_empty() {
            Vec::new()
        } else {
            let n = decided.fresh.len() as i64;
            let allocate_params: [Param<'_>; 1] = [&n];
            let rows = tx.query(&allocate, &allocate_params).await.map_err(pg)?;
            allocated(&rows, decided.fresh.len())?
        };
        let fresh = &decided.fresh;
        let grps: Vec<Option<&str>> = fresh.iter().map(|f| f.record.group.as_deref()).collect();
        let payloads: Vec<&[u8]> = fresh.iter().map(|f| f.record.payload.as_slice()).collect();
        let keys: Vec<&str> = fresh.iter().map(|f| f.record.key.as_str()).collect();
        let claimable: Vec<bool> = fresh.iter().map(|f| f.head).collect();
        let versions: Vec<Option<&str>> = fresh
            .iter()
            .map(|f| f.record.expected_version.as_deref())
            .collect();
        let replaces: Vec<Option<&str>> =
            fresh.iter().map(|f| f.record.replaces.as_deref()).collect();
        let absorbed: Vec<i64> = fresh.iter().map(|f| codec::millis(f.absorbed)).collect();
        let at = millis(now);
        let insert_params: [Param<'_>; 9] = [
            &fresh_ids, &grps, &payloads, &keys, &at, &claimable, &versions, &replaces, &absorbed,
        ];
        let rewritten = &decided.rewritten;
        let rewrite_ids: Vec<i64> = rewritten.keys().map(|id| codec::id(*id)).collect();
        let rewrite_payloads: Vec<&[u8]> = rewritten
            .values()
            .map(|(r, _)| r.payload.as_slice())
            .collect();
        let rewrite_keys: Vec<&str> = rewritten.values().map(|(r, _)| r.key.as_str()).collect();
        let rewrite_versions: Vec<Option<&str>> = rewritten
            .values()
            .map(|(r, _)| r.expected_version.as_deref())
            .collect();
        let rewrite_counts: Vec<i64> = rewritten.values().map(|(_, n)| codec::millis(*n)).collect();
        let rewrite_params: [Param<'_>; 6] = [
            &rewrite_ids,
            &rewrite_payloads,
            &rewrite_keys,
            &rewrite_versions,
            &rewrite_counts,
            &at,
        ];
        let notify_params: [Param<'_>; 1] = [&self.config.schema];
        let inserting = async {
            if fresh_ids.is_empty() {
                Ok(0)
            } else {
                tx.execute(&insert, &insert_params).await
            }
        };
        let rewriting = async {
            if rewrite_ids.is_empty() {
                Ok(0)
            } else {
                tx.execute(&rewrite, &rewrite_params).await
            }
        };
        futures::try_join!(inserting, rewriting, tx.query(&notify, &notify_params)).map_err(pg)?;
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
    /// then the claim, in one transaction and one commit.
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
        let (lock_groups, lock_rows, lock_busy, apply, refresh, claim_st, clock) =
            futures::try_join!(
                ex.prepare(&sql.lock_groups_of),
                ex.prepare(&lock_rows_sql),
                ex.prepare(&sql.lock_busy),
                ex.prepare(&sql.apply),
                ex.prepare(&sql.refresh_groups),
                ex.prepare(&sql.claim),
                ex.prepare(&sql.server_time),
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
            let state: i16 = row.try_get(2).map_err(pg)?;
            if state == codec::state(State::InFlight) {
                let group: String = row.try_get(1).map_err(pg)?;
                in_flight.entry(group).or_default().insert(id);
            } else {
                heads_before.push(id);
            }
        }
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
        let sent = self.clock.host_now();
        // Sent together, run in order: the writes, the head flags they moved, the claim.
        let (_, _, claimed_rows, reading) =
            futures::try_join!(writes, promote, take, read_clock).map_err(pg)?;
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
        let (reason, since) = match &halt {
            Some(h) => (Some(text(&h.reason)), Some(millis(h.since))),
            None => (None, None),
        };
        let client = self.client().await?;
        Exec::Pooled(&client)
            .run(&self.sql.set_halt, &[&reason, &since])
            .await
            .map_err(pg)?;
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
        Ok(rejected + buried)
    }
}

/// Claimed records in the contract's order, `(deadline, id)` (`RETURNING` follows none).
/// The rows that cannot be decoded come apart, to be set aside.
fn claimed(rows: &[Row]) -> Result<(Vec<Record>, Vec<Unreadable>)> {
    let (mut records, bad) = unreadable::split(rows)?;
    records.sort_by_key(|r| (r.next_attempt_at, r.id));
    Ok((records, bad))
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
