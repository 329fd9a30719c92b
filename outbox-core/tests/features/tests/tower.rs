//! The `tower` feature: `ServiceSink` against tower-test's mock (what the service is asked,
//! how its answers and errors are read, that readiness is awaited) and an outbox delivering
//! through a `ServiceBuilder` stack (a concurrency limit and a timeout layer, no retry layer).

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::tower::ServiceSink;
use outbox_core::{
    BoxError, Millis, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig, Sink, State,
    TokioClock,
};
use outbox_memory::MemoryStore;
use tower::ServiceBuilder;
use tower_test::mock;

const BASE: Millis = 1_700_000_000_000;

fn record(payload: &[u8]) -> Record {
    Record::fresh(RecordId(7), None, payload.to_vec(), "key-7".into(), BASE)
}

#[tokio::test(start_paused = true)]
async fn the_service_gets_the_record_and_its_response_is_the_outcome() {
    let (service, mut handle) = mock::pair::<Record, Outcome>();
    let sink = Arc::new(ServiceSink::new(service));
    let delivery = tokio::spawn({
        let sink = Arc::clone(&sink);
        async move { sink.deliver(&record(b"{}")).await }
    });
    let (asked, answer) = handle.next_request().await.unwrap();
    assert_eq!((asked.id, asked.key.as_str()), (RecordId(7), "key-7"));
    assert_eq!(asked.payload, b"{}");
    answer.send_response(Outcome::rejected("HTTP 422"));
    assert_eq!(delivery.await.unwrap(), Outcome::rejected("HTTP 422"));
}

#[tokio::test(start_paused = true)]
async fn an_error_of_the_service_is_no_answer_by_default() {
    let (service, mut handle) = mock::pair::<Record, Outcome>();
    let sink = Arc::new(ServiceSink::new(service));
    let delivery = tokio::spawn({
        let sink = Arc::clone(&sink);
        async move { sink.deliver(&record(b"{}")).await }
    });
    let (_, answer) = handle.next_request().await.unwrap();
    let reset: BoxError = Box::new(std::io::Error::other("connection reset"));
    answer.send_error(reset);
    assert_eq!(
        delivery.await.unwrap(),
        Outcome::no_answer("connection reset")
    );
}

#[tokio::test(start_paused = true)]
async fn a_mapping_for_errors_decides_what_they_mean() {
    let (service, mut handle) = mock::pair::<Record, Outcome>();
    let sink = Arc::new(ServiceSink::new(service).map_error(|err: BoxError| {
        match err.downcast_ref::<std::io::Error>() {
            Some(io) if io.kind() == std::io::ErrorKind::PermissionDenied => {
                Outcome::halt(io.to_string())
            }
            _ => Outcome::no_answer(err.to_string()),
        }
    }));
    let delivery = tokio::spawn({
        let sink = Arc::clone(&sink);
        async move { sink.deliver(&record(b"{}")).await }
    });
    let (_, answer) = handle.next_request().await.unwrap();
    let refused: BoxError = Box::new(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "token expired",
    ));
    answer.send_error(refused);
    assert_eq!(delivery.await.unwrap(), Outcome::halt("token expired"));
}

#[tokio::test(start_paused = true)]
async fn a_response_mapping_reads_the_services_own_type() {
    let (service, mut handle) = mock::pair::<Record, u16>();
    let sink = Arc::new(
        ServiceSink::new(service)
            .map_response(|status: u16| outbox_core::http::classify(status, None)),
    );
    for (status, delivered) in [(201, true), (422, false), (503, false)] {
        let delivery = tokio::spawn({
            let sink = Arc::clone(&sink);
            async move { sink.deliver(&record(b"{}")).await }
        });
        let (_, answer) = handle.next_request().await.unwrap();
        answer.send_response(status);
        let outcome = delivery.await.unwrap();
        match status {
            201 => assert_eq!(outcome, Outcome::Delivered),
            422 => assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}"),
            _ => assert!(matches!(outcome, Outcome::Transient { .. }), "{outcome:?}"),
        }
        assert_eq!(outcome == Outcome::Delivered, delivered);
    }
}

