//! The HTTP sink against a real local server: every status class, Retry-After with and without
//! the server's Date, the idempotency key, credentials read per request, requests that cannot
//! be built, a refused connection and a timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use outbox_core::http::{Classifier, Forbidden};
use outbox_core::{Outcome, Record, RecordId, RetryAfter, Sink};
use outbox_http::{HttpSink, Target, Token};
use reqwest::{Method, Url};

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

impl Seen {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// The idempotency key, the `Authorization` header and the body of one request.
#[derive(Clone, Debug)]
struct Request {
    key: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

/// Answers with the status in the path; `?retry_after=...&date=...` become headers.
async fn answer(
    State(seen): State<Seen>,
    Path(code): Path<u16>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    seen.0.lock().unwrap().push(Request {
        key: text("idempotency-key").unwrap_or_default(),
        authorization: text("authorization"),
        body: body.to_vec(),
    });
    let mut out = HeaderMap::new();
    for pair in query.as_deref().unwrap_or_default().split('&') {
        let Some((name, value)) = pair.split_once('=') else {
            continue;
        };
        let name = name.replace('_', "-");
        let value = value.replace("%20", " ");
        out.insert(
            axum::http::HeaderName::try_from(name).unwrap(),
            value.parse().unwrap(),
        );
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
    // "Later", and every status that is no verdict on the record: a 403 from a gateway, a
    // redirect that was not followed, a misdirected request, a legal block.
    let transient = [
        500, 502, 503, 408, 425, 429, 403, 300, 302, 421, 423, 451, 499,
    ];
    for code in transient {
        let outcome = deliver(&format!("{base}/s/{code}")).await;
        assert_eq!(
            outcome,
            Outcome::transient(format!("HTTP {code}: server says why"), None),
            "{code}"
        );
    }
    let terminal = [400, 404, 405, 410, 411, 413, 414, 415, 422];
    for code in terminal {
        assert_eq!(
            deliver(&format!("{base}/s/{code}")).await,
            Outcome::rejected(format!("HTTP {code}: server says why"))
        );
    }
    for code in [401, 407] {
        assert_eq!(
            deliver(&format!("{base}/s/{code}")).await,
            Outcome::halt(format!("HTTP {code}: server says why"))
        );
    }
    assert!(matches!(
        deliver(&format!("{base}/s/409")).await,
        Outcome::Conflict { .. }
    ));
    // Every request carried the record's key and its payload.
    assert_eq!(seen.len(), 1 + transient.len() + terminal.len() + 3);
    let seen = seen.0.lock().unwrap();
    assert!(seen
        .iter()
        .all(|r| r.key == "key-123" && r.body == b"payload" && r.authorization.is_none()));
}

#[tokio::test]
async fn what_403_means_is_the_users_choice() {
    let (base, _) = serve().await;
    let url = format!("{base}/s/403");
    let sink = |forbidden| {
        let sink = HttpSink::post(&url).unwrap().on_forbidden(forbidden);
        async move { sink.deliver(&record()).await }
    };
    assert!(matches!(
        sink(Forbidden::Retry).await,
        Outcome::Transient { .. }
    ));
    assert_eq!(
        sink(Forbidden::Halt).await,
        Outcome::halt("HTTP 403: server says why")
    );
    assert_eq!(
        sink(Forbidden::Reject).await,
        Outcome::rejected("HTTP 403: server says why")
    );
    // A whole table of one's own.
    let sink = HttpSink::post(&format!("{base}/s/451"))
        .unwrap()
        .classifier(Classifier::new().reject(451));
    assert!(matches!(
        sink.deliver(&record()).await,
        Outcome::Rejected { .. }
    ));
}

#[tokio::test]
async fn retry_after_reaches_the_outcome() {
    let (base, _) = serve().await;
    let retry_after = |outcome: Outcome| match outcome {
        Outcome::Transient { retry_after, .. } => retry_after,
        other => panic!("{other:?}"),
    };
    let outcome = deliver(&format!("{base}/s/429?retry_after=120")).await;
    assert_eq!(
        retry_after(outcome),
        Some(RetryAfter::Delay(Duration::from_secs(120)))
    );
    // An HTTP-date is read against the response's own Date: 90 s on the server's clock,
    // whatever that clock says.
    let date = "Wed,%2021%20Oct%202015%2007:28:00%20GMT";
    let server_date = "Wed,%2021%20Oct%202015%2007:26:30%20GMT";
    let outcome = deliver(&format!(
        "{base}/s/503?retry_after={date}&date={server_date}"
    ))
    .await;
    assert_eq!(
        retry_after(outcome),
        Some(RetryAfter::Date(Duration::from_secs(90)))
    );
    let outcome = deliver(&format!("{base}/s/503?retry_after=soon")).await;
    assert_eq!(retry_after(outcome), None);
}

#[tokio::test]
async fn the_credential_is_read_for_every_request() {
    let (base, seen) = serve().await;
    let token = Token::bearer("one");
    let sink = HttpSink::post(&format!("{base}/s/204"))
        .unwrap()
        .header("authorization", "Bearer fixed")
        .unwrap()
        .credentials(token.clone());
    assert_eq!(sink.deliver(&record()).await, Outcome::Delivered);
    token.set_bearer("two");
    assert_eq!(sink.deliver(&record()).await, Outcome::Delivered);
    token.clear();
    assert_eq!(sink.deliver(&record()).await, Outcome::Delivered);
    let sent: Vec<_> = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.authorization.clone())
        .collect();
    // The source replaces the fixed header; when it has nothing, the fixed one is sent.
    assert_eq!(
        sent,
        [
            Some("Bearer one".into()),
            Some("Bearer two".into()),
            Some("Bearer fixed".into())
        ]
    );
    // Its Debug output keeps the secret.
    assert!(!format!("{token:?} {sink:?}").contains("two"));
}

#[tokio::test]
async fn a_request_that_cannot_be_built_halts_and_reaches_no_server() {
    let (base, seen) = serve().await;
    let halted = |outcome: Outcome| match outcome {
        Outcome::Halt { reason } => reason,
        other => panic!("{other:?}"),
    };

    let bad_key = Record::fresh(RecordId(2), None, b"x".to_vec(), "line\nbreak".into(), 0);
    let sink = HttpSink::post(&format!("{base}/s/204")).unwrap();
    let reason = halted(sink.deliver(&bad_key).await);
    assert!(reason.contains("idempotency key"), "{reason}");
    assert!(reason.contains("not this record"), "{reason}");

    let sink = sink.credentials(|| Some("Bearer \u{7f}".to_owned()));
    let reason = halted(sink.deliver(&record()).await);
    assert!(reason.contains("Authorization"), "{reason}");

    // URLs a route can produce that no HTTP client can send: another scheme (pointing at the
    // live server), and one without a host.
    let ftp = Url::parse(&base.replace("http:", "ftp:")).unwrap();
    for url in [ftp, Url::parse("file:///tmp/notes").unwrap()] {
        let sink = HttpSink::route(move |_| Target {
            method: Method::POST,
            url: url.clone(),
        });
        let reason = halted(sink.deliver(&record()).await);
        assert!(reason.contains("could not be built"), "{reason}");
    }
    // The tests build reqwest with TLS (for the interception tests), so an https URL is sent;
    // a build without it halts instead (the `failure` module's unit tests). A plain HTTP
    // server cannot answer a TLS handshake: nothing answered, nothing spent.
    let sink = HttpSink::post(&base.replace("http:", "https:")).unwrap();
    let outcome = sink.deliver(&record()).await;
    assert!(outcome.is_unanswered(), "{outcome:?}");
    assert_eq!(seen.len(), 0, "no request reached the server");
}

#[tokio::test]
async fn a_refused_connection_is_no_answer() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let outcome = deliver(&format!("http://me:pw-s3cret@{addr}/s/200?token=s3cret")).await;
    let Outcome::NoAnswer { error } = outcome else {
        panic!("{outcome:?}")
    };
    // reqwest's text names the URL; the reason shows it without user info or query.
    assert!(error.contains(&format!("http://{addr}/s/200")), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_before_any_response_is_no_answer() {
    let (base, _) = serve().await;
    let sink = HttpSink::post(&format!("{base}/hang?token=s3cret"))
        .unwrap()
        .timeout(Duration::from_secs(5));
    let outcome = sink.deliver(&record()).await;
    let Outcome::NoAnswer { error } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(error.contains("timed out"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
}

#[test]
fn bad_configuration_is_a_typed_error() {
    for url in [
        "not a url?key=s3cret",
        "ftp://me:s3cret@127.0.0.1/?key=s3cret",
        "file:///tmp/x?key=s3cret",
        "http://me:s3cret@[::1/",
    ] {
        match HttpSink::post(url) {
            Err(outbox_core::Error::InvalidConfig(why)) => {
                assert!(!why.contains("s3cret"), "{why}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    let sink = HttpSink::post("http://127.0.0.1:1/").unwrap();
    assert!(sink.header("bad header", "x").is_err());
}
