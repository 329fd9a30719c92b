//! A week-old backlog against a real local server that keeps entity versions, on tokio's
//! paused clock: a stale write refused with 412 and parked, ten offline edits sent as one,
//! an edit made while the previous one is in flight, and the age policy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use outbox_core::{
    Clock, Event, Jitter, Millis, NewRecord, Outbox, RecordId, RetryPolicy, RunnerConfig,
    State as RecordState, TokioClock,
};
use outbox_http::{HttpSink, Target, CREATED_AT};
use outbox_memory::MemoryStore;
use reqwest::Url;
use tokio::sync::{broadcast, watch, Notify};

const BASE: Millis = 1_700_000_000_000;
const DAY: Duration = Duration::from_secs(86_400);

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    method: String,
    note: String,
    body: String,
    if_match: Option<String>,
    created_at: Option<String>,
}

/// A note: its version and body.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Note {
    version: u64,
    body: String,
}

/// A server that keeps notes with versions (`ETag: "<version>"`): `PUT /notes/{id}` writes the
/// body, `DELETE /notes/{id}` removes it; both refuse with 412 when an `If-Match` names
/// another version.
#[derive(Clone, Default)]
struct NoteServer {
    notes: Arc<Mutex<HashMap<String, Note>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// When set, a request waits for it before it is answered (and `arrived` is told).
    gate: Arc<Mutex<Option<Arc<Notify>>>>,
    arrived: Arc<Notify>,
}

impl NoteServer {
    async fn start() -> (Url, Self) {
        let server = NoteServer::default();
        let app = Router::new()
            .route("/notes/{id}", any(note))
            .with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, server)
    }

    fn set(&self, id: &str, version: u64, body: &str) {
        self.notes.lock().unwrap().insert(
            id.into(),
            Note {
                version,
                body: body.into(),
            },
        );
    }

    fn note(&self, id: &str) -> Option<Note> {
        self.notes.lock().unwrap().get(id).cloned()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn note(
    State(server): State<NoteServer>,
    Path(id): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let seen = Seen {
        method: method.to_string(),
        note: id.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
        if_match: header("if-match"),
        created_at: header(CREATED_AT),
    };
    server.seen.lock().unwrap().push(seen.clone());
    let gate = server.gate.lock().unwrap().take();
    if let Some(gate) = gate {
        server.arrived.notify_one();
        gate.notified().await;
    }
    let mut notes = server.notes.lock().unwrap();
    let current = notes.get(&id).cloned();
    if let (Some(expected), Some(note)) = (&seen.if_match, &current) {
        if *expected != format!("\"{}\"", note.version) {
            return (StatusCode::PRECONDITION_FAILED, "the note has changed").into_response();
        }
    }
    match method {
        Method::DELETE => {
            notes.remove(&id);
            StatusCode::NO_CONTENT.into_response()
        }
        _ => {
            let version = current.map_or(1, |n| n.version + 1);
            notes.insert(
                id,
                Note {
                    version,
                    body: seen.body,
                },
            );
            (StatusCode::OK, [("etag", format!("\"{version}\""))]).into_response()
        }
    }
}

/// A note edit goes to `PUT /notes/{group}`; a payload of `delete` is `DELETE`.
fn sink(base: &Url) -> HttpSink {
    let base = base.clone();
    HttpSink::route(move |record| Target {
        method: if record.payload == b"delete" {
            reqwest::Method::DELETE
        } else {
            reqwest::Method::PUT
        },
        url: base
            .join(&format!(
                "notes/{}",
                record.group.as_deref().unwrap_or("none")
            ))
            .unwrap(),
    })
    .timeout(Duration::from_secs(3_600))
}

struct App {
    outbox: Outbox,
    online: watch::Sender<bool>,
    events: broadcast::Receiver<Event>,
    clock: TokioClock,
}

/// An app that starts offline, on a clock at [`BASE`].
async fn app(base: &Url, policy: RetryPolicy) -> App {
    let clock = TokioClock::starting_at(BASE);
    let (online, signal) = watch::channel(false);
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink(base))
        .clock(Arc::new(clock))
        .policy(policy)
        .config(
            RunnerConfig::default()
                .with_delivery_timeout(Duration::from_secs(7_200))
                .with_seed(7),
        )
        .connectivity(signal)
        .start()
        .await
        .unwrap();
    let events = outbox.events();
    App {
        outbox,
        online,
        events,
        clock,
    }
}

impl App {
    /// The next event `what` picks, within a day of paused time.
    async fn next<T>(&mut self, what: impl Fn(&Event) -> Option<T>) -> T {
        let events = &mut self.events;
        let wait = async {
            loop {
                if let Some(found) = what(&events.recv().await.unwrap()) {
                    return found;
                }
            }
        };
        tokio::time::timeout(DAY, wait)
            .await
            .expect("no such event within a day")
    }

