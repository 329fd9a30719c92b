//! A store wrapper that keeps tokio's paused clock still while the store works.
//!
//! Under `tokio::time::pause` a current-thread runtime advances its clock by itself whenever
//! it has nothing to run. A backend that waits for its own engine thread (a writer thread, a
//! channel) looks idle to tokio, so the clock would leap to the next timer (a lease renewal, a
//! scenario's patience) in the middle of a store call. Tokio holds the clock still while a
//! `spawn_blocking` task runs, so each call here runs on the blocking pool, driven there with
//! [`Handle::block_on`](tokio::runtime::Handle::block_on). A store that itself sleeps on tokio's
//! clock inside a call would wait forever under this wrapper; none should.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{
    Applied, Claim, Error, Halt, Lease, ListQuery, Millis, NewRecord, Record, RecordId, Result,
    Round, Stats, Store, Tombstone, Transition,
};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PausedClockStore {
    inner: Arc<dyn Store>,
}

impl PausedClockStore {
    pub(crate) fn wrap(inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(PausedClockStore { inner })
    }

    async fn run<T, F, Fut>(&self, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn Store>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>>,
    {
        let store = Arc::clone(&self.inner);
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || handle.block_on(call(store)))
            .await
            .map_err(Error::backend)?
    }
}

#[async_trait]
impl Store for PausedClockStore {
    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Vec<RecordId>> {
        self.run(move |s| async move { s.enqueue(records, now).await })
            .await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        self.run(move |s| async move { s.claim(claim).await }).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let ids = ids.to_vec();
        self.run(move |s| async move { s.renew(&ids, lease).await })
            .await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        self.run(move |s| async move { s.apply(transitions).await })
            .await
    }

    async fn expired(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |s| async move { s.expired(now, limit).await })
            .await
    }

    async fn stepped_back(&self, now: Millis, limit: usize) -> Result<Vec<Record>> {
        self.run(move |s| async move { s.stepped_back(now, limit).await })
            .await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        self.run(move |s| async move { s.round(outcomes, claim).await })
            .await
    }

    async fn halt(&self) -> Result<Option<Halt>> {
        self.run(|s| async move { s.halt().await }).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        self.run(move |s| async move { s.set_halt(halt).await })
            .await
    }

    async fn get(&self, id: RecordId) -> Result<Option<Record>> {
        self.run(move |s| async move { s.get(id).await }).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Record>> {
        let query = query.clone();
        self.run(move |s| async move { s.list(&query).await }).await
    }

    async fn tombstones(&self, after: Option<RecordId>, limit: usize) -> Result<Vec<Tombstone>> {
        self.run(move |s| async move { s.tombstones(after, limit).await })
            .await
    }

    async fn stats(&self) -> Result<Stats> {
        self.run(|s| async move { s.stats().await }).await
    }

    async fn next_due(&self) -> Result<Option<Millis>> {
        self.run(|s| async move { s.next_due().await }).await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.run(move |s| async move { s.prune(older_than).await })
            .await
    }
}
