//! Trace contexts on PostgreSQL: kept by every enqueue path (the store's own; a caller's
//! tokio-postgres, sqlx, diesel and diesel-async transaction, fresh and coalescing) and
//! returned by get, list and claim; a replacing write carries its own (or none); a report of
//! progress (a runner's round, an apply) leaves it as it was; and a damaged stored value reads
//! as none, the record still readable and claimable.

mod common;

use common::{admin, claim, server_ready, url, Scratch};
use outbox_core::{
    ListQuery, NewRecord, Outcome, Record, RecordId, RetryPolicy, State, Store, TraceContext,
};
use outbox_postgres::PgStore;

const T0: u64 = 1_700_000_000_000;
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

fn cx() -> TraceContext {
    TraceContext::new(PARENT, Some("congo=t61rcWkgMzE".into())).expect("a valid context")
}

fn other() -> TraceContext {
    TraceContext::new(OTHER, None).expect("a valid context")
}

fn traced(payload: &str, cx: TraceContext) -> NewRecord {
    NewRecord::new(payload.as_bytes().to_vec()).trace_context(cx)
}

/// A record made without a context (`NewRecord::new` takes none without the `opentelemetry`
/// feature; cleared here so the test holds with it too).
fn plain(payload: &str) -> NewRecord {
    let mut record = NewRecord::new(payload.as_bytes().to_vec());
    record.trace = None;
    record
}

/// A write of the coalescing key `doc/<doc>`, in the group `doc`.
fn edit(record: NewRecord, doc: &str) -> NewRecord {
    record.in_group(doc).replacing(format!("{doc}/title"))
}

async fn trace_of(store: &PgStore, id: RecordId) -> Option<TraceContext> {
    store.get(id).await.expect("get").expect("the record").trace
}

/// Sets the stored trace of `id` to the SQL expression `value`, behind the store's back.
/// A store of `scratch` with one edit of "doc" waiting, carrying [`cx`]: the record each
/// driver's replacing write lands on.
async fn with_waiting_edit(scratch: &Scratch) -> (PgStore, RecordId) {
    let store = scratch.store().await;
    let waiting = store
        .enqueue(vec![edit(traced("v1", cx()), "doc")], T0)
        .await
        .expect("enqueue");
    (store, waiting.ids[0])
}

/// What a driver's transaction left: `fresh` (a traced and a plain write) keep [`cx`] and
/// none; `merged` replaced `waiting` in place and brought [`other`].
async fn assert_carried(
    store: &PgStore,
    fresh: &[RecordId],
    merged: &[RecordId],
    waiting: RecordId,
) {
    assert_eq!(merged, [waiting], "replaced in place");
    assert_eq!(trace_of(store, fresh[0]).await, Some(cx()));
    assert_eq!(trace_of(store, fresh[1]).await, None);
    assert_eq!(trace_of(store, waiting).await, Some(other()));
}

