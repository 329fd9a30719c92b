//! The misbehaving server: a real HTTP server on 127.0.0.1 that goes through scripted phases
//! and deduplicates writes by idempotency key.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tokio::net::TcpListener;

/// The phases, counted in requests since the server came up.
#[derive(Clone, Debug)]
pub struct Script {
    /// The first this-many requests get 503.
    pub unavailable: u64,
    /// The next this-many get 429 with `Retry-After: 1`.
    pub throttled: u64,
    /// At this request the server rotates its token: the client's old one gets 401 until it
    /// logs in again and sends the new one.
    pub expire_at: u64,
    /// Requests in this range are recorded and then not answered before the client gives up,
    /// so the client sends them again: the duplicates the server suppresses.
    pub lost_answers: std::ops::Range<u64>,
    /// How long a lost answer keeps the client waiting.
    pub hang: Duration,
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests received.
    pub requests: u64,
    /// Idempotency keys of accepted writes.
    pub accepted: HashSet<String>,
    /// Writes that arrived again with a key already accepted.
    pub duplicates: u64,
    /// 503 and 429 answers.
    pub later: u64,
    /// 422 answers: a status of the classifier's terminal set, a verdict on that write.
    pub rejected: u64,
    /// 401 answers.
    pub refused: u64,
    /// Logins answered.
    pub logins: u64,
    /// The token generation the server accepts now.
    generation: u32,
}

/// The first token the server accepts: the demo's app logged in before the run.
pub const FIRST_TOKEN: &str = "demo-token-0";

fn token(generation: u32) -> String {
    format!("demo-token-{generation}")
}

/// A handle on the running server.
#[derive(Clone, Debug)]
pub struct Server {
    script: Script,
    counts: Arc<Mutex<Counts>>,
}

impl Server {
    /// A server that will follow `script` once started.
    pub fn new(script: Script) -> Self {
        Server {
            script,
            counts: Arc::new(Mutex::new(Counts::default())),
        }
    }

    /// Starts serving on `addr` (writes at `/writes`, the current token at `/login`).
    pub async fn start(&self, addr: SocketAddr) -> std::io::Result<()> {
        let listener = TcpListener::bind(addr).await?;
        let app = Router::new()
            .route("/writes", post(write))
            .route("/login", post(login))
            .with_state(self.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(())
    }

    /// Reads the counts.
    pub fn with_counts<T>(&self, f: impl FnOnce(&Counts) -> T) -> T {
        f(&self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The token the server accepts now (what a real app gets by logging in again after
    /// its token was refused).
    pub fn login(&self) -> String {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.logins += 1;
        token(c.generation)
    }
}

async fn login(State(server): State<Server>) -> String {
    server.login()
}

/// What to answer one request.
enum Answer {
    Status(StatusCode, &'static str),
    RetryAfter,
    Swallow,
    Accept,
}

async fn write(State(server): State<Server>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let key = header("idempotency-key");
    let authorization = header("authorization");
    let script = &server.script;
    let answer = {
        let mut c = server.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.requests += 1;
        let n = c.requests;
        if n == script.expire_at && c.generation == 0 {
            c.generation = 1;
        }
        if authorization.strip_prefix("Bearer ") != Some(token(c.generation).as_str()) {
            c.refused += 1;
            Answer::Status(StatusCode::UNAUTHORIZED, "credential expired")
        } else if n <= script.unavailable {
            c.later += 1;
            Answer::Status(StatusCode::SERVICE_UNAVAILABLE, "warming up")
        } else if n <= script.unavailable + script.throttled {
            c.later += 1;
            Answer::RetryAfter
        } else if body.windows(6).any(|w| w == b"poison") {
            c.rejected += 1;
            Answer::Status(StatusCode::UNPROCESSABLE_ENTITY, "field `title` is invalid")
        } else {
            if !c.accepted.insert(key) {
                c.duplicates += 1;
            }
            if script.lost_answers.contains(&n) {
                Answer::Swallow
            } else {
                Answer::Accept
            }
        }
    };
    match answer {
        Answer::Status(status, why) => (status, why).into_response(),
        Answer::RetryAfter => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            "slow down",
        )
            .into_response(),
        Answer::Swallow => {
            // The write is stored, but the answer never reaches the client in time.
            tokio::time::sleep(script.hang).await;
            StatusCode::CREATED.into_response()
        }
        Answer::Accept => StatusCode::CREATED.into_response(),
    }
}
