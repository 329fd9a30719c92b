//! Stats read counters that the store's writes keep (schema version 5). After every kind of
//! write, by every path that writes (the store's own calls, the caller's transaction through
//! rusqlite, sqlx and diesel, committed and rolled back, a row that cannot be decoded, its
//! set-aside and its discard, expiry, requeue, prune), the counters equal a recount of the
//! rows with the grouped statements stats ran before it had counters.

use std::path::Path;

use outbox_core::{
    Change, Claim, ErrorCount, Guard, Lease, NewRecord, Progress, RecordId, State, Stats, Store,
    Transition,
};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

/// Stats and the common errors as the rows say, counted the way stats did before counters
/// (a grouped scan of the table), on a connection of its own.
fn recount(path: &Path) -> (Stats, Vec<(String, u64)>) {
    let conn = Connection::open(path).expect("open");
    let mut stats = Stats::default();
    let mut stmt = conn
        .prepare(
            "SELECT state, count(*) FROM records \
             WHERE NOT (state = 2 AND lease_until IS NULL) GROUP BY state",
        )
        .expect("prepare");
    let rows = stmt
        .query_map([], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)))
        .expect("count")
        .collect::<rusqlite::Result<Vec<_>>>()
        .expect("rows");
    for (code, n) in rows {
        let n = n as u64;
        match u8::try_from(code).ok().and_then(State::from_code) {
            Some(State::Pending) => stats.pending = n,
            Some(State::Retrying) => stats.retrying = n,
            Some(State::InFlight) => stats.in_flight = n,
            Some(State::NeedsAttention) => stats.needs_attention = n,
            Some(State::Rejected) => stats.rejected = n,
            None => {}
        }
    }
    let one = |sql: &str| -> i64 {
        conn.query_row(sql, [], |row| row.get::<_, Option<i64>>(0))
            .expect(sql)
            .unwrap_or(0)
    };
    stats.discarded = one("SELECT count(*) FROM tombstones") as u64;
    stats.payload_bytes = one(
        "SELECT sum(length(payload)) FROM records WHERE NOT (state = 2 AND lease_until IS NULL)",
    ) as u64;
    stats.held = one("WITH heads AS (
            SELECT grp, min(id) AS head FROM records WHERE member = 1 GROUP BY grp)
        SELECT count(*) FROM records AS r
        JOIN heads ON r.grp = heads.grp
        JOIN records AS h ON h.id = heads.head
        WHERE r.member = 1 AND h.state = 3 AND r.id <> h.id") as u64;
    let oldest = one(
        "SELECT min(created_at) FROM records WHERE state IN (0, 1, 2, 3) \
         AND NOT (state = 2 AND lease_until IS NULL)",
    );
    stats.oldest_created_at = (oldest > 0).then_some(oldest as u64);
    let errors = conn
        .prepare(
            "SELECT last_error, count(*) AS n FROM records \
             WHERE state IN (1, 3, 4) AND last_error IS NOT NULL \
             GROUP BY last_error ORDER BY n DESC, last_error",
        )
        .expect("prepare")
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)? as u64))
        })
        .expect("errors")
        .collect::<rusqlite::Result<Vec<_>>>()
        .expect("rows");
    (stats, errors)
}

/// The store's stats and common errors equal the recount, field by field.
async fn check(store: &SqliteStore, step: &str) {
    let (expected, errors) = recount(store.path());
    let stats = store.stats().await.expect("stats");
    let fields = |s: &Stats| {
        (
            s.pending,
            s.retrying,
            s.in_flight,
            s.needs_attention,
            s.rejected,
            s.discarded,
            s.held,
            s.oldest_created_at,
            s.payload_bytes,
        )
    };
    assert_eq!(fields(&stats), fields(&expected), "after {step}");
    let common: Vec<(String, u64)> = store
        .common_errors(100)
        .await
        .expect("common errors")
        .into_iter()
        .map(|ErrorCount { error, count }| (error, count))
        .collect();
    assert_eq!(common, errors, "after {step}");
}