    /// Collects events until `stop` picks one, returning all of them.
    async fn until(&mut self, stop: impl Fn(&Event) -> bool) -> Vec<Event> {
        let mut seen = Vec::new();
        let events = &mut self.events;
        let wait = async {
            loop {
                let event = events.recv().await.unwrap();
                let done = stop(&event);
                seen.push(event);
                if done {
                    return;
                }
            }
        };
        tokio::time::timeout(DAY, wait)
            .await
            .expect("no such event within a day");
        seen
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy::default().with_jitter(Jitter::None)
}

#[tokio::test(start_paused = true)]
async fn a_week_old_write_against_a_moved_entity_is_refused_and_parked_not_applied() {
    let (base, server) = NoteServer::start().await;
    server.set("n1", 3, "as the device saw it");
    let mut app = app(&base, policy()).await;
    // Offline: the user edits the note as of version 3.
    let id = app
        .outbox
        .enqueue(
            NewRecord::new(b"my offline edit".to_vec())
                .in_group("n1")
                .expecting("3"),
        )
        .await
        .unwrap();
    // A week passes; meanwhile the note moves to version 4 elsewhere.
    tokio::time::sleep(7 * DAY).await;
    server.set("n1", 4, "edited on another device");
    app.online.send(true).unwrap();
    let reason = app
        .next(|e| match e {
            Event::Parked { id: parked, reason } if *parked == id => Some(reason.clone()),
            _ => None,
        })
        .await;
    assert!(reason.contains("412"), "{reason}");
    assert!(reason.contains("precondition failed"), "{reason}");
    let record = app.outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::NeedsAttention);
    assert_eq!(record.last_error.as_deref(), Some(reason.as_str()));
    assert_eq!(
        server.note("n1"),
        Some(Note {
            version: 4,
            body: "edited on another device".into()
        }),
        "the server's data is unchanged"
    );
    // One request, with the precondition and the enqueue time; no retry loop after it.
    tokio::time::sleep(DAY).await;
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].if_match.as_deref(), Some("\"3\""));
    assert_eq!(seen[0].created_at, Some(BASE.to_string()));
    assert!(app.clock.now() >= BASE + 8 * 86_400_000);
    app.outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn ten_offline_edits_go_out_as_one_request_and_a_delete_after_them_stays_after() {
    let (base, server) = NoteServer::start().await;
    server.set("n2", 1, "v1");
    let mut app = app(&base, policy()).await;
    let mut ids = Vec::new();
    for n in 1..=10 {
        let edit = NewRecord::new(format!("edit {n}").into_bytes())
            .in_group("n2")
            .replacing("n2/body")
            .expecting("1");
        ids.push(app.outbox.enqueue(edit).await.unwrap());
    }
    let delete = app
        .outbox
        .enqueue(NewRecord::new(b"delete".to_vec()).in_group("n2"))
        .await
        .unwrap();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert!(delete > ids[0]);
    let events = app
        .until(|e| matches!(e, Event::Enqueued { id, .. } if *id == delete))
        .await;
    let superseded: Vec<RecordId> = events
        .iter()
        .filter_map(|e| match e {
            Event::Superseded { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(superseded, vec![ids[0]; 9]);
    let stats = app.outbox.stats().await.unwrap();
    assert_eq!((stats.pending, stats.superseded), (2, 9));

    app.online.send(true).unwrap();
    app.next(|e| matches!(e, Event::Delivered { id } if *id == delete).then_some(()))
        .await;
    let seen: Vec<(String, String)> = server
        .seen()
        .into_iter()
        .map(|s| (s.method, s.body))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("PUT".into(), "edit 10".into()),
            ("DELETE".into(), "delete".into())
        ],
        "one request with the last payload, then the delete"
    );
    assert_eq!(server.note("n2"), None);
    app.outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_edit_made_while_the_previous_one_is_in_flight_is_sent_after_it() {
    let (base, server) = NoteServer::start().await;
    let mut app = app(&base, policy()).await;
    app.online.send(true).unwrap();
    let gate = Arc::new(Notify::new());
    *server.gate.lock().unwrap() = Some(gate.clone());
    let edit = |body: &str| {
        NewRecord::new(body.as_bytes().to_vec())
            .in_group("n3")
            .replacing("n3/body")
    };
    let first = app.outbox.enqueue(edit("first")).await.unwrap();
    // The server holds the first request: it is in flight.
    server.arrived.notified().await;
    let record = app.outbox.get(first).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::InFlight);
    let second = app.outbox.enqueue(edit("second")).await.unwrap();
    assert_ne!(second, first, "a write in flight is never replaced");
    gate.notify_one();
    app.next(|e| matches!(e, Event::Delivered { id } if *id == second).then_some(()))
        .await;
    let bodies: Vec<String> = server.seen().into_iter().map(|s| s.body).collect();
    assert_eq!(bodies, vec!["first", "second"], "both sent, in order");
    assert_eq!(server.note("n3").map(|n| n.body).as_deref(), Some("second"));
    assert_eq!(app.outbox.stats().await.unwrap().superseded, 0);
    app.outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_record_older_than_max_age_is_not_sent_and_says_why_until_a_person_retries() {
    let (base, server) = NoteServer::start().await;
    let mut app = app(&base, policy().with_max_age(3 * DAY)).await;
    let id = app
        .outbox
        .enqueue(NewRecord::new(b"old edit".to_vec()).in_group("n4"))
        .await
        .unwrap();
    tokio::time::sleep(4 * DAY).await;
    app.online.send(true).unwrap();
    let reason = app
        .next(|e| match e {
            Event::Parked { id: parked, reason } if *parked == id => Some(reason.clone()),
            _ => None,
        })
        .await;
    assert_eq!(reason, "stale: created 4 days ago");
    let record = app.outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::NeedsAttention);
    assert_eq!(
        record.last_error.as_deref(),
        Some("stale: created 4 days ago")
    );
    assert!(server.seen().is_empty(), "nothing was sent");
    app.outbox.retry(id).await.unwrap();
    app.next(|e| matches!(e, Event::Delivered { id: d } if *d == id).then_some(()))
        .await;
    assert_eq!(server.seen().len(), 1);
    assert_eq!(
        server.note("n4").map(|n| n.body).as_deref(),
        Some("old edit")
    );
    app.outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}
