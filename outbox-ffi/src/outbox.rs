//! The handle the app holds: open an outbox on a SQLite file, enqueue, observe, the manual
//! verbs, the connectivity signal and shutdown.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use outbox_core::{Event, Halt, ListQuery, RecordId, Sink};
use outbox_sqlite::SqliteStore;
use tokio::runtime::Runtime;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::error::OutboxError;
use crate::options::OpenOptions;
use crate::sink::{DeliverySink, ForeignSink, HttpOptions};
use crate::types::{OutboxEvent, OutboxRecord, OutboxStats, OutboxTombstone, RecordState, Write};

/// The runtime every outbox of the process runs on: two workers (the runner only waits on the
/// store and the sink; foreign deliveries run on its blocking threads), started on first use.
fn runtime() -> Result<&'static Runtime, OutboxError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("outbox")
                .enable_all()
                .build()
                .map_err(|err| err.to_string())
        })
        .as_ref()
        .map_err(|err| OutboxError::Internal {
            detail: format!("the outbox runtime could not start: {err}"),
        })
}

/// Runs `work` on the outbox's runtime and waits for it from whatever executor polls the
/// caller (Kotlin's coroutines, Swift's tasks, Python's asyncio): the core needs tokio, the
/// app's language does not provide it. A panic in `work` becomes [`OutboxError::Internal`].
async fn on_runtime<T, F>(work: F) -> Result<T, OutboxError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, OutboxError>> + Send + 'static,
{
    runtime()?
        .spawn(work)
        .await
        .map_err(|err| OutboxError::Internal {
            detail: format!("an outbox call failed: {err}"),
        })?
}

/// Called with each event, in order, on a thread of the outbox's own.
///
/// ```
/// use outbox_ffi::{EventListener, ListenerError, OutboxEvent};
///
/// struct Print;
/// impl EventListener for Print {
///     fn on_event(&self, event: OutboxEvent) -> Result<(), ListenerError> {
///         let _ = event; // update the UI's badge, log, ...
///         Ok(())
///     }
/// }
/// # let _ = Print;
/// ```
#[uniffi::export(with_foreign)]
pub trait EventListener: Send + Sync {
    /// One event. A listener that raises or panics misses nothing else: the next event is
    /// delivered as usual.
    fn on_event(&self, event: OutboxEvent) -> Result<(), ListenerError>;
}

