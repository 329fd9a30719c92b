//! [`HttpSink`]: one record, one HTTP request, one classified answer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::http::{Classifier, Forbidden, Response};
use outbox_core::{async_trait, Error, Outcome, Record, Result, Sink};
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, DATE, IF_MATCH, LOCATION,
    RETRY_AFTER,
};
use reqwest::{redirect, Client, ClientBuilder, Method, Url};

use crate::credentials::CredentialSource;
use crate::failure::{describe, Failure};
use crate::target::{elsewhere, redact, redact_text, scrub, Target};

/// The header that carries each record's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The W3C header that carries the trace context of the span a record was written in
/// ([`outbox_core::TraceContext`]), when it has one.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C header that carries the vendors' part of a record's trace context, when it has
/// one.
pub const TRACESTATE: &str = "tracestate";

/// The header that carries when the record was enqueued, in milliseconds since the Unix epoch
/// on the enqueuing device's clock, so a server can tell a write made a week ago from one made
/// now.
pub const CREATED_AT: &str = "outbox-created-at";

/// The `If-Match` value for a record's expected version: the version as a strong entity tag,
/// quoted unless it already is (`"v3"`). Weak tags are refused at enqueue, since `If-Match`
/// never matches one.
///
/// ```
/// use outbox_http::if_match;
/// assert_eq!(if_match("3"), "\"3\"");
/// assert_eq!(if_match("\"abc\""), "\"abc\"");
/// ```
pub fn if_match(version: &str) -> String {
    if version.starts_with('"') {
        version.to_owned()
    } else {
        format!("\"{version}\"")
    }
}

/// Longest part of an error response body kept in the record's `last_error`; the sink never
/// reads further, however long the body is.
pub const REASON_BYTES: usize = 256;

/// A route's answer: where the record goes, or why it cannot go anywhere.
type Route = dyn Fn(&Record) -> std::result::Result<Target, String> + Send + Sync;

/// Delivers records over HTTP. Cheap to clone; clones share one connection pool.
///
/// ## Defaults
/// - timeout: **30 s** per request, answer and error body included: long enough for a slow
///   server, short enough that a dead connection is noticed as a no-answer.
/// - content type: `application/octet-stream` unless a `content-type` header is set: the
///   payload is opaque bytes.
/// - classification: [`Classifier::new`]: only [`outbox_core::http::TERMINAL`] rejects a
///   record, 403 is retried.
/// - no `Authorization` header until [`HttpSink::credentials`] gives a source.
///
/// ## What each request carries
/// - the payload as the body, the record's key in [`IDEMPOTENCY_KEY`] and its enqueue time in
///   [`CREATED_AT`];
/// - for a record made against an entity version ([`outbox_core::NewRecord::expecting`]),
///   `If-Match` with that version ([`if_match`]): a server whose entity changed since answers
///   412, which is a conflict for the resolver (by default the record waits for a person with
///   the reason), never an overwrite and never a retry.
/// - for a record with a trace context ([`outbox_core::NewRecord::trace_context`], or the
///   current span's with the core's `opentelemetry` feature), [`TRACEPARENT`] and
///   [`TRACESTATE`], so the server's span joins the trace the write was made in.
///
/// ## What each failure becomes
/// - a status: the classifier's outcome, with the first [`REASON_BYTES`] of the body appended
///   to the error text (the rest of the body is never read);
/// - no response (refused, reset, timed out before any answer): [`Outcome::NoAnswer`];
/// - something other than our server answering: a redirect to another origin, a `511`, a
///   server certificate the client does not trust (unknown issuer, expired, wrong name):
///   [`Outcome::NoAnswer`], with a reason that says what answered instead ("redirected to
///   portal.example: a captive portal or proxy?", "certificate not trusted: interception or
///   an expired certificate?"). No budget is spent; the runner takes the link for down,
///   probes it on backoff and says so (its `LinkDown` event and warning carry the reason);
/// - a request that cannot be built (an idempotency key or credential that is not a valid
///   header value, a URL from the route that is not http(s) or has no host, an https URL
///   while reqwest has no TLS, a client that could not be built) and a client certificate
///   the server refuses: [`Outcome::Halt`]. These are configuration (or a credential) to
///   fix, not a verdict on the record, so they stop the runner instead of rejecting the
///   backlog;
/// - a route that refuses the record ([`HttpSink::try_route`]): [`Outcome::Rejected`] with the
///   route's reason, since no request can be made for it.
///
/// ## Redirects and secrets
/// Redirects are never followed, whatever client is used: a followed 302 would turn the write
/// into a GET of a portal's login page answering 200 (counted delivered, then deleted), and a
/// followed 307 would hand the payload, its key and its credential to whichever host the
/// `Location` names. A URL in any reason this sink gives (and so in `last_error`, events and
/// log lines) is named without its query string and user info.
#[derive(Clone)]
pub struct HttpSink {
    /// The client, or why it could not be built (reported as a halt at delivery).
    client: std::result::Result<Client, String>,
    route: Arc<Route>,
    timeout: Duration,
    headers: HeaderMap,
    credentials: Option<Arc<dyn CredentialSource>>,
    classifier: Classifier,
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSink")
            .field("timeout", &self.timeout)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("credentials", &self.credentials.is_some())
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl HttpSink {
    /// POSTs every record's payload to `url` (http or https).
    ///
    /// ```
    /// use outbox_http::HttpSink;
    ///
    /// assert!(HttpSink::post("http://127.0.0.1:8080/notes").is_ok());
    /// assert!(HttpSink::post("ftp://127.0.0.1/notes").is_err());
    /// ```
    pub fn post(url: &str) -> Result<Self> {
        let parsed = Url::parse(url)
            .map_err(|e| Error::InvalidConfig(format!("url {:?}: {e}", redact_text(url))))?;
        if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
            return Err(Error::InvalidConfig(format!(
                "url {:?}: an http or https URL with a host is needed",
                redact(&parsed)
            )));
        }
        Ok(Self::route(move |_| Target {
            method: Method::POST,
            url: parsed.clone(),
        }))
    }

