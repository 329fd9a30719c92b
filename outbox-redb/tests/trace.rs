//! Records keep their trace context: every enqueue path stores it, every read returns it, a
//! replacing write brings its own, progress and a reopen keep it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{failed, fresh, lease};
use outbox_core::{
    sink_fn, Change, Claim, Guard, ListQuery, NewRecord, Outbox, Outcome, Record, RecordId, Store,
    TraceContext, Transition,
};
use outbox_redb::{RedbConfig, RedbStore};

/// The W3C example context, with a `tracestate`.
fn first() -> TraceContext {
    TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("congo=t61rcWkgMzE".into()),
    )
    .unwrap()
}

/// Another context, without a `tracestate`.
fn second() -> TraceContext {
    TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        None,
    )
    .unwrap()
}

fn new(payload: &str) -> NewRecord {
    NewRecord::new(payload.as_bytes().to_vec())
}

fn traces(records: &[Record]) -> Vec<(u64, Option<TraceContext>)> {
    records.iter().map(|r| (r.id.0, r.trace.clone())).collect()
}

async fn trace_of(store: &RedbStore, id: u64) -> Option<TraceContext> {
    store.get(RecordId(id)).await.unwrap().unwrap().trace
}

#[tokio::test]
async fn get_list_and_claim_return_the_context_and_a_reopen_keeps_it() {
    let (_dir, path, store) = fresh().await;
    let batch = vec![
        new("traced").trace_context(first()),
        new("plain"),
        new("grouped").in_group("g").trace_context(second()),
    ];
    store.enqueue(batch, 100).await.unwrap();
    let expected = vec![(1, Some(first())), (2, None), (3, Some(second()))];
    assert_eq!(trace_of(&store, 1).await, Some(first()));
    assert_eq!(trace_of(&store, 2).await, None, "none without one");
    let all = store.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(traces(&all), expected);
    assert_eq!(
        all[0].trace.as_ref().and_then(TraceContext::tracestate),
        Some("congo=t61rcWkgMzE")
    );

    let claimed = store
        .claim(Claim {
            now: 100,
            limit: 10,
            lease: lease(1, 30_100),
        })
        .await
        .unwrap();
    assert_eq!(traces(&claimed), expected);

    // A failed attempt rewrites the record from its progress: the context stays.
    let progress = failed(&claimed[0], 200, 1_000);
    store
        .apply(vec![Transition {
            id: RecordId(1),
            guard: Guard::Lease(1),
            change: Change::Update(progress),
        }])
        .await
        .unwrap();
    assert_eq!(trace_of(&store, 1).await, Some(first()));
    drop(store);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    let all = store.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(traces(&all), expected, "a reopen keeps every context");
}

#[tokio::test]
async fn a_replacing_write_brings_its_own_context() {
    let (_dir, _path, store) = fresh().await;
    let edit = |p: &str| new(p).in_group("doc").replacing("doc/body");
    store
        .enqueue(vec![edit("v1").trace_context(first())], 10)
        .await
        .unwrap();
    let replaced = store
        .enqueue(vec![edit("v2").trace_context(second())], 20)
        .await
        .unwrap();
    assert_eq!(
        (replaced.ids, replaced.superseded),
        (vec![RecordId(1)], vec![0])
    );
    let record = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(
        (record.payload.as_slice(), record.trace),
        (b"v2".as_slice(), Some(second()))
    );
    // A replacement without a context leaves none: the record carries the latest write's.
    store.enqueue(vec![edit("v3")], 30).await.unwrap();
    assert_eq!(trace_of(&store, 1).await, None);
}

const NOTES: redb::TableDefinition<u64, &str> = redb::TableDefinition::new("notes");

#[tokio::test]
async fn the_callers_transaction_carries_the_context() {
    let (_dir, _path, store) = fresh().await;
    let store = Arc::new(store);
    let db = store.database().unwrap();

    let txn = db.begin_write().unwrap();
    txn.open_table(NOTES).unwrap().insert(1, "note").unwrap();
    let batch = vec![new("a").replacing("doc").trace_context(first()), new("b")];
    store.enqueue_in(&txn, batch, 10).unwrap();
    txn.commit().unwrap();
    assert_eq!(trace_of(&store, 1).await, Some(first()));
    assert_eq!(trace_of(&store, 2).await, None);

    // A replacement in the caller's transaction brings its own context.
    let txn = db.begin_write().unwrap();
    let replaced = store
        .enqueue_in(
            &txn,
            vec![new("a2").replacing("doc").trace_context(second())],
            20,
        )
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(replaced.superseded, vec![0]);
    assert_eq!(trace_of(&store, 1).await, Some(second()));

    // Through `enqueue_pending` and its commit, the sink is handed the context.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let sink = sink_fn(move |record: Record| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push((record.payload, record.trace));
            Outcome::Delivered
        }
    });
    let outbox = Outbox::builder(store.clone(), sink).start().await.unwrap();
    let txn = db.begin_write().unwrap();
    let record = new("c").trace_context(first());
    let pending = store
        .enqueue_pending(&txn, vec![record], outbox.now())
        .unwrap();
    pending.commit(txn, &outbox).unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            (b"a2".to_vec(), Some(second())),
            (b"b".to_vec(), None),
            (b"c".to_vec(), Some(first())),
        ]
    );
    outbox.shutdown(Duration::from_secs(10)).await.unwrap();
}
