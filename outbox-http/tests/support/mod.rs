//! What the tests that run the sink under the runner share: captured log lines, every event,
//! and bounded waits for events.
//!
//! These tests run on real time, with backoffs of milliseconds, and wait only for events,
//! each wait bounded. Tokio's paused clock does not suit a TLS exchange: each time the
//! runtime parks with a handshake message still in flight, the paused clock jumps to the next
//! timer, which is often the request's own timeout.

#![allow(dead_code)] // each test binary uses part of it

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::Event;
use tokio::sync::broadcast;

/// Every line the `tracing` subscriber of this thread writes, at debug level and above.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures this thread's log lines until the guard is dropped. The tests run on a
    /// current-thread runtime, so the runner and the sink log here.
    pub(crate) fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every event the outbox sent, kept for the assertions at the end.
#[derive(Clone, Default)]
pub(crate) struct Events(Arc<Mutex<(Vec<Event>, u64)>>);

impl Events {
    /// Keeps every event of `events` from now on.
    pub(crate) fn record(mut events: broadcast::Receiver<Event>) -> Events {
        let kept = Events::default();
        let into = kept.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => into.0.lock().unwrap().0.push(event),
                    Err(broadcast::error::RecvError::Lagged(n)) => into.0.lock().unwrap().1 += n,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        kept
    }

    pub(crate) fn all(&self) -> Vec<Event> {
        let (events, missed) = self.0.lock().unwrap().clone();
        assert_eq!(missed, 0, "events missed: the test must see every one");
        events
    }

    /// The `Debug` form of every event, one a line: what an application would log.
    pub(crate) fn text(&self) -> String {
        self.all().iter().map(|e| format!("{e:?}\n")).collect()
    }
}

/// How long any one wait may take: generous for a loaded machine, and a hang fails the test.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// The next event `what` picks, within [`PATIENCE`].
pub(crate) async fn next<T>(
    events: &mut broadcast::Receiver<Event>,
    what: impl Fn(&Event) -> Option<T>,
) -> T {
    let wait = async {
        loop {
            if let Some(found) = what(&recv(events).await) {
                return found;
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("no such event in time")
}

/// Waits, event by event, until `done` holds, within [`PATIENCE`].
pub(crate) async fn until(
    events: &mut broadcast::Receiver<Event>,
    what: &str,
    done: impl Fn() -> bool,
) {
    let wait = async {
        while !done() {
            recv(events).await;
        }
    };
    if tokio::time::timeout(PATIENCE, wait).await.is_err() {
        panic!("not in time: {what}");
    }
}

/// Waits until `n` records were delivered, within [`PATIENCE`].
pub(crate) async fn delivered(events: &mut broadcast::Receiver<Event>, n: usize) {
    let wait = async {
        let mut seen = 0;
        while seen < n {
            if let Event::Delivered { .. } = recv(events).await {
                seen += 1;
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("not all delivered in time");
}

/// The next event; a receiver that fell behind skips ahead (these waits only look forward).
async fn recv(events: &mut broadcast::Receiver<Event>) -> Event {
    loop {
        match events.recv().await {
            Ok(event) => return event,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => panic!("the outbox stopped"),
        }
    }
}
