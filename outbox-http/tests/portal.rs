//! Hotel Wi-Fi with a login page, from outside: for a while every request to our server is
//! answered by a portal (302 and 307 to the portal's own origin, then 511), and then the
//! server answers. Nothing may be delivered or deleted while
//! the portal answers, no budget spent, nothing sent to the portal, the link reported down
//! with what answered instead; then everything is delivered. The sink's URL carries a secret
//! in its query string and user info, which no reason, event or log line may show.
//!
//! Real time, backoffs of milliseconds, and only bounded waits for events (see `support`).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use outbox_core::{
    Backoff, Event, ListQuery, NewRecord, Outbox, RetryPolicy, RunnerConfig, State as RecordState,
};
use outbox_http::HttpSink;
use outbox_memory::MemoryStore;
use support::{delivered, next, until, Events, Logs};

const SECRET: &str = "s3cret-portal";
const PASSWORD: &str = "pa55-portal";

/// One request as a server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    uri: Uri,
    key: Option<String>,
    body: Bytes,
}

#[derive(Clone, Default)]
struct Server {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// What each request to our server was answered with.
    answers: Arc<Mutex<Vec<u16>>>,
    /// Our server answers itself (the portal is gone).
    back: Arc<AtomicBool>,
    /// Where the portal's redirects point.
    portal: Arc<Mutex<String>>,
}

