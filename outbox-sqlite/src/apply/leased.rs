//! A round's deliveries under one lease, written by one statement guarded by the lease token:
//! what a draining runner reports, without the general path's read and decode of every row.

use std::collections::{BTreeSet, HashSet};

use outbox_core::{Applied, Change, Guard, Result, State, Transition};
use rusqlite::{params, Connection};

use super::refresh;
use crate::counters::Tally;
use crate::error::db;
use crate::json::json_ids;
use crate::ops::ms;
use crate::row;

/// The rows [`Guard::Lease`]'s rule admits (in flight, under the token `?2`, with a lease),
/// among the ids in the JSON array `?1`: written once, for the read and the delete, which in
/// the same transaction on the one writer connection see the same rows.
///
/// [`Guard::Lease`]: outbox_core::Guard::Lease
macro_rules! leased_rows {
    () => {
        "FROM records WHERE id IN (SELECT value FROM json_each(?1)) \
         AND state = 2 AND lease_token = ?2 AND lease_until IS NOT NULL"
    };
}

/// The records delivered under the lease ([`leased_rows!`]), with what the counters and the
/// group heads need.
const DELIVERED_LEASED_SQL: &str =
    concat!("SELECT id, grp, member, length(payload) ", leased_rows!());

/// Deletes the rows [`DELIVERED_LEASED_SQL`] read. Not one `DELETE … RETURNING`: SQLite keeps a
/// statement journal for that form (see the writer's docs, `worker`), which cost a drain more
/// than reading the rows first.
const DELETE_LEASED_SQL: &str = concat!("DELETE ", leased_rows!());

/// The lease token of a batch made only of deliveries reported under one lease: what a
/// runner's round reports when every record of its last claim was delivered.
pub(super) fn delivered_under_one_lease(transitions: &[Transition]) -> Option<u64> {
    let mut token = None;
    for transition in transitions {
        // An id past SQLite's range names no row; the general path skips it as such.
        if i64::try_from(transition.id.0).is_err() {
            return None;
        }
        match (transition.guard, &transition.change) {
            (Guard::Lease(t), Change::Delivered) if token.is_none_or(|seen| seen == t) => {
                token = Some(t);
            }
            _ => return None,
        }
    }
    token
}

/// [`apply_counted`](super::apply_counted) for a batch of deliveries under the one lease
/// `token`: one query reads what the counters need of the rows that pass the guard (four
/// columns, nothing decoded into records), and one statement deletes them. Counts and skips
/// as the general path does: a record not in flight under the lease (or a repeated id) is
/// skipped, each delivered one leaves the in-flight count and the payload bytes, and the
/// groups it held are refreshed. One difference: a row damaged on disk after its claim, in a
/// column the query does not read (all but its id, group, membership and payload length), is
/// delivered and removed here, where the general path's read of it fails the batch.
pub(super) fn deliver(
    conn: &Connection,
    transitions: &[Transition],
    token: u64,
    tally: &mut Tally,
) -> Result<Applied> {
    let ids = json_ids(transitions.iter().map(|t| ms(t.id.0)));
    let mut stmt = conn.prepare_cached(DELIVERED_LEASED_SQL).map_err(db)?;
    let mut rows = stmt.query(params![ids, row::token(token)]).map_err(db)?;
    let mut gone = HashSet::with_capacity(transitions.len());
    let mut groups = BTreeSet::new();
    let in_flight = Some(i64::from(State::InFlight.code()));
    while let Some(row) = rows.next().map_err(db)? {
        gone.insert(row.get::<_, i64>(0).map_err(db)?);
        if row.get::<_, bool>(2).map_err(db)? {
            if let Some(group) = row.get::<_, Option<String>>(1).map_err(db)? {
                groups.insert(group);
            }
        }
        tally.leave(in_flight, None);
        tally.bytes(-row.get::<_, Option<i64>>(3).map_err(db)?.unwrap_or(0));
        tally.delivered(1);
    }
    drop(rows);
    drop(stmt);
    let deleted = conn
        .prepare_cached(DELETE_LEASED_SQL)
        .map_err(db)?
        .execute(params![ids, row::token(token)])
        .map_err(db)?;
    debug_assert_eq!(
        deleted,
        gone.len(),
        "the delete removes the rows the query read"
    );
    refresh(conn, Vec::new(), &groups)?;
    // The first report of each deleted id applied; any other was skipped.
    let skipped = transitions
        .iter()
        .filter(|t| !gone.remove(&ms(t.id.0)))
        .map(|t| t.id)
        .collect();
    Ok(Applied { skipped })
}