#[tokio::test(start_paused = true)]
async fn a_service_that_is_not_ready_is_waited_for_and_not_called() {
    let (service, mut handle) = mock::pair::<Record, Outcome>();
    handle.allow(0);
    let sink = Arc::new(ServiceSink::new(service));
    let delivery = tokio::spawn({
        let sink = Arc::clone(&sink);
        async move { sink.deliver(&record(b"{}")).await }
    });
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !delivery.is_finished(),
        "called before the service was ready"
    );
    handle.allow(1);
    let (_, answer) = handle.next_request().await.unwrap();
    answer.send_response(Outcome::Delivered);
    assert_eq!(delivery.await.unwrap(), Outcome::Delivered);
}

#[tokio::test(start_paused = true)]
async fn a_service_that_fails_to_get_ready_is_no_answer() {
    let (service, mut handle) = mock::pair::<Record, Outcome>();
    handle.allow(0);
    let sink = Arc::new(ServiceSink::new(service));
    let delivery = tokio::spawn({
        let sink = Arc::clone(&sink);
        async move { sink.deliver(&record(b"{}")).await }
    });
    tokio::task::yield_now().await;
    handle.send_error(std::io::Error::other("no connection in the pool"));
    assert_eq!(
        delivery.await.unwrap(),
        Outcome::no_answer("no connection in the pool")
    );
}

/// Counts deliveries under way in the innermost service and the most seen at once.
#[derive(Clone, Default)]
struct Gauge {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

#[tokio::test(start_paused = true)]
async fn an_outbox_delivers_through_a_service_builder_stack() {
    let gauge = Gauge::default();
    let inner = {
        let gauge = gauge.clone();
        tower::service_fn(move |record: Record| {
            let gauge = gauge.clone();
            async move {
                gauge.calls.fetch_add(1, Ordering::SeqCst);
                let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
                gauge.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                gauge.now.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(record.payload, b"order");
                Ok::<_, Infallible>(Outcome::Delivered)
            }
        })
    };
    // A plain stack: a concurrency limit and a timeout; no retry layer (the runner retries).
    let stack = ServiceBuilder::new()
        .concurrency_limit(2)
        .timeout(Duration::from_secs(5))
        .service(inner);
    let store = Arc::new(MemoryStore::new());
    let outbox = Outbox::builder(store, ServiceSink::new(stack))
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .config(RunnerConfig::default().with_concurrency(8).with_seed(3))
        .start()
        .await
        .unwrap();
    outbox
        .enqueue_batch((0..6).map(|_| NewRecord::new(b"order".to_vec())).collect())
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    let stats = outbox.stats().await.unwrap();
    assert_eq!(stats.delivered, 6, "{stats:?}");
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 6);
    // Eight runner slots, two through the limit.
    assert_eq!(gauge.most.load(Ordering::SeqCst), 2);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_timeout_layer_makes_a_hanging_service_a_record_with_no_answer() {
    let hang = tower::service_fn(|_: Record| async {
        std::future::pending::<()>().await;
        Ok::<_, Infallible>(Outcome::Delivered)
    });
    let stack = ServiceBuilder::new()
        .timeout(Duration::from_secs(2))
        .service(hang);
    let store = Arc::new(MemoryStore::new());
    let outbox = Outbox::builder(store, ServiceSink::new(stack))
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .config(RunnerConfig::default().with_seed(3))
        .start()
        .await
        .unwrap();
    let id = outbox
        .enqueue(NewRecord::new(b"order".to_vec()))
        .await
        .unwrap();
    // The layer's 2 s, well within the runner's own delivery timeout.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let record = outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, State::Retrying);
    assert_eq!((record.attempts, record.unanswered), (0, 1));
    assert_eq!(record.last_error.as_deref(), Some("request timed out"));
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}
