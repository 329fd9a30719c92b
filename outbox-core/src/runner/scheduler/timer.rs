//! The scheduler's timers: one `enum`, one table, one earliest deadline.
//!
//! Every reason the runner may wake on its own is a [`Timer`]; its deadline, on the monotonic
//! clock, is one slot of the [`TimerTable`]. A new timer is one variant.

use crate::record::Millis;

/// A reason to wake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The slow safety poll: look for expired leases of any process, read the deadline again
    /// (and, halted, the persisted halt).
    Poll,
    /// Recover leases further ahead than one lease (taken before a step back).
    FarLeases,
    /// Try a failed store call again.
    RetryIo,
    /// Say again that the link is still down.
    LinkWarn,
    /// Renew the round's leases.
    Renew,
    /// Write finished outcomes that waited for the rest of their round.
    Commit,
    /// The shutdown grace ran out: abort deliveries.
    Grace,
    /// The next claim: a deadline, the end of a probe wait, a hold or a quiet period.
    Claim,
    /// Read the store's stats for the gauges.
    Gauges,
    /// Halted: the spacing of the halt reads wakes ask for is over (one is due if a wake
    /// came meanwhile).
    HaltRead,
    /// The rate limit lets the next delivery of the round start.
    Rate,
    /// The backoff of a look for unreadable rows that timed out is over (`look`).
    Look,
}

const ALL: [Timer; 12] = [
    Timer::Poll,
    Timer::FarLeases,
    Timer::RetryIo,
    Timer::LinkWarn,
    Timer::Renew,
    Timer::Commit,
    Timer::Grace,
    Timer::Claim,
    Timer::Gauges,
    Timer::HaltRead,
    Timer::Rate,
    Timer::Look,
];

/// A deadline per [`Timer`], monotonic milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TimerTable {
    data: [Option<Millis>; ALL.len()],
}

impl TimerTable {
    pub(super) fn set(&mut self, timer: Timer, at: Millis) {
        self.data[timer as usize] = Some(at);
    }

    /// Sets the timer unless it is set already (the earlier deadline stands).
    pub(super) fn set_if_unset(&mut self, timer: Timer, at: Millis) {
        self.data[timer as usize].get_or_insert(at);
    }

    pub(super) fn set_or_stop(&mut self, timer: Timer, at: Option<Millis>) {
        self.data[timer as usize] = at;
    }

    pub(super) fn stop(&mut self, timer: Timer) {
        self.data[timer as usize] = None;
    }

    pub(super) fn get(&self, timer: Timer) -> Option<Millis> {
        self.data[timer as usize]
    }

    pub(super) fn is_set(&self, timer: Timer) -> bool {
        self.get(timer).is_some()
    }

    /// True when the timer is set and its deadline is at or before `now`.
    pub(super) fn is_expired(&self, timer: Timer, now: Millis) -> bool {
        self.get(timer).is_some_and(|at| at <= now)
    }

    /// The earliest deadline of all.
    pub(super) fn next_timeout(&self) -> Option<Millis> {
        self.data.iter().flatten().min().copied()
    }

    /// The timers whose deadline is at or before `now`, in the table's order.
    pub(super) fn expired(&self, now: Millis) -> impl Iterator<Item = Timer> + '_ {
        ALL.into_iter().filter(move |t| self.is_expired(*t, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_timeout_is_the_earliest_set_deadline() {
        let mut table = TimerTable::default();
        assert_eq!(table.next_timeout(), None);
        table.set(Timer::Poll, 60_000);
        table.set(Timer::Commit, 20);
        table.set(Timer::Gauges, 1_000);
        assert_eq!(table.next_timeout(), Some(20));
        table.stop(Timer::Commit);
        assert_eq!(table.next_timeout(), Some(1_000));
    }

    #[test]
    fn set_if_unset_keeps_the_earlier_deadline() {
        let mut table = TimerTable::default();
        table.set_if_unset(Timer::Commit, 20);
        table.set_if_unset(Timer::Commit, 40);
        assert_eq!(table.get(Timer::Commit), Some(20));
        table.set_or_stop(Timer::Commit, None);
        assert!(!table.is_set(Timer::Commit));
    }

    #[test]
    fn expired_lists_exactly_the_timers_at_or_before_now() {
        let mut table = TimerTable::default();
        table.set(Timer::Renew, 10);
        table.set(Timer::RetryIo, 11);
        table.set(Timer::LinkWarn, 9);
        assert_eq!(
            table.expired(10).collect::<Vec<_>>(),
            [Timer::LinkWarn, Timer::Renew]
        );
        assert!(table.is_expired(Timer::RetryIo, 11));
        assert!(!table.is_expired(Timer::Claim, u64::MAX));
    }
}