    /// Sends each record where `route` says, for a route that cannot fail (a method chosen
    /// from the record, a fixed URL). To build the URL from the record's data, use
    /// [`HttpSink::try_route`] with [`Target::under`], which refuses a value that would send
    /// the record elsewhere.
    ///
    /// ```
    /// use outbox_http::{HttpSink, Target};
    /// use reqwest::{Method, Url};
    ///
    /// let notes = Url::parse("http://127.0.0.1:8080/notes").unwrap();
    /// // A write made against a known version replaces the note; any other adds one.
    /// let sink = HttpSink::route(move |record| Target {
    ///     method: if record.expected_version.is_some() { Method::PUT } else { Method::POST },
    ///     url: notes.clone(),
    /// });
    /// # let _ = sink;
    /// ```
    pub fn route(route: impl Fn(&Record) -> Target + Send + Sync + 'static) -> Self {
        Self::try_route(move |record| Ok(route(record)))
    }

    /// Sends each record where `route` says, or rejects it with the route's reason when it
    /// answers `Err`: a record no request can be made for is kept, rejected, for a person to
    /// read, and the rest of the queue goes on.
    ///
    /// A group is the application's data. This route puts it in the path and refuses a group
    /// that is an absolute URL (or climbs out of `/docs/`), which would otherwise send the
    /// payload, its key and the credential to the host it names:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use outbox_core::{Outcome, Record, RecordId, Sink};
    /// use outbox_http::{HttpSink, Target};
    /// use reqwest::{Method, Url};
    ///
    /// let base = Url::parse("http://127.0.0.1:8080/docs/").unwrap();
    /// let sink = HttpSink::try_route(move |record| {
    ///     Target::under(Method::PUT, &base, record.group.as_deref().unwrap_or("inbox"))
    /// });
    /// let hostile = Record::fresh(RecordId(1), Some("http://elsewhere.example/".into()), vec![], "k".into(), 0);
    /// let Outcome::Rejected { reason } = sink.deliver(&hostile).await else { panic!() };
    /// assert!(reason.contains("is an absolute URL"), "{reason}");
    /// # }
    /// ```
    pub fn try_route(
        route: impl Fn(&Record) -> std::result::Result<Target, String> + Send + Sync + 'static,
    ) -> Self {
        HttpSink {
            client: build(Client::builder()),
            route: Arc::new(route),
            timeout: Duration::from_secs(30),
            headers: HeaderMap::new(),
            credentials: None,
            classifier: Classifier::new(),
        }
    }

