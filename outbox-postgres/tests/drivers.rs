//! The in-transaction enqueue on every driver feature (sqlx, diesel, diesel-async), against
//! the real server: a committed transaction is announced and delivered with no `notify()` and
//! no poll; a rolled-back one leaves nothing; a coalescing write in a transaction merges as it
//! does outside one; a bad batch is a typed error that leaves the business write free to
//! commit; and 64 concurrent sqlx transactions are each delivered once.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{admin, server_ready, url, Scratch};
use outbox_core::{
    sink_fn, Enqueued, Error, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig, Store,
};
use outbox_postgres::{PendingEnqueue, PgStore};
use outbox_testkit::WakeOnlyRunner;

/// How long a check waits for a delivery or for the runner to settle.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// The test's schema with a business table, and its store.
async fn app() -> (Scratch, PgStore) {
    let scratch = Scratch::new();
    let store = scratch.store().await;
    admin()
        .await
        .batch_execute(&format!(
            "CREATE TABLE \"{}\".orders (id int PRIMARY KEY)",
            scratch.schema
        ))
        .await
        .expect("business table");
    (scratch, store)
}

async fn orders(schema: &str) -> i64 {
    admin()
        .await
        .query_one(&format!("SELECT count(*) FROM \"{schema}\".orders"), &[])
        .await
        .expect("count")
        .get(0)
}

fn edit(title: &str, group: &str) -> NewRecord {
    NewRecord::new(title.as_bytes().to_vec())
        .in_group(group)
        .replacing(format!("{group}/title"))
}

/// The two bad batches every driver must refuse before sending anything: an empty group, and
/// a good record followed by one whose coalescing key holds a NUL.
fn bad_batches() -> [Vec<NewRecord>; 2] {
    [
        vec![NewRecord::new(b"x".to_vec()).in_group("")],
        vec![
            NewRecord::new(b"fine".to_vec()),
            NewRecord::new(b"x".to_vec()).replacing("a\0b"),
        ],
    ]
}

fn assert_refused(result: outbox_core::Result<PendingEnqueue>) {
    match result {
        Err(Error::InvalidGroup { .. }) => {}
        other => panic!("expected a typed refusal of the batch, got {other:?}"),
    }
}

/// The coalescing check: a waiting edit enqueued outside any transaction, then a second edit
/// of the same key inside one (`enqueue`, run by the driver): the second replaces the first,
/// exactly as two enqueues outside a transaction do (compared on another group). The second
/// is held for later (until 2100): the rewrite inside the transaction carries its not-before
/// time, and the deadline it gives.
async fn check_coalescing<F, Fut>(store: &PgStore, inside: F)
where
    F: FnOnce(Vec<NewRecord>) -> Fut,
    Fut: std::future::Future<Output = PendingEnqueue>,
{
    let outside_first = store.enqueue(vec![edit("v1", "out")], 1).await.unwrap();
    let outside_second = store.enqueue(vec![edit("v2", "out")], 2).await.unwrap();
    let first = store.enqueue(vec![edit("v1", "in")], 1).await.unwrap();
    const AT: u64 = 4_102_444_800_000;
    let pending = inside(vec![edit("v2", "in").not_before(AT)]).await;
    assert_eq!(outside_second.ids, outside_first.ids);
    assert_eq!(pending.ids(), first.ids.as_slice(), "replaced in place");
    assert_eq!(
        pending.enqueued().superseded,
        outside_second.superseded,
        "as outside"
    );
    for id in [outside_first.ids[0], first.ids[0]] {
        let record = store.get(id).await.unwrap().expect("one record per key");
        assert_eq!(record.payload, b"v2");
    }
    let held = store.get(first.ids[0]).await.unwrap().expect("the record");
    assert_eq!(
        (held.next_attempt_at, held.not_before),
        (Some(AT), Some(AT))
    );
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.superseded, stats.scheduled),
        (2, 2, 1)
    );
}

mod sqlx_driver {
    use super::*;

