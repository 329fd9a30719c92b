//! A hostile server's error body: 100 MB, streamed. The sink keeps the first 256 bytes and
//! stops reading; this binary's allocator measures what the delivery held at its peak, and
//! the server counts what it managed to hand to the socket before the sink hung up.
//!
//! One test alone in its binary, so the allocator's peak is this delivery's.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use outbox_core::{Outcome, Record, RecordId, Sink};
use outbox_http::{HttpSink, REASON_BYTES};
use peak_alloc::PeakAlloc;

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

const CHUNK: usize = 64 * 1024;
const BODY: u64 = 100 * 1024 * 1024;
/// One static chunk, sent again and again: the server allocates no body.
static ZEROS: [u8; CHUNK] = [b'z'; CHUNK];

#[derive(Clone, Default)]
struct Sent {
    bytes: Arc<AtomicU64>,
    /// Set when the body stream is dropped: the connection is gone or the body is done.
    dropped: Arc<AtomicBool>,
    done: Arc<tokio::sync::Notify>,
}

/// Marks the stream dropped.
struct OnDrop(Sent);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
        self.0.done.notify_one();
    }
}

async fn huge_error(State(sent): State<Sent>) -> Response {
    let guard = OnDrop(sent.clone());
    let chunks = (0..BODY / CHUNK as u64).map(move |_| {
        let _keep = &guard;
        sent.bytes.fetch_add(CHUNK as u64, Ordering::SeqCst);
        Ok::<_, Infallible>(Bytes::from_static(&ZEROS))
    });
    let body = Body::from_stream(futures::stream::iter(chunks));
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

#[tokio::test]
async fn a_100_mb_error_body_is_not_read_past_its_first_bytes() {
    let sent = Sent::default();
    let app = Router::new()
        .route("/writes", post(huge_error))
        .with_state(sent.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/writes", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let sink = HttpSink::post(&url).unwrap();
    let record = Record::fresh(RecordId(1), None, b"{}".to_vec(), "key".into(), 0);

    ALLOCATOR.reset_peak_usage();
    let before = ALLOCATOR.current_usage();
    let outcome = sink.deliver(&record).await;
    let peak = ALLOCATOR.peak_usage() - before;

    let Outcome::Transient { error, .. } = outcome else {
        panic!("{outcome:?}")
    };
    let detail = error.strip_prefix("HTTP 503: ").unwrap();
    assert_eq!(detail.len(), REASON_BYTES);
    assert!(detail.bytes().all(|b| b == b'z'));
    // The server and the client share this process, so the peak counts both sides.
    assert!(
        peak < 1024 * 1024,
        "the delivery held {peak} bytes at its peak"
    );

    // The sink hung up: the server's body stream is dropped long before its end.
    let wait = async {
        while !sent.dropped.load(Ordering::SeqCst) {
            sent.done.notified().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("the server was still sending 30 s later");
    let bytes = sent.bytes.load(Ordering::SeqCst);
    assert!(bytes < BODY / 10, "the server got {bytes} bytes out");
    eprintln!("peak {peak} bytes; the server got {bytes} of {BODY} bytes out before the hang-up");
}
