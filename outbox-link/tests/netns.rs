//! The operating system's signal on Linux, in network namespaces the tests make themselves:
//! the route and the interface going and coming back, loopback alone, flapping, an outbox
//! that delivers when the route returns, and the signal's idle cost.
#![cfg(target_os = "linux")]

mod parks;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{Backoff, Event, Jitter, NewRecord, Outbox, RetryPolicy};
use outbox_http::HttpSink;
use outbox_memory::MemoryStore;
use parks::parks_in_twenty_seconds;
use support::{in_namespace, ip, ip_batch, next, online_namespace, DEFAULT_ROUTE};
use tokio::sync::watch;
use tokio::time::Instant;

/// The promise: a change is reported within this long.
const PROMPT: Duration = Duration::from_millis(100);

/// Expects the signal's next transition to be `expected`, within [`PROMPT`].
async fn reported(online: &mut watch::Receiver<bool>, expected: bool, what: &str) -> Duration {
    let (value, took) = next(online, PROMPT)
        .await
        .unwrap_or_else(|| panic!("{what}: nothing reported within {PROMPT:?}"));
    assert_eq!(value, expected, "{what}");
    eprintln!("{what}: reported {value} after {took:?}");
    took
}

#[test]
fn the_route_and_the_interface_going_and_coming_back_are_reported_within_100_ms() {
    in_namespace("route_and_interface", false, || async {
        online_namespace().await;
        let mut online = outbox_link::watch().unwrap();
        assert!(
            *online.borrow(),
            "an interface that is up with a default route is online"
        );

        ip("route del default").await;
        reported(&mut online, false, "default route removed").await;
        ip(DEFAULT_ROUTE).await;
        reported(&mut online, true, "default route restored").await;

        ip("link set d0 down").await;
        reported(&mut online, false, "interface down").await;
        // Taking the interface down took its route with it: up again, it needs the route too.
        ip("link set d0 up").await;
        ip(DEFAULT_ROUTE).await;
        reported(&mut online, true, "interface up with its route").await;

        // The cable pulled: the route stays (flagged), the interface is up without carrier.
        ip("link set p0 down").await;
        reported(&mut online, false, "carrier lost").await;
        ip("link set p0 up").await;
        reported(&mut online, true, "carrier back").await;
    });
}

#[test]
fn loopback_alone_is_offline_even_with_a_default_route_through_it() {
    in_namespace("loopback_alone", false, || async {
        let mut first = outbox_link::watch().unwrap();
        assert!(!*first.borrow(), "loopback alone is offline");

        // (A higher metric than the uplink's route added below, so both can be there.)
        ip("route add default dev lo metric 500").await;
        ip("-6 route add default dev lo metric 500").await;
        // A signal started now reads the tables with those routes in them.
        let second = outbox_link::watch().unwrap();
        assert!(
            !*second.borrow(),
            "a default route through loopback is no way out"
        );

        // The first signal is live: a real uplink turns it online.
        online_namespace().await;
        reported(&mut first, true, "uplink added").await;
    });
}

#[test]
fn ten_flaps_within_the_window_are_one_transition() {
    in_namespace("ten_flaps", false, || async {
        online_namespace().await;
        // A window wider than the default, so that the burst of 21 `ip` processes below fits
        // inside it even on a loaded machine (the default's own timing is the first test's).
        let window = Duration::from_secs(1);
        let mut online = outbox_link::watch_debounced(window).unwrap();
        assert!(*online.borrow());
        let sent = record(online.clone());

        // Ten times down, then up again with the route the kernel took away, then down. Each
        // state is held for as long as one `ip` process takes, milliseconds: long enough for
        // a signal that did not gather them to read and report each one.
        let burst = Instant::now();
        for _ in 0..10 {
            ip("link set d0 down").await;
            ip_batch(&format!("link set d0 up\n{DEFAULT_ROUTE}\n")).await;
        }
        ip("link set d0 down").await;
        let took = burst.elapsed();
        eprintln!("ten flaps took {took:?}");
        assert!(
            took < window,
            "the flaps took {took:?}, longer than the window: the test proves nothing"
        );

        let started = Instant::now();
        let (first, _) = next(&mut online, window * 2)
            .await
            .expect("the burst is reported");
        assert!(!first, "the burst left the link down");
        eprintln!(
            "the burst was reported {:?} after it ended",
            started.elapsed()
        );
        // Nothing else from the burst: the next transition is the one this makes.
        ip("link set d0 up").await;
        ip(DEFAULT_ROUTE).await;
        let (second, _) = next(&mut online, window * 2)
            .await
            .expect("the restore is reported");
        assert!(second, "one transition for the burst, then the restore");
        let mut sent = sent;
        let sent = tokio::time::timeout(window, sent.wait_for(|sent| sent.len() >= 2))
            .await
            .expect("the recorder saw the restore")
            .expect("the recorder runs")
            .clone();
        assert_eq!(sent, [false, true], "every transition the signal sent");
    });
}

