//! The boundary seen from Rust: a sink that panics is a delivery without an answer, the
//! classification is the core's table with the app's changes, and every core error keeps its
//! name as an exception.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::http::{Classifier, Forbidden, Response};
use outbox_core::{Error, Outcome, RecordId};
use outbox_ffi::{
    classify_delivery, default_options, open_outbox, BackoffOptions, ConflictChoice, Delivery,
    DeliverySink, ForbiddenMeaning, OpenOptions, OutboxError, OutboxEvent, OutboxRecord,
    RecordState, SinkError, Write,
};

fn answer(status: u16) -> Delivery {
    Delivery::Response {
        status,
        retry_after: None,
        date: None,
        location_elsewhere: None,
        detail: None,
    }
}

fn fast() -> OpenOptions {
    let mut options = default_options();
    options.policy.backoff = BackoffOptions::Exponential {
        initial_ms: 10,
        factor: 2.0,
        cap_ms: 50,
    };
    options.runner.relink_spread_ms = 0;
    options
}

/// Panics on its first delivery, as a bug in Rust code behind a foreign sink would.
struct PanicsOnce(AtomicU32);

impl DeliverySink for PanicsOnce {
    fn deliver(&self, _record: OutboxRecord) -> Result<Delivery, SinkError> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("the delivery code has a bug");
        }
        Ok(answer(200))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_sink_is_no_answer_and_the_record_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
    let sink = Arc::new(PanicsOnce(AtomicU32::new(0)));
    let outbox = open_outbox(path, fast(), sink.clone()).await.unwrap();
    let id = outbox.enqueue(Write::new(b"{}".to_vec())).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut retried = None;
    loop {
        assert!(Instant::now() < deadline, "the record was never delivered");
        match outbox.next_event(100).await.unwrap() {
            Some(OutboxEvent::Retrying { id: r, spent, .. }) if r == id => retried = Some(spent),
            Some(OutboxEvent::Delivered { id: r }) if r == id => break,
            _ => {}
        }
    }
    assert_eq!(retried, Some(false), "a panic spends no attempt");
    assert_eq!(sink.0.load(Ordering::SeqCst), 2);
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.pending, stats.retrying), (1, 0, 0));
    outbox.shutdown(2_000).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_raising_an_error_leaves_its_reason_on_the_record() {
    struct Raises;
    impl DeliverySink for Raises {
        fn deliver(&self, _record: OutboxRecord) -> Result<Delivery, SinkError> {
            Err(SinkError::Failed {
                reason: "socket factory missing".into(),
            })
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
    let mut options = fast();
    // One no-answer, then a long wait: the record is read while it waits.
    options.policy.backoff = BackoffOptions::Table {
        delays_ms: vec![60_000],
    };
    options.policy.jitter = outbox_ffi::JitterKind::None;
    let outbox = open_outbox(path, options, Arc::new(Raises)).await.unwrap();
    let id = outbox.enqueue(Write::new(b"{}".to_vec())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the record was never retried");
        if let Some(OutboxEvent::Retrying { id: r, .. }) = outbox.next_event(100).await.unwrap() {
            if r == id {
                break;
            }
        }
    }
    let record = outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Retrying);
    assert_eq!((record.attempts, record.unanswered), (0, 1));
    assert_eq!(
        record.last_error.as_deref(),
        Some("the sink raised: the sink failed: socket factory missing")
    );
    let classes: Vec<(&str, Option<u16>)> = record
        .history
        .iter()
        .map(|a| (a.outcome_class.as_str(), a.status))
        .collect();
    assert_eq!(classes, [("no answer", None)], "the attempt is kept");
    outbox.shutdown(2_000).await.unwrap();
}

/// Answers 409 to `dup` and 412 to `stale`, by payload.
struct Conflicts;

impl DeliverySink for Conflicts {
    fn deliver(&self, record: OutboxRecord) -> Result<Delivery, SinkError> {
        Ok(answer(if record.payload == b"dup" { 409 } else { 412 }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_follows_the_apps_choice_and_a_412_always_waits_for_a_person() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
    let mut options = fast();
    options.on_conflict = ConflictChoice::AlreadyDelivered;
    let outbox = open_outbox(path, options, Arc::new(Conflicts))
        .await
        .unwrap();
    let dup = outbox.enqueue(Write::new(b"dup".to_vec())).await.unwrap();
    let stale = outbox.enqueue(Write::new(b"stale".to_vec())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            Instant::now() < deadline,
            "the conflicts were never resolved"
        );
        let stats = outbox.stats().await.unwrap();
        if stats.delivered == 1 && stats.needs_attention == 1 {
            break;
        }
        outbox.next_event(100).await.unwrap();
    }
    assert!(
        outbox.get(dup).await.unwrap().is_none(),
        "delivered, so gone"
    );
    let parked = outbox.get(stale).await.unwrap().unwrap();
    assert_eq!(parked.state, RecordState::NeedsAttention);
    outbox.shutdown(2_000).await.unwrap();
}

#[test]
fn a_foreign_answer_is_classified_by_the_core_table_with_the_apps_changes() {
    let mut options = default_options();
    options.classifier.reject = vec![451];
    options.classifier.retry = vec![404];
    options.classifier.forbidden = ForbiddenMeaning::Halt;
    // The app's options make the core's classifier with those changes, and a foreign answer
    // goes through it unchanged, for every status there is.
    let core = Classifier::new()
        .reject(451)
        .retry(404)
        .on_forbidden(Forbidden::Halt);
    let ours = options.classifier.table();
    for status in 100..=699 {
        let expected = core.classify(&Response::new(status));
        assert_eq!(
            classify_delivery(&ours, answer(status)),
            expected,
            "{status}"
        );
    }
    assert!(matches!(
        classify_delivery(&ours, answer(451)),
        Outcome::Rejected { .. }
    ));
    assert!(matches!(
        classify_delivery(&ours, answer(403)),
        Outcome::Halt { .. }
    ));
    // The headers travel: Retry-After read against the response's Date.
    let busy = Delivery::Response {
        status: 503,
        retry_after: Some("Tue, 14 Nov 2023 23:13:22 GMT".into()),
        date: Some("Tue, 14 Nov 2023 23:13:20 GMT".into()),
        location_elsewhere: None,
        detail: Some("down for maintenance".into()),
    };
    assert_eq!(
        classify_delivery(&ours, busy),
        Outcome::transient(
            "HTTP 503: down for maintenance",
            Some(outbox_core::RetryAfter::Date(Duration::from_secs(2)))
        )
    );
    let portal = Delivery::Response {
        status: 302,
        retry_after: None,
        date: None,
        location_elsewhere: Some("portal.example".into()),
        detail: Some("login page".into()),
    };
    assert!(classify_delivery(&ours, portal).is_unanswered());
}

#[test]
fn every_core_error_keeps_its_name() {
    let id = RecordId(7);
    let cases: Vec<(Error, OutboxError)> = vec![
        (
            Error::SchemaTooNew {
                found: 9,
                supported: 4,
            },
            OutboxError::SchemaTooNew {
                found: 9,
                supported: 4,
            },
        ),
        (
            Error::PayloadTooLarge { size: 5, max: 4 },
            OutboxError::PayloadTooLarge { size: 5, max: 4 },
        ),
        (
            Error::QueueFull {
                limit: outbox_core::CapLimit::Records,
                max: 1_000,
                used: 1_000,
                adding: 1,
            },
            OutboxError::QueueFull {
                limit: "records".into(),
                max: 1_000,
                used: 1_000,
                adding: 1,
            },
        ),
        (Error::NoSuchRecord(id), OutboxError::NoSuchRecord { id: 7 }),
        (
            Error::RecordInFlight(id),
            OutboxError::RecordInFlight { id: 7 },
        ),
        (
            Error::RecordRejected(id),
            OutboxError::RecordRejected { id: 7 },
        ),
        (Error::NotRejected(id), OutboxError::NotRejected { id: 7 }),
        (
            Error::Timeout(Duration::from_millis(1500)),
            OutboxError::Timeout { after_ms: 1500 },
        ),
        (Error::Stopped, OutboxError::Stopped),
        (
            Error::InvalidConfig("batch".into()),
            OutboxError::InvalidConfig {
                detail: "batch".into(),
            },
        ),
        (
            Error::NotFound { path: "/a".into() },
            OutboxError::NotFound { path: "/a".into() },
        ),
        (
            Error::AlreadyExists { path: "/a".into() },
            OutboxError::AlreadyExists { path: "/a".into() },
        ),
    ];
    for (core, expected) in cases {
        assert_eq!(OutboxError::from(core), expected);
    }
    // Variants with an engine's error keep the engine's words.
    let full = OutboxError::from(Error::StorageFull {
        source: Some("database or disk is full".into()),
    });
    assert_eq!(
        full,
        OutboxError::StorageFull {
            detail: "full: database or disk is full".into()
        }
    );
    let named = |err: Error| OutboxError::from(err);
    assert!(matches!(
        named(Error::InvalidGroup { reason: "x".into() }),
        OutboxError::InvalidGroup { .. }
    ));
    assert!(matches!(
        named(Error::InvalidIdempotencyKey { reason: "x".into() }),
        OutboxError::InvalidIdempotencyKey { .. }
    ));
    assert!(matches!(
        named(Error::Locked { source: None }),
        OutboxError::Locked { .. }
    ));
    assert!(matches!(
        named(Error::ReadOnly { source: None }),
        OutboxError::ReadOnly { .. }
    ));
    assert!(matches!(
        named(Error::unavailable("busy")),
        OutboxError::Unavailable { .. }
    ));
    assert!(matches!(
        named(Error::backend("disk I/O")),
        OutboxError::Backend { .. }
    ));
    assert!(matches!(
        named(Error::NotAnOutbox {
            detail: "text".into(),
            source: None
        }),
        OutboxError::NotAnOutbox { .. }
    ));
    assert!(matches!(
        named(Error::Corrupted {
            detail: "torn".into(),
            source: None
        }),
        OutboxError::Corrupted { .. }
    ));
}

/// Counts deliveries; every one is accepted.
struct Counts(AtomicU32);

impl DeliverySink for Counts {
    fn deliver(&self, _record: OutboxRecord) -> Result<Delivery, SinkError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(answer(200))
    }
}

/// A write held for a day is pending with that time on the record, and a write without one
/// beside it is delivered while the held one waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_held_until_later_waits_for_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
    let sink = Arc::new(Counts(AtomicU32::new(0)));
    let outbox = open_outbox(path, fast(), sink.clone()).await.unwrap();
    let now = outbox_core::Clock::now(&outbox_core::SystemClock);
    let later = now + 86_400_000;
    let held = outbox
        .enqueue(Write {
            not_before: Some(later),
            ..Write::new(b"reminder".to_vec())
        })
        .await
        .unwrap();
    let plain = outbox.enqueue(Write::new(b"now".to_vec())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            Instant::now() < deadline,
            "the plain write was never delivered"
        );
        if let Some(OutboxEvent::Delivered { id }) = outbox.next_event(100).await.unwrap() {
            assert_eq!(id, plain, "only the write without a time goes");
            break;
        }
    }
    let record = outbox.get(held).await.unwrap().expect("the held write");
    assert_eq!(record.state, RecordState::Pending);
    assert_eq!(
        (record.not_before, record.next_attempt_at),
        (Some(later), Some(later))
    );
    assert!(record.history.is_empty() && !record.history_unreadable);
    assert_eq!(sink.0.load(Ordering::SeqCst), 1);
    outbox.shutdown(2_000).await.unwrap();
}

