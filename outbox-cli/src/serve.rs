//! `serve`: a small web page on 127.0.0.1 over the same views and verbs as the command line.
//!
//! The page (`page.html` + `page.js`, served from the binary, no build step) reads the JSON API
//! below. Who may use it at all is [`crate::session`]'s business: the token of the printed
//! URL, kept as a cookie, on every request. The page only reads unless `serve` was started
//! with `--write`; then its buttons POST the verbs, each carrying the revision of the record
//! the page showed (a compare-and-set, as `--seen` on the command line), and a discard asks
//! for its reason and a confirmation first; a resume button beside a halt asks, then lifts
//! the halt the page showed and no other ([`verbs::lift_halt`]). Every change is logged on the server's stderr as
//! an `audit:` line naming the browser's operating-system user.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /?token=T` | sets the cookie, then sends the browser to `/` |
//! | `GET /` | the page |
//! | `GET /api/stats` | the `stats --json` shape |
//! | `GET /api/records?state=&group=&after=&limit=` | the `list --json` shape |
//! | `GET /api/records/{id}` | the `show --json` shape |
//! | `POST /api/records/{id}/retry` (`requeue`, `discard`) with `{"seen": "REVISION", "reason": "..."}` | `{"message": "...", "id": N}` |
//! | `POST /api/halt/resume` with `{"seen": {"reason": "...", "since": MS}}` (the halt as `/api/stats` gave it) | `{"message": "..."}` |
//!
//! Errors are `{"error": "..."}` with 400, 401, 403, 404 or 409 (409 also when the record or
//! the halt changed since the page showed it).

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use outbox_core::{record::validate_group, Halt, Store};
use serde::Deserialize;

use crate::audit::{self, User, Via};
use crate::cli::{parse_id, parse_state_filter};
use crate::error::CliError;
use crate::session::{self, Session};
use crate::verbs::{self, Done, Verb};
use crate::view::{
    self, Found, Listing, Page, RecordDetail, RecordView, TombstoneView, UnreadableView,
};
use crate::Now;

const PAGE_HTML: &str = include_str!("page.html");
const PAGE_JS: &str = include_str!("page.js");
/// The largest page the API returns.
const MAX_LIMIT: usize = 500;

struct App {
    store: Arc<dyn Store>,
    session: Session,
    now: Now,
    name: String,
    write: bool,
    local: SocketAddr,
}

type Shared = Arc<App>;

/// Serves the page for `store` on 127.0.0.1:`port` until Ctrl-C (or SIGTERM); with `write`,
/// with its repair buttons. Writes the URL to open (with port 0, the port the system chose)
/// to `out` once listening.
pub async fn run(
    store: Arc<dyn Store>,
    name: &str,
    port: u16,
    write: bool,
    now: Now,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await
        .map_err(|err| CliError::Open(format!("cannot listen on 127.0.0.1:{port}: {err}")))?;
    let local = listener.local_addr()?;
    let session = Session::new(local.port())?;
    let url = session.url();
    let app = Arc::new(App {
        store,
        session: session.clone(),
        now,
        name: name.to_owned(),
        write,
        local,
    });
    let router = Router::new()
        .route("/", get(page))
        .route("/page.js", get(script))
        .route("/api/stats", get(stats))
        .route("/api/records", get(records))
        .route("/api/records/{id}", get(record))
        .route("/api/records/{id}/{action}", post(act))
        .route("/api/halt/resume", post(resume))
        .layer(middleware::from_fn_with_state(session, session::guard))
        .with_state(app);
    let mode = if write {
        "with repair buttons"
    } else {
        "read-only; --write adds the repair buttons"
    };
    writeln!(
        out,
        "outbox: serving {} on {url} ({mode}; Ctrl-C to stop)",
        crate::escape::visible(name)
    )?;
    out.flush()?;
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(crate::watch::stop_signal())
    .await?;
    Ok(())
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, Json(body)).into_response()
}

