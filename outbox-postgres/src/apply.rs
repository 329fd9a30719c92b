//! How `apply` writes a batch: guards checked against the locked rows, then every write sent
//! pipelined, each touched group's head flags refreshed once.

use std::collections::{BTreeMap, HashMap};

use outbox_core::{Change, Guard, RecordId, Result, State, Transition};
use tokio_postgres::types::ToSql;
use tokio_postgres::Statement;

use crate::codec::{self, count, millis, state, token};
use crate::error::pg;
use crate::sql::Exec;

/// A locked row as `apply` sees it while it works through a batch.
pub(crate) struct Current {
    pub(crate) group: Option<String>,
    pub(crate) state: State,
    pub(crate) token: Option<i64>,
}

/// The prepared statements of one `apply`.
pub(crate) struct Statements {
    pub(crate) lock_groups: Statement,
    pub(crate) lock_rows: Statement,
    pub(crate) delete: Statement,
    pub(crate) discard: Statement,
    pub(crate) update: Statement,
    pub(crate) refresh: Statement,
    pub(crate) count: Statement,
}

/// One write of an `apply`, with its parameters as stored.
enum Op {
    Delete(i64),
    Discard(i64, String, i64, i64),
    Update(i64, i16, [i64; 3], Option<i64>, Option<i64>, Option<String>),
}

/// What an `apply` writes, decided before anything is written.
#[derive(Default)]
pub(crate) struct Plan {
    ops: Vec<Op>,
    /// Changed records by group: each group's head flags are refreshed once, after them.
    touched: BTreeMap<String, Vec<i64>>,
    delivered: i64,
    pub(crate) skipped: Vec<RecordId>,
}

impl Plan {
    /// Turns a batch of transitions into the statements that apply it, checking each guard
    /// against the locked rows (and the batch's own earlier changes).
    pub(crate) fn new(rows: &mut HashMap<i64, Current>, transitions: Vec<Transition>) -> Plan {
        let mut plan = Plan::default();
        for transition in transitions {
            let id = codec::id(transition.id);
            let holds = rows.get(&id).is_some_and(|current| match transition.guard {
                Guard::Lease(t) => {
                    current.state == State::InFlight && current.token == Some(token(t))
                }
                Guard::Idle => current.state != State::InFlight,
            });
            if !holds {
                plan.skipped.push(transition.id);
                continue;
            }
            let group = rows.get(&id).and_then(|c| c.group.clone());
            match transition.change {
                Change::Delivered => {
                    rows.remove(&id);
                    plan.delivered += 1;
                    plan.ops.push(Op::Delete(id));
                }
                Change::Discard {
                    reason,
                    at,
                    attempts,
                } => {
                    rows.remove(&id);
                    plan.ops
                        .push(Op::Discard(id, reason, millis(at), count(attempts)));
                }
                Change::Update(progress) => {
                    rows.insert(
                        id,
                        Current {
                            group: group.clone(),
                            state: progress.state,
                            token: None,
                        },
                    );
                    plan.ops.push(Op::Update(
                        id,
                        state(progress.state),
                        [
                            count(progress.attempts),
                            count(progress.unanswered),
                            count(progress.interrupted),
                        ],
                        progress.last_attempt_at.map(millis),
                        progress.next_attempt_at.map(millis),
                        progress.last_error,
                    ));
                }
            }
            if let Some(group) = group {
                plan.touched.entry(group).or_default().push(id);
            }
        }
        plan
    }

    /// Sends every write of the plan pipelined, in order, a bounded number at a time.
    pub(crate) async fn run(&self, tx: &dyn Exec, st: &Statements) -> Result<()> {
        type Param<'a> = &'a (dyn ToSql + Sync);
        let mut writes: Vec<(&Statement, Vec<Param<'_>>)> = Vec::new();
        for op in &self.ops {
            writes.push(match op {
                Op::Delete(id) => (&st.delete, vec![id]),
                Op::Discard(id, reason, at, attempts) => {
                    (&st.discard, vec![id, reason, at, attempts])
                }
                Op::Update(id, state, [attempts, unanswered, interrupted], last, next, error) => (
                    &st.update,
                    vec![
                        id,
                        state,
                        attempts,
                        unanswered,
                        interrupted,
                        last,
                        next,
                        error,
                    ],
                ),
            });
        }
        for (group, ids) in &self.touched {
            writes.push((&st.refresh, vec![group, ids]));
        }
        if self.delivered > 0 {
            writes.push((&st.count, vec![&self.delivered]));
        }
        // join_all polls a short list in order, so the statements go out, and run, in order.
        for chunk in writes.chunks(PIPELINE) {
            let sent = chunk
                .iter()
                .map(|(statement, params)| tx.execute_prepared(statement, params));
            for result in futures::future::join_all(sent).await {
                result.map_err(pg)?;
            }
        }
        Ok(())
    }
}

/// Statements in flight at once on one connection during an `apply`.
const PIPELINE: usize = 16;