/// A cap of two records: the third write raises `QueueFull` naming the limit and the usage,
/// and nothing of it is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_raises_queue_full_and_queues_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
    let mut options = fast();
    options.online = false; // nothing is delivered: the two records stay
    options.max_records = Some(2);
    let sink = Arc::new(Counts(AtomicU32::new(0)));
    let outbox = open_outbox(path, options, sink).await.unwrap();
    outbox.enqueue(Write::new(b"a".to_vec())).await.unwrap();
    outbox.enqueue(Write::new(b"bb".to_vec())).await.unwrap();
    let refused = outbox.enqueue(Write::new(b"c".to_vec())).await;
    assert_eq!(
        refused.unwrap_err(),
        OutboxError::QueueFull {
            limit: "records".into(),
            max: 2,
            used: 2,
            adding: 1
        }
    );
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.pending, stats.payload_bytes), (2, 3));
    outbox.shutdown(2_000).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_runner_says_as_it_opens_is_the_first_event() {
    use outbox_core::{Claim, Lease, NewRecord, Store};
    use outbox_sqlite::{SqliteConfig, SqliteStore};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
    // A previous process claimed a record and died delivering it: its lease ran out with no
    // report. The app allows one such interruption, so opening parks the record.
    let now = outbox_core::Clock::now(&outbox_core::SystemClock);
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    let id = store
        .enqueue(vec![NewRecord::new(b"{}".to_vec())], now - 2_000)
        .await
        .unwrap()
        .ids[0];
    let lease = Lease {
        token: 7,
        until: now - 1_000,
    };
    let claim = Claim {
        now: now - 2_000,
        limit: 1,
        lease,
    };
    assert_eq!(store.claim(claim).await.unwrap().len(), 1);
    drop(store);

    let mut options = fast();
    options.online = false;
    options.policy.max_interruptions = 1;
    let outbox = open_outbox(path, options, Arc::new(Answers(200)))
        .await
        .unwrap();
    let event = outbox.next_event(10_000).await.unwrap();
    assert!(
        matches!(&event, Some(OutboxEvent::Parked { id: parked, .. }) if *parked == id.0),
        "{event:?}"
    );
    outbox.shutdown(5_000).await.unwrap();
}

/// Answers every delivery with one status.
struct Answers(u16);

impl DeliverySink for Answers {
    fn deliver(&self, _record: OutboxRecord) -> Result<Delivery, SinkError> {
        Ok(answer(self.0))
    }
}
