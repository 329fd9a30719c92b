//! Runs each example to completion, through the same function its `cargo run --example`
//! calls, and checks its final line.

use outbox_examples::{offline_first, postgres_fleet, sqlx_orders, transactional_outbox, Log};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_outbox_delivers_every_order_once() {
    let log = Log::quiet();
    let last = transactional_outbox::run(log.clone()).await.unwrap();
    assert_eq!(last, "3 orders, 3 delivered, 0 lost", "{:#?}", log.lines());
    // The refused order was answered 422 and its record rolled back with it.
    assert!(
        log.lines().iter().any(|l| l.contains("-> 422")),
        "{:#?}",
        log.lines()
    );
}

// On tokio's paused clock: the example's waits (backoff, "nothing went out while offline")
// pass in no wall-clock time.
#[tokio::test(start_paused = true)]
async fn offline_first_shows_the_four_states_and_loses_nothing() {
    let log = Log::quiet();
    let started = std::time::Instant::now();
    let last = offline_first::run(log.clone()).await.unwrap();
    let lines = log.lines();
    assert_eq!(last, "5 delivered · 1 rejected · 0 lost", "{lines:#?}");
    for state in [": pending", ": retrying", ": needs-attention", ": rejected"] {
        assert!(
            lines.iter().any(|l| l.contains(state)),
            "no{state} line in {lines:#?}"
        );
    }
    assert!(
        lines.iter().any(|l| l.starts_with("[offline] pending 5 ·")),
        "{lines:#?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fleet_delivers_each_record_once() {
    let log = Log::quiet();
    let last = postgres_fleet::run(log.clone()).await.unwrap();
    let required = std::env::var("OUTBOX_PG_REQUIRED").is_ok_and(|v| v == "1");
    if !required && last.starts_with(postgres_fleet::SKIPPED) {
        eprintln!("\n*** SKIPPED: {last}. Set OUTBOX_PG_REQUIRED=1 to make this a failure. ***\n");
        return;
    }
    assert_eq!(
        last,
        "300 records, 3 runners, each delivered once",
        "{:#?}",
        log.lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fleet_skips_without_a_server() {
    // Port 1 on the loopback: nothing listens there, the connection is refused at once.
    let url = "postgres://postgres@127.0.0.1:1/test";
    let last = postgres_fleet::run_at(Log::quiet(), url).await.unwrap();
    assert!(
        last.starts_with(&format!("skipped: no PostgreSQL at {url} (")),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_orders_delivers_every_committed_order_once() {
    let log = Log::quiet();
    let last = sqlx_orders::run(log.clone()).await.unwrap();
    let required = std::env::var("OUTBOX_PG_REQUIRED").is_ok_and(|v| v == "1");
    if !required && last.starts_with(postgres_fleet::SKIPPED) {
        eprintln!("\n*** SKIPPED: {last}. Set OUTBOX_PG_REQUIRED=1 to make this a failure. ***\n");
        return;
    }
    assert_eq!(last, "3 orders, 3 delivered, 0 lost", "{:#?}", log.lines());
    // The refused order was answered 422 and its record rolled back with it.
    assert!(
        log.lines().iter().any(|l| l.contains("-> 422")),
        "{:#?}",
        log.lines()
    );
}