async fn seen(
    server: &Server,
    method: Method,
    uri: Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> usize {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut all = server.seen.lock().unwrap();
    all.push(Seen {
        method,
        uri,
        key,
        body,
    });
    all.len() - 1
}

/// Our server's address, with a portal in front of it until `back` is set: request `n` is
/// answered 302, 307 or 511 in turn.
async fn ours(
    State(server): State<Server>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = seen(&server, method, uri, &headers, body).await;
    let login = format!("{}/login?next=%2Fwrites", server.portal.lock().unwrap());
    let (status, response) = if server.back.load(Ordering::SeqCst) {
        (201, StatusCode::CREATED.into_response())
    } else {
        match n % 3 {
            0 => (
                302,
                (StatusCode::FOUND, [("location", login)]).into_response(),
            ),
            1 => (
                307,
                (StatusCode::TEMPORARY_REDIRECT, [("location", login)]).into_response(),
            ),
            _ => (
                511,
                (
                    StatusCode::NETWORK_AUTHENTICATION_REQUIRED,
                    "<html>Please log in to Hotel Wi-Fi</html>",
                )
                    .into_response(),
            ),
        }
    };
    server.answers.lock().unwrap().push(status);
    response
}

/// The portal's own origin: a login page for whatever asks.
async fn portal(
    State(server): State<Server>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    seen(&server, method, uri, &headers, body).await;
    (StatusCode::OK, "<html>Welcome! Log in here.</html>").into_response()
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr.to_string()
}

#[tokio::test]
async fn a_captive_portal_delivers_nothing_spends_nothing_and_says_what_answered() {
    let (logs, _guard) = Logs::capture();
    let other = Server::default();
    let portal_addr = serve(
        Router::new()
            .fallback(any(portal))
            .with_state(other.clone()),
    )
    .await;
    let server = Server::default();
    *server.portal.lock().unwrap() = format!("http://{portal_addr}");
    let addr = serve(
        Router::new()
            .route("/writes", any(ours))
            .with_state(server.clone()),
    )
    .await;

    let url = format!("http://app:{PASSWORD}@{addr}/writes?api_key={SECRET}");
    let store = Arc::new(MemoryStore::new());
    let policy = RetryPolicy::default().with_backoff(Backoff::exponential(
        Duration::from_millis(10),
        2.0,
        Duration::from_millis(100),
    ));
    let outbox = Outbox::builder(store.clone(), Arc::new(HttpSink::post(&url).unwrap()))
        .policy(policy)
        .config(
            RunnerConfig::default()
                .with_link_down_warn_every(Duration::from_millis(50))
                .with_seed(7),
        )
        .start()
        .await
        .unwrap();
    let mut events = outbox.events();
    let kept = Events::record(outbox.events());
    let writes: Vec<NewRecord> = (0..5u8).map(|i| NewRecord::new(vec![b'0' + i])).collect();
    let keys: Vec<String> = writes.iter().map(|w| w.key.clone()).collect();
    let ids = outbox.enqueue_batch(writes).await.unwrap();

    let down = next(&mut events, |e| match e {
        Event::LinkDown { error, .. } => Some(error.clone()),
        _ => None,
    })
    .await;
    assert!(
        down.contains(&format!(
            "redirected to {portal_addr}: a captive portal or proxy?"
        )),
        "{down}"
    );

    // Behind the portal for a while: probed on backoff through each of its answers, twice,
    // and warned again meanwhile.
    until(
        &mut events,
        "six answers from the portal and a repeated warning",
        || {
            server.answers.lock().unwrap().len() >= 6
                && logs.text().contains("the link is still down")
        },
    )
    .await;
    let answers = server.answers.lock().unwrap().clone();
    for status in [302, 307, 511] {
        assert!(answers.contains(&status), "{status} in {answers:?}");
    }
    assert!(
        other.seen.lock().unwrap().is_empty(),
        "the portal got nothing"
    );
    let stats = outbox.stats().await.unwrap();
    assert_eq!(stats.delivered, 0);
    let records = outbox.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(records.len(), 5, "nothing deleted");
    assert!(
        records
            .iter()
            .all(|r| r.attempts == 0 && r.state != RecordState::NeedsAttention),
        "no budget spent: {records:?}"
    );
    // Every answer of the portal counted as unanswered (one probe may be between the portal's
    // answer and its record when the list was read).
    let unanswered: u32 = records.iter().map(|r| r.unanswered).sum();
    assert!(
        unanswered as usize + 1 >= answers.len(),
        "{answers:?} {records:?}"
    );
    for record in records.iter().filter(|r| r.unanswered > 0) {
        let error = record.last_error.as_deref().unwrap_or_default();
        assert!(
            error.contains("a captive portal"),
            "the reason says what answered: {error}"
        );
    }
    assert!(!outbox.is_halted());
    let log = logs.text();
    assert!(
        log.contains("the link is still down") && log.contains("a captive portal"),
        "the warning repeats at link_down_warn_every, saying what answers: {log}"
    );

    server.back.store(true, Ordering::SeqCst);
    delivered(&mut events, 5).await;
    assert_eq!(outbox.stats().await.unwrap().delivered, 5);
    for id in ids {
        assert!(outbox.get(id).await.unwrap().is_none());
    }
    let seen = server.seen.lock().unwrap().clone();
    let answers = server.answers.lock().unwrap().clone();
    // Every write reached our server as a POST with its payload and key, once answered 201.
    let mut accepted: Vec<String> = seen
        .iter()
        .zip(&answers)
        .filter(|(_, status)| **status == 201)
        .map(|(s, _)| {
            assert_eq!(s.method, Method::POST);
            assert_eq!(s.body.len(), 1);
            s.key.clone().unwrap()
        })
        .collect();
    accepted.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(accepted, expected);
    assert!(
        other.seen.lock().unwrap().is_empty(),
        "the portal got nothing"
    );
    assert!(kept.all().iter().any(|e| matches!(e, Event::LinkUp { .. })));
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();

    // The secret was in every request the sink made, and in no message.
    assert!(seen.iter().all(|s| s.uri.to_string().contains(SECRET)));
    for (what, text) in [("events", kept.text()), ("logs", logs.text())] {
        assert!(
            !text.contains(SECRET),
            "{what} show the query string: {text}"
        );
        assert!(
            !text.contains(PASSWORD),
            "{what} show the user info: {text}"
        );
    }
}
