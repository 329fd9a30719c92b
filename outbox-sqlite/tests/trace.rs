//! Trace contexts on SQLite: kept by every enqueue path (the store's own, a caller's rusqlite,
//! sqlx or diesel transaction) and returned by get, list and claim; a replacing write carries
//! its own (or none); a report of progress leaves it as it was; and a damaged stored value
//! reads as none, the record still readable and claimable.

use std::path::{Path, PathBuf};

use outbox_core::{
    Claim, Lease, ListQuery, NewRecord, Outcome, Record, RecordId, RetryPolicy, Store, TraceContext,
};
use outbox_sqlite::{SqliteConfig, SqliteStore};

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

async fn store() -> (tempfile::TempDir, PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    (dir, path, store)
}

fn claim(now: u64, limit: usize) -> Claim {
    Claim {
        now,
        limit,
        lease: Lease {
            token: 7,
            until: now + 60_000,
        },
    }
}

async fn trace_of(store: &SqliteStore, id: RecordId) -> Option<TraceContext> {
    store.get(id).await.expect("get").expect("the record").trace
}

/// Sets the stored trace of `id` to the SQL expression `value`, behind the store's back.
fn plant(path: &Path, id: RecordId, value: &str) {
    rusqlite::Connection::open(path)
        .expect("open the file")
        .execute(
            &format!("UPDATE records SET trace = {value} WHERE id = ?1"),
            [i64::try_from(id.0).expect("id")],
        )
        .expect("plant");
}

#[tokio::test]
async fn get_list_and_claim_return_the_context() {
    let (_dir, _path, store) = store().await;
    let ids = store
        .enqueue(vec![traced("a", cx()), plain("b")], 1)
        .await
        .expect("enqueue")
        .ids;
    assert_eq!(trace_of(&store, ids[0]).await, Some(cx()));
    assert_eq!(trace_of(&store, ids[1]).await, None);

    let listed = store.list(&ListQuery::new(10)).await.expect("list");
    let traces: Vec<_> = listed.iter().map(|r| (r.id, r.trace.clone())).collect();
    assert_eq!(traces, [(ids[0], Some(cx())), (ids[1], None)]);

    let claimed = store.claim(claim(2, 10)).await.expect("claim");
    let traces: Vec<_> = claimed.iter().map(|r| (r.id, r.trace.clone())).collect();
    assert_eq!(traces, [(ids[0], Some(cx())), (ids[1], None)]);
}

#[tokio::test]
async fn a_replacing_write_carries_its_own_context_or_none() {
    let (_dir, _path, store) = store().await;
    let edit = |record: NewRecord| record.in_group("doc-1").replacing("doc-1/title");
    let first = store
        .enqueue(vec![edit(traced("v1", cx()))], 1)
        .await
        .expect("enqueue");
    let second = store
        .enqueue(vec![edit(traced("v2", other()))], 2)
        .await
        .expect("enqueue");
    assert_eq!(second.ids, first.ids, "replaced in place");
    assert_eq!(second.superseded, [0]);
    assert_eq!(trace_of(&store, first.ids[0]).await, Some(other()));

    let third = store
        .enqueue(vec![edit(plain("v3"))], 3)
        .await
        .expect("enqueue");
    assert_eq!(third.ids, first.ids);
    let record = store.get(first.ids[0]).await.expect("get").expect("record");
    assert_eq!(
        (record.payload.as_slice(), record.trace),
        (b"v3".as_slice(), None)
    );
}

#[tokio::test]
async fn a_report_of_progress_leaves_the_context() {
    let (_dir, _path, store) = store().await;
    let ids = store
        .enqueue(vec![traced("a", cx())], 1)
        .await
        .expect("enqueue")
        .ids;
    let claimed: Vec<Record> = store.claim(claim(2, 1)).await.expect("claim");
    let mut rng = outbox_core::fastrand::Rng::with_seed(1);
    let step = outbox_core::machine::on_outcome(
        &claimed[0],
        &Outcome::transient("HTTP 503", None),
        &RetryPolicy::default(),
        3,
        &mut rng,
    );
    store.apply(vec![step.transition]).await.expect("apply");
    let record = store.get(ids[0]).await.expect("get").expect("record");
    assert_eq!(record.attempts, 1);
    assert_eq!(record.trace, Some(cx()));
}

#[tokio::test]
async fn a_damaged_context_reads_as_none_and_the_record_stays_claimable() {
    let (_dir, path, store) = store().await;
    let records = (0..5).map(|i| traced(&format!("r{i}"), cx())).collect();
    let ids = store.enqueue(records, 1).await.expect("enqueue").ids;
    // Text that is no context, a context without its newline's tracestate, a number, a blob,
    // and text that is not UTF-8.
    let damage = [
        "'garbage'",
        "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7'",
        "42",
        "x'00ff'",
        "CAST(x'c328ff' AS TEXT)",
    ];
    for (id, value) in ids.iter().zip(damage) {
        plant(&path, *id, value);
    }
    for id in &ids {
        assert_eq!(trace_of(&store, *id).await, None, "{id:?}");
    }
    let listed = store.list(&ListQuery::new(10)).await.expect("list");
    assert_eq!(listed.len(), ids.len());
    assert!(listed.iter().all(|r| r.trace.is_none()));
    assert!(store.unreadable(10).await.expect("unreadable").is_empty());

    let claimed = store.claim(claim(2, 10)).await.expect("claim");
    let claimed_ids: Vec<_> = claimed.iter().map(|r| r.id).collect();
    assert_eq!(claimed_ids, ids, "every damaged record is claimed");
    assert!(claimed.iter().all(|r| r.trace.is_none()));
}

