//! An offline-first client: the app tells the runner whether the device is online through an
//! [`outbox_link::Link`], as a mobile core does from the platform's own callback (Android's
//! `NetworkCallback`, iOS's `NWPathMonitor`): `link.set_online(bool)` feeds the channel that
//! [`OutboxBuilder::connectivity`] takes. (A desktop or server app passes
//! `outbox_link::watch()?` instead, the operating system's own signal; this example scripts
//! its outages so that it runs the same everywhere.) Writes go into the queue whatever the
//! connectivity, and the user sees each write in one of four states:
//!
//! - **pending**: queued, not tried yet (everything written while offline);
//! - **retrying**: the server failed (here its first answer is a 503) and the write is
//!   scheduled again by itself;
//! - **needs-attention**: the server kept failing for one write until its retry budget was
//!   spent; it waits for a person, who retries it once the server is fixed;
//! - **rejected**: the server refused a write for good (a 422): nothing will resend it.
//!
//! Run it with `cargo run --example offline_first`. It starts offline with five writes,
//! goes online, goes offline again for a sixth write and a manual retry, goes online, and
//! ends with `5 delivered · 1 rejected · 0 lost`. It takes about a second: the retry policy
//! backs off from 50 ms instead of 1 s.
//!
//! [`OutboxBuilder::connectivity`]: outbox_core::OutboxBuilder::connectivity

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    Backoff, Event, ListQuery, NewRecord, Outbox, RecordId, RetryPolicy, State, Stats, TokioClock,
};
use outbox_http::HttpSink;
use outbox_link::Link;
use outbox_memory::MemoryStore;

use crate::downstream::Downstream;
use crate::{Log, Result};

/// The write the server fails with 503 until a person fixes it.
pub const FLAKY: &str = "note-3";
/// The write the server refuses with 422.
pub const REFUSED: &str = "note-4";
/// Answered failures a write may spend before it needs attention.
pub const MAX_ATTEMPTS: u32 = 3;

/// One line of counts per state, as an app would show them.
pub fn describe(phase: &str, stats: &Stats) -> String {
    format!(
        "[{phase}] pending {} · retrying {} · in flight {} · needs-attention {} · rejected {} · delivered {}",
        stats.pending,
        stats.retrying,
        stats.in_flight,
        stats.needs_attention,
        stats.rejected,
        stats.delivered
    )
}

/// The short retry policy of the example: backoff from 50 ms, doubling, capped at 400 ms.
pub fn policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_millis(50),
            2.0,
            Duration::from_millis(400),
        ))
        .with_max_attempts(MAX_ATTEMPTS)
}