fn failure(err: CliError) -> Response {
    let status = match &err {
        CliError::Usage(_) => StatusCode::BAD_REQUEST,
        CliError::NoSuchRecord(_) => StatusCode::NOT_FOUND,
        CliError::NotApplicable(_) | CliError::Partial(_) | CliError::Changed(_) => {
            StatusCode::CONFLICT
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, err.line())
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn page(State(app): State<Shared>) -> Response {
    let html = PAGE_HTML
        .replace("{{CSRF}}", app.session.csrf())
        .replace("{{WRITE}}", if app.write { "true" } else { "false" })
        .replace("{{NAME}}", &escape_html(&app.name));
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        PAGE_JS,
    )
        .into_response()
}

async fn stats(State(app): State<Shared>) -> Response {
    match view::stats(&*app.store, app.now.get()).await {
        Ok(stats) => Json(stats).into_response(),
        Err(err) => failure(err),
    }
}

#[derive(Debug, Deserialize)]
struct ListParams {
    state: Option<String>,
    group: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

async fn records(State(app): State<Shared>, Query(params): Query<ListParams>) -> Response {
    let listed = async {
        let state = match params.state.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => Some(parse_state_filter(s).map_err(CliError::Usage)?),
            None => None,
        };
        let group = params.group.as_deref().filter(|g| !g.is_empty());
        if let Some(group) = group {
            validate_group(group).map_err(|e| CliError::Usage(e.to_string()))?;
        }
        let after = match params.after.as_deref().filter(|a| !a.is_empty()) {
            Some(a) => Some(parse_id(a).map_err(CliError::Usage)?),
            None => None,
        };
        let limit = params.limit.unwrap_or(50).clamp(1, MAX_LIMIT);
        view::list(&*app.store, state, group, after, limit).await
    };
    let now = app.now.get();
    match listed.await {
        Ok(Listing::Records(records, next)) => Json(Page {
            records: records.iter().map(|r| RecordView::at(r, now)).collect(),
            next_after: next.map(|id| id.0),
        })
        .into_response(),
        Ok(Listing::Tombstones(tombstones, next)) => Json(Page {
            records: tombstones.iter().map(TombstoneView::from).collect(),
            next_after: next.map(|id| id.0),
        })
        .into_response(),
        Ok(Listing::Unreadable(rows, next)) => Json(Page {
            records: rows.iter().map(UnreadableView::from).collect(),
            next_after: next.map(|id| id.0),
        })
        .into_response(),
        Err(err) => failure(err),
    }
}

async fn record(State(app): State<Shared>, Path(id): Path<String>) -> Response {
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match view::find(&*app.store, id).await {
        Ok(Found::Record(r)) => Json(RecordDetail::at(&r, app.now.get())).into_response(),
        Ok(Found::Tombstone(t)) => Json(TombstoneView::from(&t)).into_response(),
        Ok(Found::Unreadable(row)) => Json(UnreadableView::from(&row)).into_response(),
        Err(err) => failure(err),
    }
}

#[derive(Debug, Default, Deserialize)]
struct ActBody {
    /// The revision of the record as the page showed it.
    seen: Option<String>,
    /// A discard's reason, as the person typed it.
    reason: Option<String>,
}

async fn act(
    State(app): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if !app.write {
        return error(
            StatusCode::FORBIDDEN,
            "this page is read-only: start `outbox serve --write` to repair records",
        );
    }
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let body: ActBody = if body.is_empty() {
        ActBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(body) => body,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("bad body: {err}")),
        }
    };
    let seen = match body.seen.as_deref().map(crate::revision::parse) {
        Some(Ok(seen)) => seen,
        Some(Err(message)) => return error(StatusCode::BAD_REQUEST, message),
        None => {
            return error(
                StatusCode::BAD_REQUEST,
                "say which revision of the record you saw (\"seen\")",
            )
        }
    };
    let user = User::of_peer(peer, app.local);
    let reason = body
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    let verb = match action.as_str() {
        "retry" => Verb::Retry,
        "requeue" => Verb::Requeue,
        "discard" => match reason {
            Some(reason) => Verb::Discard {
                reason: Via::Page.reason(reason, &user),
            },
            None => return error(StatusCode::BAD_REQUEST, "a discard needs a reason"),
        },
        other => return error(StatusCode::NOT_FOUND, format!("no action {other:?}")),
    };
    let now = app.now.get();
    let done = verbs::one(&*app.store, &verb, id, Some(&seen), now).await;
    let result = match &done {
        Ok(d) => Some(d.result()),
        Err(CliError::Changed(line)) => Some(format!("unchanged: {line}")),
        Err(_) => None,
    };
    if let Some(result) = result {
        let entry = audit::Entry {
            at: now,
            user: &user,
            via: Via::Page,
            verb: verb.name(),
            record: Some(id),
            result: &result,
            reason: reason.filter(|_| matches!(verb, Verb::Discard { .. })),
        };
        // The operator's terminal (or the service's journal) keeps the log.
        let _ = writeln!(std::io::stderr(), "{entry}");
    }
    match done {
        Ok(Done::Skipped { why, .. }) => error(
            StatusCode::CONFLICT,
            format!("left #{} as it is: {why}", id.0),
        ),
        Ok(done) => Json(serde_json::json!({ "message": done.line(), "id": id.0 })).into_response(),
        Err(err) => failure(err),
    }
}

#[derive(Debug, Deserialize)]
struct ResumeBody {
    /// The halt as the page showed it.
    seen: view::HaltView,
}

/// Lifts the halt the page showed, if it is still the one in the store ([`verbs::lift_halt`]).
async fn resume(
    State(app): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    if !app.write {
        return error(
            StatusCode::FORBIDDEN,
            "this page is read-only: start `outbox serve --write` to lift a halt",
        );
    }
    let seen = match serde_json::from_slice::<ResumeBody>(&body) {
        Ok(body) => Halt::from(body.seen),
        Err(err) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("say which halt you saw ({{\"seen\": {{\"reason\", \"since\"}}}}): {err}"),
            )
        }
    };
    let what = crate::human::halt(&seen);
    let user = User::of_peer(peer, app.local);
    let now = app.now.get();
    let resumed = verbs::lift_halt(&*app.store, &seen).await;
    if let Some(result) = verbs::resume_result(&resumed, &what) {
        let entry = audit::Entry {
            at: now,
            user: &user,
            via: Via::Page,
            verb: "resume",
            record: None,
            result: &result,
            reason: None,
        };
        let _ = writeln!(std::io::stderr(), "{entry}");
    }
    match resumed {
        Ok(resumed) => Json(serde_json::json!({ "message": resumed.line(&what) })).into_response(),
        Err(err) => failure(err),
    }
}
