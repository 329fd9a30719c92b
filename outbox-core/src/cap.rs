//! The size cap: the most records and payload bytes a store holds, and the one rule that
//! refuses an enqueue that would pass it.
//!
//! A device with little storage and a server gone for weeks would otherwise fill its disk. A
//! store opened with a [`Cap`] counts what it holds ([`Usage`]: every record it keeps, rejected
//! ones too, since they occupy the disk until pruned, and their payload bytes) and asks
//! [`Cap::admit`] before each enqueue, in the same transaction as the enqueue, inside a
//! caller's own transaction too. A refused enqueue is [`Error::QueueFull`] and changes nothing:
//! none of the batch is written, nothing already queued is touched, and the caller's own
//! writes in its transaction may still commit. Deliveries, discards and prunes free room.

use std::fmt;

use crate::error::{Error, Result};

/// Which limit of a [`Cap`] an enqueue would pass.
///
/// ```
/// use outbox_core::CapLimit;
/// assert_eq!(CapLimit::Records.to_string(), "records");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CapLimit {
    /// [`Cap::max_records`].
    Records,
    /// [`Cap::max_bytes`].
    Bytes,
}

impl fmt::Display for CapLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CapLimit::Records => "records",
            CapLimit::Bytes => "payload bytes",
        })
    }
}

/// What a store holds, as its cap counts it: every record (pending, retrying, in flight,
/// needs-attention, rejected) and the bytes of their payloads.
///
/// ```
/// use outbox_core::Usage;
/// let usage = Usage { records: 3, bytes: 96 };
/// assert_eq!(usage.records, 3);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Records held.
    pub records: u64,
    /// Payload bytes of those records.
    pub bytes: u64,
}

/// The most a store holds; no limit by default.
///
/// ```
/// use outbox_core::{Cap, CapLimit, Error, Usage};
///
/// let cap = Cap::none().with_max_records(1_000).with_max_bytes(1 << 20);
/// let full = Usage { records: 1_000, bytes: 64_000 };
/// assert!(cap.admit(Usage { records: 999, bytes: 63_936 }, 1, 64).is_ok());
/// let err = cap.admit(full, 1, 64).unwrap_err();
/// assert!(matches!(err, Error::QueueFull { limit: CapLimit::Records, max: 1_000, used: 1_000, adding: 1 }));
/// // A write that adds nothing (it replaced a waiting one, no larger) always goes in.
/// assert!(cap.admit(full, 0, 0).is_ok());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cap {
    /// The most records held (rejected ones included); `None` for no limit.
    pub max_records: Option<u64>,
    /// The most payload bytes held; `None` for no limit.
    pub max_bytes: Option<u64>,
}

impl Cap {
    /// No limit: every enqueue within the payload limit goes in.
    pub fn none() -> Cap {
        Cap::default()
    }

    /// At most `max` records.
    #[must_use]
    pub fn with_max_records(mut self, max: u64) -> Cap {
        self.max_records = Some(max);
        self
    }

    /// At most `max` payload bytes.
    #[must_use]
    pub fn with_max_bytes(mut self, max: u64) -> Cap {
        self.max_bytes = Some(max);
        self
    }

    /// True when neither limit is set: a store need not count anything for it.
    pub fn is_none(&self) -> bool {
        self.max_records.is_none() && self.max_bytes.is_none()
    }

    /// The one rule every store applies before an enqueue: with `usage` held now, may a
    /// write adding `records` records and `bytes` payload bytes (net: a write that replaces a
    /// waiting one adds no record, and the difference of the payloads) go in? An addition
    /// that would take a count past its limit is refused with [`Error::QueueFull`] naming the
    /// limit, the usage and the addition; one that adds nothing always goes in, so a store
    /// above a cap lowered since still takes writes that do not grow it.
    pub fn admit(&self, usage: Usage, records: u64, bytes: u64) -> Result<()> {
        let checks = [
            (CapLimit::Records, self.max_records, usage.records, records),
            (CapLimit::Bytes, self.max_bytes, usage.bytes, bytes),
        ];
        for (limit, max, used, adding) in checks {
            if let Some(max) = max {
                if adding > 0 && used.saturating_add(adding) > max {
                    return Err(Error::QueueFull {
                        limit,
                        max,
                        used,
                        adding,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_record_that_fits_goes_in_and_the_next_is_refused() {
        let cap = Cap::none().with_max_records(3);
        let at = |records| Usage { records, bytes: 0 };
        assert!(cap.admit(at(2), 1, 10).is_ok());
        assert!(cap.admit(at(0), 3, 10).is_ok());
        assert!(matches!(
            cap.admit(at(1), 3, 10),
            Err(Error::QueueFull {
                limit: CapLimit::Records,
                max: 3,
                used: 1,
                adding: 3
            })
        ));
    }

    #[test]
    fn bytes_are_checked_on_their_own_and_no_cap_admits_everything() {
        let cap = Cap::none().with_max_bytes(100);
        let usage = Usage {
            records: 1_000_000,
            bytes: 60,
        };
        assert!(cap.admit(usage, 5, 40).is_ok());
        let err = cap.admit(usage, 1, 41).unwrap_err();
        assert!(matches!(
            err,
            Error::QueueFull {
                limit: CapLimit::Bytes,
                max: 100,
                used: 60,
                adding: 41
            }
        ));
        assert_eq!(
            err.to_string(),
            "the outbox is full: 60 of at most 100 payload bytes held, 41 more refused"
        );
        assert!(!err.is_temporary());
        let huge = Usage {
            records: u64::MAX,
            bytes: u64::MAX,
        };
        assert!(Cap::none().admit(huge, 1, 1).is_ok());
        assert!(cap.admit(huge, 0, 0).is_ok());
    }
}
