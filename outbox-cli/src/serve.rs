//! `serve`: a small web page on 127.0.0.1 over the same views and verbs as the command line.
//!
//! The page (`page.html` + `page.js`, served from the binary, no build step) reads the JSON API
//! below and presses the verbs with POSTs that carry this process's random token in the
//! `X-Outbox-Token` header. The token is only in the page itself, which another origin cannot
//! read, and a custom header cannot be sent cross-origin without a CORS preflight this server
//! never grants: a page of another site cannot press the buttons. Requests whose `Host` is not
//! this server's own address are refused too (DNS rebinding), and the page may not be framed.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /` | the page |
//! | `GET /api/stats` | the `stats --json` shape |
//! | `GET /api/records?state=&group=&after=&limit=` | the `list --json` shape |
//! | `GET /api/records/{id}` | the `show --json` shape |
//! | `POST /api/records/{id}/retry` (`requeue`, `discard` with `{"reason": "..."}`) | `{"message": "...", "id": N}` |
//!
//! Errors are `{"error": "..."}` with 400, 403, 404 or 409.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use outbox_core::{record::validate_group, Store};
use serde::Deserialize;

use crate::cli::{parse_id, parse_state_filter};
use crate::error::CliError;
use crate::verbs::{self, Done, Verb};
use crate::view::{self, Found, Listing, Page, RecordDetail, RecordView, TombstoneView};
use crate::Now;

const PAGE_HTML: &str = include_str!("page.html");
const PAGE_JS: &str = include_str!("page.js");
/// The header a POST must carry the token in.
pub const TOKEN_HEADER: &str = "x-outbox-token";
/// The largest page the API returns.
const MAX_LIMIT: usize = 500;

struct App {
    store: Arc<dyn Store>,
    token: String,
    now: Now,
    name: String,
    port: u16,
}

type Shared = Arc<App>;

/// 128 bits from the operating system's random source, as hex: the per-process token.
fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    #[cfg(unix)]
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    }
    #[cfg(not(unix))]
    {
        // std seeds each RandomState from the operating system's random source.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(0);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    Ok(crate::view::hex(&bytes))
}

/// Serves the page for `store` on 127.0.0.1:`port` until Ctrl-C (or SIGTERM). Writes the address to `out`
/// once listening (with port 0, the port the system chose).
pub async fn run(
    store: Arc<dyn Store>,
    name: &str,
    port: u16,
    now: Now,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await
        .map_err(|err| CliError::Open(format!("cannot listen on 127.0.0.1:{port}: {err}")))?;
    let port = listener.local_addr()?.port();
    let app = Arc::new(App {
        store,
        token: new_token()?,
        now,
        name: name.to_owned(),
        port,
    });
    let router = Router::new()
        .route("/", get(page))
        .route("/page.js", get(script))
        .route("/api/stats", get(stats))
        .route("/api/records", get(records))
        .route("/api/records/{id}", get(record))
        .route("/api/records/{id}/{action}", post(act))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), guard))
        .with_state(app);
    writeln!(
        out,
        "outbox: serving {name} on http://127.0.0.1:{port}/ (Ctrl-C to stop)"
    )?;
    out.flush()?;
    axum::serve(listener, router)
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
        CliError::NotApplicable(_) | CliError::Partial(_) => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, err.line())
}

/// Refuses requests addressed to another host name (DNS rebinding) and forbids framing.
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let ours = [
        format!("127.0.0.1:{}", app.port),
        format!("localhost:{}", app.port),
    ];
    if !ours.iter().any(|o| o == host) {
        return error(
            StatusCode::FORBIDDEN,
            format!("this server answers to http://127.0.0.1:{}/ only", app.port),
        );
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn page(State(app): State<Shared>) -> Response {
    let html = PAGE_HTML
        .replace("{{TOKEN}}", &app.token)
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
    match listed.await {
        Ok(Listing::Records(records, next)) => Json(Page {
            records: records.iter().map(RecordView::from).collect(),
            next_after: next.map(|id| id.0),
        })
        .into_response(),
        Ok(Listing::Tombstones(tombstones, next)) => Json(Page {
            records: tombstones.iter().map(TombstoneView::from).collect(),
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
        Ok(Found::Record(r)) => Json(RecordDetail::from(&r)).into_response(),
        Ok(Found::Tombstone(t)) => Json(TombstoneView::from(&t)).into_response(),
        Err(err) => failure(err),
    }
}

#[derive(Debug, Default, Deserialize)]
struct ActBody {
    reason: Option<String>,
}

/// Compares without stopping at the first difference, so the time taken tells nothing.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn act(
    State(app): State<Shared>,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let token = headers
        .get(TOKEN_HEADER)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if !same(token, app.token.as_bytes()) {
        return error(
            StatusCode::FORBIDDEN,
            "missing or wrong token: the buttons work from this server's own page only",
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
    let verb = match action.as_str() {
        "retry" => Verb::Retry,
        "requeue" => Verb::Requeue,
        "discard" => match body.reason.filter(|r| !r.trim().is_empty()) {
            Some(reason) => Verb::Discard { reason },
            None => return error(StatusCode::BAD_REQUEST, "a discard needs a reason"),
        },
        other => return error(StatusCode::NOT_FOUND, format!("no action {other:?}")),
    };
    let done = async {
        let record = match view::find(&*app.store, id).await? {
            Found::Record(record) => record,
            Found::Tombstone(_) => {
                return Err(CliError::NotApplicable(format!(
                    "#{} was discarded already",
                    id.0
                )))
            }
        };
        let transition = verb.transition(&record, app.now.get()).map_err(|why| {
            CliError::NotApplicable(format!("cannot {} #{}: {why}", verb.name(), id.0))
        })?;
        let done = verbs::apply(&*app.store, &verb, vec![transition]).await?;
        done.into_iter()
            .next()
            .ok_or_else(|| CliError::Partial("the store reported nothing".into()))
    };
    match done.await {
        Ok(Done::Skipped { why, .. }) => error(
            StatusCode::CONFLICT,
            format!("left #{} as it is: {why}", id.0),
        ),
        Ok(done) => Json(serde_json::json!({ "message": done.line(), "id": id.0 })).into_response(),
        Err(err) => failure(err),
    }
}
