//! Any `tower::Service<Record>` as the sink (feature `tower`).
//!
//! [`ServiceSink`] delivers each record by calling a service: a tonic client, a
//! `reqwest-middleware` stack, or a [`tower::ServiceBuilder`](https://docs.rs/tower) stack of
//! your own. The service's response is mapped to an [`Outcome`]; an error of the service (a
//! transport failure, a timeout layer's `Elapsed`, a load shedder's refusal) is read as no
//! answer unless a mapping for errors says otherwise.
//!
//! The runner already bounds each delivery (`RunnerConfig::delivery_timeout`) and retries on
//! its own schedule, durably: a retry layer in the stack would retry behind the runner's back,
//! so leave it out. Timeouts and concurrency limits are fine.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox_core::Result<()> {
//! use std::convert::Infallible;
//! use std::future::{ready, Ready};
//! use std::sync::Arc;
//! use std::task::{Context, Poll};
//! use std::time::Duration;
//! use outbox_core::tower::ServiceSink;
//! use outbox_core::{NewRecord, Outbox, Outcome, Record};
//!
//! /// A service that answers with an HTTP-like status code.
//! #[derive(Clone)]
//! struct Status;
//!
//! impl tower_service::Service<Record> for Status {
//!     type Response = u16;
//!     type Error = Infallible;
//!     type Future = Ready<Result<u16, Infallible>>;
//!     fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
//!         Poll::Ready(Ok(()))
//!     }
//!     fn call(&mut self, _record: Record) -> Self::Future {
//!         ready(Ok(204))
//!     }
//! }
//!
//! let sink = ServiceSink::new(Status).map_response(|status: u16| outbox_core::http::classify(status, None));
//! let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?;
//! outbox.enqueue(NewRecord::new(b"{}".to_vec())).await?;
//! outbox.flush(Duration::from_secs(5)).await?;
//! assert_eq!(outbox.stats().await?.delivered, 1);
//! # outbox.shutdown(Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use tower_service::Service;

use crate::outcome::Outcome;
use crate::record::Record;
use crate::sink::Sink;

/// Turns a service's response into an [`Outcome`]. Any `Fn(T) -> Outcome` is one;
/// [`AsOutcome`] takes a response that already is one.
pub trait MapResponse<T>: Send + Sync + 'static {
    /// The outcome `response` means.
    fn outcome(&self, response: T) -> Outcome;
}

impl<T, F> MapResponse<T> for F
where
    F: Fn(T) -> Outcome + Send + Sync + 'static,
{
    fn outcome(&self, response: T) -> Outcome {
        self(response)
    }
}

/// Turns a service's error into an [`Outcome`]. Any `Fn(E) -> Outcome` is one;
/// [`NoAnswerOnError`] is the default.
pub trait MapError<E>: Send + Sync + 'static {
    /// The outcome `error` means.
    fn outcome(&self, error: E) -> Outcome;
}

impl<E, F> MapError<E> for F
where
    F: Fn(E) -> Outcome + Send + Sync + 'static,
{
    fn outcome(&self, error: E) -> Outcome {
        self(error)
    }
}

/// The default response mapping: the service already answers with an [`Outcome`] (or
/// something that converts into one).
#[derive(Clone, Copy, Debug, Default)]
pub struct AsOutcome;

impl<T: Into<Outcome>> MapResponse<T> for AsOutcome {
    fn outcome(&self, response: T) -> Outcome {
        response.into()
    }
}

/// The default error mapping: an error of the service is a failure before any answer,
/// [`Outcome::NoAnswer`] with the error's text (its sources included).
///
/// ```
/// use outbox_core::tower::{MapError, NoAnswerOnError};
/// use outbox_core::Outcome;
///
/// let outcome = NoAnswerOnError.outcome(std::io::Error::other("connection reset"));
/// assert_eq!(outcome, Outcome::no_answer("connection reset"));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAnswerOnError;

impl<E: Into<crate::BoxError>> MapError<E> for NoAnswerOnError {
    fn outcome(&self, error: E) -> Outcome {
        let error: crate::BoxError = error.into();
        Outcome::no_answer(error_text(error.as_ref()))
    }
}

/// An error's text followed by its sources', so a wrapped transport error is not lost.
fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A [`Sink`] that delivers each record through a `tower::Service<Record>`; see the
/// [module documentation](self).
///
/// Each delivery clones the service, waits until the clone is ready, then calls it, as tower
/// expects of a shared client: a concurrency limit in the stack is shared by every delivery.
///
/// ```
/// use outbox_core::tower::ServiceSink;
/// use outbox_core::Outcome;
///
/// // Errors are no answer by default; this service's errors say the credential was refused.
/// # #[derive(Clone)] struct Client;
/// # impl tower_service::Service<outbox_core::Record> for Client {
/// #     type Response = Outcome; type Error = std::io::Error;
/// #     type Future = std::future::Ready<Result<Outcome, std::io::Error>>;
/// #     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), std::io::Error>> { std::task::Poll::Ready(Ok(())) }
/// #     fn call(&mut self, _: outbox_core::Record) -> Self::Future { std::future::ready(Ok(Outcome::Delivered)) }
/// # }
/// let sink = ServiceSink::new(Client).map_error(|err: std::io::Error| match err.kind() {
///     std::io::ErrorKind::PermissionDenied => Outcome::halt(err.to_string()),
///     _ => Outcome::no_answer(err.to_string()),
/// });
/// # let _ = sink;
/// ```
pub struct ServiceSink<S, R = AsOutcome, E = NoAnswerOnError> {
    /// Cloned for each delivery; the lock is held only for the clone.
    service: Mutex<S>,
    response: R,
    error: E,
}

impl<S> ServiceSink<S> {
    /// A sink over `service`, whose response is an [`Outcome`] (or converts into one) and whose
    /// errors are no answer. Change either with [`ServiceSink::map_response`] and
    /// [`ServiceSink::map_error`].
    pub fn new(service: S) -> Self {
        ServiceSink {
            service: Mutex::new(service),
            response: AsOutcome,
            error: NoAnswerOnError,
        }
    }
}

impl<S, R, E> ServiceSink<S, R, E> {
    /// Maps the service's response to an outcome with `response`.
    pub fn map_response<R2>(self, response: R2) -> ServiceSink<S, R2, E> {
        ServiceSink {
            service: self.service,
            response,
            error: self.error,
        }
    }

    /// Maps the service's errors to an outcome with `error` instead of reading them as no
    /// answer.
    pub fn map_error<E2>(self, error: E2) -> ServiceSink<S, R, E2> {
        ServiceSink {
            service: self.service,
            response: self.response,
            error,
        }
    }

    /// A clone of the service, ready or not.
    fn service(&self) -> S
    where
        S: Clone,
    {
        // A panic while cloning leaves the service as it was: keep using it.
        self.service
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl<S, R, E> fmt::Debug for ServiceSink<S, R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceSink")
            .field("service", &std::any::type_name::<S>())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<S, R, E> Sink for ServiceSink<S, R, E>
where
    S: Service<Record> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
    R: MapResponse<S::Response>,
    E: MapError<S::Error>,
{
    async fn deliver(&self, record: &Record) -> Outcome {
        let mut service = self.service();
        if let Err(err) = futures::future::poll_fn(|cx| service.poll_ready(cx)).await {
            return self.error.outcome(err);
        }
        match service.call(record.clone()).await {
            Ok(response) => self.response.outcome(response),
            Err(err) => self.error.outcome(err),
        }
    }
}
