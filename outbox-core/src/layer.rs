//! Store layers: a wrapper around a [`Store`] that changes a few operations and passes the rest
//! through.
//!
//! A layer implements [`StoreLayer`]: it names the store it wraps ([`StoreLayer::inner`]) and
//! overrides only the operations it changes; every other operation forwards to the inner store.
//! The blanket `impl<L: StoreLayer> Store for L` makes any layer a full [`Store`], so layers
//! stack and hand over as `Arc<dyn Store>` like any backend.
//!
//! Each call through a layer first asks [`StoreLayer::enter`], which may return a value held for
//! the length of the call (and dropped when it ends), whichever operation it is: a layer that
//! needs to act around *every* call (count it, time it, hold a resource) overrides that alone.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox_core::Result<()> {
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use outbox_core::layer::{Operation, StoreLayer, Entered};
//! use outbox_core::{async_trait, Claim, Lease, NewRecord, Record, Result, Store};
//! use outbox_memory::MemoryStore;
//!
//! /// Counts every call and claims at most one record at a time.
//! #[derive(Debug)]
//! struct OneByOne {
//!     inner: MemoryStore,
//!     calls: AtomicU64,
//! }
//!
//! #[async_trait]
//! impl StoreLayer for OneByOne {
//!     fn inner(&self) -> &dyn Store {
//!         &self.inner
//!     }
//!
//!     fn enter(&self, _op: Operation) -> Entered {
//!         self.calls.fetch_add(1, Ordering::Relaxed);
//!         Entered::none()
//!     }
//!
//!     async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
//!         self.inner.claim(Claim { limit: claim.limit.min(1), ..claim }).await
//!     }
//! }
//!
//! let store = OneByOne { inner: MemoryStore::new(), calls: AtomicU64::new(0) };
//! let store: &dyn Store = &store;
//! store.enqueue(vec![NewRecord::new(b"a".to_vec()), NewRecord::new(b"b".to_vec())], 0).await?;
//! let claim = Claim { now: 0, limit: 10, lease: Lease { token: 1, until: 100 } };
//! assert_eq!(store.claim(claim).await?.len(), 1);
//! assert_eq!(store.stats().await?.pending, 1);
//! # Ok(())
//! # }
//! ```

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::Clock;
use crate::error::Result;
use crate::machine::Transition;
use crate::record::{Lease, Millis, NewRecord, Record, RecordId, Tombstone};
use crate::store::{Applied, Claim, Enqueued, ErrorCount, Halt, ListQuery, Round, Stats, Store};
use crate::unreadable::Unreadable;

/// One operation of the [`Store`] trait, as [`StoreLayer::enter`] is told it.
///
/// ```
/// use outbox_core::layer::Operation;
/// assert_eq!(Operation::Round.name(), "round");
/// assert!(Operation::Round.writes() && !Operation::Stats.writes());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// [`Store::enqueue`].
    Enqueue,
    /// [`Store::claim`].
    Claim,
    /// [`Store::renew`].
    Renew,
    /// [`Store::apply`].
    Apply,
    /// [`Store::round`].
    Round,
    /// [`Store::expired`].
    Expired,
    /// [`Store::stepped_back`].
    SteppedBack,
    /// [`Store::get`].
    Get,
    /// [`Store::list`].
    List,
    /// [`Store::tombstones`].
    Tombstones,
    /// [`Store::stats`].
    Stats,
    /// [`Store::next_due`].
    NextDue,
    /// [`Store::halt`].
    Halt,
    /// [`Store::set_halt`].
    SetHalt,
    /// [`Store::clear_halt_if`].
    ClearHaltIf,
    /// [`Store::prune`].
    Prune,
    /// [`Store::unreadable`].
    Unreadable,
    /// [`Store::discard_unreadable`].
    DiscardUnreadable,
    /// [`Store::unreadable_row`].
    UnreadableRow,
    /// [`Store::common_errors`].
    CommonErrors,
}

