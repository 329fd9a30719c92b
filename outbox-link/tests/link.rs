//! The `Link` handle a mobile core feeds from the platform's callback, on tokio's paused
//! clock: what it reports and when, flapping, an outbox that follows it, its end, its idle
//! cost.

mod parks;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record, TokioClock};
use outbox_link::{Error, Link, DEFAULT_WINDOW};
use outbox_memory::MemoryStore;
use parks::parks_in_twenty_seconds;
use tokio::sync::watch;
use tokio::time::{sleep, Instant};

/// Every value the signal sends, kept by a task of its own.
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

#[tokio::test(start_paused = true)]
async fn a_report_reaches_the_channel_one_window_later() {
    let link = Link::new(true).unwrap();
    let mut online = link.subscribe();
    let reported = Instant::now();
    link.set_online(false);
    online.changed().await.unwrap();
    assert!(!*online.borrow_and_update());
    assert_eq!(reported.elapsed(), DEFAULT_WINDOW);
    assert!(!link.is_online());

    link.set_online(true);
    online.changed().await.unwrap();
    assert!(*online.borrow());
}

#[tokio::test(start_paused = true)]
async fn ten_flaps_within_the_window_are_one_transition() {
    let link = Link::new(true).unwrap();
    let sent = record(link.subscribe());
    // Ten times off and on 2 ms apart, then off: 42 ms, inside the 50 ms window.
    for _ in 0..10 {
        link.set_online(false);
        sleep(Duration::from_millis(2)).await;
        link.set_online(true);
        sleep(Duration::from_millis(2)).await;
    }
    link.set_online(false);
    sleep(Duration::from_secs(10)).await;
    assert_eq!(*sent.borrow(), [false]);
}

#[tokio::test(start_paused = true)]
async fn a_burst_that_ends_where_it_began_is_no_transition() {
    let link = Link::new(true).unwrap();
    let sent = record(link.subscribe());
    for _ in 0..10 {
        link.set_online(false);
        sleep(Duration::from_millis(2)).await;
        link.set_online(true);
        sleep(Duration::from_millis(2)).await;
    }
    sleep(Duration::from_secs(10)).await;
    assert!(sent.borrow().is_empty(), "{:?}", *sent.borrow());
    assert!(link.is_online());
}

#[tokio::test(start_paused = true)]
async fn a_link_that_never_settles_is_still_reported_within_a_window() {
    let link = Link::new(true).unwrap();
    let mut sent = record(link.subscribe());
    // Gone, with a blip of 2 ms back every 30 ms, for a second: a window that moved with each
    // change would never close; this one closes 50 ms after the first and reads "gone".
    let flapping = link.clone();
    tokio::spawn(async move {
        for _ in 0..33 {
            flapping.set_online(false);
            sleep(Duration::from_millis(28)).await;
            flapping.set_online(true);
            sleep(Duration::from_millis(2)).await;
        }
    });
    let started = Instant::now();
    let first = sent
        .wait_for(|sent| !sent.is_empty())
        .await
        .unwrap()
        .clone();
    assert_eq!(first, [false]);
    assert_eq!(started.elapsed(), DEFAULT_WINDOW);
}

#[tokio::test(start_paused = true)]
async fn the_platform_callback_may_report_from_a_thread_without_a_runtime() {
    let link = Link::new(false).unwrap();
    let mut online = link.subscribe();
    let callback = link.clone();
    std::thread::spawn(move || callback.set_online(true))
        .join()
        .unwrap();
    online.changed().await.unwrap();
    assert!(*online.borrow());
}

#[tokio::test(start_paused = true)]
async fn an_outbox_fed_by_a_link_holds_writes_offline_and_sends_them_when_it_reports_online() {
    let link = Link::new(false).unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let sink = sink_fn(move |_: Record| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Outcome::Delivered
        }
    });
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink)
        .clock(Arc::new(TokioClock::new()))
        .connectivity(link.subscribe())
        .start()
        .await
        .unwrap();
    for n in 0..3u8 {
        outbox.enqueue(NewRecord::new(vec![n])).await.unwrap();
    }
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        sent.load(Ordering::SeqCst),
        0,
        "nothing is sent while offline"
    );

    // The platform's callback: the network is back.
    link.set_online(true);
    let back = Instant::now();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 3);
    assert!(
        back.elapsed() < Duration::from_secs(1),
        "{:?}",
        back.elapsed()
    );
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_ends_the_signal() {
    let link = Link::new(false).unwrap();
    let mut online = link.subscribe();
    let clone = link.clone();
    drop(link);
    clone.set_online(false);
    drop(clone);
    // The runner reads an ended signal as "always online" and learns from its deliveries.
    assert!(online.changed().await.is_err());
}

#[tokio::test(start_paused = true)]
async fn an_idle_link_wakes_nothing_in_twenty_seconds() {
    let start = Instant::now();
    let alone = parks_in_twenty_seconds(start).await;
    let link = Link::new(true).unwrap();
    let online = parks_in_twenty_seconds(start).await;
    link.set_online(false);
    let mut seen = link.subscribe();
    seen.wait_for(|online| !*online).await.unwrap();
    let offline = parks_in_twenty_seconds(start).await;
    assert_eq!((online, offline), (alone, alone));
}

#[test]
fn outside_a_runtime_it_says_so() {
    assert!(matches!(Link::new(true), Err(Error::NoRuntime)));
    assert!(matches!(outbox_link::watch(), Err(Error::NoRuntime)));
    assert!(matches!(
        Link::with_window(true, Duration::from_secs(11)),
        Err(Error::InvalidWindow { .. })
    ));
}
