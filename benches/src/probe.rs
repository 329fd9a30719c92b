//! A [`Store`] wrapper that counts the calls the runner makes, to explain a drain's speed:
//! every `claim`, `apply`, `round` and `renew` of a persistent store is a durable commit.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use outbox_core::layer::{Entered, Operation, StoreLayer};
use outbox_core::{async_trait, Applied, Claim, Result, Round, Store, Transition};

/// How many times each write the runner needs was called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// `claim` calls, including those that found nothing due.
    pub claims: u64,
    /// `apply` calls: outcomes and releases written.
    pub applies: u64,
    /// `round` calls: a round's outcomes and its claim in one commit.
    pub rounds: u64,
    /// Transitions written by those `apply` and `round` calls.
    pub transitions: u64,
    /// `renew` calls.
    pub renews: u64,
}

impl Calls {
    /// Write calls (each a commit on a persistent store).
    pub fn commits(&self) -> u64 {
        self.claims + self.applies + self.rounds + self.renews
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
/// assert!(calls.claims + calls.rounds >= 1 && calls.transitions == 10);
/// # Ok(())
/// # }
/// ```
pub struct Counting {
    inner: Arc<dyn Store>,
    claims: AtomicU64,
    applies: AtomicU64,
    rounds: AtomicU64,
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
            rounds: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
            renews: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn calls(&self) -> Calls {
        Calls {
            claims: self.claims.load(Ordering::Relaxed),
            applies: self.applies.load(Ordering::Relaxed),
            rounds: self.rounds.load(Ordering::Relaxed),
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
impl StoreLayer for Counting {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    fn enter(&self, op: Operation) -> Entered {
        let counter = match op {
            Operation::Claim => &self.claims,
            Operation::Apply => &self.applies,
            Operation::Round => &self.rounds,
            Operation::Renew => &self.renews,
            _ => return Entered::none(),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Entered::none()
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.transitions
            .fetch_add(transitions.len() as u64, Ordering::Relaxed);
        self.inner.apply(transitions).await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        self.transitions
            .fetch_add(outcomes.len() as u64, Ordering::Relaxed);
        self.inner.round(outcomes, claim).await
    }
}
