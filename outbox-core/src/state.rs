//! The states a queued record can be in.

use std::fmt;
use std::str::FromStr;

/// Where a record stands. Each state is a different situation for the person holding the device.
///
/// Two further fates are not row states: a *delivered* record is removed from the queue and
/// counted in [`Stats::delivered`](crate::Stats::delivered); a *discarded* record is removed and
/// leaves a [`Tombstone`](crate::Tombstone).
///
/// ```
/// use outbox_core::State;
///
/// assert!(State::Retrying.is_due_kind());
/// assert_eq!("needs-attention".parse::<State>().unwrap(), State::NeedsAttention);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Never attempted; due at once (its deadline is its enqueue time, so new work is FIFO).
    Pending,
    /// Failed and self-healing; due when `next_attempt_at` passes.
    Retrying,
    /// Claimed by a runner under a lease; lease expiry or a restart recovers it.
    InFlight,
    /// Budget exhausted, crash-looped or an unresolved conflict: waits for a person.
    NeedsAttention,
    /// The server gave a final verdict; the reason is kept until pruned.
    Rejected,
}

impl State {
    /// Every row state, in a stable order.
    pub const ALL: [State; 5] = [
        State::Pending,
        State::Retrying,
        State::InFlight,
        State::NeedsAttention,
        State::Rejected,
    ];

    /// The stable text form used in storage, logs and listings.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Retrying => "retrying",
            State::InFlight => "in-flight",
            State::NeedsAttention => "needs-attention",
            State::Rejected => "rejected",
        }
    }

    /// A small stable integer for storage engines that keep the state as a number.
    pub const fn code(self) -> u8 {
        match self {
            State::Pending => 0,
            State::Retrying => 1,
            State::InFlight => 2,
            State::NeedsAttention => 3,
            State::Rejected => 4,
        }
    }

    /// The inverse of [`State::code`].
    pub const fn from_code(code: u8) -> Option<State> {
        match code {
            0 => Some(State::Pending),
            1 => Some(State::Retrying),
            2 => Some(State::InFlight),
            3 => Some(State::NeedsAttention),
            4 => Some(State::Rejected),
            _ => None,
        }
    }

    /// True for the states that become due on their own (pending and retrying).
    pub const fn is_due_kind(self) -> bool {
        matches!(self, State::Pending | State::Retrying)
    }

    /// True for the states that keep a record's place in its group: every state but rejected.
    /// Later records of the group wait behind such a record.
    pub const fn holds_group(self) -> bool {
        !matches!(self, State::Rejected)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of the state names of [`State::as_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_code_round_trip() {
        for state in State::ALL {
            assert_eq!(state.as_str().parse::<State>(), Ok(state));
            assert_eq!(State::from_code(state.code()), Some(state));
        }
        assert!("delivered".parse::<State>().is_err());
        assert_eq!(State::from_code(9), None);
    }
}
