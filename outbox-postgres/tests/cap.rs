//! The size cap ([`PgConfig::with_cap`]) against the real server: the 1,001st record of a cap
//! of 1,000 is refused with `QueueFull` and changes nothing, on the store's own enqueue and
//! inside a business transaction on every driver (whose own write still commits); eight
//! racing enqueuers take exactly the last ten places; a delivery makes room again; a
//! transaction on an old snapshot cannot take a place it did not see taken; and
//! `Stats::payload_bytes` is exact through enqueues, coalescing, deliveries, discards and
//! prunes.

mod common;

use common::{admin, config, payload_bytes_recounted, server_ready, url, Scratch};
use outbox_core::{
    Cap, CapLimit, Change, Claim, Error, Guard, History, Lease, NewRecord, Progress, RecordId,
    State, Stats, Store, Transition,
};
use outbox_postgres::PgStore;

const T0: u64 = 1_700_000_000_000;
/// Every filler record's payload: 8 bytes.
const FILL: &[u8] = b"8 bytes!";

/// A store on `scratch`'s schema held to `cap`, with a business table `orders` beside it.
async fn capped(scratch: &Scratch, cap: Cap) -> PgStore {
    let store = PgStore::connect(config(&scratch.schema).with_cap(cap))
        .await
        .expect("the capped store opens");
    admin()
        .await
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS \"{}\".orders (id int PRIMARY KEY)",
            scratch.schema
        ))
        .await
        .expect("business table");
    store
}

/// A store of 1,000 records at most, holding `n` of them.
async fn thousand(scratch: &Scratch, n: usize) -> PgStore {
    let store = capped(scratch, Cap::none().with_max_records(1_000)).await;
    for start in (0..n).step_by(100) {
        let batch = (start..n.min(start + 100))
            .map(|_| NewRecord::new(FILL.to_vec()))
            .collect();
        store.enqueue(batch, T0).await.expect("below the cap");
    }
    store
}

fn one() -> Vec<NewRecord> {
    vec![NewRecord::new(FILL.to_vec())]
}

/// `result` is the refusal of a record past a full cap of 1,000 records.
fn assert_full<T: std::fmt::Debug>(result: outbox_core::Result<T>) {
    match result {
        Err(Error::QueueFull {
            limit: CapLimit::Records,
            max: 1_000,
            used: 1_000,
            adding: 1,
        }) => {}
        other => panic!("expected QueueFull at 1,000 of 1,000 records, got {other:?}"),
    }
}

async fn orders(schema: &str) -> i64 {
    admin()
        .await
        .query_one(&format!("SELECT count(*) FROM \"{schema}\".orders"), &[])
        .await
        .expect("count")
        .get(0)
}

