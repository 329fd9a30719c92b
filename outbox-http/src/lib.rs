//! An HTTP [`Sink`] for `outbox`.
//!
//! [`HttpSink`] sends each record's payload (POST to one URL by default, or any method and URL
//! you map from the record) with an `Idempotency-Key` header carrying the record's stable key,
//! applies a per-request timeout, and turns the answer into an [`Outcome`] with
//! [`outbox_core::http::classify`], `Retry-After` included. A connection error or a timeout
//! before any response is [`Outcome::NoAnswer`]: it spends no retry budget.
//!
//! HTTPS needs the `tls` feature (rustls); plain HTTP needs nothing.
//!
//! ```
//! use std::time::Duration;
//! use outbox_http::HttpSink;
//!
//! let sink = HttpSink::post("http://127.0.0.1:8080/notes")
//!     .unwrap()
//!     .timeout(Duration::from_secs(10))
//!     .header("authorization", "Bearer secret")
//!     .unwrap();
//! # let _ = sink;
//! ```
#![deny(missing_docs)]

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{async_trait, http, Error, Outcome, Record, Result, Sink};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Method, Url};

/// The header that carries each record's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Longest part of an error response body kept in the record's `last_error`.
const REASON_BYTES: usize = 256;

/// Where and how one record is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// HTTP method.
    pub method: Method,
    /// Full URL.
    pub url: Url,
}

type Route = dyn Fn(&Record) -> Target + Send + Sync;

/// Delivers records over HTTP. Cheap to clone; clones share one connection pool.
#[derive(Clone)]
pub struct HttpSink {
    client: Client,
    route: Arc<Route>,
    timeout: Duration,
    headers: HeaderMap,
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSink")
            .field("timeout", &self.timeout)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl HttpSink {
    /// POSTs every record's payload to `url`, as `application/octet-stream` unless a
    /// `content-type` header is set.
    pub fn post(url: &str) -> Result<Self> {
        let url = Url::parse(url).map_err(|e| Error::InvalidConfig(format!("url {url:?}: {e}")))?;
        Ok(Self::route(move |_| Target {
            method: Method::POST,
            url: url.clone(),
        }))
    }

    /// Sends each record where `route` says (for example a URL built from its group).
    ///
    /// ```
    /// use outbox_http::{HttpSink, Target};
    /// use reqwest::{Method, Url};
    ///
    /// let base = Url::parse("http://127.0.0.1:8080/docs/").unwrap();
    /// let sink = HttpSink::route(move |record| Target {
    ///     method: Method::PUT,
    ///     url: base.join(record.group.as_deref().unwrap_or("inbox")).unwrap(),
    /// });
    /// # let _ = sink;
    /// ```
    pub fn route(route: impl Fn(&Record) -> Target + Send + Sync + 'static) -> Self {
        HttpSink {
            client: Client::new(),
            route: Arc::new(route),
            timeout: Duration::from_secs(30),
            headers: HeaderMap::new(),
        }
    }

    /// Uses your own `reqwest::Client` (proxies, TLS roots, pool sizes).
    pub fn client(mut self, client: Client) -> Self {
        self.client = client;
        self
    }

    /// Per-request timeout (default 30 s). Running out before a response is a no-answer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a header to every request.
    pub fn header(mut self, name: &str, value: &str) -> Result<Self> {
        let name = HeaderName::try_from(name)
            .map_err(|e| Error::InvalidConfig(format!("header name {name:?}: {e}")))?;
        let value = HeaderValue::try_from(value)
            .map_err(|e| Error::InvalidConfig(format!("header value for {name}: {e}")))?;
        self.headers.insert(name, value);
        Ok(self)
    }

    /// Sends one record and classifies what came back.
    async fn send(&self, record: &Record) -> Outcome {
        let target = (self.route)(record);
        let mut request = self
            .client
            .request(target.method, target.url)
            .timeout(self.timeout)
            .headers(self.headers.clone())
            .body(record.payload.clone());
        if !self.headers.contains_key(CONTENT_TYPE) {
            request = request.header(CONTENT_TYPE, "application/octet-stream");
        }
        match HeaderValue::try_from(record.key.as_str()) {
            Ok(key) => request = request.header(IDEMPOTENCY_KEY, key),
            Err(_) => {
                return Outcome::rejected(format!(
                    "idempotency key {:?} is not a valid header value",
                    record.key
                ))
            }
        }
        let response = match request.send().await {
            Ok(response) => response,
            // A request that cannot even be built will never succeed: final.
            Err(err) if err.is_builder() => {
                return Outcome::rejected(format!("invalid request: {err}"))
            }
            // Connect errors, resets and timeouts before a response: nobody answered.
            Err(err) => return Outcome::no_answer(describe(&err)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let outcome = http::classify(status, retry_after.as_deref());
        if matches!(outcome, Outcome::Delivered) {
            return outcome;
        }
        // Keep the start of the server's explanation for the person reading `last_error`.
        let body = response.bytes().await.unwrap_or_default();
        let detail = String::from_utf8_lossy(&body[..body.len().min(REASON_BYTES)])
            .trim()
            .to_owned();
        if detail.is_empty() {
            outcome
        } else {
            with_detail(outcome, &detail)
        }
    }
}

/// The error and its causes in one line.
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn with_detail(outcome: Outcome, detail: &str) -> Outcome {
    match outcome {
        Outcome::Transient { error, retry_after } => Outcome::Transient {
            error: format!("{error}: {detail}"),
            retry_after,
        },
        Outcome::Rejected { reason } => Outcome::rejected(format!("{reason}: {detail}")),
        Outcome::Halt { reason } => Outcome::halt(format!("{reason}: {detail}")),
        Outcome::Conflict { detail: d } => Outcome::conflict(format!("{d}: {detail}")),
        other => other,
    }
}

#[async_trait]
impl Sink for HttpSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        self.send(record).await
    }
}