/// An error an [`EventListener`] raises; any exception thrown by the app's `on_event` arrives
/// as one. It is logged, and the listener keeps receiving events.
///
/// ```
/// let err = outbox_ffi::ListenerError::Failed { reason: "boom".into() };
/// assert!(err.to_string().contains("boom"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum ListenerError {
    /// The listener failed.
    #[error("the event listener failed: {reason}")]
    Failed {
        /// What failed.
        reason: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for ListenerError {
    fn from(err: uniffi::UnexpectedUniFFICallbackError) -> Self {
        ListenerError::Failed { reason: err.reason }
    }
}

/// A filter for [`Outbox::list`].
///
/// ```
/// use outbox_ffi::{ListFilter, RecordState};
///
/// let retrying = ListFilter { state: Some(RecordState::Retrying), group: None, after: None, limit: 50 };
/// # let _ = retrying;
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct ListFilter {
    /// Only records in this state.
    #[uniffi(default = None)]
    pub state: Option<RecordState>,
    /// Only records of this group.
    #[uniffi(default = None)]
    pub group: Option<String>,
    /// Only records after this id (the last id of the previous page).
    #[uniffi(default = None)]
    pub after: Option<u64>,
    /// The page size.
    #[uniffi(default = 100)]
    pub limit: u32,
}

/// An outbox on one SQLite file: a durable queue of pending writes and the runner that
/// delivers them through the app's sink.
///
/// Every call that touches the file is `async` (a `suspend fun` in Kotlin, `async` in Swift
/// and Python) and returns once its write is durable. One process opens a file once; another
/// process on the same file shares it (the queue is SQLite's).
///
/// ```
/// # fn main() -> Result<(), outbox_ffi::OutboxError> {
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # runtime.block_on(async {
/// use std::sync::Arc;
/// use outbox_ffi::{default_options, open_outbox, Delivery, DeliverySink, OutboxRecord, SinkError, Write};
///
/// struct Accept;
/// impl DeliverySink for Accept {
///     fn deliver(&self, _record: OutboxRecord) -> Result<Delivery, SinkError> {
///         Ok(Delivery::Response { status: 201, retry_after: None, date: None,
///             location_elsewhere: None, detail: None })
///     }
/// }
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("outbox.db").to_string_lossy().into_owned();
/// let outbox = open_outbox(path, default_options(), Arc::new(Accept)).await?;
/// outbox.enqueue(Write::new(b"{\"title\":\"hello\"}".to_vec())).await?;
/// outbox.flush(5_000).await?;
/// assert_eq!(outbox.stats().await?.delivered, 1);
/// outbox.shutdown(5_000).await?;
/// # Ok(())
/// # })
/// # }
/// ```
#[derive(uniffi::Object)]
pub struct Outbox {
    inner: Arc<outbox_core::Outbox>,
    online: watch::Sender<bool>,
    events: Arc<tokio::sync::Mutex<broadcast::Receiver<Event>>>,
    /// The built-in HTTP sink's credential, read for every request.
    authorization: Option<outbox_http::Token>,
    listener: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if let Some(task) = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Opens the outbox at `path` (creating the file if there is none) and starts delivering
/// through `sink`, the app's own delivery code. What a previous process left is recovered:
/// records it was delivering when it was killed go again once their lease expires, and every
/// deadline is kept.
///
/// Raises `SchemaTooNew` for a file written by a newer version, `NotAnOutbox` for a file that
/// is not one, `InvalidConfig` for options out of range.
///
/// ```
/// # fn main() -> Result<(), outbox_ffi::OutboxError> {
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # runtime.block_on(async {
/// use std::sync::Arc;
/// use outbox_ffi::{default_options, open_outbox, Delivery, DeliverySink, OutboxError, OutboxRecord, SinkError};
///
/// struct Offline;
/// impl DeliverySink for Offline {
///     fn deliver(&self, _: OutboxRecord) -> Result<Delivery, SinkError> {
///         Ok(Delivery::NoAnswer { reason: "no route".into() })
///     }
/// }
/// let dir = tempfile::tempdir().unwrap();
/// let mut options = default_options();
/// options.runner.batch = 0;
/// let path = dir.path().join("a.db").to_string_lossy().into_owned();
/// let refused = open_outbox(path, options, Arc::new(Offline)).await;
/// assert!(matches!(refused, Err(OutboxError::InvalidConfig { .. })));
/// # Ok(())
/// # })
/// # }
/// ```
#[uniffi::export]
pub async fn open_outbox(
    path: String,
    options: OpenOptions,
    sink: Arc<dyn DeliverySink>,
) -> Result<Arc<Outbox>, OutboxError> {
    let classifier = options.classifier.table();
    open(path, options, ForeignSink { sink, classifier }, None).await
}

/// Opens the outbox at `path` like [`open_outbox`], delivering with the built-in HTTP sink:
/// each payload is POSTed to `http.url` with its `Idempotency-Key`, from Rust.
///
/// ```
/// # fn main() -> Result<(), outbox_ffi::OutboxError> {
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # runtime.block_on(async {
/// use outbox_ffi::{default_options, open_http_outbox, HttpOptions, OutboxError};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("a.db").to_string_lossy().into_owned();
/// let refused = open_http_outbox(path, default_options(), HttpOptions::post("ftp://x/")).await;
/// assert!(matches!(refused, Err(OutboxError::InvalidConfig { .. })));
/// # Ok(())
/// # })
/// # }
/// ```
#[uniffi::export]
pub async fn open_http_outbox(
    path: String,
    options: OpenOptions,
    http: HttpOptions,
) -> Result<Arc<Outbox>, OutboxError> {
    let (sink, token) = http.build(options.classifier.table())?;
    open(path, options, sink, Some(token)).await
}

async fn open(
    path: String,
    options: OpenOptions,
    sink: impl Sink,
    authorization: Option<outbox_http::Token>,
) -> Result<Arc<Outbox>, OutboxError> {
    let policy = options.policy.to_core()?;
    let config = options.runner.to_core()?;
    let sqlite = options.sqlite()?;
    let on_conflict = options.on_conflict;
    let (online, signal) = watch::channel(options.online);
    let (inner, events) = on_runtime(async move {
        let store = SqliteStore::open_or_create(&path, sqlite).await?;
        let builder = outbox_core::Outbox::builder(Arc::new(store), sink)
            .policy(policy)
            .config(config)
            .connectivity(signal)
            .conflict_resolver(move |_: &outbox_core::Record, detail: &str| {
                on_conflict.resolve(detail)
            });
        // Subscribed before the start: what the runner says as it starts (records its
        // recovery parks, rows it cannot read) is the first thing `next_event` returns.
        let events = builder.events();
        let outbox = builder.start().await?;
        Ok((Arc::new(outbox), events))
    })
    .await?;
    Ok(Arc::new(Outbox {
        inner,
        online,
        events: Arc::new(tokio::sync::Mutex::new(events)),
        authorization,
        listener: std::sync::Mutex::new(None),
    }))
}

#[uniffi::export]
impl Outbox {
    /// Durably enqueues one write and wakes the runner; returns the record's id once the
    /// write is on disk. Raises `InvalidGroup`, `InvalidIdempotencyKey`, `PayloadTooLarge` or
    /// `StorageFull` and enqueues nothing when the write cannot be kept.
    pub async fn enqueue(&self, write: Write) -> Result<u64, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.enqueue(write.into_core()).await?.0) }).await
    }

    /// Durably enqueues several writes, all or nothing, in one transaction.
    pub async fn enqueue_batch(&self, writes: Vec<Write>) -> Result<Vec<u64>, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move {
            let records = writes.into_iter().map(Write::into_core).collect();
            let ids = inner.enqueue_batch(records).await?;
            Ok(ids.into_iter().map(|id| id.0).collect())
        })
        .await
    }

    /// Counts per state, held records, the next deadline, the halt and the link.
    pub async fn stats(&self) -> Result<OutboxStats, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.stats().await?.into()) }).await
    }

    /// A page of records, oldest first.
    pub async fn list(&self, filter: ListFilter) -> Result<Vec<OutboxRecord>, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move {
            let mut query = ListQuery::new(filter.limit as usize);
            query.state = filter.state.map(Into::into);
            query.group = filter.group;
            query.after = filter.after.map(RecordId);
            let records = inner.list(&query).await?;
            Ok(records.into_iter().map(OutboxRecord::from).collect())
        })
        .await
    }

    /// One record, or `None` when it is not in the queue (delivered, or never was).
    pub async fn get(&self, id: u64) -> Result<Option<OutboxRecord>, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.get(RecordId(id)).await?.map(OutboxRecord::from)) }).await
    }

    /// A page of tombstones of discarded records, after the id `after`.
    pub async fn tombstones(
        &self,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<OutboxTombstone>, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move {
            let stones = inner
                .tombstones(after.map(RecordId), limit as usize)
                .await?;
            Ok(stones.into_iter().map(OutboxTombstone::from).collect())
        })
        .await
    }

    /// Sends a needs-attention (or retrying) record again now, with a fresh budget.
    pub async fn retry(&self, id: u64) -> Result<(), OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.retry(RecordId(id)).await?) }).await
    }

    /// Sends every needs-attention record again; returns how many.
    pub async fn retry_all(&self) -> Result<u64, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.retry_all().await?) }).await
    }

    /// Re-admits a rejected record with a fresh budget, in its own place in its group.
    pub async fn requeue(&self, id: u64) -> Result<(), OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.requeue(RecordId(id)).await?) }).await
    }

    /// Removes a record from delivery, leaving a tombstone with `reason`.
    pub async fn discard(&self, id: u64, reason: String) -> Result<(), OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.discard(RecordId(id), &reason).await?) }).await
    }

    /// Deletes rejected records and tombstones older than `older_than_ms`; returns how many.
    pub async fn prune(&self, older_than_ms: u64) -> Result<u64, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.prune(Duration::from_millis(older_than_ms)).await?) })
            .await
    }

    /// Resumes a runner halted by a refused credential (store the new credential first): the
    /// halt it holds is cleared and `Resumed` says so; `is_halted` turns false once the file
    /// no longer holds it. A newer halt the file holds (another process's refusal) is not
    /// lifted: `StillHalted` says so, and a second `resume` lifts it.
    pub fn resume(&self) {
        self.inner.resume();
    }

    /// Lifts the halt a person was shown (`halt_reason` and `halted_since` of `stats`) only
    /// while the file still holds that very halt; returns whether it did. False, and nothing
    /// changed, when the file holds another halt (a newer refusal) or none. For an app that
    /// shows the halt and asks before resuming; `resume` lifts whatever this runner holds.
    pub async fn resume_if(&self, reason: String, since: u64) -> Result<bool, OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.resume_if(&Halt { reason, since }).await?) }).await
    }

    /// True while a halt holds the runner.
    pub fn is_halted(&self) -> bool {
        self.inner.is_halted()
    }

    /// The device's connectivity: call it from the platform's callback
    /// (`ConnectivityManager.NetworkCallback`, `NWPathMonitor`). While offline nothing is
    /// attempted; coming online sends what waited out a no-answer at once.
    pub fn set_online(&self, online: bool) {
        self.online.send_replace(online);
    }

    /// Replaces the `Authorization` value of the built-in HTTP sink (`None` sends none), for
    /// the requests from now on; then `resume` a runner a 401 halted. Raises `InvalidConfig`
    /// on an outbox that delivers through the app's own sink.
    pub fn set_authorization(&self, value: Option<String>) -> Result<(), OutboxError> {
        let token = self
            .authorization
            .as_ref()
            .ok_or_else(|| OutboxError::InvalidConfig {
                detail: "this outbox delivers through the app's own sink, which sends its own credential".into(),
            })?;
        match value {
            Some(value) => token.set(value),
            None => token.clear(),
        }
        Ok(())
    }

    /// Waits until nothing claimable is due and nothing is in flight, or raises `Timeout`
    /// after `timeout_ms`. Records scheduled for later do not count.
    pub async fn flush(&self, timeout_ms: u64) -> Result<(), OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.flush(Duration::from_millis(timeout_ms)).await?) }).await
    }

    /// The next event, waiting at most `timeout_ms` for one; `None` when none came. Events are
    /// kept from the moment the outbox opened (up to 1,024 unread; past that the reader gets
    /// [`OutboxEvent::Lagged`]).
    pub async fn next_event(&self, timeout_ms: u64) -> Result<Option<OutboxEvent>, OutboxError> {
        let events = Arc::clone(&self.events);
        on_runtime(async move {
            let mut events = events.lock().await;
            let wait = Duration::from_millis(timeout_ms);
            match tokio::time::timeout(wait, events.recv()).await {
                Err(_) => Ok(None),
                Ok(Ok(event)) => Ok(Some(event.into())),
                Ok(Err(broadcast::error::RecvError::Lagged(missed))) => {
                    Ok(Some(OutboxEvent::Lagged { missed }))
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => Err(OutboxError::Stopped),
            }
        })
        .await
    }

    /// Calls `listener` with every event from now on, in order, on a thread of the outbox's
    /// own; `None` stops the current listener. Independent of [`Outbox::next_event`].
    pub fn set_event_listener(
        &self,
        listener: Option<Arc<dyn EventListener>>,
    ) -> Result<(), OutboxError> {
        let mut slot = self.listener.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = slot.take() {
            task.abort();
        }
        let Some(listener) = listener else {
            return Ok(());
        };
        let mut events = self.inner.events();
        *slot = Some(runtime()?.spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => OutboxEvent::from(event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        OutboxEvent::Lagged { missed }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let listener = Arc::clone(&listener);
                let called = tokio::task::spawn_blocking(move || {
                    std::panic::catch_unwind(AssertUnwindSafe(|| listener.on_event(event)))
                })
                .await;
                match called {
                    Ok(Ok(Ok(()))) => {}
                    Ok(Ok(Err(err))) => {
                        tracing::warn!(error = %err, "the event listener raised; it keeps receiving events");
                    }
                    Ok(Err(_)) | Err(_) => {
                        tracing::error!("the event listener panicked; it keeps receiving events");
                    }
                }
            }
        }));
        Ok(())
    }

    /// Stops the runner: deliveries under way get up to `timeout_ms` to report, and every
    /// record is left with its outcome recorded or its lease released. The handle still
    /// reads and enqueues; nothing is delivered any more.
    pub async fn shutdown(&self, timeout_ms: u64) -> Result<(), OutboxError> {
        let inner = Arc::clone(&self.inner);
        on_runtime(async move { Ok(inner.shutdown(Duration::from_millis(timeout_ms)).await?) })
            .await
    }
}
