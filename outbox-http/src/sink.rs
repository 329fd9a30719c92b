//! [`HttpSink`]: one record, one HTTP request, one classified answer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::http::{Classifier, Forbidden, Response};
use outbox_core::{async_trait, Error, Outcome, Record, Result, Sink};
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, DATE, IF_MATCH, RETRY_AFTER,
};
use reqwest::{Client, Method, Url};

use crate::credentials::CredentialSource;

/// The header that carries each record's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

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
///
/// ## What each failure becomes
/// - a status: the classifier's outcome, with the first [`REASON_BYTES`] of the body appended
///   to the error text (the rest of the body is never read);
/// - no response (refused, reset, timed out before any answer): [`Outcome::NoAnswer`];
/// - a request that cannot be built (an idempotency key or credential that is not a valid
///   header value, a URL from the route that is not http(s) or has no host, an https URL
///   while reqwest has no TLS) and a TLS certificate the client refuses: [`Outcome::Halt`]. These are configuration to fix, not
///   a verdict on the record, so they stop the runner instead of rejecting the backlog.
#[derive(Clone)]
pub struct HttpSink {
    client: Client,
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
        let parsed =
            Url::parse(url).map_err(|e| Error::InvalidConfig(format!("url {url:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
            return Err(Error::InvalidConfig(format!(
                "url {url:?}: an http or https URL with a host is needed"
            )));
        }
        Ok(Self::route(move |_| Target {
            method: Method::POST,
            url: parsed.clone(),
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
    ///     // A join that fails keeps the base URL; the server's answer then tells.
    ///     url: base.join(record.group.as_deref().unwrap_or("inbox")).unwrap_or(base.clone()),
    /// });
    /// # let _ = sink;
    /// ```
    pub fn route(route: impl Fn(&Record) -> Target + Send + Sync + 'static) -> Self {
        HttpSink {
            client: Client::new(),
            route: Arc::new(route),
            timeout: Duration::from_secs(30),
            headers: HeaderMap::new(),
            credentials: None,
            classifier: Classifier::new(),
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
        let target = (self.route)(record);
        let headers = match self.request_headers(record) {
            Ok(headers) => headers,
            Err(why) => return cannot_build(&why),
        };
        let request = self
            .client
            .request(target.method, target.url)
            .timeout(self.timeout)
            .headers(headers)
            .body(record.payload.clone())
            .build();
        let request = match request {
            Ok(request) => request,
            Err(err) => return cannot_build(&describe(&err)),
        };
        let response = match self.client.execute(request).await {
            Ok(response) => response,
            Err(err) if err.is_builder() => return cannot_build(&describe(&err)),
            Err(err) => {
                if let Some(why) = misconfigured(&err).filter(|_| err.is_connect()) {
                    return Outcome::halt(format!(
                        "{why} (configuration, not this record): {}",
                        describe(&err)
                    ));
                }
                // Connect errors, resets and timeouts before a response: nobody answered.
                return Outcome::no_answer(describe(&err));
            }
        };
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let outcome = self.classifier.classify(&Response {
            status: response.status().as_u16(),
            retry_after: header(RETRY_AFTER),
            date: header(DATE),
        });
        if matches!(outcome, Outcome::Delivered) {
            return outcome;
        }
        let detail = reason(response).await;
        if detail.is_empty() {
            outcome
        } else {
            with_detail(outcome, &detail)
        }
    }
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

/// Each error of the chain, outermost first.
fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// The error and its causes in one line.
fn describe(err: &reqwest::Error) -> String {
    chain(err)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Why a connect error is the sink's configuration rather than a link that is down, if it is.
///
/// - A TLS handshake broken off over a certificate (unknown issuer, expired, wrong name, none
///   presented). The TLS stacks reqwest can use share no error type for it, but each names
///   the certificate in its message (rustls: "invalid peer certificate", OpenSSL:
///   "certificate verify failed", ...), so the message is what is matched.
/// - An https URL while reqwest was built without TLS: its connector refuses every such
///   request with "scheme is not http", so no server can ever answer.
fn misconfigured(err: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let says = |what: &str| chain(err).any(|e| e.to_string().to_ascii_lowercase().contains(what));
    if says("certificate") {
        Some("TLS certificate refused")
    } else if says("scheme is not http") {
        Some("https needs TLS support (outbox-http's `tls` feature)")
    } else {
        None
    }
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

#[cfg(test)]
mod tests {
    use std::io;

    use super::misconfigured;

    /// A connect error wrapping what the TLS stack said, as reqwest's chain does.
    #[derive(Debug)]
    struct Connect(io::Error);

    impl std::fmt::Display for Connect {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl std::error::Error for Connect {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn connect(says: &str) -> Connect {
        Connect(io::Error::new(io::ErrorKind::InvalidData, says.to_owned()))
    }

    #[test]
    fn a_refused_certificate_is_configuration() {
        for says in [
            "invalid peer certificate: UnknownIssuer",
            "invalid peer certificate: Expired",
            "error:0A000086:SSL routines::certificate verify failed",
            "peer sent no certificates",
        ] {
            assert_eq!(
                misconfigured(&connect(says)),
                Some("TLS certificate refused"),
                "{says}"
            );
        }
        assert!(misconfigured(&connect("invalid URL, scheme is not http"))
            .is_some_and(|why| why.starts_with("https needs TLS")));
    }

    #[test]
    fn a_link_that_is_down_is_not() {
        for says in [
            "Connection refused (os error 111)",
            "connection reset by peer",
            "received corrupt message of type InvalidContentType",
        ] {
            assert_eq!(misconfigured(&connect(says)), None, "{says}");
        }
    }
}
