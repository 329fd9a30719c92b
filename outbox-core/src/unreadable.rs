//! Rows a store holds but cannot decode: an old app version's encoding, a bit flip, a hand
//! edit. Such a row never stops the others: claim and stats pass it by, [`Store::unreadable`]
//! lists it with the reason, and [`Store::discard_unreadable`] removes it, keeping a
//! tombstone with what could be read.
//!
//! [`Store::unreadable`]: crate::Store::unreadable
//! [`Store::discard_unreadable`]: crate::Store::discard_unreadable

use std::fmt;

use crate::record::RecordId;

/// A row the store cannot decode, and why.
///
/// ```
/// use outbox_core::{RecordId, Unreadable};
/// let row = Unreadable::new(RecordId(42), "last_error is not UTF-8");
/// assert_eq!(row.to_string(), "row 42 cannot be read: last_error is not UTF-8");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unreadable {
    /// The row's id (the one part every backend can read: it is the row's key).
    pub id: RecordId,
    /// What could not be decoded, in words.
    pub reason: String,
}

impl Unreadable {
    /// A row `id` that cannot be read because of `reason`.
    pub fn new(id: RecordId, reason: impl Into<String>) -> Self {
        Unreadable {
            id,
            reason: reason.into(),
        }
    }

    /// The tombstone reason a discarded unreadable row keeps.
    ///
    /// ```
    /// use outbox_core::{RecordId, Unreadable};
    /// let row = Unreadable::new(RecordId(7), "unknown state code 9");
    /// assert_eq!(row.tombstone_reason(), "unreadable row discarded: unknown state code 9");
    /// ```
    pub fn tombstone_reason(&self) -> String {
        format!("unreadable row discarded: {}", self.reason)
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "row {} cannot be read: {}", self.id.0, self.reason)
    }
}
