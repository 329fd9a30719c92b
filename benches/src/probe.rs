//! A [`Store`] wrapper that counts the calls the runner makes, to explain a drain's speed:
//! every `claim`, `apply` and `renew` of a persistent store is a durable commit.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use outbox_core::{
    async_trait, Applied, Claim, Lease, ListQuery, Millis, NewRecord, Record, RecordId, Result,
    Stats, Store, Tombstone, Transition,
};

/// How many times each write the runner needs was called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// `claim` calls, including those that found nothing due.
    pub claims: u64,
    /// `apply` calls: outcomes and releases written.
    pub applies: u64,
    /// Transitions written by those `apply` calls.
    pub transitions: u64,
    /// `renew` calls.
    pub renews: u64,
}

impl Calls {
    /// Write calls (each a commit on a persistent store).
    pub fn commits(&self) -> u64 {
        self.claims + self.applies + self.renews
    }
}

/// Counts the write calls made through it and passes every call on to the store it wraps.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use std::sync::Arc;
/// use outbox_benches::probe::Counting;
/// use outbox_benches::{subject::StoreKind, workload};
///
/// let subject = StoreKind::Memory.open().await?;
/// let counting = Arc::new(Counting::new(Arc::clone(&subject.store)));
/// let store: Arc<dyn outbox_core::Store> = counting.clone();
/// workload::drain(&store, 10).await?;
/// let calls = counting.calls();
/// assert!(calls.claims >= 1 && calls.transitions == 10);
/// # Ok(())
/// # }
/// ```
pub struct Counting {
    inner: Arc<dyn Store>,
    claims: AtomicU64,
    applies: AtomicU64,
    transitions: AtomicU64,
    renews: AtomicU64,
}

impl Counting {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Counting {
            inner,
            claims: AtomicU64::new(0),
            applies: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
            renews: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn calls(&self) -> Calls {
        Calls {
            claims: self.claims.load(Ordering::Relaxed),
            applies: self.applies.load(Ordering::Relaxed),
            transitions: self.transitions.load(Ordering::Relaxed),
            renews: self.renews.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counting")
            .field("inner", &self.inner)
            .field("calls", &self.calls())
            .finish()
    }
}

#[async_trait]
impl Store for Counting {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Vec<RecordId>> {
        self.inner.enqueue(records, now).await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        self.claims.fetch_add(1, Ordering::Relaxed);
        self.inner.claim(claim).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        self.renews.fetch_add(1, Ordering::Relaxed);
        self.inner.renew(ids, lease).await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.applies.fetch_add(1, Ordering::Relaxed);
        self.transitions
            .fetch_add(transitions.len() as u64, Ordering::Relaxed);
        self.inner.apply(transitions).await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.inner.expired(now, limit).await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.inner.stepped_back(now, limit).await
    }

    async fn round(
        &self,
        outcomes: Vec<Transition>,
        claim: Option<Claim>,
    ) -> Result<outbox_core::Round> {
        self.inner.round(outcomes, claim).await
    }

    async fn halt(&self) -> Result<Option<outbox_core::Halt>> {
        self.inner.halt().await
    }

    async fn set_halt(&self, halt: Option<outbox_core::Halt>) -> Result<()> {
        self.inner.set_halt(halt).await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.inner.get(id).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        self.inner.list(query).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.inner.tombstones(after, limit).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.inner.stats().await
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.inner.next_due().await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.inner.prune(older_than).await
    }
}
