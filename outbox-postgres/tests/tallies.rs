//! The counts `stats` and `common_errors` read (schema version 4: per-session shards kept by
//! triggers; the payload bytes since version 6) against a full recount of the records, the way
//! version 3 counted them: after a random workload from several sessions at once, after a prune,
//! and across the upgrade from version 3.

mod common;

use std::sync::Arc;

use common::{admin, down_to_3, payload_bytes_recounted, server_ready, Scratch};
use outbox_core::{
    machine, Change, Claim, ErrorCount, Guard, Lease, ListQuery, NewRecord, Progress, State, Stats,
    Store, Transition,
};
use outbox_postgres::PgStore;

const T0: u64 = 1_700_000_000_000;

/// What version 3 computed by reading every record: the per-state counts, the oldest
/// undelivered record, the tombstones, the held records and the merged writes (the writes
/// absorbed by live records counted from the records; those of records gone, and the
/// delivered count, were counters then too).
async fn recount(client: &tokio_postgres::Client, s: &str) -> Vec<Option<i64>> {
    let r = format!("\"{s}\".records");
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE state = 0 AND lease_token IS NULL), \
                 count(*) FILTER (WHERE state = 1 AND lease_token IS NULL), \
                 count(*) FILTER (WHERE state < 3 AND lease_token IS NOT NULL), \
                 count(*) FILTER (WHERE state = 3), count(*) FILTER (WHERE state = 4), \
                 min(created_at) FILTER (WHERE state IN (0, 1, 3) \
                   OR (state = 2 AND lease_token IS NOT NULL)), \
                 (SELECT count(*) FROM \"{s}\".tombstones), \
                 (SELECT coalesce(sum(g.n - 1), 0)::bigint FROM \
                   (SELECT count(*) AS n, min(id) AS head FROM {r} \
                    WHERE grp IS NOT NULL AND state <> 4 GROUP BY grp) AS g \
                   JOIN {r} AS h ON h.id = g.head WHERE h.state = 3), \
                 (SELECT superseded FROM \"{s}\".meta) \
                   + (SELECT coalesce(sum(superseded), 0) FROM \"{s}\".tallies)::bigint \
                   + coalesce(sum(absorbed), 0)::bigint \
                 FROM {r}"
            ),
            &[],
        )
        .await
        .unwrap();
    (0..9).map(|i| row.get::<_, Option<i64>>(i)).collect()
}

/// The same figures as the store reports them.
fn reported(stats: &Stats) -> Vec<Option<i64>> {
    let n = |v: u64| Some(v as i64);
    vec![
        n(stats.pending),
        n(stats.retrying),
        n(stats.in_flight),
        n(stats.needs_attention),
        n(stats.rejected),
        stats.oldest_created_at.map(|t| t as i64),
        n(stats.discarded),
        n(stats.held),
        n(stats.superseded),
    ]
}

/// Version 3's grouped query over the failed records (those in flight, which hold a lease
/// token since version 7, left out).
async fn errors_recounted(client: &tokio_postgres::Client, s: &str) -> Vec<ErrorCount> {
    let rows = client
        .query(
            &format!(
                "SELECT last_error, count(*) FROM \"{s}\".records \
                 WHERE (state IN (3, 4) OR (state = 1 AND lease_token IS NULL)) \
                 AND last_error IS NOT NULL \
                 GROUP BY last_error ORDER BY count(*) DESC, last_error COLLATE \"C\""
            ),
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|row| ErrorCount {
            error: row.get(0),
            count: row.get::<_, i64>(1) as u64,
        })
        .collect()
}

async fn assert_counts_exact(store: &PgStore, s: &str, delivered: u64, when: &str) {
    let client = admin().await;
    let stats = store.stats().await.unwrap();
    assert_eq!(reported(&stats), recount(&client, s).await, "{when}");
    assert_eq!(stats.delivered, delivered, "{when}: delivered");
    assert_eq!(
        stats.payload_bytes,
        payload_bytes_recounted(&client, s).await,
        "{when}: payload bytes"
    );
    let all = errors_recounted(&client, s).await;
    assert_eq!(
        store.common_errors(usize::MAX).await.unwrap(),
        all,
        "{when}"
    );
    assert_eq!(
        store.common_errors(3).await.unwrap(),
        all.into_iter().take(3).collect::<Vec<_>>(),
        "{when}: the top three"
    );
}

fn failure(state: State, error: String, now: u64) -> Change {
    Change::Update(Progress {
        state,
        attempts: 1,
        unanswered: 0,
        interrupted: 0,
        last_attempt_at: Some(now),
        next_attempt_at: (state == State::Retrying).then_some(now),
        last_error: Some(error),
        history: Default::default(),
    })
}

