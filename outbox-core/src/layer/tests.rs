//! The layer tests: every operation forwarded and entered once, and what `enter` holds dropped
//! with the call.

use std::sync::Mutex;

use super::*;
use crate::record::NewRecord;

/// A store that records which of its methods were called, to see the layer forward each.
#[derive(Debug, Default)]
struct Recorder {
    calls: Mutex<Vec<&'static str>>,
}

impl Recorder {
    fn called(&self, name: &'static str) {
        self.calls.lock().unwrap().push(name);
    }
}

#[async_trait]
impl Store for Recorder {
    async fn enqueue(&self, _: Vec<NewRecord>, _: Millis) -> Result<Enqueued> {
        self.called("enqueue");
        Ok(Enqueued::fresh(vec![RecordId(9)]))
    }
    async fn claim(&self, _: Claim) -> Result<Vec<Record>> {
        self.called("claim");
        Ok(vec![])
    }
    async fn renew(&self, _: &[RecordId], _: Lease) -> Result<()> {
        self.called("renew");
        Ok(())
    }
    async fn apply(&self, _: Vec<Transition>) -> Result<Applied> {
        self.called("apply");
        Ok(Applied::default())
    }
    async fn round(&self, _: Vec<Transition>, _: Option<Claim>) -> Result<Round> {
        self.called("round");
        Ok(Round::default())
    }
    async fn expired(&self, _: Millis, _: usize) -> Result<Vec<Record>> {
        self.called("expired");
        Ok(vec![])
    }
    async fn stepped_back(&self, _: Millis, _: usize) -> Result<Vec<Record>> {
        self.called("stepped_back");
        Ok(vec![])
    }
    async fn get(&self, _: RecordId) -> Result<Option<Record>> {
        self.called("get");
        Ok(None)
    }
    async fn list(&self, _: &ListQuery) -> Result<Vec<Record>> {
        self.called("list");
        Ok(vec![])
    }
    async fn tombstones(&self, _: Option<RecordId>, _: usize) -> Result<Vec<Tombstone>> {
        self.called("tombstones");
        Ok(vec![])
    }
    async fn stats(&self) -> Result<Stats> {
        self.called("stats");
        Ok(Stats::default())
    }
    async fn next_due(&self) -> Result<Option<Millis>> {
        self.called("next_due");
        Ok(Some(5))
    }
    async fn halt(&self) -> Result<Option<Halt>> {
        self.called("halt");
        Ok(None)
    }
    async fn set_halt(&self, _: Option<Halt>) -> Result<()> {
        self.called("set_halt");
        Ok(())
    }
    async fn clear_halt_if(&self, _: &Halt) -> Result<Option<Halt>> {
        self.called("clear_halt_if");
        Ok(None)
    }
    async fn prune(&self, _: Millis) -> Result<u64> {
        self.called("prune");
        Ok(3)
    }

    async fn unreadable(&self, _: usize) -> Result<Vec<Unreadable>> {
        self.called("unreadable");
        Ok(vec![Unreadable::new(RecordId(4), "bad")])
    }

    async fn discard_unreadable(&self, _: RecordId, _: Millis) -> Result<bool> {
        self.called("discard_unreadable");
        Ok(true)
    }

    async fn unreadable_row(&self, id: RecordId) -> Result<Option<Unreadable>> {
        self.called("unreadable_row");
        Ok(Some(Unreadable::new(id, "bad")))
    }

    async fn common_errors(&self, _: usize) -> Result<Vec<ErrorCount>> {
        self.called("common_errors");
        Ok(vec![])
    }
}

/// Forwards everything, and notes each call it is entered for.
#[derive(Debug, Default)]
struct Pass {
    inner: Recorder,
    entered: Mutex<Vec<Operation>>,
}

impl StoreLayer for Pass {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    fn enter(&self, op: Operation) -> Entered {
        self.entered.lock().unwrap().push(op);
        Entered::none()
    }
}

#[tokio::test]
async fn a_layer_forwards_every_operation_and_enters_each_once() {
    let layer = Pass::default();
    let store: &dyn Store = &layer;
    let claim = Claim {
        now: 0,
        limit: 1,
        lease: Lease { token: 1, until: 2 },
    };
    assert_eq!(store.enqueue(vec![], 0).await.unwrap(), vec![RecordId(9)]);
    store.claim(claim).await.unwrap();
    store.renew(&[], claim.lease).await.unwrap();
    store.apply(vec![]).await.unwrap();
    store.round(vec![], Some(claim)).await.unwrap();
    store.expired(0, 1).await.unwrap();
    store.stepped_back(0, 1).await.unwrap();
    store.get(RecordId(1)).await.unwrap();
    store.list(&ListQuery::new(1)).await.unwrap();
    store.tombstones(None, 1).await.unwrap();
    store.stats().await.unwrap();
    assert_eq!(store.next_due().await.unwrap(), Some(5));
    store.halt().await.unwrap();
    store.set_halt(None).await.unwrap();
    let seen = Halt {
        reason: "r".into(),
        since: 1,
    };
    assert_eq!(store.clear_halt_if(&seen).await.unwrap(), None);
    assert_eq!(store.prune(0).await.unwrap(), 3);
    assert_eq!(store.unreadable(1).await.unwrap().len(), 1);
    assert!(store.discard_unreadable(RecordId(4), 0).await.unwrap());
    assert!(store.unreadable_row(RecordId(4)).await.unwrap().is_some());
    store.common_errors(5).await.unwrap();
    let names: Vec<&str> = Operation::ALL.iter().map(|op| op.name()).collect();
    assert_eq!(*layer.inner.calls.lock().unwrap(), names);
    assert_eq!(*layer.entered.lock().unwrap(), Operation::ALL.to_vec());
}

/// Drops flag the end of the call's scope.
struct Flag<'a>(&'a Mutex<bool>);

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = true;
    }
}

#[test]
fn what_enter_holds_is_dropped_with_the_call() {
    static DROPPED: Mutex<bool> = Mutex::new(false);
    let entered = Entered::hold(Flag(&DROPPED));
    assert!(!*DROPPED.lock().unwrap());
    drop(entered);
    assert!(*DROPPED.lock().unwrap());
}