    /// Builds the sink's client from your own `reqwest::ClientBuilder` (proxies, TLS roots,
    /// pool sizes). Redirects stay off whatever the builder says: the sink sets
    /// `redirect::Policy::none()` on it (see "Redirects and secrets" above). A builder that
    /// cannot build (a TLS backend that fails to start, for one) is
    /// [`Error::InvalidConfig`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_http::HttpSink;
    ///
    /// let builder = reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(30));
    /// let sink = HttpSink::post("http://127.0.0.1:8080/notes").unwrap().client(builder).unwrap();
    /// # let _ = sink;
    /// ```
    pub fn client(mut self, builder: ClientBuilder) -> Result<Self> {
        self.client = Ok(build(builder).map_err(Error::InvalidConfig)?);
        Ok(self)
    }

    /// Per-request timeout (default 30 s). Running out before a response is a no-answer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a header to every request. For a credential that can change, use
    /// [`HttpSink::credentials`] instead: it is read again for every request.
    ///
    /// ```
    /// use outbox_http::HttpSink;
    ///
    /// let sink = HttpSink::post("http://127.0.0.1:8080/notes")
    ///     .unwrap()
    ///     .header("content-type", "application/json")
    ///     .unwrap();
    /// # let _ = sink;
    /// ```
    pub fn header(mut self, name: &str, value: &str) -> Result<Self> {
        let name = HeaderName::try_from(name)
            .map_err(|e| Error::InvalidConfig(format!("header name {name:?}: {e}")))?;
        let value = HeaderValue::try_from(value)
            .map_err(|e| Error::InvalidConfig(format!("header value for {name}: {e}")))?;
        self.headers.insert(name, value);
        Ok(self)
    }

    /// Reads the `Authorization` header from `source` for every request (it replaces one set
    /// with [`HttpSink::header`]).
    ///
    /// ```
    /// use outbox_http::{HttpSink, Token};
    ///
    /// let token = Token::bearer("from-login");
    /// let sink = HttpSink::post("http://127.0.0.1:8080/notes").unwrap().credentials(token.clone());
    /// // Later, after a 401 halted the runner: store the new token, then `outbox.resume()`.
    /// token.set_bearer("from-the-next-login");
    /// # let _ = sink;
    /// ```
    pub fn credentials(mut self, source: impl CredentialSource) -> Self {
        self.credentials = Some(Arc::new(source));
        self
    }

    /// Replaces the classification table (which statuses reject a record).
    ///
    /// ```
    /// use outbox_core::http::Classifier;
    /// use outbox_http::HttpSink;
    ///
    /// // This API answers 451 for records it will never accept.
    /// let sink = HttpSink::post("http://127.0.0.1:8080/notes")
    ///     .unwrap()
    ///     .classifier(Classifier::new().reject(451));
    /// # let _ = sink;
    /// ```
    pub fn classifier(mut self, classifier: Classifier) -> Self {
        self.classifier = classifier;
        self
    }

    /// Sets what a 403 means: retried (the default), a halt like a 401, or a rejection.
    ///
    /// ```
    /// use outbox_core::http::Forbidden;
    /// use outbox_http::HttpSink;
    ///
    /// let sink = HttpSink::post("http://127.0.0.1:8080/notes")
    ///     .unwrap()
    ///     .on_forbidden(Forbidden::Halt);
    /// # let _ = sink;
    /// ```
    pub fn on_forbidden(mut self, forbidden: Forbidden) -> Self {
        self.classifier = self.classifier.on_forbidden(forbidden);
        self
    }

