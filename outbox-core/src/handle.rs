//! The handle the application holds: enqueue, observe, manual verbs, flush and shutdown.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Mutex};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::config::RunnerConfig;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::outcome::{ConflictResolver, ParkOnConflict};
use crate::policy::RetryPolicy;
use crate::record::{Millis, NewRecord, Record, RecordId, Tombstone};
use crate::runner::{shell, Shared};
use crate::sink::Sink;
use crate::store::{Enqueued, ListQuery, Stats, Store};

mod uncommitted;
mod unreadable;
mod verbs;

pub use uncommitted::Uncommitted;

/// Builds and starts an [`Outbox`]. Made by [`Outbox::builder`].
pub struct OutboxBuilder {
    store: Arc<dyn Store>,
    sink: Arc<dyn Sink>,
    policy: RetryPolicy,
    config: RunnerConfig,
    /// The clock given with [`OutboxBuilder::clock`], if any.
    clock: Option<Arc<dyn Clock>>,
    online: Option<watch::Receiver<bool>>,
    resolver: Arc<dyn ConflictResolver>,
    events: broadcast::Sender<Event>,
}

impl std::fmt::Debug for OutboxBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxBuilder")
            .field("store", &self.store)
            .field("policy", &self.policy)
            .field("config", &self.config)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl OutboxBuilder {
    /// Replaces the default [`RetryPolicy`].
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Replaces the default [`RunnerConfig`].
    pub fn config(mut self, config: RunnerConfig) -> Self {
        self.config = config;
        self
    }

    /// Replaces the system clock (tests pass a [`TokioClock`](crate::TokioClock)).
    ///
    /// A store that names the clock its records are judged by ([`Store::shared_clock`], the
    /// server's for PostgreSQL) needs none: the runner uses the store's. Giving such a store a
    /// different clock makes [`OutboxBuilder::start`] fail with [`Error::InvalidConfig`]
    /// rather than run beside the fleet in a time of its own (where its leases would be
    /// stolen early, or others' kept late, and records delivered twice); giving it the
    /// store's own clock is accepted.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Feeds the runner a connectivity signal: `false` means offline, and nothing is attempted
    /// until it turns `true`. Without one the runner assumes it is always online.
    pub fn connectivity(mut self, online: watch::Receiver<bool>) -> Self {
        self.online = Some(online);
        self
    }

    /// Decides what a conflict (409) means; by default it parks the record.
    pub fn conflict_resolver(mut self, resolver: impl ConflictResolver + 'static) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// Subscribes to the outbox's events from before it starts, so that none of what its start
    /// says is missed: records the recovery parks (a delivery that kept killing the process),
    /// rows the store cannot read. [`Outbox::events`] subscribes from the moment it is called,
    /// when the runner may have said those already. Like it, the stream ends
    /// (`RecvError::Closed`) once the outbox is gone, or at once if it fails to start. A halt
    /// persisted before the start is no event: [`Outbox::is_halted`] says so from the start.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use outbox_core::{sink_fn, Event, NewRecord, Outbox, Outcome, Record};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let builder = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink);
    /// let mut events = builder.events();
    /// let outbox = builder.start().await?;
    /// let id = outbox.enqueue(NewRecord::new(b"hello".to_vec())).await?;
    /// outbox.flush(Duration::from_secs(5)).await?;
    /// loop {
    ///     if events.recv().await.expect("open") == (Event::Delivered { id }) {
    ///         break;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Recovers what a previous process left (expired leases count one interruption each;
    /// deadlines set before the wall clock stepped back are re-based, keeping their waits),
    /// reads a persisted halt, and starts the runner on the current tokio runtime.
    ///
    /// # Errors
    /// The first store error of the recovery; [`Error::InvalidConfig`] for an invalid policy
    /// or configuration, or a clock that differs from the one the store names (see
    /// [`OutboxBuilder::clock`]).
    pub async fn start(self) -> Result<Outbox> {
        self.policy.validate()?;
        self.config.validate()?;
        let clock = runner_clock(self.store.shared_clock(), self.clock)?;
        let shared = Arc::new(Shared::new(
            self.store,
            self.sink,
            self.policy,
            self.config,
            clock,
            self.resolver,
            self.events,
        ));
        let halt = shared.store.halt().await?;
        shared.halted.store(halt.is_some(), Ordering::SeqCst);
        #[cfg(feature = "metrics")]
        crate::metrics::started(halt.is_some());
        let (scheduler, started) = shell::prepare(&shared, halt).await?;
        let (stop, stop_rx) = watch::channel(None);
        let task = tokio::spawn(shell::run(
            Arc::clone(&shared),
            scheduler,
            started,
            stop_rx,
            self.online,
        ));
        Ok(Outbox {
            shared,
            stop,
            task: Mutex::new(Some(task)),
        })
    }
}

/// The clock a runner schedules with: the one its store names, else the one it was given, else
/// the system clock. A given clock that is not the store's own (the same allocation) is
/// refused: the other runners of the store judge this one's leases and deadlines by the
/// store's clock, so a runner in another time would take over live leases or leave expired
/// ones, and deliver records twice.
fn runner_clock(
    shared: Option<Arc<dyn Clock>>,
    given: Option<Arc<dyn Clock>>,
) -> Result<Arc<dyn Clock>> {
    match (shared, given) {
        (Some(shared), Some(given))
            if !std::ptr::addr_eq(Arc::as_ptr(&shared), Arc::as_ptr(&given)) =>
        {
            Err(Error::InvalidConfig(format!(
                "the store judges leases and deadlines by its own clock ({shared:?}); a runner \
                 on another clock ({given:?}) would deliver records twice. Leave out \
                 `.clock(..)`, or open the store so that it names none (PostgreSQL: \
                 `PgConfig::with_runner_clock`, for one host only)"
            )))
        }
        (Some(shared), _) => Ok(shared),
        (None, Some(given)) => Ok(given),
        (None, None) => Ok(Arc::new(SystemClock)),
    }
}

/// A running outbox: the store, the runner delivering from it, and the verbs around them.
///
/// Every verb takes `&self`, [`Outbox::shutdown`] included, so the handle can be shared as an
/// `Arc<Outbox>` by the tasks of an application. Dropping the handle stops the runner; records it was delivering are released (nothing
/// spent) by the runner task as it ends. Prefer [`Outbox::shutdown`], which waits for
/// deliveries to report: when the tokio runtime itself is shutting down, the runner task may
/// not get to release them, and their leases then expire and count as one interruption.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use outbox_core::{sink_fn, NewRecord, Outbox, Outcome, Record};
/// use outbox_memory::MemoryStore;
///
/// let sink = sink_fn(|record: Record| async move {
///     // Send `record.payload` with `record.key` as the idempotency key, then classify.
///     Outcome::Delivered
/// });
/// let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink).start().await?;
/// outbox.enqueue(NewRecord::new(b"{\"title\":\"hello\"}".to_vec())).await?;
/// outbox.flush(Duration::from_secs(5)).await?;
/// assert_eq!(outbox.stats().await?.delivered, 1);
/// outbox.shutdown(Duration::from_secs(5)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Outbox {
    shared: Arc<Shared>,
    stop: watch::Sender<Option<Instant>>,
    /// The runner task until a shutdown has seen it end.
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Outbox {
    /// Starts building an outbox over `store` that delivers through `sink`.
    pub fn builder(store: Arc<dyn Store>, sink: impl Sink) -> OutboxBuilder {
        OutboxBuilder {
            store,
            sink: Arc::new(sink),
            policy: RetryPolicy::default(),
            config: RunnerConfig::default(),
            clock: None,
            online: None,
            resolver: Arc::new(ParkOnConflict),
            events: crate::runner::event_channel(),
        }
    }

    /// Durably enqueues one record and wakes the runner.
    pub async fn enqueue(&self, record: NewRecord) -> Result<RecordId> {
        let ids = self.enqueue_batch(vec![record]).await?;
        ids.into_iter().next().ok_or_else(|| Error::Backend {
            detail: "the store returned no id for an enqueued record".into(),
            source: None,
        })
    }

    /// Durably enqueues a batch, all or nothing, and wakes the runner once.
    pub async fn enqueue_batch(&self, records: Vec<NewRecord>) -> Result<Vec<RecordId>> {
        let groups: Vec<Option<String>> = records.iter().map(|r| r.group.clone()).collect();
        let enqueued = self
            .shared
            .store
            .enqueue(records, self.shared.now())
            .await?;
        self.announce(&enqueued, groups);
        Ok(enqueued.ids)
    }

    /// Announces records that a transaction of the caller's own has committed: sends
    /// [`Event::Enqueued`] for each (or [`Event::Superseded`] for one that replaced an earlier
    /// waiting write, as [`Enqueued::replaced`] says), exactly as [`Outbox::enqueue_batch`]
    /// does, and wakes the runner once.
    ///
    /// `enqueued` is what the store's in-transaction enqueue returned, and `groups[i]` the
    /// group of the `i`-th record of that batch (a missing entry reads as no group). Call it
    /// only after the commit succeeded: the events say the records are durable. The store
    /// crates wrap this in their commit helpers (`enqueue_pending(..)` then `commit(tx,
    /// &outbox)` in `outbox-sqlite`, `outbox-redb` and `outbox-postgres`), which are the
    /// path to use; this is for a transaction those helpers do not cover.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, Event, NewRecord, Outbox, Outcome, Record, Store};
    /// use outbox_memory::MemoryStore;
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(store.clone(), sink).start().await?;
    /// let mut events = outbox.events();
    ///
    /// // Written (and committed) by the application's own transaction, out of the handle's sight.
    /// let records = vec![NewRecord::new(b"paid".to_vec()).in_group("order-7")];
    /// let groups: Vec<Option<String>> = records.iter().map(|r| r.group.clone()).collect();
    /// let enqueued = store.enqueue(records, 1_000).await?;
    ///
    /// // Announced once committed: the event goes out and the runner wakes.
    /// outbox.committed(&enqueued, &groups);
    /// let announced = loop {
    ///     // (A runner awake already may report the delivery's start first.)
    ///     match events.recv().await.unwrap() {
    ///         event @ Event::Enqueued { .. } => break event,
    ///         _ => {}
    ///     }
    /// };
    /// assert_eq!(announced, Event::Enqueued { id: enqueued[0], group: Some("order-7".into()) });
    /// # Ok(())
    /// # }
    /// ```
    pub fn committed(&self, enqueued: &Enqueued, groups: &[Option<String>]) {
        self.announce(enqueued, groups.iter().cloned());
    }

    /// Sends one `Enqueued` or `Superseded` event per record of `enqueued`, then wakes the
    /// runner: the one announcement of both the handle's enqueues and the caller's commits.
    fn announce(&self, enqueued: &Enqueued, groups: impl IntoIterator<Item = Option<String>>) {
        let groups = groups.into_iter().chain(std::iter::repeat(None));
        for (index, (id, group)) in enqueued.iter().zip(groups).enumerate() {
            self.shared.emit(if enqueued.replaced(index) {
                Event::Superseded { id: *id, group }
            } else {
                Event::Enqueued { id: *id, group }
            });
        }
        self.notify();
    }

    /// The time on this outbox's clock, the one its runner schedules with (the server's, for a
    /// PostgreSQL fleet that shares its clock): the `now` to give a store's in-transaction
    /// enqueue, so those records are due on the runner's clock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, Outbox, Outcome, Record, TokioClock};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink)
    ///     .clock(Arc::new(TokioClock::starting_at(1_700_000_000_000)))
    ///     .start()
    ///     .await?;
    /// assert!(outbox.now() >= 1_700_000_000_000);
    /// # Ok(())
    /// # }
    /// ```
    pub fn now(&self) -> Millis {
        self.shared.now()
    }

    /// Wakes the runner. A transaction of your own that enqueued through a store's
    /// `enqueue_pending` and committed with its `commit(tx, &outbox)` has woken it already
    /// (and sent the records' events); see also [`Outbox::committed`].
    pub fn notify(&self) {
        self.shared.wake.notify_one();
    }

    /// A cloneable handle that only wakes the runner, for tasks that learn of new records
    /// elsewhere (a database notification, another process's enqueue).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, Outbox, Outcome, Record};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?;
    /// let notifier = outbox.notifier();
    /// tokio::spawn(async move { notifier.notify() });
    /// # Ok(())
    /// # }
    /// ```
    pub fn notifier(&self) -> Notifier {
        Notifier {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Counts per state, held-back records, the oldest undelivered record, the next deadline,
    /// the persisted halt and the link as this runner sees it.
    pub async fn stats(&self) -> Result<Stats> {
        let mut stats = self.shared.store.stats().await?;
        stats.link = Some(self.shared.link());
        Ok(stats)
    }

    /// A page of records (see [`ListQuery`]).
    pub async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        self.shared.store.list(query).await
    }

    /// One record.
    pub async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.shared.store.get(id).await
    }

    /// A page of tombstones of discarded records.
    pub async fn tombstones(
        &self,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<Tombstone>> {
        self.shared.store.tombstones(after, limit).await
    }

    /// True while a halt holds the runner, and after [`Outbox::resume`] until the store has
    /// cleared the halt (a resume that finds a newer halt leaves it true).
    pub fn is_halted(&self) -> bool {
        self.shared.halted.load(Ordering::SeqCst)
    }

    /// Subscribes to events from now on: what the runner said at its start (records its
    /// recovery parked, rows the store cannot read) may have gone by already; subscribe with
    /// [`OutboxBuilder::events`] to have those too. The stream ends (`RecvError::Closed`) once
    /// the last handle is dropped; a shutdown alone does not end it, since the handle can
    /// still enqueue and its verbs still send events.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// The store under this outbox.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    /// Waits until no claimable record is due and this runner holds nothing in flight, or
    /// returns [`Error::Timeout`]. Records scheduled for later do not count. Due records wait
    /// while the runner waits out a server's `Retry-After` or, after a time without any answer,
    /// its `relink_spread` ([`RunnerConfig`]); a `timeout` shorter than
    /// that wait returns the timeout error, and the records stay queued. It also waits for the
    /// runner's look for rows the store cannot decode, made once it is first idle after its
    /// start (unless that look outgrew the store's deadline and was put off, or failed), so the
    /// [`Event::Unreadable`] of each such row has been sent when it returns.
    pub async fn flush(&self, timeout: Duration) -> Result<()> {
        let mut progress = self.shared.progress.subscribe();
        let settle = async {
            loop {
                progress.borrow_and_update();
                if self.settled().await? {
                    return Ok(());
                }
                if self.shared.stopped.load(Ordering::SeqCst) {
                    return Err(Error::Stopped);
                }
                // Progress is bumped after every round, so this never misses the last one.
                if progress.changed().await.is_err() {
                    return Err(Error::Stopped);
                }
            }
        };
        tokio::time::timeout(timeout, settle)
            .await
            .map_err(|_| Error::Timeout(timeout))?
    }

    /// Stops the runner: no new delivery starts, deliveries under way get up to `timeout` to
    /// report, and every record is left with its outcome recorded or its lease released.
    /// Returns [`Error::Timeout`] if that did not finish in time (the release then goes on in
    /// the background).
    ///
    /// It takes `&self`, so any holder of a shared handle can call it. Calling it again is
    /// fine: the first call's grace stands, and a later call waits (up to its own `timeout`)
    /// for the same runner to end, or returns at once if it has ended. The store stays
    /// readable and writable through the handle, but nothing delivers any more: `flush` then
    /// returns [`Error::Stopped`] while anything is due.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use outbox_core::{sink_fn, Outbox, Outcome, Record};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Arc::new(Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?);
    /// let shared = Arc::clone(&outbox);
    /// tokio::spawn(async move { shared.shutdown(Duration::from_secs(5)).await }).await.unwrap()?;
    /// outbox.shutdown(Duration::from_secs(5)).await?; // already stopped: returns at once
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) -> Result<()> {
        // A huge timeout must not overflow the clock: past a day it means "wait for them".
        let grace = Instant::now()
            .checked_add(timeout.mul_f32(0.75))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        self.stop.send_if_modified(|stop| {
            if stop.is_some() {
                return false;
            }
            *stop = Some(grace);
            true
        });
        let join = async {
            let mut task = self.task.lock().await;
            let Some(running) = task.as_mut() else {
                return Ok(());
            };
            // Cancelled by the timeout, the handle stays for a later call to wait on.
            let joined = running.await;
            *task = None;
            joined.map_err(Error::backend)
        };
        tokio::time::timeout(timeout, join)
            .await
            .map_err(|_| Error::Timeout(timeout))?
    }

    async fn settled(&self) -> Result<bool> {
        // A runner holding records or looking is not settled, whatever the store says: no
        // store call while it is busy (`flush` looks again at its next progress).
        if self.runner_busy() {
            return Ok(false);
        }
        // The store first, then what the runner holds: the runner counts a claim as held
        // before it reaches the store, so records it claims between the two reads are seen
        // either as due or as held, never as neither.
        let due = self.shared.store.next_due().await?;
        if self.runner_busy() {
            return Ok(false);
        }
        Ok(due.is_none_or(|at| at > self.shared.now()))
    }

    /// Whether the runner holds records in flight or is making its look for unreadable rows.
    fn runner_busy(&self) -> bool {
        self.shared.holding.load(Ordering::SeqCst) > 0 || self.shared.looking.load(Ordering::SeqCst)
    }

    async fn record(&self, id: RecordId) -> Result<Record> {
        self.shared
            .store
            .get(id)
            .await?
            .ok_or(Error::NoSuchRecord(id))
    }
}

/// Wakes an outbox's runner; see [`Outbox::notifier`]. Waking a stopped runner does nothing,
/// and neither does waking one whose outbox is gone: a notifier does not keep the outbox (nor
/// its event stream) alive.
#[derive(Clone, Debug)]
pub struct Notifier {
    shared: Weak<Shared>,
}

impl Notifier {
    /// Wakes the runner (wake-ups that arrive during a drain coalesce into one more round).
    pub fn notify(&self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.wake.notify_one();
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // Unless a shutdown already set its grace, stop at once: deliveries are abandoned and
        // their records released.
        self.stop.send_if_modified(|stop| {
            if stop.is_some() {
                return false;
            }
            *stop = Some(Instant::now());
            true
        });
    }
}
