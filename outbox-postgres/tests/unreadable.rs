//! The look for rows PostgreSQL's store cannot decode: the server passes by the rows that
//! decode, so only the others travel, a page at a time. Every rule of the decoding is met
//! here by a row that breaks it, and rows damaged where the decoding forgives (history,
//! trace) or at the edge of a range are not listed; between them `list` and `unreadable`
//! account for every row.

mod common;

use common::{admin, server_ready, Scratch};
use outbox_core::{ListQuery, NewRecord, RecordId, Store};

const T0: u64 = 1_700_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_look_lists_every_row_that_breaks_a_rule_and_only_those_across_pages() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let records = (0..800)
        .map(|i| NewRecord::new(format!("r{i}").into_bytes()))
        .collect();
    let ids: Vec<i64> = store
        .enqueue(records, T0)
        .await
        .unwrap()
        .into_iter()
        .map(|id| i64::try_from(id.0).unwrap())
        .collect();
    let client = admin().await;
    let s = &scratch.schema;
    let damage = |set: &'static str, id: i64| {
        let client = &client;
        async move {
            let sql = format!("UPDATE \"{s}\".records SET {set} WHERE id = $1");
            assert_eq!(client.execute(&sql, &[&id]).await.unwrap(), 1, "{set}");
        }
    };
    // One row for each rule, spread over the table.
    let rules = [
        "state = 9",
        "state = -1",
        "created_at = -1",
        "attempts = -1",
        "unanswered = 4294967296",
        "interrupted = -3",
        "last_attempt_at = -1",
        "next_attempt_at = -5",
        "not_before = -2",
        // In flight without a lease: what a claim leaves of a row it set aside.
        "state = 2, lease_token = NULL, lease_until = NULL",
        "state = 2, lease_token = 7, lease_until = -1",
    ];
    let mut bad = Vec::new();
    for (i, set) in rules.iter().enumerate() {
        let id = ids[i * 70 + 3];
        damage(set, id).await;
        bad.push(id);
    }
    // Enough more that the rows found take several pages.
    for &id in ids.iter().skip(1).step_by(2).take(300) {
        if !bad.contains(&id) {
            damage("attempts = -7", id).await;
            bad.push(id);
        }
    }
    // Damage the decoding forgives, and values at the edge of their range: still records.
    let forgiven = [
        "history = '\\x00ff'::bytea",
        "trace = 'not a trace context'",
        "attempts = 4294967295",
        "next_attempt_at = 0",
        "state = 2, lease_token = -1, lease_until = 0",
    ];
    for (i, set) in forgiven.iter().enumerate() {
        let id = ids[i * 100 + 50];
        assert!(!bad.contains(&id));
        damage(set, id).await;
    }
    bad.sort_unstable();

    let listed = store.unreadable(10_000).await.unwrap();
    let listed_ids: Vec<i64> = listed
        .iter()
        .map(|row| i64::try_from(row.id.0).unwrap())
        .collect();
    assert_eq!(listed_ids, bad);
    assert!(listed.iter().all(|row| !row.reason.is_empty()));
    // A limit takes the lowest ids.
    let first: Vec<RecordId> = store
        .unreadable(5)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.id)
        .collect();
    assert_eq!(first, listed[..5].iter().map(|r| r.id).collect::<Vec<_>>());

    // Every row is a record `list` reads, or a row the look found: none is lost between.
    let mut readable = 0;
    let mut after = None;
    loop {
        let page = store
            .list(&ListQuery {
                after,
                ..ListQuery::new(100)
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        readable += page.len();
    }
    assert_eq!(readable + bad.len(), ids.len());
}
