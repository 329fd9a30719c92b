//! The `Sink`: the user's code that delivers one record to the server.

use std::future::Future;
use std::sync::Arc;

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
/// The runner polls its deliveries in its own task, next to its timers and lease renewals, so
/// `deliver` must not block the thread: await I/O, and move blocking calls or heavy CPU work
/// to `tokio::task::spawn_blocking`. A sink that blocks holds up the other deliveries and the
/// lease renewals with it (on a shared store, another process may then take the record over).
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

/// A shared sink is a sink: the outbox can own one `Arc` while the application keeps another,
/// to reach the sink's own state (a credential to rotate, counters to read).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use outbox_core::{async_trait, NewRecord, Outbox, Outcome, Record, Sink};
/// use outbox_memory::MemoryStore;
///
/// #[derive(Default)]
/// struct Counting(AtomicUsize);
///
/// #[async_trait]
/// impl Sink for Counting {
///     async fn deliver(&self, _record: &Record) -> Outcome {
///         self.0.fetch_add(1, Ordering::SeqCst);
///         Outcome::Delivered
///     }
/// }
///
/// let sink = Arc::new(Counting::default());
/// let outbox = Outbox::builder(Arc::new(MemoryStore::new()), Arc::clone(&sink)).start().await?;
/// outbox.enqueue(NewRecord::new(b"{}".to_vec())).await?;
/// outbox.flush(Duration::from_secs(5)).await?;
/// assert_eq!(sink.0.load(Ordering::SeqCst), 1);
/// # outbox.shutdown(Duration::from_secs(5)).await?;
/// # Ok(())
/// # }
/// ```
#[async_trait]
impl<S: Sink + ?Sized> Sink for Arc<S> {
    async fn deliver(&self, record: &Record) -> Outcome {
        (**self).deliver(record).await
    }
}

/// A boxed sink is a sink, so a sink chosen at run time (`Box<dyn Sink>`) can be passed on.
///
/// ```
/// use outbox_core::{sink_fn, Outcome, Record, Sink};
///
/// fn pick(dry_run: bool) -> Box<dyn Sink> {
///     if dry_run {
///         Box::new(sink_fn(|_: Record| async { Outcome::Delivered }))
///     } else {
///         Box::new(sink_fn(|_: Record| async { Outcome::no_answer("no network in this example") }))
///     }
/// }
///
/// fn uses(_sink: impl Sink) {}
/// uses(pick(true));
/// ```
#[async_trait]
impl<S: Sink + ?Sized> Sink for Box<S> {
    async fn deliver(&self, record: &Record) -> Outcome {
        (**self).deliver(record).await
    }
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