/// One session's share of the workload: enqueues (grouped, coalescing), claims and their
/// outcomes (delivered, failed with a shared or a unique text, needs-attention, rejected,
/// discarded), and a person's retries, requeues and discards. Returns how many deliveries
/// were applied.
async fn work(store: PgStore, me: u64, seed: u64, steps: usize) -> u64 {
    let mut rng = fastrand::Rng::with_seed(seed ^ me);
    let mut delivered = 0;
    for step in 0..steps {
        let now = T0 + step as u64;
        match rng.u8(..6) {
            0 | 1 => {
                let batch = (0..rng.usize(1..6))
                    .map(|i| {
                        // Payloads of varied sizes, so a coalescing rewrite changes the bytes.
                        let r = NewRecord::new(vec![b'x'; rng.usize(1..40)]);
                        match rng.u8(..4) {
                            0 => r.in_group(format!("g{}", rng.u8(..4))),
                            1 => r.replacing(format!("k{}", rng.u8(..3))),
                            _ if i == 0 => r.in_group(format!("s{me}")),
                            _ => r,
                        }
                    })
                    .collect();
                store.enqueue(batch, now).await.unwrap();
            }
            2 | 3 => {
                let token = me * 1_000_000 + step as u64;
                let claimed = store
                    .claim(Claim {
                        now: now + 10_000,
                        limit: rng.usize(1..6),
                        lease: Lease {
                            token,
                            until: now + 60_000,
                        },
                    })
                    .await
                    .unwrap();
                let mut delivering = Vec::new();
                let outcomes = claimed
                    .iter()
                    .map(|r| {
                        let change = match rng.u8(..7) {
                            0 | 1 => {
                                delivering.push(r.id);
                                Change::Delivered
                            }
                            2 => failure(State::Retrying, format!("HTTP 50{}", rng.u8(..3)), now),
                            3 => failure(State::NeedsAttention, "HTTP 500".into(), now),
                            4 => failure(State::Rejected, format!("HTTP 404: /n/{}", r.id), now),
                            5 => failure(State::Rejected, "HTTP 400".into(), now),
                            _ => Change::Discard {
                                reason: "ceiling".into(),
                                at: now,
                                attempts: 1,
                            },
                        };
                        Transition {
                            id: r.id,
                            guard: Guard::Lease(token),
                            change,
                        }
                    })
                    .collect();
                let applied = store.apply(outcomes).await.unwrap();
                delivered += delivering
                    .iter()
                    .filter(|id| !applied.skipped.contains(id))
                    .count() as u64;
            }
            4 => {
                let stuck = store
                    .list(&ListQuery::new(3).state(State::NeedsAttention))
                    .await
                    .unwrap();
                let transitions = stuck
                    .iter()
                    .filter_map(|r| {
                        if rng.bool() {
                            machine::retry_now(r, now).map(|s| s.transition)
                        } else {
                            machine::discard(r, "by hand", now).map(|s| s.transition)
                        }
                    })
                    .collect();
                store.apply(transitions).await.unwrap();
            }
            _ => {
                let rejected = store
                    .list(&ListQuery::new(2).state(State::Rejected))
                    .await
                    .unwrap();
                let transitions = rejected
                    .iter()
                    .filter_map(|r| machine::requeue(r, now))
                    .collect();
                store.apply(transitions).await.unwrap();
            }
        }
    }
    delivered
}

/// Leaves a record of every kind: two retrying and two rejected (one text shared with the
/// workload), a needs-attention head with a record held behind it, one in flight.
async fn finale(store: &PgStore) {
    let now = T0 + 1_000;
    let ids = store
        .enqueue(
            vec![
                NewRecord::new(b"a".to_vec()),
                NewRecord::new(b"b".to_vec()),
                NewRecord::new(b"c".to_vec()),
                NewRecord::new(b"d".to_vec()),
                NewRecord::new(b"head".to_vec()).in_group("finale"),
                NewRecord::new(b"held".to_vec()).in_group("finale"),
                NewRecord::new(b"in flight".to_vec()),
            ],
            now,
        )
        .await
        .unwrap();
    let lease = Lease {
        token: 777,
        until: now + 60_000,
    };
    let mut claimed = Vec::new();
    while !ids.iter().all(|id| claimed.contains(id) || *id == ids[5]) {
        let more = store
            .claim(Claim {
                now: now + 100_000,
                limit: 100,
                lease,
            })
            .await
            .unwrap();
        assert!(!more.is_empty(), "the finale's records are claimed");
        claimed.extend(more.into_iter().map(|r| r.id));
    }
    let fail = |i: usize, state, error: &str| Transition {
        id: ids[i],
        guard: Guard::Lease(777),
        change: failure(state, error.to_owned(), now),
    };
    let applied = store
        .apply(vec![
            fail(0, State::Retrying, "HTTP 500"),
            fail(1, State::Retrying, "timed out"),
            fail(2, State::Rejected, "HTTP 400"),
            fail(3, State::Rejected, "HTTP 404: /finale"),
            fail(4, State::NeedsAttention, "HTTP 500"),
        ])
        .await
        .unwrap();
    assert!(applied.skipped.is_empty());
}