impl Operation {
    /// Every operation, in the trait's order.
    pub const ALL: [Operation; 20] = [
        Operation::Enqueue,
        Operation::Claim,
        Operation::Renew,
        Operation::Apply,
        Operation::Round,
        Operation::Expired,
        Operation::SteppedBack,
        Operation::Get,
        Operation::List,
        Operation::Tombstones,
        Operation::Stats,
        Operation::NextDue,
        Operation::Halt,
        Operation::SetHalt,
        Operation::ClearHaltIf,
        Operation::Prune,
        Operation::Unreadable,
        Operation::DiscardUnreadable,
        Operation::UnreadableRow,
        Operation::CommonErrors,
    ];

    /// The method's name.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Enqueue => "enqueue",
            Operation::Claim => "claim",
            Operation::Renew => "renew",
            Operation::Apply => "apply",
            Operation::Round => "round",
            Operation::Expired => "expired",
            Operation::SteppedBack => "stepped_back",
            Operation::Get => "get",
            Operation::List => "list",
            Operation::Tombstones => "tombstones",
            Operation::Stats => "stats",
            Operation::NextDue => "next_due",
            Operation::Halt => "halt",
            Operation::SetHalt => "set_halt",
            Operation::ClearHaltIf => "clear_halt_if",
            Operation::Prune => "prune",
            Operation::Unreadable => "unreadable",
            Operation::DiscardUnreadable => "discard_unreadable",
            Operation::UnreadableRow => "unreadable_row",
            Operation::CommonErrors => "common_errors",
        }
    }

    /// True for the operations that write (each a durable commit on a persistent store).
    pub fn writes(self) -> bool {
        matches!(
            self,
            Operation::Enqueue
                | Operation::Claim
                | Operation::Renew
                | Operation::Apply
                | Operation::Round
                | Operation::SetHalt
                | Operation::Prune
                | Operation::DiscardUnreadable
        )
    }
}

/// What [`StoreLayer::enter`] returns: a value held while the call runs and dropped when it
/// ends (or nothing).
///
/// ```
/// use outbox_core::layer::Entered;
/// let _nothing = Entered::none();
/// let _held = Entered::hold(String::from("dropped when the call ends"));
/// ```
#[must_use = "dropping it ends the call's scope at once"]
pub struct Entered(Option<Box<dyn Any + Send>>);

impl Entered {
    /// Nothing to hold.
    pub fn none() -> Self {
        Entered(None)
    }

    /// Holds `value` until the call ends.
    pub fn hold(value: impl Any + Send) -> Self {
        Entered(Some(Box::new(value)))
    }
}

impl Debug for Entered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Entered(held)"
        } else {
            "Entered(none)"
        })
    }
}

/// A wrapper around a store that overrides some operations and forwards the rest (see the
/// [module documentation](self)). Every method but [`inner`](StoreLayer::inner) has a default
/// that forwards to the inner store; the blanket implementation makes the layer a [`Store`].
#[async_trait]
pub trait StoreLayer: Debug + Send + Sync {
    /// The store this layer wraps.
    fn inner(&self) -> &dyn Store;

    /// Called as every call enters the layer, before the operation (forwarded or overridden)
    /// runs; the returned value is dropped when the call ends. Holds nothing by default.
    fn enter(&self, op: Operation) -> Entered {
        let _ = op;
        Entered::none()
    }

