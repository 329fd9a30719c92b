//! [`WakeOnlyRunner`]: the checks every store's in-transaction enqueue helper must pass, in one
//! place. A store commits a batch with its own helper (`enqueue_pending`, then
//! `PendingEnqueue::commit`); this runner shows whether that announced the records and woke it.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    sink_fn, Clock, Enqueued, Event, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig,
    Store,
};
use tokio::sync::{broadcast, mpsc};

/// How long (real or paused time) the checks wait for a delivery or for the runner to settle.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A runner with no safety poll that delivers everything, and records what its sink saw: only
/// a wake-up makes it deliver, so a delivery proves that something woke it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use outbox_core::{Store, TokioClock};
/// use outbox_testkit::WakeOnlyRunner;
///
/// let store = Arc::new(outbox_memory::MemoryStore::new());
/// let mut runner = WakeOnlyRunner::start(store.clone(), Arc::new(TokioClock::new())).await;
/// let batch = WakeOnlyRunner::batch("doc-1");
/// // A store's helper would enqueue inside the caller's transaction and commit; here the
/// // store enqueues and the handle is told, as that helper's commit does.
/// let enqueued = store.enqueue(batch.clone(), runner.outbox.now()).await.unwrap();
/// runner.outbox.committed(&enqueued, &[None, Some("doc-1".into()), Some("doc-1".into())]);
/// runner.expect_announced(&enqueued.ids, &enqueued, "doc-1").await;
/// runner.shutdown().await;
/// # }
/// ```
pub struct WakeOnlyRunner {
    /// The handle the store's helper commits through.
    pub outbox: Outbox,
    events: broadcast::Receiver<Event>,
    deliveries: mpsc::UnboundedReceiver<Record>,
}

impl WakeOnlyRunner {
    /// Starts the runner on `store` with `clock`, and waits until it has gone idle.
    ///
    /// # Panics
    /// When the runner cannot start or settle: this is a test helper.
    pub async fn start(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> WakeOnlyRunner {
        let (delivered, deliveries) = mpsc::unbounded_channel::<Record>();
        let sink = sink_fn(move |record: Record| {
            let delivered = delivered.clone();
            async move {
                let _ = delivered.send(record);
                Outcome::Delivered
            }
        });
        let outbox = Outbox::builder(store, sink)
            .clock(clock)
            .config(RunnerConfig {
                safety_poll: None,
                ..RunnerConfig::default()
            })
            .start()
            .await
            .expect("the runner starts");
        let events = outbox.events();
        outbox.flush(PATIENCE).await.expect("the runner settles");
        WakeOnlyRunner {
            outbox,
            events,
            deliveries,
        }
    }

    /// The batch the checks expect: a plain record, then two edits of one title in `group`
    /// (the second replaces the first).
    pub fn batch(group: &str) -> Vec<NewRecord> {
        let edit = |title: &str| {
            NewRecord::new(title.as_bytes().to_vec())
                .in_group(group)
                .replacing(format!("{group}/title"))
        };
        vec![
            NewRecord::new(b"create".to_vec()),
            edit("Plans"),
            edit("Plans v2"),
        ]
    }

    /// The events sent so far, without waiting.
    pub fn events_so_far(&mut self) -> Vec<Event> {
        let mut seen = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            seen.push(event);
        }
        seen
    }

    /// Checks that [`WakeOnlyRunner::batch`] in `group`, enqueued with the ids `pending` and
    /// committed as `enqueued`, was announced (`Enqueued`, `Enqueued`, `Superseded`) and
    /// delivered with no `notify()` and no poll: both records, the edit with its last payload.
    ///
    /// # Panics
    /// On any difference: this is a test helper.
    pub async fn expect_announced(
        &mut self,
        pending: &[RecordId],
        enqueued: &Enqueued,
        group: &str,
    ) {
        assert_eq!(pending.len(), 3, "the batch of three");
        assert_eq!(pending[1], pending[2], "the second edit replaces the first");
        assert_eq!(
            enqueued.ids, pending,
            "the commit reports the ids of the enqueue"
        );
        assert_eq!(enqueued.superseded, vec![2]);
        // Sent by the commit itself; the woken runner may already report its deliveries.
        let announced: Vec<Event> = self
            .events_so_far()
            .into_iter()
            .filter(|e| matches!(e, Event::Enqueued { .. } | Event::Superseded { .. }))
            .collect();
        let group = Some(group.to_owned());
        assert_eq!(
            announced,
            vec![
                Event::Enqueued {
                    id: pending[0],
                    group: None
                },
                Event::Enqueued {
                    id: pending[1],
                    group: group.clone()
                },
                Event::Superseded {
                    id: pending[1],
                    group
                },
            ]
        );
        let mut payloads = Vec::new();
        for _ in 0..2 {
            let delivered = tokio::time::timeout(PATIENCE, self.deliveries.recv())
                .await
                .expect("a delivery woken by the commit")
                .expect("the sink is alive");
            payloads.push(delivered.payload);
        }
        payloads.sort();
        assert_eq!(payloads, vec![b"Plans v2".to_vec(), b"create".to_vec()]);
        self.outbox.flush(PATIENCE).await.expect("flush");
        let stats = self.outbox.stats().await.expect("stats");
        assert_eq!((stats.delivered, stats.undelivered()), (2, 0));
    }

    /// Checks that nothing was announced or delivered (after a rollback, an abort or a failed
    /// commit), once the runner has settled.
    ///
    /// # Panics
    /// When something was: this is a test helper.
    pub async fn expect_nothing_announced(&mut self) {
        self.outbox
            .flush(PATIENCE)
            .await
            .expect("the runner settles");
        assert_eq!(self.events_so_far(), vec![], "no event");
        assert!(self.deliveries.try_recv().is_err(), "nothing delivered");
    }

    /// Shuts the runner down.
    pub async fn shutdown(self) {
        self.outbox.shutdown(PATIENCE).await.expect("shutdown");
    }
}
