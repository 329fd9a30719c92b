//! The HTTP sink against a real local server: every status class, Retry-After, the
//! idempotency key, a refused connection and a timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use outbox_core::{Outcome, Record, RecordId, RetryAfter, Sink};
use outbox_http::HttpSink;

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

/// The idempotency key and body of one request.
type Request = (String, Vec<u8>);

async fn answer(
    State(seen): State<Seen>,
    Path(code): Path<u16>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    seen.0.lock().unwrap().push((key, body.to_vec()));
    let mut out = HeaderMap::new();
    if let Some(value) = query
        .as_deref()
        .and_then(|q| q.strip_prefix("retry_after="))
    {
        out.insert("retry-after", value.replace("%20", " ").parse().unwrap());
    }
    (StatusCode::from_u16(code).unwrap(), out, "server says why")
}

async fn hang() -> &'static str {
    std::future::pending::<()>().await;
    "never"
}

async fn serve() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/s/{code}", post(answer))
        .route("/hang", post(hang))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

fn record() -> Record {
    Record::fresh(RecordId(1), None, b"payload".to_vec(), "key-123".into(), 0)
}

async fn deliver(url: &str) -> Outcome {
    HttpSink::post(url).unwrap().deliver(&record()).await
}

#[tokio::test]
async fn each_status_class_maps_to_its_outcome() {
    let (base, seen) = serve().await;
    assert_eq!(deliver(&format!("{base}/s/201")).await, Outcome::Delivered);
    for code in [500, 502, 503, 408, 425, 429] {
        let outcome = deliver(&format!("{base}/s/{code}")).await;
        assert_eq!(
            outcome,
            Outcome::transient(format!("HTTP {code}: server says why"), None),
            "{code}"
        );
    }
    for code in [400, 403, 404, 410, 422] {
        assert_eq!(
            deliver(&format!("{base}/s/{code}")).await,
            Outcome::rejected(format!("HTTP {code}: server says why"))
        );
    }
    assert!(matches!(
        deliver(&format!("{base}/s/401")).await,
        Outcome::Halt { .. }
    ));
    assert!(matches!(
        deliver(&format!("{base}/s/409")).await,
        Outcome::Conflict { .. }
    ));
    // Every request carried the record's key and its payload.
    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.len(), 14);
    assert!(seen.iter().all(|(k, b)| k == "key-123" && b == b"payload"));
}

#[tokio::test]
async fn retry_after_reaches_the_outcome() {
    let (base, _) = serve().await;
    let outcome = deliver(&format!("{base}/s/429?retry_after=120")).await;
    let Outcome::Transient { retry_after, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        retry_after,
        Some(RetryAfter::Delay(Duration::from_secs(120)))
    );
    let date = "Wed,%2021%20Oct%202015%2007:28:00%20GMT";
    let outcome = deliver(&format!("{base}/s/503?retry_after={date}")).await;
    let Outcome::Transient { retry_after, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(retry_after, Some(RetryAfter::At(1_445_412_480_000)));
    let outcome = deliver(&format!("{base}/s/503?retry_after=soon")).await;
    assert!(matches!(
        outcome,
        Outcome::Transient {
            retry_after: None,
            ..
        }
    ));
}

#[tokio::test]
async fn a_refused_connection_is_no_answer() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let outcome = deliver(&format!("http://{addr}/s/200")).await;
    assert!(outcome.is_unanswered(), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_before_any_response_is_no_answer() {
    let (base, _) = serve().await;
    let sink = HttpSink::post(&format!("{base}/hang"))
        .unwrap()
        .timeout(Duration::from_secs(5));
    let outcome = sink.deliver(&record()).await;
    let Outcome::NoAnswer { error } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(error.contains("timed out"), "{error}");
}

#[test]
fn bad_configuration_is_a_typed_error() {
    assert!(matches!(
        HttpSink::post("not a url"),
        Err(outbox_core::Error::InvalidConfig(_))
    ));
    let sink = HttpSink::post("http://127.0.0.1:1/").unwrap();
    assert!(sink.header("bad header", "x").is_err());
}