    async fn pool(max: u32) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(max)
            .connect(&url())
            .await
            .expect("sqlx connects")
    }

    fn insert(
        schema: &str,
        id: i32,
    ) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO \"{schema}\".orders VALUES ({id})"
        )))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_wakes_the_runner_and_a_rollback_leaves_nothing() {
        if !server_ready() {
            return;
        }
        let (scratch, store) = app().await;
        let s = &scratch.schema;
        let pool = pool(2).await;
        let mut runner = WakeOnlyRunner::start(Arc::new(store.clone()), store.clock()).await;

        let mut tx = pool.begin().await.unwrap();
        insert(s, 1).execute(&mut *tx).await.unwrap();
        let dropped = store
            .enqueue_sqlx(
                &mut tx,
                vec![NewRecord::new(b"gone".to_vec())],
                runner.outbox.now(),
            )
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        runner.expect_nothing_announced().await;
        assert!(store.get(dropped.ids()[0]).await.unwrap().is_none());

        let mut tx = pool.begin().await.unwrap();
        insert(s, 7).execute(&mut *tx).await.unwrap();
        let pending = store
            .enqueue_sqlx(
                &mut tx,
                WakeOnlyRunner::batch("order-7"),
                runner.outbox.now(),
            )
            .await
            .unwrap();
        let ids = pending.ids().to_vec();
        let enqueued = pending.commit(tx, &runner.outbox).await.unwrap();
        runner.expect_announced(&ids, &enqueued, "order-7").await;
        assert_eq!(orders(s).await, 1);
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_batch_is_typed_and_the_business_write_still_commits() {
        if !server_ready() {
            return;
        }
        let (scratch, store) = app().await;
        let pool = pool(2).await;
        let mut conn = pool.acquire().await.unwrap();
        assert!(
            matches!(
                store
                    .enqueue_sqlx(&mut conn, vec![NewRecord::new(b"x".to_vec())], 1)
                    .await,
                Err(Error::InvalidConfig(_))
            ),
            "outside a transaction: refused"
        );
        drop(conn);
        let mut tx = pool.begin().await.unwrap();
        insert(&scratch.schema, 8).execute(&mut *tx).await.unwrap();
        for batch in bad_batches() {
            assert_refused(store.enqueue_sqlx(&mut tx, batch, 1).await);
        }
        tx.commit().await.unwrap();
        assert_eq!(
            orders(&scratch.schema).await,
            1,
            "the business write committed"
        );
        assert_eq!(store.stats().await.unwrap().undelivered(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coalescing_write_in_a_transaction_merges_as_outside() {
        if !server_ready() {
            return;
        }
        let (_scratch, store) = app().await;
        let pool = pool(2).await;
        check_coalescing(&store, |batch| async {
            let mut tx = pool.begin().await.unwrap();
            let pending = store.enqueue_sqlx(&mut tx, batch, 2).await.unwrap();
            tx.commit().await.unwrap();
            pending
        })
        .await;
    }

    /// 64 transactions at once, eight groups of eight: every record is delivered once, and
    /// each group in id order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sixty_four_concurrent_transactions_are_each_delivered_once() {
        if !server_ready() {
            return;
        }
        let (scratch, store) = app().await;
        let pool = pool(64).await;
        let (seen, mut deliveries) = tokio::sync::mpsc::unbounded_channel::<Record>();
        let sink = sink_fn(move |record: Record| {
            let seen = seen.clone();
            async move {
                let _ = seen.send(record);
                Outcome::Delivered
            }
        });
        let outbox = Arc::new(
            Outbox::builder(Arc::new(store.clone()), sink)
                .clock(store.clock())
                .config(RunnerConfig {
                    safety_poll: None,
                    ..RunnerConfig::default()
                })
                .start()
                .await
                .unwrap(),
        );
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..64 {
            let (pool, store, outbox, schema) = (
                pool.clone(),
                store.clone(),
                Arc::clone(&outbox),
                scratch.schema.clone(),
            );
            tasks.spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                insert(&schema, n).execute(&mut *tx).await.unwrap();
                let record =
                    NewRecord::new(n.to_string().into_bytes()).in_group(format!("g{}", n % 8));
                let pending = store
                    .enqueue_sqlx(&mut tx, vec![record], outbox.now())
                    .await
                    .unwrap();
                pending.commit(tx, &outbox).await.unwrap()
            });
        }
        let mut enqueued: Vec<Enqueued> = Vec::new();
        while let Some(done) = tasks.join_next().await {
            enqueued.push(done.unwrap());
        }
        let mut by_group: HashMap<Option<String>, Vec<RecordId>> = HashMap::new();
        let mut delivered = Vec::new();
        for _ in 0..64 {
            let record = tokio::time::timeout(PATIENCE, deliveries.recv())
                .await
                .expect("every commit wakes the runner")
                .expect("sink alive");
            by_group
                .entry(record.group.clone())
                .or_default()
                .push(record.id);
            delivered.push(record.id);
        }
        outbox.flush(PATIENCE).await.unwrap();
        assert!(deliveries.try_recv().is_err(), "nothing delivered twice");
        delivered.sort();
        let mut ids: Vec<RecordId> = enqueued.iter().flat_map(|e| e.ids.clone()).collect();
        ids.sort();
        assert_eq!(delivered, ids, "each record once");
        for (group, order) in by_group {
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{group:?} in id order: {order:?}"
            );
        }
        assert_eq!(orders(&scratch.schema).await, 64);
        assert_eq!(store.stats().await.unwrap().delivered, 64);
        let Ok(outbox) = Arc::try_unwrap(outbox) else {
            panic!("the tasks hold no handle any more");
        };
        outbox.shutdown(PATIENCE).await.unwrap();
    }
}