#[cfg(test)]
mod tests {
    use outbox_core::{Claim, ListQuery, NewRecord, RecordId};

    use super::*;
    use crate::apply::apply;
    use crate::ops::{insert, list, stats};

    /// Two ungrouped records, two of group "g" (the second behind the first) and one more
    /// ungrouped, the claimable ones claimed under lease 7; then one in flight under lease 8
    /// and one under lease 7 without its deadline. Returns the seven ids.
    fn claimed_under_lease_7(conn: &mut Connection) -> Vec<RecordId> {
        crate::schema::migrate(conn, 0).expect("schema");
        // Keys of their own, so the two stores' records compare equal.
        let record = |key: &str, group: Option<&str>| NewRecord {
            group: group.map(str::to_owned),
            ..NewRecord::new(key.as_bytes().to_vec()).with_key(key)
        };
        let records = vec![
            record("one", None),
            record("head", Some("g")),
            record("behind", Some("g")),
            record("four", None),
            record("five", None),
        ];
        let ids = insert(conn, records, 1).expect("insert").ids;
        let lease = outbox_core::Lease {
            token: 7,
            until: 100,
        };
        let claimed = crate::ops::claim(
            conn,
            Claim {
                now: 2,
                limit: 10,
                lease,
            },
        )
        .expect("claim");
        assert_eq!(claimed.len(), 4, "all but the one behind its group's head");
        // Two more: one in flight under lease 8, one under lease 7 but with its deadline
        // gone (no lease, as `Guard::admits` reads it).
        let more = insert(conn, vec![record("six", None), record("seven", None)], 1)
            .expect("insert")
            .ids;
        for token in [8, 7] {
            let lease = outbox_core::Lease { token, until: 100 };
            let claim = Claim {
                now: 2,
                limit: 1,
                lease,
            };
            assert_eq!(crate::ops::claim(conn, claim).expect("claim").len(), 1);
        }
        conn.execute(
            "UPDATE records SET lease_until = NULL WHERE id = ?1",
            [ms(more[1].0)],
        )
        .expect("no deadline");
        ids.into_iter().chain(more).collect()
    }

    #[test]
    fn deliveries_under_one_lease_apply_and_count_as_the_general_path_does() {
        let delivered = |id: RecordId, token: u64| Transition {
            id,
            guard: Guard::Lease(token),
            change: Change::Delivered,
        };
        let (mut fast, mut general) = (
            Connection::open_in_memory().expect("open"),
            Connection::open_in_memory().expect("open"),
        );
        let ids = claimed_under_lease_7(&mut fast);
        assert_eq!(claimed_under_lease_7(&mut general), ids);
        // Delivered: an ungrouped record, the group's head (reported twice), the fifth record;
        // skipped: the record behind the head (not in flight), an id that never was, the
        // repeated report, the record under another lease and the one without a deadline.
        // The fourth record stays in flight.
        let batch = vec![
            delivered(ids[0], 7),
            delivered(ids[1], 7),
            delivered(ids[2], 7),
            delivered(ids[1], 7),
            delivered(RecordId(999), 7),
            delivered(ids[4], 7),
            delivered(ids[5], 7),
            delivered(ids[6], 7),
        ];
        assert_eq!(delivered_under_one_lease(&batch), Some(7));
        // One transition that no lease guards sends the same batch down the general path.
        let mut forced = batch.clone();
        forced.push(Transition {
            id: RecordId(1000),
            guard: Guard::Idle,
            change: Change::Delivered,
        });
        assert_eq!(delivered_under_one_lease(&forced), None);

        let fast_applied = apply(&fast, batch).expect("fast");
        let mut general_applied = apply(&general, forced).expect("general");
        assert_eq!(general_applied.skipped.pop(), Some(RecordId(1000)));
        assert_eq!(fast_applied, general_applied);
        assert_eq!(
            fast_applied.skipped,
            vec![ids[2], ids[1], RecordId(999), ids[5], ids[6]]
        );

        let fast_stats = stats(&fast).expect("stats");
        assert_eq!(fast_stats, stats(&general).expect("stats"));
        assert_eq!((fast_stats.delivered, fast_stats.in_flight), (3, 3));
        let every = ListQuery::new(10);
        let left = list(&fast, &every).expect("list");
        assert_eq!(left, list(&general, &every).expect("list"));
        assert_eq!(
            left.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![ids[2], ids[3], ids[5], ids[6]]
        );
        // The record behind the delivered head now heads its group: claimable, in both.
        let next = Claim {
            now: 3,
            limit: 10,
            lease: outbox_core::Lease {
                token: 8,
                until: 100,
            },
        };
        let fast_next = crate::ops::claim(&fast, next).expect("claim");
        assert_eq!(fast_next, crate::ops::claim(&general, next).expect("claim"));
        assert_eq!(
            fast_next.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![ids[2]]
        );
    }