/// The store holds exactly 1,000 fillers, as `stats` and a recount of the rows say.
async fn assert_holds_thousand(store: &PgStore, schema: &str) {
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.payload_bytes), (1_000, 8_000));
    assert_eq!(payload_bytes_recounted(&admin().await, schema).await, 8_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_1001st_record_is_refused_and_a_delivery_makes_room() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = thousand(&scratch, 999).await;
    // A batch that would pass the cap is refused whole: not even its first record goes in.
    match store
        .enqueue(vec![NewRecord::new(FILL.to_vec()); 2], T0)
        .await
    {
        Err(Error::QueueFull {
            limit: CapLimit::Records,
            max: 1_000,
            used: 999,
            adding: 2,
        }) => {}
        other => panic!("expected the batch of two refused, got {other:?}"),
    }
    assert_eq!(store.stats().await.unwrap().pending, 999);
    store.enqueue(one(), T0).await.expect("the 1,000th fits");
    let before = store.stats().await.unwrap();
    assert_eq!(before.usage().records, 1_000);

    assert_full(store.enqueue(one(), T0).await);
    assert_eq!(store.stats().await.unwrap(), before, "nothing touched");
    assert_holds_thousand(&store, &scratch.schema).await;

    // One delivered: one place free, then full again.
    let lease = Lease {
        token: 1,
        until: T0 + 60_000,
    };
    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 1,
            lease,
        })
        .await
        .unwrap();
    // In flight still counts.
    assert_full(store.enqueue(one(), T0).await);
    store
        .apply(vec![Transition {
            id: claimed[0].id,
            guard: Guard::Lease(1),
            change: Change::Delivered,
        }])
        .await
        .unwrap();
    store.enqueue(one(), T0).await.expect("the freed place");
    assert_full(store.enqueue(one(), T0).await);
    assert_holds_thousand(&store, &scratch.schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_takes_coalescing_writes_that_add_nothing_and_holds_its_bytes() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = thousand(&scratch, 999).await;
    let edit = |payload: &[u8]| NewRecord::new(payload.to_vec()).replacing("doc/7");
    let first = store.enqueue(vec![edit(b"v1")], T0).await.unwrap();
    // Full: a rewrite of the waiting record adds no record, whatever its size (no byte limit).
    let second = store
        .enqueue(vec![edit(b"version two, longer")], T0)
        .await
        .expect("a replacement adds no record");
    assert_eq!(second.ids, first.ids);
    assert_eq!(second.superseded, vec![0]);
    assert_full(store.enqueue(one(), T0).await);
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.payload_bytes), (1_000, 999 * 8 + 19));
    drop(store);

    // The same outbox held to its bytes as well: 8,011 now, at most 8,015.
    let store = capped(
        &scratch,
        Cap::none().with_max_records(2_000).with_max_bytes(8_015),
    )
    .await;
    match store.enqueue(vec![NewRecord::new(vec![0; 5])], T0).await {
        Err(Error::QueueFull {
            limit: CapLimit::Bytes,
            max: 8_015,
            used: 8_011,
            adding: 5,
        }) => {}
        other => panic!("expected QueueFull on bytes, got {other:?}"),
    }
    // Growing the waiting record by 5 bytes is refused as well; by 4 fits, shrinking always.
    assert!(matches!(
        store.enqueue(vec![edit(&[b'x'; 24])], T0).await,
        Err(Error::QueueFull {
            limit: CapLimit::Bytes,
            adding: 5,
            ..
        })
    ));
    store.enqueue(vec![edit(&[b'x'; 23])], T0).await.unwrap();
    store.enqueue(vec![edit(b"v3")], T0).await.unwrap();
    store
        .enqueue(vec![NewRecord::new(vec![0; 21])], T0)
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.payload_bytes), (1_001, 8_015));
    assert_eq!(
        payload_bytes_recounted(&admin().await, &scratch.schema).await,
        8_015
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_tokio_postgres_transaction_the_refusal_leaves_the_business_write_to_commit() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = thousand(&scratch, 1_000).await;
    let mut client = admin().await;
    let tx = client.transaction().await.unwrap();
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (1)"), &[])
        .await
        .unwrap();
    assert_full(store.enqueue_pending(&tx, one(), T0).await);
    assert_full(
        store
            .enqueue_in(&tx, vec![NewRecord::new(FILL.to_vec()).replacing("k")], T0)
            .await,
    );
    // The transaction is still usable, and commits its own writes.
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (2)"), &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(orders(s).await, 2);
    assert_holds_thousand(&store, s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_sqlx_transaction_the_refusal_leaves_the_business_write_to_commit() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = scratch.schema.clone();
    let store = thousand(&scratch, 1_000).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url())
        .await
        .expect("sqlx connects");
    let insert = |id: i32| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO \"{s}\".orders VALUES ({id})"
        )))
    };
    let mut tx = pool.begin().await.unwrap();
    insert(1).execute(&mut *tx).await.unwrap();
    assert_full(store.enqueue_sqlx(&mut tx, one(), T0).await);
    insert(2).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(orders(&s).await, 2);
    assert_holds_thousand(&store, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_diesel_transaction_the_refusal_leaves_the_business_write_to_commit() {
    use diesel::{Connection, PgConnection, RunQueryDsl};
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = scratch.schema.clone();
    let store = thousand(&scratch, 1_000).await;
    let (schema, st) = (s.clone(), store.clone());
    tokio::task::spawn_blocking(move || {
        let mut conn = PgConnection::establish(&url()).expect("diesel connects");
        let insert = |conn: &mut PgConnection, id: i32| {
            diesel::sql_query(format!("INSERT INTO \"{schema}\".orders VALUES ({id})"))
                .execute(conn)
        };
        conn.transaction(|conn| {
            insert(conn, 1)?;
            assert_full(st.enqueue_diesel(conn, one(), T0));
            insert(conn, 2)?;
            Ok::<_, diesel::result::Error>(())
        })
        .expect("the business writes commit");
    })
    .await
    .expect("the blocking task");
    assert_eq!(orders(&s).await, 2);
    assert_holds_thousand(&store, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_diesel_async_transaction_the_refusal_leaves_the_business_write_to_commit() {
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = scratch.schema.clone();
    let store = thousand(&scratch, 1_000).await;
    let mut conn = AsyncPgConnection::establish(&url())
        .await
        .expect("diesel-async connects");
    let insert = |id: i32| diesel::sql_query(format!("INSERT INTO \"{s}\".orders VALUES ({id})"));
    conn.transaction(async |conn| {
        insert(1).execute(conn).await?;
        assert_full(store.enqueue_diesel_async(conn, one(), T0).await);
        insert(2).execute(conn).await?;
        Ok::<_, diesel::result::Error>(())
    })
    .await
    .expect("the business writes commit");
    assert_eq!(orders(&s).await, 2);
    assert_holds_thousand(&store, &s).await;
}

/// Eight enqueuers (four on the store, four in transactions of their own, with a business
/// write each) race for the last ten places, five tries each: exactly ten records go in, every
/// other try is `QueueFull`, and the outbox never holds more than 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_racing_enqueuers_take_exactly_the_last_ten_places() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = thousand(&scratch, 990).await;
    let mut tasks = tokio::task::JoinSet::new();
    for enqueuer in 0..8 {
        let (store, s) = (store.clone(), scratch.schema.clone());
        tasks.spawn(async move {
            let mut client = admin().await;
            let mut went_in = 0;
            for attempt in 0..5 {
                let result = if enqueuer % 2 == 0 {
                    store.enqueue(one(), T0).await.map(drop)
                } else {
                    let tx = client.transaction().await.unwrap();
                    let order = enqueuer * 10 + attempt;
                    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES ({order})"), &[])
                        .await
                        .unwrap();
                    let result = store.enqueue_in(&tx, one(), T0).await.map(drop);
                    tx.commit().await.unwrap();
                    result
                };
                match result {
                    Ok(()) => went_in += 1,
                    Err(Error::QueueFull {
                        limit: CapLimit::Records,
                        max: 1_000,
                        used,
                        adding: 1,
                    }) => assert_eq!(used, 1_000, "refused only when full"),
                    Err(other) => panic!("enqueuer {enqueuer}: {other:?}"),
                }
            }
            went_in
        });
    }
    let mut went_in = 0;
    while let Some(done) = tasks.join_next().await {
        went_in += done.expect("an enqueuer");
    }
    assert_eq!(went_in, 10, "exactly the free places");
    assert_eq!(orders(&scratch.schema).await, 20, "every business write");
    assert_holds_thousand(&store, &scratch.schema).await;
}

/// A REPEATABLE READ transaction whose snapshot was taken before another enqueue took the last
/// place does not see that record; its enqueue fails with a serialization error (temporary:
/// retry the transaction) instead of going in on the old count. The retry is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_on_an_older_snapshot_cannot_take_a_place_already_taken() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = thousand(&scratch, 999).await;
    let mut client = admin().await;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (1)"), &[])
        .await
        .unwrap();
    store.enqueue(one(), T0).await.expect("the last place");
    let stale = store.enqueue_in(&tx, one(), T0).await;
    assert!(
        matches!(&stale, Err(Error::Unavailable { detail, .. }) if detail.contains("40001")),
        "{stale:?}"
    );
    assert!(stale.unwrap_err().is_temporary());
    drop(tx);
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    assert_full(store.enqueue_in(&tx, one(), T0).await);
    tx.commit().await.unwrap();
    assert_holds_thousand(&store, s).await;
}

fn failed(state: State, now: u64) -> Progress {
    Progress {
        state,
        attempts: 1,
        unanswered: 0,
        interrupted: 0,
        last_attempt_at: Some(now),
        next_attempt_at: (state == State::Retrying).then_some(now + 1_000),
        last_error: Some("HTTP 422".into()),
        history: History::default(),
    }
}

/// The payload bytes `stats` reads against the rows, after every kind of change; an outbox
/// without a cap never takes the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_bytes_are_exact_through_every_change() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let store = scratch.store().await;
    let client = admin().await;
    let check = |stats: Stats, bytes: u64, when: &'static str| {
        let client = &client;
        async move {
            assert_eq!(stats.payload_bytes, bytes, "{when}");
            assert_eq!(payload_bytes_recounted(client, s).await, bytes, "{when}");
        }
    };
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(vec![1; 10]),
                NewRecord::new(vec![2; 20]).replacing("k"),
                NewRecord::new(vec![3; 30]),
                NewRecord::new(vec![4; 40]),
            ],
            T0,
        )
        .await
        .unwrap()
        .ids;
    check(store.stats().await.unwrap(), 100, "enqueued").await;
    store
        .enqueue(vec![NewRecord::new(vec![5; 5]).replacing("k")], T0)
        .await
        .unwrap();
    check(store.stats().await.unwrap(), 85, "the 20 replaced by 5").await;

    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 4,
            lease: Lease {
                token: 9,
                until: T0 + 60_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4);
    check(store.stats().await.unwrap(), 85, "in flight still counts").await;
    let change = |id: RecordId, change: Change| Transition {
        id,
        guard: Guard::Lease(9),
        change,
    };
    store
        .apply(vec![
            change(ids[0], Change::Delivered),
            change(
                ids[1],
                Change::Discard {
                    reason: "by hand".into(),
                    at: T0,
                    attempts: 0,
                },
            ),
            change(ids[2], Change::Update(failed(State::Rejected, T0))),
            change(ids[3], Change::Update(failed(State::Retrying, T0))),
        ])
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.rejected, stats.retrying, stats.discarded), (1, 1, 1));
    check(stats, 70, "10 delivered, 5 discarded, the rejected counted").await;
    assert_eq!(
        store.prune(T0 + 1).await.unwrap(),
        2,
        "the rejected and the tombstone"
    );
    check(store.stats().await.unwrap(), 40, "the rejected pruned").await;

    let turns: i64 = client
        .query_one(&format!("SELECT turns FROM \"{s}\".cap_turn"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(turns, 0, "no cap, no turn taken");
    drop(store);
    let store = capped(&scratch, Cap::none().with_max_bytes(1 << 20)).await;
    store
        .enqueue(vec![NewRecord::new(vec![6; 2])], T0)
        .await
        .unwrap();
    check(store.stats().await.unwrap(), 42, "capped").await;
}