/// Three sessions (three pools: their connections fall in different shards) work on one
/// outbox at once; the counts read from the shards then equal a full recount, before and
/// after a prune that also tidies the error counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shards_add_up_to_a_full_recount_after_concurrent_sessions() {
    if !server_ready() {
        return;
    }
    let seed = fastrand::u64(..);
    eprintln!("seed {seed}");
    let scratch = Scratch::new();
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(scratch.store().await);
    }
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(me, store)| tokio::spawn(work(store.clone(), me as u64, seed, 120)))
        .collect();
    let mut delivered = 0;
    for task in tasks {
        delivered += task.await.unwrap();
    }
    let store = &stores[0];
    let s = &scratch.schema;
    finale(&stores[1]).await;
    assert_counts_exact(
        store,
        s,
        delivered,
        &format!("after the workload (seed {seed})"),
    )
    .await;
    let stats = store.stats().await.unwrap();
    assert!(
        [
            stats.retrying,
            stats.in_flight,
            stats.needs_attention,
            stats.rejected,
            stats.held,
            stats.discarded
        ]
        .iter()
        .all(|&n| n > 0),
        "every kind of count is reached: {stats:?} (seed {seed})"
    );

    store.prune(u64::MAX / 2).await.unwrap();
    assert_counts_exact(
        store,
        s,
        delivered,
        &format!("after the prune (seed {seed})"),
    )
    .await;
    // The prune tidied the error counts: one row per shard of each text still held by a
    // failed record, none for the texts that went with the pruned records.
    let client = admin().await;
    let stale: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT digest FROM \"{s}\".error_tallies \
                 GROUP BY digest HAVING sum(n) = 0) AS z"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stale, 0, "texts of no failed record are left (seed {seed})");
}

/// A schema left at version 3 (its counts only in `meta` and in the records) with records in
/// every kind of state is brought to version 4 with every figure kept; counting goes on
/// exactly after it; and the step found half done (the version set back) converges again
/// with the counts kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_schema_is_migrated_with_its_counts_and_the_step_is_idempotent() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = scratch.schema.clone();
    let store = scratch.store().await;
    let delivered = work(store.clone(), 9, 42, 80).await;
    finale(&store).await;
    let stats_before = store.stats().await.unwrap();
    let errors_before = store.common_errors(usize::MAX).await.unwrap();
    assert!(
        stats_before.rejected + stats_before.retrying > 0,
        "{stats_before:?}"
    );
    drop(store);
    let client = admin().await;
    client
        .batch_execute(&format!(
            "{} UPDATE \"{s}\".schema_version SET version = 3;",
            down_to_3(&s)
        ))
        .await
        .unwrap();
    let version = || async {
        client
            .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
    };
    assert_eq!(version().await, 3);

    let store = Arc::new(scratch.store().await);
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(store.stats().await.unwrap(), stats_before);
    assert_eq!(
        store.common_errors(usize::MAX).await.unwrap(),
        errors_before
    );
    // Counting goes on from there.
    let more = work((*store).clone(), 10, 43, 40).await;
    assert_counts_exact(&store, &s, delivered + more, "after more work on version 4").await;

    // Half done: the tables and triggers exist, the version says 3.
    let stats_now = store.stats().await.unwrap();
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 3"))
        .await
        .unwrap();
    let again = scratch.store().await;
    assert_eq!(version().await, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(again.stats().await.unwrap(), stats_now);
    assert_counts_exact(&again, &s, delivered + more, "after the step ran again").await;
}

/// A prune while another session holds its counter row (an application's transaction that
/// enqueued and has not committed) still prunes, leaving the tidying of the error counts for
/// a later prune instead of failing or waiting on that transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_beside_an_open_transaction_prunes_and_leaves_the_tidying() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    finale(&store).await;
    let mut client = admin().await;
    // A first, committed enqueue on the connection gives its shard a counter row; the second
    // transaction then holds that row until it ends.
    let tx = client.transaction().await.unwrap();
    store
        .enqueue_in(&tx, vec![NewRecord::new(b"first".to_vec())], T0)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let tx = client.transaction().await.unwrap();
    store
        .enqueue_in(&tx, vec![NewRecord::new(b"open".to_vec())], T0)
        .await
        .unwrap();
    let pruned = store.prune(u64::MAX / 2).await.unwrap();
    assert_eq!(pruned, 2, "the two rejected records");
    tx.commit().await.unwrap();
    assert_counts_exact(&store, &scratch.schema, 0, "after the prune").await;
}
