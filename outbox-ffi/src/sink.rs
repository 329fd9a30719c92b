//! The sink: delivery written in the app's own language, classified here by the same table as
//! `HttpSink`, or the built-in `HttpSink` itself.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::http::{Classifier, Response};
use outbox_core::{async_trait, Outcome, Record, Sink};

use crate::types::OutboxRecord;

/// What the app's delivery code saw: a response (its status and the headers the classifier
/// reads), or no answer at all.
///
/// The outbox classifies a response exactly as the Rust `HttpSink` does (2xx delivered; 401 and
/// 407 halt; 409 and 412 conflict; 400, 404, 405, 410, 411, 413, 414, 415 and 422 rejected;
/// 511 and a redirect to another origin a no-answer; everything else retried, with
/// `Retry-After` honoured), so the rules are the same on every platform.
///
/// ```
/// use outbox_ffi::Delivery;
///
/// let busy = Delivery::Response {
///     status: 503,
///     retry_after: Some("30".into()),
///     date: None,
///     location_elsewhere: None,
///     detail: Some("maintenance".into()),
/// };
/// let offline = Delivery::NoAnswer { reason: "connection refused".into() };
/// # let _ = (busy, offline);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum Delivery {
    /// A server answered.
    Response {
        /// The status code.
        status: u16,
        /// The raw `Retry-After` header, if any (seconds or an HTTP date).
        #[uniffi(default = None)]
        retry_after: Option<String>,
        /// The raw `Date` header, if any: an HTTP-date `Retry-After` is read against it.
        #[uniffi(default = None)]
        date: Option<String>,
        /// For a redirect whose `Location` names another origin than the request's: that
        /// origin (`portal.example`). A captive portal answered, not the server.
        #[uniffi(default = None)]
        location_elsewhere: Option<String>,
        /// The start of the response body, kept in the record's `last_error` for a person.
        #[uniffi(default = None)]
        detail: Option<String>,
    },
    /// No server answered: no route, refused, reset, timed out, or a TLS certificate the
    /// client does not trust. Nothing is spent; the record is retried on backoff.
    NoAnswer {
        /// What the transport said.
        reason: String,
    },
}

/// An error a foreign sink raises. Any exception thrown by the app's `deliver` arrives as one,
/// and counts as a no-answer: nothing spent, logged, the record retried.
///
/// ```
/// let err = outbox_ffi::SinkError::Failed { reason: "boom".into() };
/// assert!(err.to_string().contains("boom"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum SinkError {
    /// The delivery code failed before it had an answer.
    #[error("the sink failed: {reason}")]
    Failed {
        /// What failed.
        reason: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for SinkError {
    fn from(err: uniffi::UnexpectedUniFFICallbackError) -> Self {
        SinkError::Failed { reason: err.reason }
    }
}

/// Delivery written in the app's language (OkHttp, URLSession, `urllib`): send the record's
/// payload with its key as the `Idempotency-Key` header and report what came back.
///
/// It is called on a thread of the outbox's own, never the app's main thread, and may block
/// until the request completes (the runner's `delivery_timeout_ms` bounds the wait).
///
/// ```
/// use outbox_ffi::{Delivery, DeliverySink, OutboxRecord, SinkError};
///
/// struct Accept;
/// impl DeliverySink for Accept {
///     fn deliver(&self, _record: OutboxRecord) -> Result<Delivery, SinkError> {
///         Ok(Delivery::Response { status: 204, retry_after: None, date: None,
///             location_elsewhere: None, detail: None })
///     }
/// }
/// # let _ = Accept;
/// ```
#[uniffi::export(with_foreign)]
pub trait DeliverySink: Send + Sync {
    /// Delivers `record` once and reports what came back.
    fn deliver(&self, record: OutboxRecord) -> Result<Delivery, SinkError>;
}

/// The core's sink around a [`DeliverySink`]: each delivery runs on a blocking thread, and
/// whatever the foreign code reports is classified by the shared table.
pub(crate) struct ForeignSink {
    pub(crate) sink: Arc<dyn DeliverySink>,
    pub(crate) classifier: Classifier,
}

#[async_trait]
impl Sink for ForeignSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        let sink = Arc::clone(&self.sink);
        let id = record.id;
        let view = OutboxRecord::from(record.clone());
        // The foreign call blocks (it is a network request in the app's language), so it runs
        // off the runtime's workers; a panic in it is caught here, never unwinding through
        // the runner.
        let called = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(AssertUnwindSafe(|| sink.deliver(view)))
        })
        .await;
        match called {
            Ok(Ok(Ok(delivery))) => classify(&self.classifier, delivery),
            Ok(Ok(Err(err))) => {
                tracing::warn!(record = id.0, error = %err, "the sink raised; counted as no answer");
                Outcome::no_answer(format!("the sink raised: {err}"))
            }
            Ok(Err(panic)) => {
                let why = panic_text(panic.as_ref());
                tracing::error!(record = id.0, panic = %why, "the sink panicked; counted as no answer");
                Outcome::no_answer(format!("the sink panicked: {why}"))
            }
            Err(join) => {
                tracing::error!(record = id.0, error = %join, "the sink's thread failed; counted as no answer");
                Outcome::no_answer(format!("the sink's thread failed: {join}"))
            }
        }
    }
}