fn update(id: RecordId, guard: Guard, state: State, error: &str) -> Transition {
    Transition {
        id,
        guard,
        change: Change::Update(Progress {
            state,
            attempts: 1,
            unanswered: 0,
            interrupted: 0,
            last_attempt_at: Some(2_000),
            next_attempt_at: (state == State::Retrying).then_some(3_000),
            last_error: Some(error.to_owned()),
            history: Default::default(),
        }),
    }
}

fn lease(token: u64) -> Lease {
    Lease {
        token,
        until: 10_000,
    }
}

fn batch(prefix: &str, n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| {
            NewRecord::new(format!("{prefix}{i}").into_bytes()).in_group(format!("g{}", i % 3))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_equal_a_recount_after_every_kind_of_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    check(&store, "nothing").await;

    let ids = store.enqueue(batch("a", 12), 1_000).await.expect("enqueue");
    let loose = store
        .enqueue((0..6).map(|i| NewRecord::new(vec![i])).collect(), 900)
        .await
        .expect("enqueue");
    check(&store, "enqueue").await;

    // Coalescing rewrites a pending record in place: no new count.
    let edit = |body: &str| {
        NewRecord::new(body.as_bytes().to_vec())
            .in_group("doc")
            .replacing("doc/body")
    };
    store.enqueue(vec![edit("v1")], 1_100).await.expect("edit");
    store
        .enqueue(vec![edit("v2, longer")], 1_200)
        .await
        .expect("edit");
    check(&store, "a larger replacement").await;
    store.enqueue(vec![edit("v3")], 1_300).await.expect("edit");
    check(&store, "coalescing").await;

    let claimed = store
        .claim(Claim {
            now: 5_000,
            limit: 8,
            lease: lease(1),
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 8);
    check(&store, "claim").await;

    // The round's outcomes: delivered, failed (retrying), needs attention (a group head, so
    // its group is held), rejected, then a second failure with another error.
    let held = |i: usize| Guard::Lease(claimed[i].lease.expect("leased").token);
    let outcomes = vec![
        Transition {
            id: claimed[0].id,
            guard: held(0),
            change: Change::Delivered,
        },
        update(claimed[1].id, held(1), State::Retrying, "HTTP 503"),
        update(claimed[2].id, held(2), State::NeedsAttention, "HTTP 500"),
        update(claimed[3].id, held(3), State::Rejected, "HTTP 400"),
        update(claimed[4].id, held(4), State::Retrying, "HTTP 503"),
    ];
    let round = store
        .round(
            outcomes,
            Some(Claim {
                now: 5_001,
                limit: 3,
                lease: lease(2),
            }),
        )
        .await
        .expect("round");
    check(&store, "a round").await;

    // The same record fails again with another error; another is discarded by a person.
    store
        .apply(vec![
            update(claimed[1].id, Guard::Idle, State::Retrying, "timed out"),
            Transition {
                id: claimed[5].id,
                guard: held(5),
                change: Change::Discard {
                    reason: "by a person".into(),
                    at: 5_100,
                    attempts: 0,
                },
            },
        ])
        .await
        .expect("apply");
    check(&store, "a failure and a discard").await;

    // Leases run out: the records go back by an update, as the runner's recovery does.
    let expired = store.expired(20_000, 100).await.expect("expired");
    assert!(!expired.is_empty());
    let back = expired
        .iter()
        .map(|r| Transition {
            id: r.id,
            guard: Guard::Lease(r.lease.expect("leased").token),
            change: Change::Update(Progress::requeued(20_000)),
        })
        .collect();
    store.apply(back).await.expect("recover");
    check(&store, "expiry").await;

    // A person requeues the rejected and the parked ones.
    let requeue = |id| Transition {
        id,
        guard: Guard::Idle,
        change: Change::Requeue { at: 21_000 },
    };
    store
        .apply(vec![requeue(claimed[2].id), requeue(claimed[3].id)])
        .await
        .expect("requeue");
    check(&store, "requeue").await;

    // Rejected again, then pruned.
    let again = store
        .claim(Claim {
            now: 30_000,
            limit: 100,
            lease: lease(3),
        })
        .await
        .expect("claim");
    let rejections = again
        .iter()
        .map(|r| update(r.id, Guard::Lease(3), State::Rejected, "HTTP 422"))
        .collect();
    store.apply(rejections).await.expect("reject");
    check(&store, "rejections").await;
    store.prune(u64::MAX).await.expect("prune");
    check(&store, "prune").await;

    // The caller's own transaction, committed and rolled back, through rusqlite.
    let committed = {
        let mut conn = Connection::open(&path).expect("open");
        let tx = conn.transaction().expect("begin");
        let committed = store
            .enqueue_in(&tx, batch("tx", 4), 40_000)
            .expect("enqueue in");
        tx.commit().expect("commit");
        let tx = conn.transaction().expect("begin");
        store
            .enqueue_in(&tx, batch("gone", 4), 40_000)
            .expect("enqueue in");
        tx.rollback().expect("rollback");
        committed
    };
    check(&store, "rusqlite transactions").await;

    // Through sqlx (a build without the driver features, as the rusqlite range's newest end
    // is tested, has none to go through).
    #[cfg(feature = "sqlx")]
    {
        use sqlx::Connection as _;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("sqlx");
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
        // No runner here to announce to: the pending announcement is dropped.
        let _ = store
            .enqueue_sqlx(&mut tx, batch("sqlx", 3), 41_000)
            .await
            .expect("enqueue sqlx");
        tx.commit().await.expect("commit");
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
        let _ = store
            .enqueue_sqlx(&mut tx, batch("sqlx-gone", 3), 41_000)
            .await
            .expect("enqueue sqlx");
        tx.rollback().await.expect("rollback");
    }
    check(&store, "sqlx transactions").await;

    // Through diesel.
    #[cfg(feature = "diesel")]
    {
        use diesel::Connection as _;
        let p = path.clone();
        let mut conn =
            diesel::SqliteConnection::establish(&p.display().to_string()).expect("diesel");
        type BoxError = Box<dyn std::error::Error + Send + Sync>;
        conn.immediate_transaction(|conn| {
            let _ = store.enqueue_diesel(conn, batch("diesel", 2), 42_000)?;
            Ok::<_, BoxError>(())
        })
        .expect("committed");
        let rolled_back = conn.immediate_transaction(|conn| {
            let _ = store.enqueue_diesel(conn, batch("diesel-gone", 2), 42_000)?;
            Err::<(), BoxError>("roll back".into())
        });
        assert!(rolled_back.is_err());
    }
    check(&store, "diesel transactions").await;

    // A bad row: counted in its stored state until a claim sets it aside, then no longer;
    // discarded, it leaves a tombstone.
    let bad = committed[1];
    {
        let conn = Connection::open(&path).expect("open");
        conn.execute(
            "UPDATE records SET key = CAST(x'c328ff' AS TEXT) WHERE id = ?1",
            [bad.0 as i64],
        )
        .expect("plant");
    }
    check(&store, "planted bad rows").await;
    store
        .claim(Claim {
            now: 50_000,
            limit: 100,
            lease: lease(4),
        })
        .await
        .expect("claim around the bad row");
    check(&store, "the bad row set aside").await;
    assert!(store
        .discard_unreadable(bad, 50_001)
        .await
        .expect("discard"));
    check(&store, "the bad row discarded").await;

    assert!(!ids.is_empty() && !loose.is_empty() && !round.claimed.is_empty());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_driven_below_zero_by_hand_reads_as_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .expect("create");
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 1_000)
        .await
        .expect("enqueue");
    // Someone deleted rows and edited the counter by hand.
    Connection::open(&path)
        .expect("open")
        .execute_batch("UPDATE meta SET value = -3 WHERE name = 'state 0'")
        .expect("edit");
    let stats = store.stats().await.expect("stats still answer");
    assert_eq!((stats.pending, stats.undelivered()), (0, 0));
    store.close().await;
}
