//! How a batch of transitions becomes one set-based write: every guard checked with
//! [`Guard::admits`] against the locked rows (and the batch's own earlier changes), then each
//! record's last change gathered into the arrays the `apply` statement takes.

use std::collections::{BTreeMap, HashMap, HashSet};

use outbox_core::{
    Change, Guard, History, Lease, Millis, Progress, Record, RecordId, Result, State, Transition,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::codec::{self, count, millis, state, text};
use crate::error::pg;

/// A locked row as the guards see it: the fields a guard reads and the history (a requeue
/// keeps it, and writes it back whole), the rest left empty.
pub(crate) fn locked(row: &Row) -> Result<(i64, Record)> {
    let id: i64 = row.try_get(0).map_err(pg)?;
    let group: Option<String> = row.try_get(1).map_err(pg)?;
    let code: i16 = row.try_get(2).map_err(pg)?;
    let token: Option<i64> = row.try_get(3).map_err(pg)?;
    let until: Option<i64> = row.try_get(4).map_err(pg)?;
    let history: Option<Vec<u8>> = row.try_get(5).map_err(pg)?;
    let state = codec::stored_state(code, token.is_some())?;
    let mut record = Record::fresh(codec::record_id(id)?, group, Vec::new(), String::new(), 0);
    record.state = state;
    record.history = history.as_deref().map(History::decode).unwrap_or_default();
    record.lease = token.map(|t| Lease {
        token: codec::untoken(t),
        until: until.and_then(|u| u64::try_from(u).ok()).unwrap_or(0),
    });
    Ok((id, record))
}

/// The last change a batch makes to one record (a requeue is an update that keeps the id).
enum Op {
    Delete,
    Discard {
        reason: String,
        at: Millis,
        attempts: u32,
    },
    Update(Progress),
}

/// What an `apply` writes, decided before anything is written.
#[derive(Default)]
pub(crate) struct Plan {
    /// Each changed record's last change, in the order of that change.
    ops: Vec<Option<(i64, Op)>>,
    /// Where each record's entry sits in `ops`.
    at: HashMap<i64, usize>,
    /// Changed records by group: each group's head flags are refreshed once, after them.
    pub(crate) touched: BTreeMap<String, Vec<i64>>,
    /// Transitions whose guard did not hold, in order.
    pub(crate) skipped: Vec<RecordId>,
    /// Whether a change not made by a runner on its own claim (a person's retry, requeue or
    /// discard, a recovery) was kept: the runners of every process are then told.
    pub(crate) wakes: bool,
}

impl Plan {
    /// Checks each transition against `rows` (the locked records, updated as the batch goes)
    /// and keeps the ones that apply. `in_flight` holds the in-flight records of the batch's
    /// groups (only read when the batch requeues): a requeue waits while its group has one.
    pub(crate) fn new(
        mut rows: HashMap<i64, Record>,
        mut in_flight: HashMap<String, HashSet<i64>>,
        transitions: Vec<Transition>,
    ) -> Plan {
        let mut plan = Plan::default();
        for Transition { id, guard, change } in transitions {
            let key = codec::id(id);
            let Some(record) = rows.get_mut(&key).filter(|r| guard.admits(r)) else {
                plan.skipped.push(id);
                continue;
            };
            let group = record.group.clone();
            let was_in_flight = record.state == State::InFlight;
            let op = match change {
                Change::Delivered => Op::Delete,
                Change::Discard {
                    reason,
                    at,
                    attempts,
                } => Op::Discard {
                    reason,
                    at,
                    attempts,
                },
                Change::Requeue { at } => {
                    let busy = group
                        .as_ref()
                        .and_then(|g| in_flight.get(g))
                        .is_some_and(|members| !members.is_empty());
                    if !outbox_core::machine::admits_requeue(record, busy) {
                        plan.skipped.push(id);
                        continue;
                    }
                    // A fresh budget, due at `at`; id, payload, key, group and creation time
                    // stay.
                    record.requeue(at);
                    Op::Update(record.progress())
                }
                Change::Update(progress) => {
                    if !outbox_core::machine::admits_update(record, &progress) {
                        plan.skipped.push(id);
                        continue;
                    }
                    record.set_progress(progress.clone());
                    Op::Update(progress)
                }
            };
            if matches!(op, Op::Delete | Op::Discard { .. }) {
                // Gone: later transitions of the batch find no record.
                rows.remove(&key);
            }
            if was_in_flight {
                // Every change takes a record out of flight.
                if let Some(members) = group.as_ref().and_then(|g| in_flight.get_mut(g)) {
                    members.remove(&key);
                }
            }
            plan.wakes |= !matches!(guard, Guard::Lease(_));
            if let Some(previous) = plan.at.insert(key, plan.ops.len()) {
                plan.ops[previous] = None;
            }
            plan.ops.push(Some((key, op)));
            if let Some(group) = group {
                plan.touched.entry(group).or_default().push(key);
            }
        }
        plan
    }

    /// True when the batch writes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The parameters of the `apply` statement.
    pub(crate) fn arrays(&self) -> Arrays {
        let mut a = Arrays::default();
        for (id, op) in self.ops.iter().flatten() {
            let id = *id;
            match op {
                Op::Delete => a.delivered.push(id),
                Op::Discard {
                    reason,
                    at,
                    attempts,
                } => {
                    a.discard.push(id);
                    a.reasons.push(text(reason));
                    a.discarded_at.push(millis(*at));
                    a.spent.push(count(*attempts));
                }
                Op::Update(p) => {
                    a.update.push(id);
                    a.states.push(state(p.state));
                    a.attempts.push(count(p.attempts));
                    a.unanswered.push(count(p.unanswered));
                    a.interrupted.push(count(p.interrupted));
                    a.last_at.push(p.last_attempt_at.map(millis));
                    a.next_at.push(p.next_attempt_at.map(millis));
                    a.errors.push(p.last_error.as_deref().map(text));
                    a.histories.push(codec::history(&p.history));
                }
            }
        }
        a
    }

    /// The touched groups and their changed records, as the refresh statement takes them.
    pub(crate) fn groups(&self) -> (Vec<&str>, Vec<i64>) {
        let groups = self.touched.keys().map(String::as_str).collect();
        let ids = self.touched.values().flatten().copied().collect();
        (groups, ids)
    }
}

/// The arrays of one `apply` statement, one list per kind of change.
#[derive(Default)]
pub(crate) struct Arrays {
    delivered: Vec<i64>,
    discard: Vec<i64>,
    reasons: Vec<String>,
    discarded_at: Vec<i64>,
    spent: Vec<i64>,
    update: Vec<i64>,
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
    /// In the order of the statement's `$1` to `$14`.
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 14] {
        [
            &self.delivered,
            &self.discard,
            &self.reasons,
            &self.discarded_at,
            &self.spent,
            &self.update,
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

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Attempt, AttemptClass};

    fn rows(records: &[Record]) -> HashMap<i64, Record> {
        records
            .iter()
            .map(|r| (codec::id(r.id), r.clone()))
            .collect()
    }

    fn in_flight(id: u64, token: u64, group: Option<&str>) -> Record {
        let mut r = Record::fresh(RecordId(id), group.map(Into::into), vec![], "k".into(), 0);
        r.state = State::InFlight;
        r.lease = Some(Lease { token, until: 10 });
        r
    }

    fn progress(state: State) -> Progress {
        Progress {
            state,
            attempts: 1,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: Some(5),
            next_attempt_at: (state == State::Retrying).then_some(9),
            last_error: Some("no".into()),
            history: one_attempt(),
        }
    }

    fn one_attempt() -> History {
        let mut history = History::default();
        history.push(Attempt::new(5, AttemptClass::Rejected, "HTTP 422: no"));
        history
    }

    #[test]
    fn guards_follow_the_batch_and_each_record_keeps_its_last_change() {
        let records = [
            in_flight(1, 7, Some("g")),
            in_flight(2, 7, None),
            in_flight(4, 7, Some("h")),
        ];
        let mut rejected = Record::fresh(RecordId(5), Some("h".into()), vec![], "k".into(), 0);
        rejected.state = State::Rejected;
        let mut all = rows(&records);
        all.insert(5, rejected);
        let busy = HashMap::from([
            ("g".to_owned(), HashSet::from([1])),
            ("h".to_owned(), HashSet::from([4])),
        ]);
        let requeue = |id| Transition {
            id: RecordId(id),
            guard: Guard::Idle,
            change: Change::Requeue { at: 20 },
        };
        let plan = Plan::new(
            all,
            busy,
            vec![
                // A stale lease: skipped.
                Transition {
                    id: RecordId(1),
                    guard: Guard::Lease(8),
                    change: Change::Delivered,
                },
                // Rejected under its lease, then requeued by a person in the same batch: its
                // group has nothing else in flight once it reported.
                Transition {
                    id: RecordId(1),
                    guard: Guard::Lease(7),
                    change: Change::Update(progress(State::Rejected)),
                },
                requeue(1),
                // Requeue of a record that is not rejected: skipped.
                requeue(2),
                Transition {
                    id: RecordId(2),
                    guard: Guard::Lease(7),
                    change: Change::Delivered,
                },
                // Gone already.
                Transition {
                    id: RecordId(2),
                    guard: Guard::Idle,
                    change: Change::Delivered,
                },
                Transition {
                    id: RecordId(3),
                    guard: Guard::Idle,
                    change: Change::Delivered,
                },
                // Its group has record 4 in flight: skipped, until 4 reported.
                requeue(5),
                Transition {
                    id: RecordId(4),
                    guard: Guard::Lease(7),
                    change: Change::Delivered,
                },
                requeue(5),
            ],
        );
        assert_eq!(
            plan.skipped,
            vec![
                RecordId(1),
                RecordId(2),
                RecordId(2),
                RecordId(3),
                RecordId(5)
            ]
        );
        let a = plan.arrays();
        assert_eq!(
            a.update,
            vec![1, 5],
            "the requeues, as updates that keep the id"
        );
        assert_eq!(a.states, vec![state(State::Pending); 2]);
        assert_eq!(a.next_at, vec![Some(20); 2]);
        assert_eq!((a.attempts[0], a.errors[0].clone()), (0, None));
        assert_eq!(
            a.histories[0],
            Some(one_attempt().encode()),
            "a requeue keeps the history"
        );
        assert_eq!(a.histories[1], None, "record 5 had no attempts");
        assert_eq!(a.delivered, vec![2, 4]);
        assert_eq!(plan.groups(), (vec!["g", "h"], vec![1, 1, 4, 5]));
        assert!(plan.wakes, "a person's requeue was kept");
    }

    #[test]
    fn only_a_kept_change_outside_a_runners_own_lease_wakes_the_fleet() {
        let lease = |id, guard| Transition {
            id: RecordId(id),
            guard,
            change: Change::Delivered,
        };
        let runner = Plan::new(
            rows(&[in_flight(1, 7, None)]),
            HashMap::new(),
            vec![lease(1, Guard::Lease(7))],
        );
        assert!(!runner.wakes, "a runner's own report");
        // A person's discard of a record that is in flight is refused: nothing changed.
        let refused = Plan::new(
            rows(&[in_flight(1, 7, None)]),
            HashMap::new(),
            vec![lease(1, Guard::Idle)],
        );
        assert!(!refused.wakes && refused.skipped == vec![RecordId(1)]);
        let mut idle = in_flight(2, 7, None);
        idle.state = State::NeedsAttention;
        idle.lease = None;
        let person = Plan::new(
            rows(&[idle]),
            HashMap::new(),
            vec![Transition {
                id: RecordId(2),
                guard: Guard::Idle,
                change: Change::Update(progress(State::Retrying)),
            }],
        );
        assert!(person.wakes, "a person's retry");
    }
}