#[tokio::test]
async fn a_replacing_write_over_a_damaged_context_sets_its_own() {
    let (_dir, path, store) = store().await;
    let edit = |record: NewRecord| record.replacing("doc-1/title");
    let first = store
        .enqueue(vec![edit(traced("v1", cx()))], 1)
        .await
        .expect("enqueue");
    plant(&path, first.ids[0], "'garbage'");
    let second = store
        .enqueue(vec![edit(traced("v2", other()))], 2)
        .await
        .expect("enqueue");
    assert_eq!(second.ids, first.ids);
    assert_eq!(trace_of(&store, first.ids[0]).await, Some(other()));
}

#[tokio::test]
async fn a_callers_rusqlite_transaction_carries_it() {
    let (_dir, path, store) = store().await;
    let mut conn = rusqlite::Connection::open(&path).expect("open");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    let tx = conn.transaction().expect("begin");
    let ids = store
        .enqueue_in(&tx, vec![traced("a", cx()), plain("b")], 1)
        .expect("enqueue")
        .ids;
    tx.commit().expect("commit");
    assert_eq!(trace_of(&store, ids[0]).await, Some(cx()));
    assert_eq!(trace_of(&store, ids[1]).await, None);

    let edit = |record: NewRecord| record.replacing("k");
    let tx = conn.transaction().expect("begin");
    let first = store
        .enqueue_in(&tx, vec![edit(traced("v1", cx()))], 2)
        .expect("enqueue");
    tx.commit().expect("commit");
    plant(&path, first.ids[0], "'garbage'");
    let tx = conn.transaction().expect("begin");
    let second = store
        .enqueue_in(&tx, vec![edit(traced("v2", other()))], 3)
        .expect("enqueue");
    tx.commit().expect("commit");
    assert_eq!(second.ids, first.ids);
    assert_eq!(trace_of(&store, first.ids[0]).await, Some(other()));
}

#[cfg(feature = "sqlx")]
mod sqlx_driver {
    use super::*;
    use sqlx::{Connection, SqliteConnection};

    async fn enqueue(
        conn: &mut SqliteConnection,
        store: &SqliteStore,
        batch: Vec<NewRecord>,
    ) -> Vec<RecordId> {
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
        let pending = store
            .enqueue_sqlx(&mut tx, batch, 1)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
        pending.ids().to_vec()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sqlx_transaction_carries_it() {
        let (_dir, path, store) = store().await;
        let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("sqlx opens the file");
        let ids = enqueue(&mut conn, &store, vec![traced("a", cx()), plain("b")]).await;
        assert_eq!(trace_of(&store, ids[0]).await, Some(cx()));
        assert_eq!(trace_of(&store, ids[1]).await, None);

        // A replacing write reads the record it replaces through sqlx: a damaged context
        // there is none, and the new write's takes its place.
        let edit = |record: NewRecord| record.replacing("k");
        let id = enqueue(&mut conn, &store, vec![edit(traced("v1", cx()))]).await[0];
        for value in ["'garbage'", "42", "CAST(x'c328ff' AS TEXT)"] {
            plant(&path, id, value);
            let replaced = enqueue(&mut conn, &store, vec![edit(traced("v2", other()))]).await;
            assert_eq!(replaced, [id]);
            assert_eq!(trace_of(&store, id).await, Some(other()), "{value}");
        }
        enqueue(&mut conn, &store, vec![edit(plain("v3"))]).await;
        assert_eq!(trace_of(&store, id).await, None);
    }
}

#[cfg(feature = "diesel")]
mod diesel_driver {
    use super::*;
    use diesel::{Connection, RunQueryDsl, SqliteConnection};

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    fn enqueue(
        conn: &mut SqliteConnection,
        store: &SqliteStore,
        batch: Vec<NewRecord>,
    ) -> Vec<RecordId> {
        conn.immediate_transaction(|conn| Ok::<_, BoxError>(store.enqueue_diesel(conn, batch, 1)?))
            .expect("committed")
            .ids()
            .to_vec()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_diesel_transaction_carries_it() {
        let (_dir, path, store) = store().await;
        let store = std::sync::Arc::new(store);
        let (p, st) = (path.clone(), store.clone());
        let (ids, id) = tokio::task::spawn_blocking(move || {
            let mut conn =
                SqliteConnection::establish(&p.display().to_string()).expect("diesel opens");
            diesel::sql_query("PRAGMA busy_timeout = 5000")
                .execute(&mut conn)
                .expect("busy timeout");
            let ids = enqueue(&mut conn, &st, vec![traced("a", cx()), plain("b")]);
            // A replacing write reads the record it replaces through diesel: a damaged
            // context there is none, and the new write's takes its place.
            let edit = |record: NewRecord| record.replacing("k");
            let id = enqueue(&mut conn, &st, vec![edit(traced("v1", cx()))])[0];
            for value in ["'garbage'", "42", "x'00ff'", "CAST(x'c328ff' AS TEXT)"] {
                plant(&p, id, value);
                let replaced = enqueue(&mut conn, &st, vec![edit(traced("v2", other()))]);
                assert_eq!(replaced, [id], "{value}");
            }
            (ids, id)
        })
        .await
        .expect("the blocking task");
        assert_eq!(trace_of(&store, ids[0]).await, Some(cx()));
        assert_eq!(trace_of(&store, ids[1]).await, None);
        assert_eq!(trace_of(&store, id).await, Some(other()));
    }
}
