//! A small local HTTP service standing in for the downstream API the examples deliver to: it
//! answers each request as a script says and remembers every request it got.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use tokio::task::JoinHandle;

use crate::Result;

/// The header the fleet example uses to say which runner sent a request.
pub const RUNNER_HEADER: &str = "x-runner";

/// One request the service received, and how it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its `Idempotency-Key` header (empty if missing).
    pub key: String,
    /// Its [`RUNNER_HEADER`], if any.
    pub runner: Option<String>,
    /// Its body.
    pub body: Vec<u8>,
    /// The status the service answered.
    pub status: u16,
}

impl Request {
    /// True when the service accepted it (a 2xx answer).
    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Decides the status of each request from the request and how many came before it.
pub type Script = dyn Fn(&Request, usize) -> u16 + Send + Sync;

struct Inner {
    script: Box<Script>,
    requests: Mutex<Vec<Request>>,
}

/// The running service. Dropping it stops it.
pub struct Downstream {
    addr: SocketAddr,
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Downstream {
    /// Starts a service on `127.0.0.1` (a free port) that answers every POST to `/events`
    /// with the status `script` returns.
    pub async fn start(
        script: impl Fn(&Request, usize) -> u16 + Send + Sync + 'static,
    ) -> Result<Downstream> {
        let inner = Arc::new(Inner {
            script: Box::new(script),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/events", post(receive))
            .with_state(Arc::clone(&inner));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Downstream { addr, inner, task })
    }

    /// A service that accepts everything with 201.
    pub async fn accepting() -> Result<Downstream> {
        Downstream::start(|_, _| 201).await
    }

    /// The URL to deliver to.
    pub fn url(&self) -> String {
        format!("http://{}/events", self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// How many times each idempotency key was accepted.
    pub fn accepted_by_key(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for request in self.requests().into_iter().filter(Request::accepted) {
            *counts.entry(request.key).or_insert(0) += 1;
        }
        counts
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let mut request = Request {
        key: text(outbox_http::IDEMPOTENCY_KEY).unwrap_or_default(),
        runner: text(RUNNER_HEADER),
        body: body.to_vec(),
        status: 0,
    };
    let mut requests = inner
        .requests
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    request.status = (inner.script)(&request, requests.len());
    let status = StatusCode::from_u16(request.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    requests.push(request);
    status
}