    /// The headers of one request, or why they cannot be built.
    fn request_headers(&self, record: &Record) -> std::result::Result<HeaderMap, String> {
        let mut headers = self.headers.clone();
        if !headers.contains_key(CONTENT_TYPE) {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
        }
        let key = HeaderValue::try_from(record.key.as_str()).map_err(|_| {
            format!(
                "idempotency key {:?} is not a valid header value",
                record.key
            )
        })?;
        headers.insert(IDEMPOTENCY_KEY, key);
        headers.insert(CREATED_AT, HeaderValue::from(record.created_at));
        if let Some(version) = &record.expected_version {
            let value = HeaderValue::try_from(if_match(version))
                .map_err(|_| format!("expected version {version:?} is not a valid header value"))?;
            headers.insert(IF_MATCH, value);
        }
        if let Some(cx) = &record.trace {
            // A context is visible ASCII by construction: only a broken invariant is skipped.
            if let Ok(value) = HeaderValue::try_from(cx.traceparent()) {
                headers.insert(TRACEPARENT, value);
            }
            if let Some(Ok(value)) = cx.tracestate().map(HeaderValue::try_from) {
                headers.insert(TRACESTATE, value);
            }
        }
        if let Some(value) = self.credentials.as_ref().and_then(|c| c.authorization()) {
            // The value itself stays out of the reason: it is a secret.
            let mut value = HeaderValue::try_from(value)
                .map_err(|_| "the credential source gave an invalid Authorization value")?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(headers)
    }

    /// Sends one record and classifies what came back.
    async fn send(&self, record: &Record) -> Outcome {
        let client = match &self.client {
            Ok(client) => client,
            Err(why) => return cannot_build(why),
        };
        let target = match (self.route)(record) {
            Ok(target) => target,
            Err(why) => return Outcome::rejected(format!("no route for this record: {why}")),
        };
        let headers = match self.request_headers(record) {
            Ok(headers) => headers,
            Err(why) => return cannot_build(&why),
        };
        let request = client
            .request(target.method, target.url.clone())
            .timeout(self.timeout)
            .headers(headers)
            .body(record.payload.clone())
            .build();
        let request = match request {
            Ok(request) => request,
            Err(err) => return cannot_build(&describe(err)),
        };
        let response = match client.execute(request).await {
            Ok(response) => response,
            Err(err) if err.is_builder() => return cannot_build(&describe(err)),
            Err(err) => {
                // Connect errors, resets and timeouts before a response: nobody answered,
                // unless the handshake says who did, or that nobody ever can.
                let failure = if err.is_connect() {
                    Failure::of(&err)
                } else {
                    Failure::Link
                };
                return failure.outcome(&describe(err));
            }
        };
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let status = response.status();
        let location_elsewhere = header(LOCATION)
            .filter(|_| status.is_redirection())
            .and_then(|location| elsewhere(&target.url, location));
        let outcome = self.classifier.classify(&Response {
            status: status.as_u16(),
            retry_after: header(RETRY_AFTER),
            date: header(DATE),
            location_elsewhere: location_elsewhere.as_deref(),
        });
        // Delivered needs no reason, and what answered in our server's place (a portal's
        // page) is not read.
        if matches!(outcome, Outcome::Delivered | Outcome::NoAnswer { .. }) {
            return outcome;
        }
        outcome.with_detail(&scrub(&reason(response).await, &target.url))
    }
}

/// The sink's client: never following a redirect.
fn build(builder: ClientBuilder) -> std::result::Result<Client, String> {
    builder
        .redirect(redirect::Policy::none())
        .build()
        .map_err(|err| format!("the HTTP client could not be built: {}", describe(err)))
}

/// The halt for a request that could not be built.
fn cannot_build(why: &str) -> Outcome {
    Outcome::halt(format!(
        "request could not be built (configuration, not this record): {why}"
    ))
}

/// The start of the server's explanation, for the person reading `last_error`. Reads the
/// body chunk by chunk and stops at [`REASON_BYTES`]: dropping the response then closes the
/// connection instead of downloading the rest.
async fn reason(mut response: reqwest::Response) -> String {
    let mut kept = Vec::with_capacity(REASON_BYTES);
    while kept.len() < REASON_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let take = chunk.len().min(REASON_BYTES - kept.len());
                kept.extend_from_slice(&chunk[..take]);
            }
            // The end, or a body cut short: keep what arrived.
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&kept).trim().to_owned()
}

#[async_trait]
impl Sink for HttpSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        self.send(record).await
    }
}
