//! Records enqueued inside a transaction of the caller's, announced once it has committed.

use super::Outbox;
use crate::record::RecordId;
use crate::store::Enqueued;

/// Records enqueued inside a transaction of the caller's that has not committed yet, with what
/// an [`Outbox`] needs to announce them once it has (their ids, which replaced an earlier
/// write, their groups). Each store's `enqueue_pending` returns one inside its own
/// `PendingEnqueue`, whose `commit(tx, &outbox)` commits and then calls
/// [`Uncommitted::announce`].
///
/// ```
/// use outbox_core::{Enqueued, RecordId, Uncommitted};
/// let pending = Uncommitted::new(Enqueued::fresh(vec![RecordId(3)]), vec![Some("order-7".into())]);
/// assert_eq!((pending.ids(), pending.groups()), (&[RecordId(3)][..], &[Some("order-7".to_owned())][..]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uncommitted {
    enqueued: Enqueued,
    groups: Vec<Option<String>>,
}

impl Uncommitted {
    /// What an in-transaction enqueue did, and the group of each record in the batch's order.
    pub fn new(enqueued: Enqueued, groups: Vec<Option<String>>) -> Self {
        Uncommitted { enqueued, groups }
    }

    /// The ids the records will have once committed, in the batch's order (to store beside
    /// your business row, say).
    pub fn ids(&self) -> &[RecordId] {
        &self.enqueued.ids
    }

    /// The ids, and which records replaced an earlier waiting write.
    pub fn enqueued(&self) -> &Enqueued {
        &self.enqueued
    }

    /// The group of each record, in the batch's order.
    pub fn groups(&self) -> &[Option<String>] {
        &self.groups
    }

    /// Announces the records through `outbox` ([`Outbox::committed`]): call it once their
    /// transaction has committed. Returns what was enqueued.
    pub fn announce(self, outbox: &Outbox) -> Enqueued {
        outbox.announce(&self.enqueued, self.groups);
        self.enqueued
    }
}
