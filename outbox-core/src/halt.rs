//! The halt: why a runner stopped delivering until a person resumes it, and since when, as
//! stores persist it (see [`Store::set_halt`](crate::Store::set_halt) and
//! [`Store::clear_halt_if`](crate::Store::clear_halt_if)).

use crate::record::Millis;

/// Why a runner stopped delivering until a person resumes it, and since when. Stores persist
/// it so that a restart stays halted.
///
/// ```
/// use outbox_core::Halt;
/// let halt = Halt { reason: "HTTP 401".into(), since: 1_000 };
/// assert_eq!(halt.reason, "HTTP 401");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    /// What the server said, or why the runner suspects a misconfiguration.
    pub reason: String,
    /// When the runner halted.
    pub since: Millis,
}

impl Halt {
    /// The compare-and-clear of [`Store::clear_halt_if`](crate::Store::clear_halt_if) on a
    /// halt held in `slot`: takes it if it is `seen`, leaves any other, and returns what the
    /// slot held. For a store that keeps its halt as a value under its own lock.
    ///
    /// ```
    /// use outbox_core::Halt;
    /// let shown = Halt { reason: "HTTP 401".into(), since: 1_000 };
    /// let newer = Halt { reason: "HTTP 403".into(), since: 2_000 };
    /// let mut slot = Some(newer.clone());
    /// assert_eq!(Halt::clear_if_seen(&mut slot, &shown), Some(newer.clone()));
    /// assert_eq!(slot, Some(newer.clone()), "another halt is left");
    /// assert_eq!(Halt::clear_if_seen(&mut slot, &newer), Some(newer));
    /// assert_eq!(slot, None);
    /// ```
    pub fn clear_if_seen(slot: &mut Option<Halt>, seen: &Halt) -> Option<Halt> {
        let found = slot.clone();
        if found.as_ref() == Some(seen) {
            *slot = None;
        }
        found
    }
}
