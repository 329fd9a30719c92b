//! Clock steps, seen while running: the wall clock against the monotonic clock.
//!
//! Between two readings both clocks move by the same amount unless the wall clock was set
//! (by a person, NTP or a device waking with a wrong clock). A difference beyond
//! [`STEP_TOLERANCE`] is a step: back, deadlines set before it are re-based by the measured
//! step; ahead, deadlines only come sooner and are read again.

use super::io::Now;
use crate::record::Millis;

/// A change of the wall clock against the monotonic clock larger than this is a step.
pub const STEP_TOLERANCE: Millis = 2_000;

/// How the wall clock moved since the last reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moved {
    /// With the monotonic clock (within the tolerance).
    Steady,
    /// Back by this many milliseconds.
    Back(Millis),
    /// Ahead beyond the tolerance.
    Ahead,
}

/// Watches `wall - mono` from one reading to the next.
#[derive(Clone, Copy, Debug)]
pub(super) struct StepWatch {
    offset: i128,
}

impl StepWatch {
    pub(super) fn new(now: Now) -> Self {
        StepWatch {
            offset: offset(now),
        }
    }

    pub(super) fn observe(&mut self, now: Now) -> Moved {
        let offset = offset(now);
        let moved = offset - self.offset;
        self.offset = offset;
        if moved < -i128::from(STEP_TOLERANCE) {
            Moved::Back(Millis::try_from(-moved).unwrap_or(Millis::MAX))
        } else if moved > i128::from(STEP_TOLERANCE) {
            Moved::Ahead
        } else {
            Moved::Steady
        }
    }
}

fn offset(now: Now) -> i128 {
    i128::from(now.wall) - i128::from(now.mono)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(wall: Millis, mono: Millis) -> Now {
        Now { wall, mono }
    }

    #[test]
    fn a_step_is_the_wall_clock_moving_against_the_monotonic_one() {
        let mut watch = StepWatch::new(now(100_000, 0));
        assert_eq!(watch.observe(now(101_000, 1_000)), Moved::Steady);
        assert_eq!(
            watch.observe(now(103_500, 2_000)),
            Moved::Steady,
            "within tolerance"
        );
        assert_eq!(watch.observe(now(50_000, 3_000)), Moved::Back(54_500));
        assert_eq!(watch.observe(now(1_000_000, 4_000)), Moved::Ahead);
        assert_eq!(watch.observe(now(1_001_000, 5_000)), Moved::Steady);
    }

    #[test]
    fn a_wall_clock_at_zero_or_far_ahead_does_not_overflow() {
        let mut watch = StepWatch::new(now(Millis::MAX, 0));
        assert_eq!(watch.observe(now(0, 1)), Moved::Back(Millis::MAX));
    }
}
