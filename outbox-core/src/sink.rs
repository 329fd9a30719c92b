//! The `Sink`: the user's code that delivers one record to the server.

use std::future::Future;

use async_trait::async_trait;

use crate::outcome::Outcome;
use crate::record::Record;

/// Delivers one record and reports what happened.
///
/// `record.key` is the record's stable idempotency key: send it with every delivery (for HTTP,
/// as an `Idempotency-Key` header) so the server can drop the duplicate that a crash between
/// its answer and our commit produces. Classify HTTP answers with [`crate::http::classify`];
/// report a transport failure before any response as [`Outcome::NoAnswer`].
///
/// A sink that panics does not stop the runner: the record counts as interrupted.
///
/// ```
/// use outbox_core::{async_trait, Outcome, Record, Sink};
///
/// struct Print;
///
/// #[async_trait]
/// impl Sink for Print {
///     async fn deliver(&self, record: &Record) -> Outcome {
///         println!("{} {:?}", record.key, record.payload);
///         Outcome::Delivered
///     }
/// }
/// ```
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// Delivers `record` once.
    async fn deliver(&self, record: &Record) -> Outcome;
}

/// A sink made from an async closure; see [`sink_fn`].
#[derive(Clone, Debug)]
pub struct SinkFn<F>(F);

/// Makes a [`Sink`] from a closure that takes the record and returns a future of the outcome.
///
/// ```
/// use outbox_core::{sink_fn, Outcome, Record};
///
/// let sink = sink_fn(|record: Record| async move {
///     if record.payload.is_empty() { Outcome::rejected("empty") } else { Outcome::Delivered }
/// });
/// # let _ = sink;
/// ```
pub fn sink_fn<F, Fut>(f: F) -> SinkFn<F>
where
    F: Fn(Record) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    SinkFn(f)
}

#[async_trait]
impl<F, Fut> Sink for SinkFn<F>
where
    F: Fn(Record) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    async fn deliver(&self, record: &Record) -> Outcome {
        (self.0)(record.clone()).await
    }
}
