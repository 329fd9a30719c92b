//! The debounce window: a burst of changes is one transition, to the state the burst leaves.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

/// How long a burst of changes is gathered before the signal says what it left: 50 ms.
///
/// A hand-over (one network replacing another, an interface bounced by its driver, a route
/// replaced by deleting and adding it) changes the tables several times within a few
/// milliseconds; 50 ms gathers those into one transition, and still reports a real change
/// well within a tenth of a second.
///
/// ```
/// assert_eq!(outbox_link::DEFAULT_WINDOW.as_millis(), 50);
/// ```
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(50);

/// The longest window accepted: a signal that waits longer than this before telling the
/// runner holds deliveries back for no gain.
///
/// ```
/// assert!(outbox_link::MAX_WINDOW >= outbox_link::DEFAULT_WINDOW);
/// ```
pub const MAX_WINDOW: Duration = Duration::from_secs(10);

/// Refuses a window longer than [`MAX_WINDOW`].
pub(crate) fn check(window: Duration) -> Result<Duration, Error> {
    if window > MAX_WINDOW {
        Err(Error::InvalidWindow {
            window,
            max: MAX_WINDOW,
        })
    } else {
        Ok(window)
    }
}

/// The window's state machine: pure, given the time and the state read at the window's end.
///
/// The first change after a quiet spell opens a window of a fixed length; later changes fall
/// into it without moving its end, so a link that keeps flapping is still reported at least
/// once per window. When it closes, the state is read once: a transition is reported only if
/// it differs from the last one reported (a burst that ends where it began reports nothing).
#[derive(Debug)]
pub(crate) struct Debounce {
    window: Duration,
    reported: bool,
    until: Option<Instant>,
}

impl Debounce {
    pub(crate) fn new(reported: bool, window: Duration) -> Self {
        Debounce {
            window,
            reported,
            until: None,
        }
    }

    /// Something changed at `now`: opens a window unless one is open.
    pub(crate) fn changed(&mut self, now: Instant) {
        if self.until.is_none() {
            self.until = Some(now.checked_add(self.window).unwrap_or(now));
        }
    }

    /// When the open window closes, if one is open.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.until
    }

    /// The window closed and the state is `online`: the transition to report, if any.
    pub(crate) fn settle(&mut self, online: bool) -> Option<bool> {
        self.until = None;
        if online == self.reported {
            None
        } else {
            self.reported = online;
            Some(online)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_change_opens_the_window_and_later_ones_do_not_move_it() {
        let t0 = Instant::now();
        let mut d = Debounce::new(true, ms(50));
        assert_eq!(d.deadline(), None);
        d.changed(t0);
        for i in 1..10 {
            d.changed(t0 + ms(i * 4));
        }
        assert_eq!(d.deadline(), Some(t0 + ms(50)));
    }

    #[test]
    fn a_burst_is_one_transition_to_the_state_it_leaves() {
        let mut d = Debounce::new(true, ms(50));
        d.changed(Instant::now());
        assert_eq!(d.settle(false), Some(false));
        assert_eq!(d.deadline(), None);
        // The same state read again is no transition.
        d.changed(Instant::now());
        assert_eq!(d.settle(false), None);
        d.changed(Instant::now());
        assert_eq!(d.settle(true), Some(true));
    }

    #[test]
    fn a_burst_that_ends_where_it_began_reports_nothing() {
        let mut d = Debounce::new(false, ms(50));
        d.changed(Instant::now());
        assert_eq!(d.settle(false), None);
    }

    #[test]
    fn a_window_too_long_is_refused_and_the_longest_accepted() {
        assert!(check(MAX_WINDOW).is_ok());
        assert!(check(Duration::ZERO).is_ok());
        let err = check(MAX_WINDOW + ms(1)).unwrap_err();
        assert!(err.to_string().contains("10s"), "{err}");
    }
}
