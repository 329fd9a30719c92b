//! The due query, the claim, the group-head lookup, the lease query, the stepped-back query,
//! the claimability refresh and the statements of stats are index lookups: checked in the
//! query plans, and by counting the virtual machine steps a query takes as the backlog it must
//! not read grows.

use outbox_core::{Claim, Lease, NewRecord};
use rusqlite::{Connection, StatementStatus};

use crate::{apply, ops, schema};

fn outbox() -> Connection {
    let mut conn = Connection::open_in_memory().expect("open");
    schema::migrate(&mut conn, 0).expect("schema");
    conn
}

fn plan(conn: &Connection, sql: &str) -> String {
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("explain");
    // The plan does not depend on the values; bind nulls.
    let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
    let details: Vec<String> = stmt
        .query_map(rusqlite::params_from_iter(nulls), |row| {
            row.get::<_, String>(3)
        })
        .expect("plan")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    details.join("\n")
}

#[test]
fn the_due_query_reads_the_due_index_in_order() {
    let plan = plan(&outbox(), ops::DUE_SQL);
    assert!(
        plan.contains(
            "SEARCH records USING INDEX records_deadline (claimable=? AND next_attempt_at<?)"
        ),
        "{plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
}

#[test]
fn the_claim_reads_the_due_rows_in_order_and_updates_them_by_id() {
    let read = plan(&outbox(), ops::CLAIM_READ_SQL);
    assert!(
        read.contains(
            "SEARCH records USING INDEX records_deadline (claimable=? AND next_attempt_at<?)"
        ),
        "{read}"
    );
    assert!(!read.contains("TEMP B-TREE"), "no sort: {read}");
    let write = plan(&outbox(), ops::CLAIM_SQL);
    assert!(
        write.contains("SEARCH records USING INTEGER PRIMARY KEY (rowid=?)"),
        "{write}"
    );
    assert!(!write.contains("SCAN records"), "{write}");
}

#[test]
fn records_scheduled_after_a_moment_are_a_range_of_the_deadline_index() {
    let plan = plan(&outbox(), ops::STEPPED_BACK_SQL);
    assert!(
        plan.contains(
            "SEARCH records USING INDEX records_deadline (claimable=? AND next_attempt_at>?)"
        ),
        "{plan}"
    );
}

#[test]
fn the_claimability_refresh_reads_rows_by_id_and_heads_by_group() {
    let plan = plan(&outbox(), apply::REFRESH_SQL);
    assert!(!plan.contains("SCAN records"), "{plan}");
    assert!(plan.contains("records_group"), "{plan}");
}

#[test]
fn the_next_deadline_is_the_first_entry_of_the_due_index() {
    let plan = plan(&outbox(), ops::NEXT_DUE_SQL);
    assert!(plan.contains("records_deadline"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

#[test]
fn the_head_of_a_group_is_an_index_lookup() {
    let plan = plan(&outbox(), ops::HEAD_SQL);
    assert!(
        plan.contains("SEARCH records USING COVERING INDEX records_group (grp=?)"),
        "{plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

#[test]
fn expired_leases_come_from_the_lease_index() {
    let plan = plan(&outbox(), ops::EXPIRED_SQL);
    assert!(
        plan.contains("USING INDEX records_lease (lease_until<?)"),
        "{plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

/// Virtual machine steps of one due query at `now`, with `limit`.
fn due_steps(conn: &Connection, now: u64, limit: usize) -> i32 {
    let mut stmt = conn.prepare(ops::DUE_SQL).expect("prepare");
    let rows = stmt
        .query_map(rusqlite::params![ops::ms(now), limit as i64], |row| {
            row.get::<_, i64>(0)
        })
        .expect("query")
        .count();
    assert_eq!(rows, limit);
    stmt.get_status(StatementStatus::VmStep)
}

#[test]
fn a_claim_costs_the_same_whatever_the_backlog_of_records_not_yet_due() {
    let conn = outbox();
    let due: Vec<NewRecord> = (0..20).map(|_| NewRecord::new(b"due".to_vec())).collect();
    ops::insert(&conn, due, 1_000).expect("due records");
    let small = due_steps(&conn, 1_000, 10);

    // Twenty thousand records due later, and a thousand held back behind their group heads.
    let later: Vec<NewRecord> = (0..20_000)
        .map(|_| NewRecord::new(b"later".to_vec()))
        .collect();
    ops::insert(&conn, later, 50_000).expect("later records");
    let held: Vec<NewRecord> = (0..1_000)
        .map(|i| NewRecord::new(b"held".to_vec()).in_group(format!("g{}", i % 10)))
        .collect();
    ops::insert(&conn, held, 900).expect("grouped records");
    let large = due_steps(&conn, 1_000, 10);
    assert!(large <= small + 20, "steps grew from {small} to {large}");

    // And the claim itself returns the earliest deadlines first: the ten group heads at 900.
    let lease = Lease {
        token: 1,
        until: 9_000,
    };
    let claimed = ops::claim(
        &conn,
        Claim {
            now: 1_000,
            limit: 10,
            lease,
        },
    )
    .expect("claim");
    assert!(claimed.iter().all(|r| r.next_attempt_at == Some(900)));
    assert_eq!(claimed.len(), 10);
}

#[test]
fn a_claim_costs_the_same_whatever_the_backlog_of_records_held_for_later() {
    let conn = outbox();
    let due: Vec<NewRecord> = (0..20).map(|_| NewRecord::new(b"due".to_vec())).collect();
    ops::insert(&conn, due, 1_000).expect("due records");
    let small = due_steps(&conn, 1_000, 10);

    // Twenty thousand records enqueued now but not to go before 50 000: their deadline is that
    // time, in the same deadline index, past the due end a claim reads.
    let held: Vec<NewRecord> = (0..20_000)
        .map(|_| NewRecord::new(b"later".to_vec()).not_before(50_000))
        .collect();
    ops::insert(&conn, held, 1_000).expect("held records");
    let large = due_steps(&conn, 1_000, 10);
    assert!(large <= small + 20, "steps grew from {small} to {large}");
    // Their time is absolute: a step back to 500 re-bases the twenty enqueued "at 1 000" and
    // none of them.
    assert_eq!(stepped_back_steps(&conn, 500).0, 20);
}

/// Virtual machine steps of one stepped-back query at `now`.
fn stepped_back_steps(conn: &Connection, now: u64) -> (usize, i32) {
    let mut stmt = conn.prepare(ops::STEPPED_BACK_SQL).expect("prepare");
    let rows = stmt
        .query_map(rusqlite::params![ops::ms(now), 100i64], |row| {
            row.get::<_, i64>(0)
        })
        .expect("query")
        .count();
    (rows, stmt.get_status(StatementStatus::VmStep))
}

#[test]
fn records_scheduled_after_a_moment_cost_the_same_whatever_the_due_backlog() {
    let conn = outbox();
    let later: Vec<NewRecord> = (0..10)
        .map(|i| NewRecord::new(b"later".to_vec()).in_group(format!("g{}", i % 3)))
        .collect();
    ops::insert(&conn, later, 50_000).expect("later records");
    let (rows, small) = stepped_back_steps(&conn, 10_000);
    assert_eq!(rows, 10, "heads and the records behind them");

    let due: Vec<NewRecord> = (0..20_000)
        .map(|_| NewRecord::new(b"due".to_vec()))
        .collect();
    ops::insert(&conn, due, 1_000).expect("due backlog");
    let (rows, large) = stepped_back_steps(&conn, 10_000);
    assert_eq!(rows, 10);
    assert!(large <= small + 20, "steps grew from {small} to {large}");
}

#[test]
fn statements_with_a_limit_are_prepared_once_not_per_call() {
    let conn = outbox();
    let records: Vec<NewRecord> = (0..200).map(|_| NewRecord::new(b"x".to_vec())).collect();
    ops::insert(&conn, records, 1_000).expect("insert");
    for round in 0..5u64 {
        let lease = Lease {
            token: round,
            until: 9_000 + round,
        };
        let limit = 10 + round as usize;
        let claimed = ops::claim(
            &conn,
            Claim {
                now: 1_000 + round,
                limit,
                lease,
            },
        )
        .expect("claim");
        assert_eq!(claimed.len(), limit);
        ops::expired(&conn, 2_000 + round, limit).expect("expired");
        ops::stepped_back(&conn, 500 + round, limit).expect("stepped back");
    }
    for sql in [
        ops::CLAIM_READ_SQL,
        ops::CLAIM_SQL,
        ops::EXPIRED_SQL,
        ops::STEPPED_BACK_SQL,
    ] {
        let stmt = conn.prepare_cached(sql).expect("cached");
        assert_eq!(stmt.get_status(StatementStatus::Run), 5, "{sql}");
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
    }
}

#[test]
fn the_latest_record_of_a_coalescing_key_is_an_index_seek() {
    let plan = plan(&outbox(), ops::LATEST_SQL);
    assert!(
        plan.contains("SEARCH records USING INDEX records_replaces (replaces=?)"),
        "{plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
}

#[test]
fn whether_a_record_is_the_last_of_its_group_is_a_range_of_the_group_index() {
    let plan = plan(&outbox(), ops::FOLLOWED_SQL);
    assert!(
        plan.contains("SEARCH records USING COVERING INDEX records_group (grp=? AND id>?)"),
        "{plan}"
    );
}

/// Virtual machine steps of one latest-record lookup for `key`.
fn latest_steps(conn: &Connection, key: &str) -> i32 {
    let mut stmt = conn.prepare(ops::LATEST_SQL).expect("prepare");
    let rows = stmt
        .query_map([key], |row| row.get::<_, i64>(0))
        .expect("query")
        .count();
    assert_eq!(rows, 1);
    stmt.get_status(StatementStatus::VmStep)
}

#[test]
fn coalescing_costs_the_same_whatever_the_records_of_other_keys() {
    let conn = outbox();
    let keyed = |key: String| NewRecord::new(b"edit".to_vec()).replacing(key);
    ops::insert(&conn, vec![keyed("doc-1".into())], 1_000).expect("the record");
    let small = latest_steps(&conn, "doc-1");

    // Ten thousand records without a key and ten thousand of other keys, some after it.
    let plain: Vec<NewRecord> = (0..10_000)
        .map(|_| NewRecord::new(b"plain".to_vec()))
        .collect();
    ops::insert(&conn, plain, 1_000).expect("plain records");
    let others: Vec<NewRecord> = (0..10_000)
        .map(|i| keyed(format!("doc-{}", i + 2)))
        .collect();
    ops::insert(&conn, others, 1_000).expect("other keys");
    let large = latest_steps(&conn, "doc-1");
    assert!(large <= small + 20, "steps grew from {small} to {large}");
}

#[test]
fn records_without_a_coalescing_key_run_no_coalescing_query() {
    let conn = outbox();
    let plain: Vec<NewRecord> = (0..50)
        .map(|i| NewRecord::new(b"plain".to_vec()).in_group(format!("g{}", i % 5)))
        .collect();
    let enqueued = ops::insert(&conn, plain, 1_000).expect("plain records");
    assert!(enqueued.superseded.is_empty());
    let runs = |sql: &str| {
        conn.prepare_cached(sql)
            .expect("cached")
            .get_status(StatementStatus::Run)
    };
    assert_eq!(runs(ops::LATEST_SQL), 0);
    assert_eq!(runs(ops::FOLLOWED_SQL), 0);

    // The counting itself works: a keyed record in a group runs each once.
    let keyed = NewRecord::new(b"edit".to_vec())
        .in_group("g1")
        .replacing("k");
    ops::insert(&conn, vec![keyed.clone()], 1_000).expect("first edit");
    assert_eq!(runs(ops::LATEST_SQL), 1, "no record with the key yet");
    assert_eq!(runs(ops::FOLLOWED_SQL), 0, "nothing to look behind");
    let enqueued = ops::insert(&conn, vec![keyed], 1_001).expect("second edit");
    assert_eq!(enqueued.superseded, vec![0]);
    assert_eq!(runs(ops::LATEST_SQL), 2);
    assert_eq!(runs(ops::FOLLOWED_SQL), 1);
}

#[test]
fn the_statements_of_stats_read_indexes_and_counters() {
    let conn = outbox();
    let held = plan(&conn, ops::HELD_SQL);
    assert!(held.contains("records_attention"), "{held}");
    assert!(held.contains("records_group"), "{held}");
    assert!(!held.contains("SCAN records AS r"), "{held}");
    let oldest = plan(&conn, ops::OLDEST_SQL);
    assert!(
        oldest.contains("SCAN records USING INDEX records_created"),
        "{oldest}"
    );
    assert!(!oldest.contains("TEMP B-TREE"), "{oldest}");
    let scheduled = plan(&conn, ops::SCHEDULED_SQL);
    assert!(
        scheduled.contains("SCAN records USING INDEX records_scheduled"),
        "{scheduled}"
    );
    let errors = plan(&conn, crate::common_errors::COMMON_ERRORS_SQL);
    assert!(errors.contains("error_counts_common"), "{errors}");
    assert!(!errors.contains("TEMP B-TREE"), "{errors}");
}

/// Virtual machine steps of every statement of stats and of the common errors.
fn stats_steps(conn: &Connection) -> i32 {
    let tx = conn.unchecked_transaction().expect("read");
    ops::stats(&tx).expect("stats");
    crate::common_errors::common_errors(&tx, 5).expect("errors");
    let mut steps = 0;
    for sql in [
        ops::COUNTERS_SQL,
        ops::HELD_SQL,
        ops::OLDEST_SQL,
        ops::SCHEDULED_SQL,
        crate::common_errors::COMMON_ERRORS_SQL,
    ] {
        steps += tx
            .prepare_cached(sql)
            .expect("cached")
            .get_status(StatementStatus::VmStep);
    }
    steps
}

/// A backlog of `n` records: a tenth of them retrying with one of five errors, a
/// hundredth rejected, the rest pending.
fn backlog(conn: &Connection, n: usize) {
    use outbox_core::{Change, Guard, Progress, State, Transition};
    let records: Vec<NewRecord> = (0..n).map(|_| NewRecord::new(b"x".to_vec())).collect();
    let ids = ops::insert(conn, records, 1_000).expect("insert");
    let failed = ids.iter().enumerate().filter_map(|(i, &id)| {
        let state = match i % 100 {
            0..=9 => State::Retrying,
            10 => State::Rejected,
            _ => return None,
        };
        Some(Transition {
            id,
            guard: Guard::Idle,
            change: Change::Update(Progress {
                state,
                attempts: 1,
                unanswered: 0,
                interrupted: 0,
                last_attempt_at: Some(2_000),
                next_attempt_at: (state == State::Retrying).then_some(90_000),
                last_error: Some(format!("HTTP 50{}", i % 5)),
                history: Default::default(),
            }),
        })
    });
    apply::apply(conn, failed.collect()).expect("failures");
}

#[test]
fn stats_cost_the_same_whatever_the_backlog() {
    let small = outbox();
    backlog(&small, 100);
    let large = outbox();
    backlog(&large, 20_000);
    let (small, large) = (stats_steps(&small), stats_steps(&large));
    assert!(large <= small + 20, "steps grew from {small} to {large}");
}
