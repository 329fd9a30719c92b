//! The sink follows no redirect, whatever client it is given: a redirect to another origin is
//! no answer from our server (nothing spent), one to our own origin is an answer without a
//! verdict, and the host a `Location` names never receives anything. A route that would send
//! a record to a URL named by its data refuses it.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use outbox_core::{Outcome, Record, RecordId, Sink};
use outbox_http::{HttpSink, Target};
use reqwest::{redirect, Method, Url};

/// Every request a server saw: its path and query.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// `/r/{code}?to=URL` answers `code` with `Location: URL`; anything else answers 201.
async fn answer(State(seen): State<Seen>, uri: Uri) -> Response {
    seen.0.lock().unwrap().push(uri.to_string());
    let to = uri
        .query()
        .and_then(|q| q.strip_prefix("to="))
        .map(str::to_owned);
    match (uri.path().strip_prefix("/r/"), to) {
        (Some(code), Some(to)) => {
            let status = StatusCode::from_u16(code.parse().unwrap()).unwrap();
            (status, [("location", to)], "moved").into_response()
        }
        _ => StatusCode::CREATED.into_response(),
    }
}

async fn serve() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new().fallback(any(answer)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr.to_string(), seen)
}

fn record(group: Option<&str>) -> Record {
    Record::fresh(
        RecordId(1),
        group.map(str::to_owned),
        b"payload".to_vec(),
        "key-1".into(),
        0,
    )
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_says_where_it_pointed() {
    let (ours, seen) = serve().await;
    let (portal, portal_seen) = serve().await;
    // A client of the application's own that would follow ten redirects.
    let following = || reqwest::Client::builder().redirect(redirect::Policy::limited(10));
    for code in [301, 302, 303, 307, 308] {
        let away = format!("http://{ours}/r/{code}?to=http://{portal}/login");
        for sink in [
            HttpSink::post(&away).unwrap(),
            HttpSink::post(&away).unwrap().client(following()).unwrap(),
        ] {
            assert_eq!(
                sink.deliver(&record(None)).await,
                Outcome::no_answer(format!(
                    "HTTP {code}: redirected to {portal}: a captive portal or proxy?"
                )),
            );
        }
        // To our own origin: the server answered, without a verdict (one attempt spent).
        let home = format!("http://{ours}/r/{code}?to=/elsewhere");
        let outcome = HttpSink::post(&home)
            .unwrap()
            .client(following())
            .unwrap()
            .deliver(&record(None))
            .await;
        assert_eq!(
            outcome,
            Outcome::transient(format!("HTTP {code}: moved"), None)
        );
    }
    assert!(portal_seen.all().is_empty(), "{:?}", portal_seen.all());
    assert!(
        seen.all().iter().all(|uri| uri.starts_with("/r/")),
        "no redirect was followed, not even home: {:?}",
        seen.all()
    );
    assert_eq!(seen.all().len(), 5 * 3);
}

#[tokio::test]
async fn a_group_that_names_a_url_is_refused_by_the_route() {
    let (ours, seen) = serve().await;
    let (elsewhere, elsewhere_seen) = serve().await;
    let base = Url::parse(&format!("http://{ours}/docs/?key=s3cret")).unwrap();
    let sink = HttpSink::try_route(move |record| {
        Target::under(
            Method::PUT,
            &base,
            record.group.as_deref().unwrap_or("inbox"),
        )
    });
    for group in [
        format!("http://{elsewhere}/steal"),
        format!("//{elsewhere}/steal"),
        "../admin".to_owned(),
    ] {
        let outcome = sink.deliver(&record(Some(&group))).await;
        let Outcome::Rejected { reason } = outcome else {
            panic!("{group}: {outcome:?}")
        };
        assert!(reason.starts_with("no route for this record"), "{reason}");
        assert!(!reason.contains("s3cret"), "{reason}");
    }
    assert_eq!(
        sink.deliver(&record(Some("doc-7"))).await,
        Outcome::Delivered
    );
    assert!(elsewhere_seen.all().is_empty());
    assert_eq!(seen.all(), ["/docs/doc-7"]);
}