async fn plant(schema: &str, id: RecordId, value: &str) {
    let changed = admin()
        .await
        .execute(
            &format!("UPDATE \"{schema}\".records SET trace = {value} WHERE id = $1"),
            &[&i64::try_from(id.0).expect("id")],
        )
        .await
        .expect("plant");
    assert_eq!(changed, 1, "record {id:?} to plant on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_list_and_claim_return_the_context() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let ids = store
        .enqueue(vec![traced("a", cx()), plain("b")], T0)
        .await
        .expect("enqueue")
        .ids;
    assert_eq!(trace_of(&store, ids[0]).await, Some(cx()));
    assert_eq!(trace_of(&store, ids[1]).await, None);

    let listed = store.list(&ListQuery::new(10)).await.expect("list");
    let traces: Vec<_> = listed.iter().map(|r| (r.id, r.trace.clone())).collect();
    assert_eq!(traces, [(ids[0], Some(cx())), (ids[1], None)]);

    let claimed = store.claim(claim(T0 + 1, 10, 7)).await.expect("claim");
    let traces: Vec<_> = claimed.iter().map(|r| (r.id, r.trace.clone())).collect();
    assert_eq!(traces, [(ids[0], Some(cx())), (ids[1], None)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacing_write_carries_its_own_context_or_none() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let first = store
        .enqueue(vec![edit(traced("v1", cx()), "doc-1")], T0)
        .await
        .expect("enqueue");
    let second = store
        .enqueue(vec![edit(traced("v2", other()), "doc-1")], T0 + 1)
        .await
        .expect("enqueue");
    assert_eq!(second.ids, first.ids, "replaced in place");
    assert_eq!(second.superseded, [0]);
    assert_eq!(trace_of(&store, first.ids[0]).await, Some(other()));

    let third = store
        .enqueue(vec![edit(plain("v3"), "doc-1")], T0 + 2)
        .await
        .expect("enqueue");
    assert_eq!(third.ids, first.ids);
    let record = store.get(first.ids[0]).await.expect("get").expect("record");
    assert_eq!(
        (record.payload.as_slice(), record.trace),
        (b"v3".as_slice(), None),
        "a replacing write without a context clears it"
    );

    let fourth = store
        .enqueue(vec![edit(traced("v4", cx()), "doc-1")], T0 + 3)
        .await
        .expect("enqueue");
    assert_eq!(fourth.ids, first.ids);
    assert_eq!(trace_of(&store, first.ids[0]).await, Some(cx()), "and back");

    // Within one batch: the fresh record takes the context of the last write it absorbed.
    let batch = store
        .enqueue(
            vec![
                edit(traced("w1", cx()), "doc-2"),
                edit(traced("w2", other()), "doc-2"),
            ],
            T0 + 4,
        )
        .await
        .expect("enqueue");
    assert_eq!(batch.ids[0], batch.ids[1], "merged in the batch");
    assert_eq!(trace_of(&store, batch.ids[0]).await, Some(other()));
    let batch = store
        .enqueue(
            vec![
                edit(traced("x1", cx()), "doc-3"),
                edit(plain("x2"), "doc-3"),
            ],
            T0 + 5,
        )
        .await
        .expect("enqueue");
    assert_eq!(trace_of(&store, batch.ids[0]).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_progress_leaves_the_context() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let ids = store
        .enqueue(vec![traced("a", cx()), traced("b", other())], T0)
        .await
        .expect("enqueue")
        .ids;
    let claimed: Vec<Record> = store.claim(claim(T0 + 1, 2, 7)).await.expect("claim");
    assert_eq!(claimed.len(), 2);
    let mut rng = fastrand::Rng::with_seed(1);
    let step = |record: &Record, rng: &mut fastrand::Rng| {
        outbox_core::machine::on_outcome(
            record,
            &Outcome::transient("HTTP 503", None),
            &RetryPolicy::default(),
            T0 + 2,
            rng,
        )
        .transition
    };
    // A runner's round (its reports under its own lease) ...
    let first = step(&claimed[0], &mut rng);
    store.round(vec![first], None).await.expect("round");
    // ... and an apply.
    let second = step(&claimed[1], &mut rng);
    store.apply(vec![second]).await.expect("apply");
    for (id, cx) in [(ids[0], cx()), (ids[1], other())] {
        let record = store.get(id).await.expect("get").expect("record");
        assert_eq!(
            (record.state, record.attempts, record.trace),
            (State::Retrying, 1, Some(cx))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_context_reads_as_none_and_the_record_stays_claimable() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let records = (0..5).map(|i| traced(&format!("r{i}"), cx())).collect();
    let ids = store.enqueue(records, T0).await.expect("enqueue").ids;
    // Text that is no context, an empty text, a traceparent with an upper-case id, one whose
    // tracestate holds a control character, and one that is fine (left as it is).
    let damage = [
        "'garbage'",
        "''",
        "'00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01'",
        &format!("'{PARENT}' || chr(10) || 'a=' || chr(7)"),
    ];
    for (id, value) in ids.iter().zip(damage) {
        plant(&scratch.schema, *id, value).await;
    }
    for id in &ids[..4] {
        assert_eq!(trace_of(&store, *id).await, None, "record {id:?}");
    }
    assert_eq!(trace_of(&store, ids[4]).await, Some(cx()));
    let listed = store.list(&ListQuery::new(10)).await.expect("list");
    assert_eq!(listed.len(), 5, "every record still reads");
    assert!(store.unreadable(10).await.expect("unreadable").is_empty());

    let claimed = store.claim(claim(T0 + 1, 10, 7)).await.expect("claim");
    let traces: Vec<_> = claimed.iter().map(|r| (r.id, r.trace.clone())).collect();
    let mut want: Vec<_> = ids[..4].iter().map(|id| (*id, None)).collect();
    want.push((ids[4], Some(cx())));
    assert_eq!(traces, want, "claimed, damaged or not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokio_postgres_transaction_carries_it() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let (store, waiting) = with_waiting_edit(&scratch).await;
    let mut client = admin().await;

    let tx = client.transaction().await.expect("begin");
    let fresh = store
        .enqueue_in(&tx, vec![traced("a", cx()), plain("b")], T0 + 1)
        .await
        .expect("enqueue_in");
    let merged = store
        .enqueue_in(&tx, vec![edit(traced("v2", other()), "doc")], T0 + 1)
        .await
        .expect("enqueue_in");
    tx.commit().await.expect("commit");
    assert_carried(&store, &fresh.ids, &merged.ids, waiting).await;

    let tx = client.transaction().await.expect("begin");
    let pending = store
        .enqueue_pending(&tx, vec![edit(plain("v3"), "doc")], T0 + 2)
        .await
        .expect("enqueue_pending");
    tx.commit().await.expect("commit");
    assert_eq!(pending.ids(), [waiting]);
    assert_eq!(trace_of(&store, waiting).await, None, "cleared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlx_transaction_carries_it() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let (store, waiting) = with_waiting_edit(&scratch).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url())
        .await
        .expect("sqlx connects");
    let mut tx = pool.begin().await.expect("begin");
    let fresh = store
        .enqueue_sqlx(&mut tx, vec![traced("a", cx()), plain("b")], T0 + 1)
        .await
        .expect("enqueue_sqlx");
    let merged = store
        .enqueue_sqlx(&mut tx, vec![edit(traced("v2", other()), "doc")], T0 + 1)
        .await
        .expect("enqueue_sqlx");
    tx.commit().await.expect("commit");
    assert_carried(&store, fresh.ids(), merged.ids(), waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diesel_transaction_carries_it() {
    use diesel::{Connection, PgConnection};
    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let (store, waiting) = with_waiting_edit(&scratch).await;
    let st = store.clone();
    let (fresh, merged) = tokio::task::spawn_blocking(move || {
        let mut conn = PgConnection::establish(&url()).expect("diesel connects");
        conn.transaction(|conn| {
            let fresh = st.enqueue_diesel(conn, vec![traced("a", cx()), plain("b")], T0 + 1)?;
            let merged =
                st.enqueue_diesel(conn, vec![edit(traced("v2", other()), "doc")], T0 + 1)?;
            Ok::<_, BoxError>((fresh, merged))
        })
        .expect("committed")
    })
    .await
    .expect("the blocking task");
    assert_carried(&store, fresh.ids(), merged.ids(), waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diesel_async_transaction_carries_it() {
    use diesel_async::{AsyncConnection, AsyncPgConnection};
    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let (store, waiting) = with_waiting_edit(&scratch).await;
    let mut conn = AsyncPgConnection::establish(&url())
        .await
        .expect("diesel-async connects");
    let (fresh, merged) = conn
        .transaction(async |conn| {
            let fresh = store
                .enqueue_diesel_async(conn, vec![traced("a", cx()), plain("b")], T0 + 1)
                .await?;
            let merged = store
                .enqueue_diesel_async(conn, vec![edit(traced("v2", other()), "doc")], T0 + 1)
                .await?;
            Ok::<_, BoxError>((fresh, merged))
        })
        .await
        .expect("committed");
    assert_carried(&store, fresh.ids(), merged.ids(), waiting).await;
}
