//! Trace context across the hop, against a real local server: a record carries the context of
//! the span it was written in (the core's `opentelemetry` feature takes it when the write is
//! made), `HttpSink` sends it as `traceparent` and `tracestate`, and the runner's delivery span
//! links back to it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use outbox_core::{Event, NewRecord, Outbox, TraceContext};
use outbox_http::HttpSink;
use outbox_memory::MemoryStore;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// The `traceparent` and `tracestate` of each request the server got.
type Got = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

async fn server() -> (String, Got) {
    let got: Got = Arc::default();
    async fn write(State(got): State<Got>, headers: HeaderMap) -> StatusCode {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        got.lock()
            .unwrap()
            .push((header("traceparent"), header("tracestate")));
        StatusCode::CREATED
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/writes", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/writes", post(write))
        .with_state(Arc::clone(&got));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

/// Waits until `n` records were delivered.
async fn delivered(outbox: &Outbox, events: &mut tokio::sync::broadcast::Receiver<Event>, n: u64) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while outbox.stats().await.unwrap().delivered < n {
            let _ = events.recv().await;
        }
    })
    .await
    .expect("delivered within 30 s");
}

#[tokio::test]
async fn the_server_receives_the_traceparent_of_the_span_that_wrote_the_record() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
    let _default = tracing::subscriber::set_default(subscriber);

    let (url, got) = server().await;
    let outbox = Outbox::builder(
        Arc::new(MemoryStore::new()),
        Arc::new(HttpSink::post(&url).unwrap()),
    )
    .start()
    .await
    .unwrap();
    let mut events = outbox.events();

    // The application handles a request in a span and writes inside it.
    let request = tracing::info_span!("handle_request");
    let (record, context) = {
        let _inside = request.enter();
        let cx = request.context();
        let span_context = cx.span().span_context().clone();
        (NewRecord::new(b"{}".to_vec()), span_context)
    };
    assert!(
        context.is_valid(),
        "the subscriber gives the span an OpenTelemetry context"
    );
    let taken = record
        .trace
        .clone()
        .expect("the write took the span's context");
    assert_eq!(taken.trace_id(), context.trace_id().to_string());
    assert_eq!(taken.span_id(), context.span_id().to_string());
    let id = outbox.enqueue(record).await.unwrap();

    // A write made outside any span carries none; one given a context explicitly sends it.
    let plain = outbox
        .enqueue(NewRecord::new(b"plain".to_vec()))
        .await
        .unwrap();
    let given = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        Some("congo=t61rcWkgMzE".into()),
    )
    .unwrap();
    outbox
        .enqueue(NewRecord::new(b"given".to_vec()).trace_context(given.clone()))
        .await
        .unwrap();
    delivered(&outbox, &mut events, 3).await;
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();

    let got = got.lock().unwrap().clone();
    let expected = format!("00-{}-{}-01", context.trace_id(), context.span_id());
    assert!(
        got.contains(&(Some(expected.clone()), None)),
        "the request span's traceparent reached the server: {got:?} (record {id}, plain {plain})"
    );
    assert!(
        got.contains(&(None, None)),
        "no header without a context: {got:?}"
    );
    assert!(
        got.contains(&(
            Some(given.traceparent().to_owned()),
            Some("congo=t61rcWkgMzE".to_owned())
        )),
        "an explicit context with its tracestate: {got:?}"
    );

    // The delivery is a trace of its own, linked to the write's span.
    drop(request);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let deliveries: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "outbox.deliver")
        .collect();
    assert_eq!(deliveries.len(), 3, "one delivery span each");
    let linked = deliveries.iter().any(|s| {
        s.links.iter().any(|l| {
            l.span_context.span_id() == context.span_id()
                && l.span_context.trace_id() == context.trace_id()
        })
    });
    assert!(
        linked,
        "a delivery span links to the request span: {deliveries:#?}"
    );
    assert!(
        deliveries
            .iter()
            .all(|s| s.span_context.trace_id() != context.trace_id()),
        "linked, not a child: the delivery has a trace of its own"
    );
}