/// Every value the signal sends, kept by a task of its own. It runs whenever the signal has
/// sent and yields, so a signal that sent a value per flap would show each one here.
fn record(mut online: watch::Receiver<bool>) -> watch::Receiver<Vec<bool>> {
    let (tx, sent) = watch::channel(Vec::new());
    tokio::spawn(async move {
        while online.changed().await.is_ok() {
            let value = *online.borrow_and_update();
            tx.send_modify(|sent| sent.push(value));
        }
    });
    sent
}

/// A server in the namespace at 10.0.0.1:8080 that accepts every write and counts them.
async fn serve(accepted: watch::Sender<usize>) {
    let listener = tokio::net::TcpListener::bind("10.0.0.1:8080")
        .await
        .unwrap();
    let accepted = Arc::new(accepted);
    let count = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/writes",
        axum::routing::post(move || {
            let (accepted, count) = (Arc::clone(&accepted), Arc::clone(&count));
            async move {
                accepted.send_replace(count.fetch_add(1, Ordering::SeqCst) + 1);
                axum::http::StatusCode::CREATED
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
}

#[test]
fn records_queued_while_the_route_is_down_go_out_when_it_returns_without_a_backoff() {
    in_namespace("route_returns", false, || async {
        online_namespace().await;
        let online = outbox_link::watch().unwrap();
        let mut seen = online.clone();
        let hour = Duration::from_secs(3600);
        // Every wait an hour: only the signal can bring a record back sooner.
        let policy = RetryPolicy::default()
            .with_backoff(Backoff::exponential(hour, 2.0, hour))
            .with_jitter(Jitter::None);
        let sink = HttpSink::post("http://10.0.0.1:8080/writes")
            .unwrap()
            .timeout(Duration::from_secs(5));
        let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink)
            .policy(policy)
            .connectivity(online)
            .start()
            .await
            .unwrap();
        let mut events = outbox.events();

        // Online, but nothing listens yet: the first record gets no answer and waits an hour.
        let first = outbox.enqueue(NewRecord::new(b"1".to_vec())).await.unwrap();
        for n in 2..=3 {
            outbox.enqueue(NewRecord::new(vec![n])).await.unwrap();
        }
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok(Event::Retrying {
                    id,
                    at,
                    spent: false,
                }) = events.recv().await
                {
                    return (id, at);
                }
            }
        })
        .await
        .expect("the first delivery gets no answer");
        assert_eq!(waited.0, first);
        let wait_ms = waited.1.saturating_sub(outbox_core::clock::system_now());
        assert!(
            wait_ms > 3_500_000 - 60_000,
            "waits about an hour, not {wait_ms} ms"
        );

        // The route goes; three more writes while it is down; the server comes up meanwhile.
        ip("route del default").await;
        reported(&mut seen, false, "route removed").await;
        for n in 4..=6 {
            outbox.enqueue(NewRecord::new(vec![n])).await.unwrap();
        }
        let (accepted, mut count) = watch::channel(0);
        serve(accepted).await;
        assert_eq!(
            *count.borrow(),
            0,
            "nothing goes out while the route is down"
        );

        // The route returns, and nothing is called on the outbox from here on.
        ip(DEFAULT_ROUTE).await;
        let back = Instant::now();
        let delivered = tokio::time::timeout(Duration::from_secs(1), count.wait_for(|n| *n >= 6))
            .await
            .map(|_| ());
        assert!(
            delivered.is_ok(),
            "{} of 6 delivered within 1 s",
            *count.borrow()
        );
        eprintln!(
            "6 records delivered {:?} after the route returned",
            back.elapsed()
        );

        // The server counted the sixth before its answer reached the runner: let it report.
        outbox.flush(Duration::from_secs(5)).await.unwrap();
        assert_eq!(outbox.stats().await.unwrap().delivered, 6);
        outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    });
}

#[test]
fn an_idle_signal_wakes_nothing_in_twenty_seconds() {
    in_namespace("idle_signal", true, || async {
        let start = Instant::now();
        let alone = parks_in_twenty_seconds(start).await;

        let mut online = outbox_link::watch().unwrap();
        assert!(!*online.borrow());
        let offline = parks_in_twenty_seconds(start).await;

        online_namespace().await;
        let (now_online, _) = next(&mut online, Duration::from_secs(1)).await.unwrap();
        assert!(now_online);
        let idle_online = parks_in_twenty_seconds(start).await;

        // The measure sees a wake-up: a task ticking every second.
        let ticker = tokio::spawn(async {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
            }
        });
        let ticking = parks_in_twenty_seconds(start).await;
        ticker.abort();

        eprintln!(
            "parks in 20 s: no signal {alone}, signal offline {offline}, signal online \
             {idle_online}, a 1 s ticker {ticking}"
        );
        assert_eq!(offline, alone, "the offline signal woke the runtime");
        assert_eq!(idle_online, alone, "the online signal woke the runtime");
        assert!(
            ticking >= alone + 20,
            "the measure misses wake-ups: {ticking}"
        );
    });
}