/// Polls the stats until `done` holds, or fails after `timeout`.
async fn wait_until(
    outbox: &Outbox,
    timeout: Duration,
    done: impl Fn(&Stats) -> bool,
) -> Result<Stats> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let stats = outbox.stats().await?;
        if done(&stats) {
            return Ok(stats);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("gave up waiting after {timeout:?}: {stats:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes the events that show a state change, as they happen.
fn log_events(outbox: &Outbox, log: Log) -> tokio::task::JoinHandle<()> {
    let mut events = outbox.events();
    tokio::spawn(async move {
        loop {
            let line = match events.recv().await {
                Ok(Event::Enqueued { id, .. }) => format!("  record {id}: pending"),
                Ok(Event::Retrying { id, at, .. }) => {
                    let wait = at.saturating_sub(outbox_core::clock::system_now());
                    format!("  record {id}: retrying in about {wait} ms")
                }
                Ok(Event::Parked { id, reason }) => {
                    format!("  record {id}: needs-attention ({reason})")
                }
                Ok(Event::Rejected { id, reason }) => format!("  record {id}: rejected ({reason})"),
                Ok(Event::Delivered { id }) => format!("  record {id}: delivered"),
                Ok(Event::Requeued { id }) => format!("  record {id}: requeued"),
                Ok(Event::LinkUp { .. }) => "  link up".to_owned(),
                Ok(Event::LinkDown { error, .. }) => format!("  link down ({error})"),
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            log.line(line);
        }
    })
}

/// Runs the example and returns its final line, `5 delivered · 1 rejected · 0 lost`.
pub async fn run(log: Log) -> Result<String> {
    // The server: its first answer is a 503, it refuses one write with 422, and it fails
    // another with 503 until someone fixes it.
    let fixed = Arc::new(AtomicBool::new(false));
    let server_fixed = Arc::clone(&fixed);
    let downstream = Downstream::start(move |request, n| match request.key.as_str() {
        _ if n == 0 => 503,
        REFUSED => 422,
        FLAKY if !server_fixed.load(Ordering::SeqCst) => 503,
        _ => 201,
    })
    .await?;

    // The device starts offline. The platform's callback would call `link.set_online`.
    let link = Link::new(false)?;
    let sink = HttpSink::post(&downstream.url())?.timeout(Duration::from_secs(2));
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink)
        // Wall-clock time that moves with tokio's clock: the same as the system's in a normal
        // run, and paused with it in the test, where the backoff takes no real time.
        .clock(Arc::new(TokioClock::new()))
        .policy(policy())
        .connectivity(link.subscribe())
        .start()
        .await?;
    let events = log_events(&outbox, log.clone());

    let mut written = Vec::new();
    let mut write = async |name: &str| -> Result<RecordId> {
        let payload = serde_json::json!({ "note": name }).to_string();
        let id = outbox
            .enqueue(NewRecord::new(payload).with_key(name))
            .await?;
        log.line(format!("write {name} (record {id})"));
        written.push(name.to_owned());
        Ok(id)
    };

    log.line("offline: five writes");
    let mut flaky = None;
    for i in 1..=5 {
        let name = format!("note-{i}");
        let id = write(&name).await?;
        if name == FLAKY {
            flaky = Some(id);
        }
    }
    let flaky = flaky.ok_or("the flaky write was not made")?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    if !downstream.requests().is_empty() {
        return Err("a write went out while offline".into());
    }
    log.line(describe("offline", &outbox.stats().await?));

    log.line("online");
    link.set_online(true);
    let stats = wait_until(&outbox, Duration::from_secs(5), |s| {
        s.delivered == 3
            && s.needs_attention == 1
            && s.rejected == 1
            && s.pending + s.retrying + s.in_flight == 0
    })
    .await?;
    log.line(describe("online", &stats));

    log.line(
        "offline again: one more write; the server is fixed and a person retries the parked one",
    );
    link.set_online(false);
    // The link reports after its debounce window (a burst of changes is one transition); a
    // real app's writes come long after the network went away.
    link.subscribe().wait_for(|online| !*online).await?;
    let sent = downstream.requests().len();
    write("note-6").await?;
    fixed.store(true, Ordering::SeqCst);
    outbox.retry(flaky).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    if downstream.requests().len() != sent {
        return Err("a write went out while offline".into());
    }
    log.line(describe("offline", &outbox.stats().await?));

    log.line("online");
    link.set_online(true);
    let stats = wait_until(&outbox, Duration::from_secs(5), |s| {
        s.delivered == 5 && s.pending + s.retrying + s.in_flight + s.needs_attention == 0
    })
    .await?;
    outbox.flush(Duration::from_secs(5)).await?;
    log.line(describe("online", &stats));

    // Lost: a write neither accepted by the server nor kept as rejected in the queue.
    let accepted = downstream.accepted_by_key();
    if let Some((key, n)) = accepted.iter().find(|(_, &n)| n > 1) {
        return Err(format!("{key} was accepted {n} times").into());
    }
    let rejected: HashSet<String> = outbox
        .list(&ListQuery::new(100).state(State::Rejected))
        .await?
        .into_iter()
        .map(|record| record.key)
        .collect();
    let lost = written
        .iter()
        .filter(|name| !accepted.contains_key(*name) && !rejected.contains(*name))
        .count();

    outbox.shutdown(Duration::from_secs(5)).await?;
    drop(outbox);
    let _ = tokio::time::timeout(Duration::from_secs(1), events).await;
    Ok(format!(
        "{} delivered · {} rejected · {lost} lost",
        accepted.len(),
        rejected.len()
    ))
}