    #[test]
    fn a_row_damaged_after_its_claim_is_delivered_here_where_the_general_path_fails() {
        let damaged = |conn: &Connection, id: RecordId| {
            conn.execute(
                "UPDATE records SET key = CAST(x'c328ff' AS TEXT) WHERE id = ?1",
                [ms(id.0)],
            )
            .expect("damage");
        };
        let delivered = |id: RecordId| Transition {
            id,
            guard: Guard::Lease(7),
            change: Change::Delivered,
        };
        let (mut fast, mut general) = (
            Connection::open_in_memory().expect("open"),
            Connection::open_in_memory().expect("open"),
        );
        let ids = claimed_under_lease_7(&mut fast);
        claimed_under_lease_7(&mut general);
        damaged(&fast, ids[0]);
        damaged(&general, ids[0]);
        let before = stats(&fast).expect("stats");

        let applied = apply(&fast, vec![delivered(ids[0])]).expect("delivered here");
        assert!(applied.skipped.is_empty());
        let after = stats(&fast).expect("stats");
        assert_eq!(after.delivered, before.delivered + 1);
        assert_eq!(after.in_flight, before.in_flight - 1);
        assert_eq!(
            after.payload_bytes,
            before.payload_bytes - 3,
            "\"one\" left"
        );

        // The same report with one the lease does not guard goes the general way: its read
        // of the damaged row fails the batch, and nothing is written.
        let forced = vec![
            delivered(ids[0]),
            Transition {
                id: RecordId(1000),
                guard: Guard::Idle,
                change: Change::Delivered,
            },
        ];
        assert!(apply(&general, forced).is_err());
        assert_eq!(stats(&general).expect("stats"), before);
    }

    #[test]
    fn only_deliveries_under_one_lease_take_the_one_statement_path() {
        let t = |guard: Guard, change: Change| Transition {
            id: RecordId(1),
            guard,
            change,
        };
        let discard = Change::Discard {
            reason: "r".into(),
            at: 1,
            attempts: 0,
        };
        assert_eq!(delivered_under_one_lease(&[]), None);
        assert_eq!(
            delivered_under_one_lease(&[t(Guard::Lease(1), Change::Delivered)]),
            Some(1)
        );
        for mixed in [
            vec![
                t(Guard::Lease(1), Change::Delivered),
                t(Guard::Lease(2), Change::Delivered),
            ],
            vec![t(Guard::Idle, Change::Delivered)],
            vec![
                t(Guard::Lease(1), Change::Delivered),
                t(Guard::Lease(1), discard.clone()),
            ],
            vec![Transition {
                id: RecordId(u64::MAX),
                guard: Guard::Lease(1),
                change: Change::Delivered,
            }],
        ] {
            assert_eq!(delivered_under_one_lease(&mixed), None, "{mixed:?}");
        }
    }
}
