//! The server drops the store's connections in the middle of a drain
//! (`pg_terminate_backend`, as a restart or a failover does): the runner backs off, the pool
//! hands out fresh connections, and every record is still delivered.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{admin, config, server_ready, Scratch};
use outbox_core::{
    sink_fn, Backoff, NewRecord, Outbox, Outcome, Record, RecordId, RetryPolicy, RunnerConfig,
    Store,
};
use outbox_postgres::PgStore;

const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_survives_its_connections_being_killed() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let app = format!("outbox-loss-{:08x}", fastrand::u32(..));
    let store = Arc::new(
        PgStore::connect(config(&scratch.schema).with_application_name(&app))
            .await
            .expect("store opens"),
    );
    let ids = store
        .enqueue(
            (0..40)
                .map(|i| {
                    let record = NewRecord::new(format!("r{i}").into_bytes());
                    if i % 2 == 0 {
                        record.in_group(format!("g{}", i % 6))
                    } else {
                        record
                    }
                })
                .collect(),
            outbox_core::clock::system_now(),
        )
        .await
        .expect("enqueue");

    let admin = Arc::new(admin().await);
    let delivered: Arc<Mutex<Vec<RecordId>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicI64::new(0));
    let sink = {
        let (delivered, calls, killed, admin, app) = (
            Arc::clone(&delivered),
            Arc::clone(&calls),
            Arc::clone(&killed),
            Arc::clone(&admin),
            app.clone(),
        );
        sink_fn(move |record: Record| {
            let (delivered, calls, killed, admin, app) = (
                Arc::clone(&delivered),
                Arc::clone(&calls),
                Arc::clone(&killed),
                Arc::clone(&admin),
                app.clone(),
            );
            async move {
                // On the 10th delivery, and once more on the 25th, the server ends every
                // session of the store while the runner holds claimed records.
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 10 || n == 25 {
                    let row = admin
                        .query_one(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                             WHERE application_name = $1",
                            &[&app],
                        )
                        .await
                        .expect("the admin session terminates the store's sessions");
                    killed.fetch_add(row.get::<_, i64>(0), Ordering::SeqCst);
                }
                delivered.lock().unwrap().push(record.id);
                Outcome::Delivered
            }
        })
    };
    let outbox = Outbox::builder(Arc::clone(&store) as Arc<dyn Store>, sink)
        .policy(RetryPolicy::default().with_backoff(Backoff::exponential(
            Duration::from_millis(20),
            2.0,
            Duration::from_millis(200),
        )))
        .config(RunnerConfig {
            batch: 5,
            concurrency: 2,
            // A report lost with its connection leaves its record in flight until the lease
            // expires; a short lease and poll keep the test quick.
            lease: Duration::from_millis(600),
            safety_poll: Some(Duration::from_millis(100)),
            ..RunnerConfig::default()
        })
        .start()
        .await
        .expect("runner starts");

    let mut events = outbox.events();
    let stats = tokio::time::timeout(PATIENCE, async {
        loop {
            match outbox.stats().await {
                Ok(stats) if stats.delivered == ids.len() as u64 => return stats,
                // Every delivery's event comes after its store write: wait for the next one.
                Ok(_) => drop(events.recv().await),
                // A stats call can itself meet a dying connection; the next one gets a
                // fresh one.
                Err(_) => continue,
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "not everything was delivered; sink saw {:?}",
            delivered.lock().unwrap()
        )
    });
    // Let its round finish before the shutdown (see the no-polling test in tests/store.rs).
    outbox.flush(PATIENCE).await.expect("settles");
    outbox
        .shutdown(Duration::from_secs(20))
        .await
        .expect("clean stop");

    assert!(
        killed.load(Ordering::SeqCst) >= 2,
        "the server really ended the store's sessions"
    );
    assert_eq!(stats.undelivered(), 0);
    let delivered = delivered.lock().unwrap().clone();
    let distinct: BTreeSet<RecordId> = delivered.iter().copied().collect();
    eprintln!(
        "sessions killed: {}, deliveries: {}, repeated after a lost report: {}",
        killed.load(Ordering::SeqCst),
        delivered.len(),
        delivered.len() - distinct.len()
    );
    assert_eq!(
        distinct,
        ids.iter().copied().collect(),
        "every record reached the sink"
    );
    // A record whose report died with its connection is delivered again (at least once, with
    // the same key); only those, so at most a batch per kill.
    assert!(
        delivered.len() - distinct.len() <= 10,
        "{} repeats",
        delivered.len() - distinct.len()
    );
    // The store serves new calls on fresh connections.
    assert_eq!(
        store.stats().await.expect("stats").delivered,
        ids.len() as u64
    );
}