mod diesel_driver {
    use super::*;
    use diesel::{Connection, PgConnection, RunQueryDsl};

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// A blocking diesel connection, used on a blocking thread as diesel apps do.
    async fn on_conn<T: Send + 'static>(
        work: impl FnOnce(&mut PgConnection) -> T + Send + 'static,
    ) -> T {
        tokio::task::spawn_blocking(move || {
            let mut conn = PgConnection::establish(&url()).expect("diesel connects");
            work(&mut conn)
        })
        .await
        .expect("the blocking task")
    }

    fn insert(conn: &mut PgConnection, schema: &str, id: i32) -> diesel::QueryResult<usize> {
        diesel::sql_query(format!("INSERT INTO \"{schema}\".orders VALUES ({id})")).execute(conn)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_wakes_the_runner_and_a_rollback_leaves_nothing() {
        if !server_ready() {
            return;
        }
        let (scratch, store) = app().await;
        let mut runner = WakeOnlyRunner::start(Arc::new(store.clone()), store.clock()).await;
        let now = runner.outbox.now();
        let (s, st) = (scratch.schema.clone(), store.clone());
        let (dropped, pending) = on_conn(move |conn| {
            let mut dropped = None;
            let rolled_back = conn.transaction(|conn| {
                insert(conn, &s, 1)?;
                dropped =
                    Some(st.enqueue_diesel(conn, vec![NewRecord::new(b"gone".to_vec())], now)?);
                Err::<(), BoxError>("roll back".into())
            });
            assert!(rolled_back.is_err());
            let pending = conn
                .transaction(|conn| {
                    insert(conn, &s, 7)?;
                    Ok::<_, BoxError>(st.enqueue_diesel(
                        conn,
                        WakeOnlyRunner::batch("order-7"),
                        now,
                    )?)
                })
                .expect("committed");
            (dropped.expect("enqueued before the rollback"), pending)
        })
        .await;
        assert!(store.get(dropped.ids()[0]).await.unwrap().is_none());
        let ids = pending.ids().to_vec();
        let enqueued = pending.committed(&runner.outbox);
        runner.expect_announced(&ids, &enqueued, "order-7").await;
        assert_eq!(orders(&scratch.schema).await, 1);
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_batch_is_typed_and_the_business_write_still_commits() {
        if !server_ready() {
            return;
        }
        let (scratch, store) = app().await;
        let (s, st) = (scratch.schema.clone(), store.clone());
        on_conn(move |conn| {
            assert!(
                matches!(
                    st.enqueue_diesel(conn, vec![NewRecord::new(b"x".to_vec())], 1),
                    Err(Error::InvalidConfig(_))
                ),
                "outside a transaction: refused"
            );
            conn.transaction(|conn| {
                insert(conn, &s, 8)?;
                for batch in bad_batches() {
                    assert_refused(st.enqueue_diesel(conn, batch, 1));
                }
                Ok::<_, BoxError>(())
            })
            .expect("the business write commits");
        })
        .await;
        assert_eq!(orders(&scratch.schema).await, 1);
        assert_eq!(store.stats().await.unwrap().undelivered(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coalescing_write_in_a_transaction_merges_as_outside() {
        if !server_ready() {
            return;
        }
        let (_scratch, store) = app().await;
        let st = store.clone();
        check_coalescing(&store, |batch| {
            on_conn(move |conn| {
                conn.transaction(|conn| Ok::<_, BoxError>(st.enqueue_diesel(conn, batch, 2)?))
                    .expect("committed")
            })
        })
        .await;
    }
}

mod diesel_async_driver {
    use super::*;
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    async fn conn() -> AsyncPgConnection {
        AsyncPgConnection::establish(&url())
            .await
            .expect("diesel-async connects")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_wakes_the_runner_a_rollback_leaves_nothing_and_a_bad_batch_is_typed() {
        if !server_ready() {
            return;
        }
        let (scratch, store) = app().await;
        let mut runner = WakeOnlyRunner::start(Arc::new(store.clone()), store.clock()).await;
        let now = runner.outbox.now();
        let s = scratch.schema.clone();
        let mut conn = conn().await;
        let insert =
            |id: i32| diesel::sql_query(format!("INSERT INTO \"{s}\".orders VALUES ({id})"));

        let mut dropped = None;
        let rolled_back = conn
            .transaction(async |conn| {
                insert(1).execute(conn).await?;
                dropped = Some(
                    store
                        .enqueue_diesel_async(conn, vec![NewRecord::new(b"gone".to_vec())], now)
                        .await?,
                );
                Err::<(), BoxError>("roll back".into())
            })
            .await;
        assert!(rolled_back.is_err());
        runner.expect_nothing_announced().await;
        assert!(store
            .get(dropped.unwrap().ids()[0])
            .await
            .unwrap()
            .is_none());

        conn.transaction(async |conn| {
            insert(8).execute(conn).await?;
            for batch in bad_batches() {
                assert_refused(store.enqueue_diesel_async(conn, batch, now).await);
            }
            Ok::<_, BoxError>(())
        })
        .await
        .expect("the business write commits");

        let pending = conn
            .transaction(async |conn| {
                insert(7).execute(conn).await?;
                Ok::<_, BoxError>(
                    store
                        .enqueue_diesel_async(conn, WakeOnlyRunner::batch("order-7"), now)
                        .await?,
                )
            })
            .await
            .expect("committed");
        let ids = pending.ids().to_vec();
        let enqueued = pending.committed(&runner.outbox);
        runner.expect_announced(&ids, &enqueued, "order-7").await;
        assert_eq!(orders(&scratch.schema).await, 2);
        assert!(
            matches!(
                store
                    .enqueue_diesel_async(&mut conn, vec![NewRecord::new(b"x".to_vec())], 1)
                    .await,
                Err(Error::InvalidConfig(_))
            ),
            "outside a transaction: refused"
        );
        runner.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coalescing_write_in_a_transaction_merges_as_outside() {
        if !server_ready() {
            return;
        }
        let (_scratch, store) = app().await;
        let mut conn = conn().await;
        check_coalescing(&store, |batch| async {
            conn.transaction(async |conn| {
                Ok::<_, BoxError>(store.enqueue_diesel_async(conn, batch, 2).await?)
            })
            .await
            .expect("committed")
        })
        .await;
    }
}
