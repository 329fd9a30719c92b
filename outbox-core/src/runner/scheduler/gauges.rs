//! When the runner reads the store's stats for the gauges of the `metrics` feature: first
//! thing, when it goes idle and the last reading is a second old, at least every ten seconds
//! while it stays busy, and once more as it stops. Their cost is bounded whatever the load.

use crate::record::Millis;

/// An idle runner reads stale gauges at most this often.
pub(super) const IDLE_EVERY: Millis = 1_000;
/// A busy runner reads them at least this often.
pub(super) const BUSY_EVERY: Millis = 10_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct GaugeClock {
    /// When they were last read (monotonic).
    last: Option<Millis>,
    /// Something happened since.
    stale: bool,
    /// The reading at shutdown was made.
    last_done: bool,
}

impl GaugeClock {
    /// Something happened: the gauges may have moved.
    pub(super) fn touched(&mut self) {
        self.stale = true;
    }

    /// Read at `mono` (whether or not the store answered).
    pub(super) fn read(&mut self, mono: Millis) {
        self.last = Some(mono);
        self.stale = false;
    }

    /// When to read them next (monotonic), given whether the runner is idle.
    pub(super) fn due_at(&self, idle: bool, mono: Millis) -> Option<Millis> {
        match self.last {
            None => Some(mono),
            Some(last) if idle => self.stale.then(|| last.saturating_add(IDLE_EVERY)),
            Some(last) => Some(last.saturating_add(BUSY_EVERY)),
        }
    }

    /// True the first time it is asked: the runner stops, read them once more.
    pub(super) fn last_reading(&mut self) -> bool {
        !std::mem::replace(&mut self.last_done, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_thing_then_a_second_after_idle_and_every_ten_seconds_busy() {
        let mut clock = GaugeClock::default();
        assert_eq!(clock.due_at(true, 7), Some(7));
        clock.read(7);
        assert_eq!(clock.due_at(true, 8), None, "idle and nothing happened");
        clock.touched();
        assert_eq!(clock.due_at(true, 8), Some(7 + IDLE_EVERY));
        assert_eq!(clock.due_at(false, 8), Some(7 + BUSY_EVERY));
        assert!(clock.last_reading());
        assert!(!clock.last_reading());
    }
}
