//! What only the PostgreSQL store promises: the caller's transaction, guarded migrations,
//! wake-ups by `LISTEN`/`NOTIFY`, and many claimers on one schema at once.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{admin, config, server_ready, Scratch};
use outbox_core::{Change, Claim, Error, Guard, Lease, NewRecord, RecordId, Store, Transition};
use outbox_postgres::{PgConfig, PgStore, SCHEMA_VERSION};

const T0: u64 = 1_700_000_000_000;

/// Bounds every wait of these tests: long enough for a loaded CI machine, and a hang fails
/// instead of blocking the suite.
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_commits_and_rolls_back_with_the_business_row() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let mut client = admin().await;
    let s = &scratch.schema;
    client
        .batch_execute(&format!("CREATE TABLE \"{s}\".orders (id int PRIMARY KEY)"))
        .await
        .unwrap();

    let tx = client.transaction().await.unwrap();
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (1)"), &[])
        .await
        .unwrap();
    let kept = store
        .enqueue_in(&tx, vec![NewRecord::new(b"paid 1".to_vec())], T0)
        .await
        .unwrap();
    // Not visible to anyone before the commit.
    assert_eq!(store.stats().await.unwrap().pending, 0);
    tx.commit().await.unwrap();

    // A record held for later keeps its time inside the transaction too.
    let tx = client.transaction().await.unwrap();
    let reminder = NewRecord::new(b"remind".to_vec()).not_before(T0 + 3_600_000);
    let held = store.enqueue_in(&tx, vec![reminder], T0).await.unwrap();
    tx.commit().await.unwrap();
    let record = store.get(held[0]).await.unwrap().unwrap();
    assert_eq!(
        (record.next_attempt_at, record.not_before),
        (Some(T0 + 3_600_000), Some(T0 + 3_600_000))
    );
    assert_eq!(store.stats().await.unwrap().scheduled, 1);
    store
        .apply(vec![outbox_core::Transition {
            id: held[0],
            guard: outbox_core::Guard::Idle,
            change: outbox_core::Change::Discard {
                reason: "test".into(),
                at: T0,
                attempts: 0,
            },
        }])
        .await
        .unwrap();

    let tx = client.transaction().await.unwrap();
    tx.execute(&format!("INSERT INTO \"{s}\".orders VALUES (2)"), &[])
        .await
        .unwrap();
    let dropped = store
        .enqueue_in(&tx, vec![NewRecord::new(b"paid 2".to_vec())], T0)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let orders: i64 = client
        .query_one(&format!("SELECT count(*) FROM \"{s}\".orders"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(orders, 1);
    assert!(store.get(kept[0]).await.unwrap().is_some());
    assert!(store.get(dropped[0]).await.unwrap().is_none());
    assert_eq!(store.stats().await.unwrap().pending, 1);
    // A refused payload fails the call before anything is written in the caller's transaction.
    let small = PgStore::connect(config(s).with_max_payload(3))
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    let refused = small
        .enqueue_in(&tx, vec![NewRecord::new(b"four".to_vec())], T0)
        .await;
    assert!(matches!(
        refused,
        Err(Error::PayloadTooLarge { size: 4, max: 3 })
    ));
    // So does an idempotency key no header can carry: the core's rule, as in `enqueue`.
    let bad_key = NewRecord::new(b"x".to_vec()).with_key("paid 3");
    let refused = store.enqueue_in(&tx, vec![bad_key], T0).await;
    assert!(
        matches!(refused, Err(Error::InvalidIdempotencyKey { .. })),
        "{refused:?}"
    );
    tx.commit().await.unwrap();
    assert_eq!(store.stats().await.unwrap().pending, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_together_migrate_once() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let opens = (0..6).map(|_| PgStore::connect(config(&scratch.schema)));
    for result in futures::future::join_all(opens).await {
        result.expect("every concurrent opener succeeds");
    }
    let client = admin().await;
    let version: i32 = client
        .query_one(
            &format!("SELECT version FROM \"{}\".schema_version", scratch.schema),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION as i32);
}

/// A schema a DBA created ahead (empty, perhaps with its own grants) is version 0: the store
/// adopts it and builds its tables inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_schema_made_ahead_is_adopted() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let client = admin().await;
    client
        .batch_execute(&format!("CREATE SCHEMA \"{}\"", scratch.schema))
        .await
        .unwrap();
    let store = scratch.store().await;
    let ids = store
        .enqueue(vec![NewRecord::new(b"x".to_vec()).in_group("g")], T0)
        .await
        .unwrap();
    assert_eq!(ids, vec![RecordId(1)]);
    // Opening again finds it current and changes nothing.
    let again = scratch.store().await;
    assert_eq!(again.stats().await.unwrap().pending, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_left_untouched() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let ids = store
        .enqueue(vec![NewRecord::new(b"keep me".to_vec())], T0)
        .await
        .unwrap();
    let client = admin().await;
    let s = &scratch.schema;
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 99"))
        .await
        .unwrap();
    match PgStore::connect(config(s)).await {
        Err(Error::SchemaTooNew { found, supported }) => {
            assert_eq!((found, supported), (99, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    let version: i32 = client
        .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 99);
    assert!(store.get(ids[0]).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_schema_is_not_taken_for_an_outbox() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let client = admin().await;
    let s = &scratch.schema;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{s}\"; CREATE TABLE \"{s}\".invoices (id int); \
             INSERT INTO \"{s}\".invoices VALUES (7);"
        ))
        .await
        .unwrap();
    let result = PgStore::connect(config(s)).await;
    assert!(
        matches!(result, Err(Error::NotAnOutbox { .. })),
        "{result:?}"
    );
    let kept: i64 = client
        .query_one(&format!("SELECT count(*) FROM \"{s}\".invoices"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1);
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&s.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "nothing was added to the foreign schema");
}

/// A group PostgreSQL could not store (a NUL) is refused by the core's rule, the same typed
/// error every backend gives, and the rest of its batch is not enqueued either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_a_nul_is_refused_with_its_batch() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    for bad in [
        "a\0b".to_owned(),
        "x".repeat(outbox_core::MAX_GROUP_LEN + 1),
    ] {
        let result = store
            .enqueue(
                vec![
                    NewRecord::new(b"fine".to_vec()),
                    NewRecord::new(b"bad".to_vec()).in_group(bad),
                ],
                T0,
            )
            .await;
        assert!(
            matches!(result, Err(Error::InvalidGroup { .. })),
            "{result:?}"
        );
    }
    assert_eq!(store.stats().await.unwrap().pending, 0);
}

#[tokio::test]
async fn bad_settings_and_absent_servers_give_typed_errors() {
    let bad_name = PgStore::connect(PgConfig::new(common::url(), "Robert'); DROP")).await;
    assert!(
        matches!(bad_name, Err(Error::InvalidConfig(_))),
        "{bad_name:?}"
    );
    // Nothing listens on port 1: the error says "try later", which the runner retries.
    let absent = PgStore::connect(
        PgConfig::new("postgres://postgres@127.0.0.1:1/test", "outbox")
            .with_connect_timeout(Some(Duration::from_secs(5))),
    )
    .await;
    match absent {
        Err(err @ Error::Unavailable { .. }) => {
            assert!(err.is_temporary());
            assert!(
                std::error::Error::source(&err).is_some(),
                "the cause is kept"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_in_one_process_wakes_listeners_in_others() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let writer = scratch.store().await;
    let app = format!("outbox-listen-{}", fastrand::u32(..));
    let reader = PgStore::connect(config(&scratch.schema).with_application_name(&app))
        .await
        .unwrap();
    let wakeups = reader.listen().await.unwrap();
    writer
        .enqueue(vec![NewRecord::new(b"x".to_vec())], T0)
        .await
        .unwrap();
    tokio::time::timeout(PATIENCE, wakeups.notified())
        .await
        .expect("the enqueue's NOTIFY arrives");

    // Kill the listening session: the listener reconnects, wakes once for what it may have
    // missed, and hears later enqueues again.
    let client = admin().await;
    let killed: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query ILIKE 'LISTEN%') AS t",
            &[&app],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1, "the listener's session was found and ended");
    tokio::time::timeout(PATIENCE, wakeups.notified())
        .await
        .expect("the listener wakes after it reconnects");
    // Wait until the new session listens, then check a fresh enqueue is heard.
    tokio::time::timeout(PATIENCE, async {
        loop {
            let listening: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                     AND query ILIKE 'LISTEN%'",
                    &[&app],
                )
                .await
                .unwrap()
                .get(0);
            if listening == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener reconnects");
    writer
        .enqueue(vec![NewRecord::new(b"y".to_vec())], T0)
        .await
        .unwrap();
    tokio::time::timeout(PATIENCE, wakeups.notified())
        .await
        .expect("enqueues are heard after the reconnect");
}

/// A runner with no polling at all is woken by an enqueue made through another store (host A;
/// another process, in production) through `wake_on_enqueue`, with no forwarding code of the
/// application: within a round trip of the notification. And again after the server ended
/// the listening session (`pg_terminate_backend`): the listener reconnects by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_without_polling_is_woken_by_another_hosts_enqueue_and_after_its_listener_died() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let app = format!("outbox-wake-{}", fastrand::u32(..));
    let host_b = PgStore::connect(config(&scratch.schema).with_application_name(&app))
        .await
        .unwrap();
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let sink = outbox_core::sink_fn(move |record: outbox_core::Record| {
        let sent = sent.clone();
        async move {
            let _ = sent.send(record.payload);
            outbox_core::Outcome::Delivered
        }
    });
    let outbox = outbox_core::Outbox::builder(Arc::new(host_b.clone()), sink)
        .clock(host_b.clock())
        .config(outbox_core::RunnerConfig {
            safety_poll: None,
            ..outbox_core::RunnerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let _wakeups = host_b.wake_on_enqueue(outbox.notifier()).await.unwrap();
    // Settled and idle: nothing will wake it but a trigger.
    outbox.flush(PATIENCE).await.unwrap();

    let host_a = scratch.store().await;
    let client = admin().await;
    // The third enqueue can only be heard through the new session: the one wake-up the
    // listener gives after reconnecting was spent by then (each round is flushed).
    let payloads = [&b"first"[..], b"after the listener died", b"and again"];
    for (round, payload) in payloads.into_iter().enumerate() {
        if round == 1 {
            let killed: i64 = client
                .query_one(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) \
                     FROM pg_stat_activity WHERE application_name = $1 \
                     AND query ILIKE 'LISTEN%') AS t",
                    &[&app],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(killed, 1, "the listener's session was found and ended");
            // The reconnect wakes the runner once; let that round finish, then wait for the
            // new session to listen.
            tokio::time::timeout(PATIENCE, async {
                loop {
                    let listening: i64 = client
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                             AND query ILIKE 'LISTEN%'",
                            &[&app],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    if listening == 1 {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            })
            .await
            .expect("the listener reconnects");
            outbox.flush(PATIENCE).await.unwrap();
        }
        let started = std::time::Instant::now();
        host_a
            .enqueue(vec![NewRecord::new(payload.to_vec())], host_a.clock().now())
            .await
            .unwrap();
        let delivered = tokio::time::timeout(PATIENCE, received.recv())
            .await
            .expect("the runner was woken and delivered");
        assert_eq!(delivered.as_deref(), Some(payload));
        eprintln!(
            "round {round}: delivered {:?} after the enqueue",
            started.elapsed()
        );
        outbox.flush(PATIENCE).await.unwrap();
    }
    outbox.shutdown(PATIENCE).await.unwrap();
}

/// Several stores (separate pools, as separate hosts would have) claim from one schema at once:
/// no record is claimed twice, a group never has two records in flight, and each group is
/// delivered in id order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_take_disjoint_records_one_per_group() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let seed = store_seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let setup = scratch.store().await;
    let mut records = Vec::new();
    for i in 0..300 {
        let record = NewRecord::new(format!("r{i}").into_bytes());
        records.push(match rng.u8(..4) {
            0 => record,
            _ => record.in_group(format!("g{}", rng.u8(..12))),
        });
    }
    let ids = setup.enqueue(records.clone(), T0).await.unwrap();
    let group_of: HashMap<RecordId, Option<String>> = ids
        .iter()
        .copied()
        .zip(records.iter().map(|r| r.group.clone()))
        .collect();
    let group_of = Arc::new(group_of);

    #[derive(Default)]
    struct Ledger {
        claimed: HashSet<RecordId>,
        in_flight: HashMap<String, RecordId>,
        order: BTreeMap<String, Vec<RecordId>>,
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut tasks = Vec::new();
    for worker in 0..4u64 {
        let store = scratch.store().await;
        let ledger = Arc::clone(&ledger);
        let group_of = Arc::clone(&group_of);
        tasks.push(tokio::spawn(async move {
            let mut token = worker << 32;
            loop {
                token += 1;
                let lease = Lease {
                    token,
                    until: T0 + 60_000,
                };
                let claimed = store
                    .claim(Claim {
                        now: T0,
                        limit: 3,
                        lease,
                    })
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    if store.stats().await.unwrap().undelivered() == 0 {
                        return;
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                {
                    let mut ledger = ledger.lock().unwrap();
                    for record in &claimed {
                        assert!(
                            ledger.claimed.insert(record.id),
                            "{} claimed twice",
                            record.id
                        );
                        if let Some(group) = &group_of[&record.id] {
                            if let Some(other) = ledger.in_flight.insert(group.clone(), record.id) {
                                panic!("{group}: {other} and {} in flight at once", record.id);
                            }
                            ledger
                                .order
                                .entry(group.clone())
                                .or_default()
                                .push(record.id);
                        }
                    }
                }
                // "Deliver": let the other claimers run while these records are in flight.
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                {
                    // Free the groups before the report commits: a next record claimed after
                    // the commit must find its group free.
                    let mut ledger = ledger.lock().unwrap();
                    for record in &claimed {
                        if let Some(group) = &group_of[&record.id] {
                            ledger.in_flight.remove(group);
                        }
                    }
                }
                let transitions = claimed
                    .iter()
                    .map(|r| Transition {
                        id: r.id,
                        guard: Guard::Lease(token),
                        change: Change::Delivered,
                    })
                    .collect();
                let applied = store.apply(transitions).await.unwrap();
                assert!(applied.skipped.is_empty());
            }
        }));
    }
    tokio::time::timeout(PATIENCE, futures::future::try_join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("the claimers did not finish (seed {seed})"))
        .unwrap_or_else(|e| panic!("a claimer failed (seed {seed}): {e}"));
    {
        let ledger = ledger.lock().unwrap();
        assert_eq!(ledger.claimed.len(), ids.len(), "seed {seed}");
        for (group, order) in &ledger.order {
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{group} out of order: {order:?} (seed {seed})"
            );
        }
    }
    let stats = setup.stats().await.unwrap();
    assert_eq!(stats.delivered, ids.len() as u64);
    assert_eq!(stats.undelivered(), 0);
}

/// The seed of the randomized test: `OUTBOX_PG_SEED` replays a failure.
fn store_seed() -> u64 {
    std::env::var("OUTBOX_PG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// Coalescing across processes while runners drain: four stores (separate pools, as separate
/// hosts would have) each enqueue edits under one shared ungrouped key and one key of a
/// group (with now and then a plain write of that group between them), while two more stores
/// claim and deliver in rounds. Nothing deadlocks; a record is never rewritten while it is in
/// flight (each claimed payload is still the record's payload when its delivery is reported);
/// and every write is accounted for exactly once: delivered, or counted as merged, where the
/// count the enqueues reported and the persisted counter agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coalescing_is_exact_across_stores_while_runners_drain() {
    if !server_ready() {
        return;
    }
    const WRITERS: u64 = 4;
    const EDITS: u64 = 30;
    let scratch = Scratch::new();
    let setup = scratch.store().await;
    let writing = Arc::new(std::sync::atomic::AtomicUsize::new(WRITERS as usize));
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let store = scratch.store().await;
        let writing = Arc::clone(&writing);
        writers.push(tokio::spawn(async move {
            let (mut writes, mut merged) = (0u64, 0u64);
            for n in 0..EDITS {
                let payload = format!("w{writer}-{n}").into_bytes();
                let record = match n % 5 {
                    0 | 1 => NewRecord::new(payload).replacing("shared"),
                    4 if writer % 2 == 0 => NewRecord::new(payload).in_group("doc"),
                    _ => NewRecord::new(payload)
                        .in_group("doc")
                        .replacing("doc/body")
                        .expecting(format!("{n}")),
                };
                let enqueued = store.enqueue(vec![record], T0).await.unwrap();
                writes += 1;
                merged += enqueued.superseded.len() as u64;
                tokio::task::yield_now().await;
            }
            writing.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            (writes, merged)
        }));
    }
    let delivered = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let mut drainers = Vec::new();
    for drainer in 0..2u64 {
        let store = scratch.store().await;
        let writing = Arc::clone(&writing);
        let delivered = Arc::clone(&delivered);
        drainers.push(tokio::spawn(async move {
            let mut token = (drainer + 1) << 32;
            let mut outcomes = Vec::new();
            loop {
                token += 1;
                let claim = Claim {
                    now: T0,
                    limit: 4,
                    lease: Lease {
                        token,
                        until: T0 + 600_000,
                    },
                };
                let round = store
                    .round(std::mem::take(&mut outcomes), Some(claim))
                    .await
                    .unwrap();
                assert!(round.applied.skipped.is_empty(), "{round:?}");
                if round.claimed.is_empty() {
                    let idle = writing.load(std::sync::atomic::Ordering::SeqCst) == 0
                        && store.stats().await.unwrap().undelivered() == 0;
                    if idle {
                        return;
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                // "Deliver", letting the writers run meanwhile; then check that nothing
                // rewrote the records while they were in flight.
                tokio::task::yield_now().await;
                for record in &round.claimed {
                    let now = store
                        .get(record.id)
                        .await
                        .unwrap()
                        .expect("still in flight");
                    assert_eq!(
                        (now.payload.as_slice(), now.key.as_str()),
                        (record.payload.as_slice(), record.key.as_str()),
                        "{} was rewritten in flight",
                        record.id
                    );
                    delivered.lock().unwrap().push(record.payload.clone());
                    outcomes.push(Transition {
                        id: record.id,
                        guard: Guard::Lease(token),
                        change: Change::Delivered,
                    });
                }
            }
        }));
    }
    let (mut writes, mut merged) = (0, 0);
    for writer in writers {
        let (w, m) = tokio::time::timeout(PATIENCE, writer)
            .await
            .expect("the writers finish")
            .expect("a writer failed");
        writes += w;
        merged += m;
    }
    tokio::time::timeout(PATIENCE, futures::future::try_join_all(drainers))
        .await
        .expect("the drainers finish")
        .expect("a drainer failed");
    let stats = setup.stats().await.unwrap();
    let delivered = delivered.lock().unwrap().clone();
    assert_eq!(writes, WRITERS * EDITS);
    assert_eq!(
        stats.superseded, merged,
        "the counter and the enqueues agree"
    );
    assert_eq!(stats.undelivered(), 0, "{stats:?}");
    assert_eq!(stats.delivered, delivered.len() as u64);
    assert_eq!(
        stats.delivered + stats.superseded,
        writes,
        "every write delivered or merged: {stats:?}"
    );
    let distinct: HashSet<&Vec<u8>> = delivered.iter().collect();
    assert_eq!(
        distinct.len(),
        delivered.len(),
        "no payload delivered twice"
    );
    assert!(merged > 0, "the run coalesced: {stats:?}");
}

/// The coalescing lookups are index seeks, never scans of the backlog: with 20,000 records
/// under three coalescing keys in 50 groups (many records per key and per group, where
/// walking the primary key backwards looks cheap to the planner), the latest record of a key
/// is read through `records_replaces` and the last member of a group through
/// `records_groups`, whichever plan the server picks (custom or generic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalescing_lookups_seek_the_key_and_group_indexes() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    for _ in 0..20 {
        let records = (0..1_000)
            .map(|i| {
                NewRecord::new(vec![1])
                    .in_group(format!("g{}", i % 50))
                    .replacing(format!("k{}", i % 3))
            })
            .collect();
        let enqueued = store.enqueue(records, T0).await.unwrap();
        assert!(enqueued.superseded.is_empty());
    }
    // The latest record of a key, in the write's group and last of it, is replaced; a write
    // whose key's latest record is in another group is not.
    let again = store
        .enqueue(
            vec![
                NewRecord::new(vec![2]).in_group("g49").replacing("k0"),
                NewRecord::new(vec![2]).in_group("g0").replacing("k1"),
            ],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(again.superseded, vec![0]);
    let client = admin().await;
    let s = &scratch.schema;
    client
        .batch_execute(&format!("ANALYZE \"{s}\".records"))
        .await
        .unwrap();
    // The statements' shapes as the store sends them (the text is the crate's).
    let latest = format!(
        "SELECT l.id FROM unnest($1::text[]) AS c CROSS JOIN LATERAL \
         (SELECT * FROM \"{s}\".records WHERE replaces >= c AND replaces <= c \
         ORDER BY replaces DESC, id DESC LIMIT 1) AS l"
    );
    let tails = format!(
        "SELECT g, (SELECT h.id FROM \"{s}\".records AS h WHERE h.grp >= g AND h.grp <= g \
         AND h.state <> 4 ORDER BY h.grp DESC, h.id DESC LIMIT 1) FROM unnest($1::text[]) AS g"
    );
    client
        .batch_execute(&format!(
            "PREPARE latest(text[]) AS {latest}; PREPARE tails(text[]) AS {tails};"
        ))
        .await
        .unwrap();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        client
            .batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .await
            .unwrap();
        for (statement, index) in [
            ("latest('{k0,k2}')", "records_replaces"),
            ("tails('{g1,g2}')", "records_groups"),
        ] {
            let plan: String = client
                .query(&format!("EXPLAIN EXECUTE {statement}"), &[])
                .await
                .unwrap()
                .iter()
                .map(|row| row.get::<_, String>(0) + "\n")
                .collect();
            assert!(plan.contains(index), "{mode} {statement}:\n{plan}");
            assert!(!plan.contains("Seq Scan"), "{mode} {statement}:\n{plan}");
        }
    }
}