/// The text of a panic's payload, when it has one.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// The outcome of one foreign delivery under `classifier`: the core's table decides, and the
/// body's start is appended to the reason the way `HttpSink` appends it.
///
/// ```
/// use outbox_core::http::Classifier;
/// use outbox_core::Outcome;
/// use outbox_ffi::{classify_delivery, Delivery};
///
/// let answer = |status| Delivery::Response { status, retry_after: None, date: None,
///     location_elsewhere: None, detail: Some("no such field".into()) };
/// assert_eq!(classify_delivery(&Classifier::new(), answer(204)), Outcome::Delivered);
/// assert_eq!(
///     classify_delivery(&Classifier::new(), answer(422)),
///     Outcome::rejected("HTTP 422: no such field"),
/// );
/// ```
pub fn classify_delivery(classifier: &Classifier, delivery: Delivery) -> Outcome {
    classify(classifier, delivery)
}

fn classify(classifier: &Classifier, delivery: Delivery) -> Outcome {
    match delivery {
        Delivery::NoAnswer { reason } => Outcome::no_answer(reason),
        Delivery::Response {
            status,
            retry_after,
            date,
            location_elsewhere,
            detail,
        } => {
            let outcome = classifier.classify(&Response {
                status,
                retry_after: retry_after.as_deref(),
                date: date.as_deref(),
                location_elsewhere: location_elsewhere.as_deref(),
            });
            outcome.with_detail(detail.as_deref().unwrap_or_default())
        }
    }
}

/// The built-in HTTP sink (`outbox_http::HttpSink`): each record's payload is POSTed to `url`
/// with its idempotency key, from Rust, with no delivery code in the app.
///
/// ```
/// let http = outbox_ffi::HttpOptions::post("http://127.0.0.1:8080/notes");
/// assert_eq!(http.timeout_ms, 30_000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct HttpOptions {
    /// Where every record is POSTed (http; https needs a build with TLS, which this one
    /// leaves out).
    pub url: String,
    /// The per-request timeout.
    #[uniffi(default = 30000)]
    pub timeout_ms: u64,
    /// The `Authorization` value sent with each request (`Bearer …`); change it later with
    /// `set_authorization` after a 401 halted the runner, then `resume`.
    #[uniffi(default = None)]
    pub authorization: Option<String>,
    /// Extra headers sent with every request.
    #[uniffi(default)]
    pub headers: HashMap<String, String>,
}

impl HttpOptions {
    /// POST to `url` with the default 30 s timeout, no credential and no extra headers.
    pub fn post(url: &str) -> Self {
        HttpOptions {
            url: url.to_owned(),
            timeout_ms: 30_000,
            authorization: None,
            headers: HashMap::new(),
        }
    }

    /// The sink, and the credential it reads for every request.
    pub(crate) fn build(
        &self,
        classifier: Classifier,
    ) -> outbox_core::Result<(outbox_http::HttpSink, outbox_http::Token)> {
        let token = outbox_http::Token::default();
        if let Some(value) = &self.authorization {
            token.set(value.clone());
        }
        let mut sink = outbox_http::HttpSink::post(&self.url)?
            .timeout(Duration::from_millis(self.timeout_ms))
            .classifier(classifier)
            .credentials(token.clone());
        for (name, value) in &self.headers {
            sink = sink.header(name, value)?;
        }
        Ok((sink, token))
    }
}
