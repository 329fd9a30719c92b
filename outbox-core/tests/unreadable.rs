//! Unreadable rows through the runner and the handle: listed, and said once per process (one
//! event, one warning line), however often they are read.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::layer::StoreLayer;
use outbox_core::{sink_fn, Event, Outbox, Outcome, Record, RecordId, Result, Store, Unreadable};

/// A memory store that reports one unreadable row, as a persistent store would.
#[derive(Debug, Default)]
struct OneBadRow(outbox_memory::MemoryStore);

#[async_trait::async_trait]
impl StoreLayer for OneBadRow {
    fn inner(&self) -> &dyn Store {
        &self.0
    }

    async fn unreadable(&self, _: usize) -> Result<Vec<Unreadable>> {
        Ok(vec![Unreadable::new(
            RecordId(42),
            "last_error is not UTF-8",
        )])
    }
}

/// Held by each test of this file for its whole run. The first installs a subscriber for its
/// own thread only; a callsite first reached meanwhile on another test's thread, where no
/// subscriber is, can have its interest settled as "never" while that subscriber is being
/// registered, and the warning line is then not written (about one run in twenty).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Collects formatted lines.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn an_unreadable_row_is_said_once_however_often_it_is_listed() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    let outbox = Outbox::builder(Arc::new(OneBadRow::default()), sink)
        .start()
        .await
        .unwrap();
    // Subscribed before the runner's task first runs (this runtime has one thread).
    let mut events = outbox.events();
    let expected = Event::Unreadable {
        id: RecordId(42),
        reason: "last_error is not UTF-8".into(),
    };
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = events.recv().await.unwrap();
            if matches!(event, Event::Unreadable { .. }) {
                return event;
            }
        }
    })
    .await
    .expect("the runner reports the unreadable row once idle after its start");
    assert_eq!(first, expected);

    for _ in 0..3 {
        assert_eq!(
            outbox.unreadable(10).await.unwrap(),
            vec![Unreadable::new(RecordId(42), "last_error is not UTF-8")]
        );
    }
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, Event::Unreadable { .. }),
            "said a second time: {event:?}"
        );
    }
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("row 42 cannot be read: last_error is not UTF-8"))
        .collect();
    assert_eq!(warned.len(), 1, "{text}");
    assert!(warned[0].contains("WARN"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_found_at_start_reaches_a_subscriber_made_before_the_start() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let builder = Outbox::builder(
        Arc::new(OneBadRow::default()),
        sink_fn(|_: Record| async { Outcome::Delivered }),
    );
    let mut events = builder.events();
    let outbox = builder.start().await.unwrap();
    let said = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = events.recv().await.unwrap();
            if matches!(event, Event::Unreadable { .. }) {
                return event;
            }
        }
    })
    .await
    .expect("said at start");
    assert_eq!(
        said,
        Event::Unreadable {
            id: RecordId(42),
            reason: "last_error is not UTF-8".into()
        }
    );
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_starts_flushes_and_stops_hears_of_the_row_after_its_backlog() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let store = Arc::new(OneBadRow::default());
    let backlog = (0..50)
        .map(|i| outbox_core::NewRecord::new(vec![i]))
        .collect();
    store.0.enqueue(backlog, 1_700_000_000_000).await.unwrap();
    let builder = Outbox::builder(
        Arc::clone(&store) as Arc<dyn Store>,
        sink_fn(|_: Record| async { Outcome::Delivered }),
    );
    let mut events = builder.events();
    let outbox = builder.start().await.unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    // Said by the time `flush` returns, and after the backlog went out: the look waited for
    // the runner to be idle.
    let mut delivered = 0;
    let mut said = None;
    while let Ok(event) = events.try_recv() {
        match event {
            Event::Delivered { .. } => delivered += 1,
            Event::Unreadable { id, .. } => said = Some((id, delivered)),
            _ => {}
        }
    }
    assert_eq!(said, Some((RecordId(42), 50)));
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A memory store that reports three unreadable rows.
#[derive(Debug, Default)]
struct ThreeBadRows(outbox_memory::MemoryStore);

#[async_trait::async_trait]
impl StoreLayer for ThreeBadRows {
    fn inner(&self) -> &dyn Store {
        &self.0
    }

    async fn unreadable(&self, _: usize) -> Result<Vec<Unreadable>> {
        Ok((1..=3)
            .map(|id| Unreadable::new(RecordId(id), "unknown state code 9"))
            .collect())
    }
}

/// Starts over `store` with nothing queued, flushes at once and returns the rows said by then.
async fn said_by_the_first_flush(store: Arc<dyn Store>) -> Vec<RecordId> {
    let builder = Outbox::builder(store, sink_fn(|_: Record| async { Outcome::Delivered }));
    let mut events = builder.events();
    let outbox = builder.start().await.unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    let mut said = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::Unreadable { id, .. } = event {
            said.push(id);
        }
    }
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    said
}

#[tokio::test(flavor = "current_thread")]
async fn a_flush_made_as_soon_as_the_runner_starts_waits_for_its_look() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // `start` returns before the runner's task has run: the look is owed already.
    let said = said_by_the_first_flush(Arc::new(OneBadRow::default())).await;
    assert_eq!(said, [RecordId(42)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_returns_once_every_row_the_look_found_is_said() {
    let _alone = ONE_AT_A_TIME.lock().await;
    for _ in 0..20 {
        let said = said_by_the_first_flush(Arc::new(ThreeBadRows::default())).await;
        assert_eq!(said, [RecordId(1), RecordId(2), RecordId(3)]);
    }
}