    /// [`Store::enqueue`]; forwards by default.
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        self.inner().enqueue(records, now).await
    }

    /// [`Store::claim`]; forwards by default.
    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        self.inner().claim(claim).await
    }

    /// [`Store::renew`]; forwards by default.
    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        self.inner().renew(ids, lease).await
    }

    /// [`Store::apply`]; forwards by default.
    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.inner().apply(transitions).await
    }

    /// [`Store::round`]; forwards by default.
    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        self.inner().round(outcomes, claim).await
    }

    /// [`Store::expired`]; forwards by default.
    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.inner().expired(now, limit).await
    }

    /// [`Store::stepped_back`]; forwards by default.
    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.inner().stepped_back(now, limit).await
    }

    /// [`Store::get`]; forwards by default.
    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.inner().get(id).await
    }

    /// [`Store::list`]; forwards by default.
    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        self.inner().list(query).await
    }

    /// [`Store::tombstones`]; forwards by default.
    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.inner().tombstones(after, limit).await
    }

    /// [`Store::stats`]; forwards by default.
    async fn stats(&self) -> Result<Stats> {
        self.inner().stats().await
    }

    /// [`Store::next_due`]; forwards by default.
    async fn next_due(&self) -> Result<Option<Millis>> {
        self.inner().next_due().await
    }

    /// [`Store::shared_clock`]; forwards by default, so a wrapped store's runner keeps the
    /// clock the store names.
    fn shared_clock(&self) -> Option<Arc<dyn Clock>> {
        self.inner().shared_clock()
    }

    /// [`Store::halt`]; forwards by default.
    async fn halt(&self) -> Result<Option<Halt>> {
        self.inner().halt().await
    }

    /// [`Store::set_halt`]; forwards by default.
    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.inner().set_halt(halt).await
    }

    /// [`Store::clear_halt_if`]; forwards by default.
    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        self.inner().clear_halt_if(seen).await
    }

    /// [`Store::prune`]; forwards by default.
    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.inner().prune(older_than).await
    }

    /// [`Store::unreadable`]; forwards by default.
    async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        self.inner().unreadable(limit).await
    }

    /// [`Store::discard_unreadable`]; forwards by default.
    async fn discard_unreadable(&self, id: RecordId, now: Millis) -> Result<bool> {
        self.inner().discard_unreadable(id, now).await
    }

    /// [`Store::unreadable_row`]; forwards by default (so the inner store's read of one row
    /// runs, not the trait's look through every row).
    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        self.inner().unreadable_row(id).await
    }

    /// [`Store::common_errors`]; forwards by default (so the inner store's own query runs,
    /// not the trait's record-by-record default).
    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        self.inner().common_errors(limit).await
    }
}

#[async_trait]
impl<L: StoreLayer> Store for L {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        let _entered = self.enter(Operation::Enqueue);
        StoreLayer::enqueue(self, records, now).await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        let _entered = self.enter(Operation::Claim);
        StoreLayer::claim(self, claim).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let _entered = self.enter(Operation::Renew);
        StoreLayer::renew(self, ids, lease).await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        let _entered = self.enter(Operation::Apply);
        StoreLayer::apply(self, transitions).await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        let _entered = self.enter(Operation::Round);
        StoreLayer::round(self, outcomes, claim).await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let _entered = self.enter(Operation::Expired);
        StoreLayer::expired(self, now, limit).await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        let _entered = self.enter(Operation::SteppedBack);
        StoreLayer::stepped_back(self, now, limit).await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        let _entered = self.enter(Operation::Get);
        StoreLayer::get(self, id).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let _entered = self.enter(Operation::List);
        StoreLayer::list(self, query).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        let _entered = self.enter(Operation::Tombstones);
        StoreLayer::tombstones(self, after, limit).await
    }

    async fn stats(&self) -> Result<Stats> {
        let _entered = self.enter(Operation::Stats);
        StoreLayer::stats(self).await
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        let _entered = self.enter(Operation::NextDue);
        StoreLayer::next_due(self).await
    }

    fn shared_clock(&self) -> Option<Arc<dyn Clock>> {
        StoreLayer::shared_clock(self)
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        let _entered = self.enter(Operation::Halt);
        StoreLayer::halt(self).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        let _entered = self.enter(Operation::SetHalt);
        StoreLayer::set_halt(self, halt).await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        let _entered = self.enter(Operation::ClearHaltIf);
        StoreLayer::clear_halt_if(self, seen).await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        let _entered = self.enter(Operation::Prune);
        StoreLayer::prune(self, older_than).await
    }

    async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        let _entered = self.enter(Operation::Unreadable);
        StoreLayer::unreadable(self, limit).await
    }

    async fn discard_unreadable(&self, id: RecordId, now: Millis) -> Result<bool> {
        let _entered = self.enter(Operation::DiscardUnreadable);
        StoreLayer::discard_unreadable(self, id, now).await
    }

    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        let _entered = self.enter(Operation::UnreadableRow);
        StoreLayer::unreadable_row(self, id).await
    }

    async fn common_errors(&self, limit: usize) -> Result<Vec<ErrorCount>> {
        let _entered = self.enter(Operation::CommonErrors);
        StoreLayer::common_errors(self, limit).await
    }
}

#[cfg(test)]
mod tests;
