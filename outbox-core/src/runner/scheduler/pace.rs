//! Pacing: how fast the runner may go towards the server and the store.
//!
//! - A server's `Retry-After` holds the whole runner (the server is busy, not the record):
//!   nothing is claimed before the hold ends, and afterwards one request goes first, the window
//!   doubling with every answer that does not ask to wait again, up to `concurrency`.
//! - A claim that found nothing although the store's earliest deadline said "due" makes the
//!   next claim that no trigger asked for wait, doubling up to [`MAX_QUIET`]: a store whose
//!   `next_due` and claim disagree must not spin the runner. A claim a trigger asked for
//!   (start, enqueue, a verb) that finds nothing is no disagreement and holds nothing back:
//!   counting it held a retry drawn a few milliseconds after a failure until the quiet ended,
//!   and a fleet that failed together retried together.

use std::collections::VecDeque;

use crate::record::{Millis, RecordId};

/// The first quiet period after a claim that found nothing it was told was due.
pub(super) const EMPTY_CLAIM_QUIET: Millis = 50;
/// The longest quiet period.
pub(super) const MAX_QUIET: Millis = 5_000;
/// Records remembered as already warned about a cut `Retry-After`.
const MAX_WARNED: usize = 1_024;

/// The runner's pace (see the module documentation).
#[derive(Debug)]
pub(super) struct Pace {
    concurrency: usize,
    /// Nothing is claimed before this wall-clock time.
    hold_until: Option<Millis>,
    /// Deliveries allowed in flight at once.
    window: usize,
    /// Empty claims in a row that were made on the store's word that work was due.
    empty_claims: u32,
    /// Claims no trigger asked for wait until then (monotonic).
    quiet_until: Millis,
    warned: VecDeque<RecordId>,
}

impl Pace {
    pub(super) fn new(concurrency: usize) -> Self {
        Pace {
            concurrency,
            hold_until: None,
            window: concurrency,
            empty_claims: 0,
            quiet_until: 0,
            warned: VecDeque::new(),
        }
    }

    /// Deliveries allowed in flight now.
    pub(super) fn window(&self) -> usize {
        self.window
    }

    /// The hold in force, if any (wall clock).
    pub(super) fn hold_until(&self) -> Option<Millis> {
        self.hold_until
    }

    pub(super) fn holds(&self, wall: Millis) -> bool {
        self.hold_until.is_some_and(|hold| hold > wall)
    }

    /// The server asked this client to wait until `until`: hold everything, and start again
    /// with a window of one.
    pub(super) fn told_to_wait(&mut self, until: Millis) {
        self.hold(until);
        self.window = 1;
    }

    /// Hold claims until `until` (the later hold wins), without narrowing the window.
    pub(super) fn hold(&mut self, until: Millis) {
        self.hold_until = Some(self.hold_until.map_or(until, |h| h.max(until)));
    }

    /// An answer that did not ask to wait: the window widens, unless a hold is in force (the
    /// answer was to a request sent with the one that was told to wait).
    pub(super) fn answered(&mut self, wall: Millis) {
        if !self.holds(wall) {
            self.window = self.window.saturating_mul(2).min(self.concurrency);
        }
    }

    /// The wall clock stepped back by `step`: a hold keeps its wait.
    pub(super) fn step_back(&mut self, step: Millis) {
        if let Some(hold) = &mut self.hold_until {
            *hold = hold.saturating_sub(step);
        }
    }

    /// A claim found `found` records at `mono`; `on_deadline` when it was made because the
    /// store's earliest deadline said work was due (not because of a trigger).
    pub(super) fn claimed(&mut self, found: usize, on_deadline: bool, mono: Millis) {
        if found > 0 {
            self.empty_claims = 0;
            return;
        }
        if !on_deadline {
            // A trigger that found nothing is no disagreement with the store.
            return;
        }
        self.empty_claims = self.empty_claims.saturating_add(1);
        let quiet = EMPTY_CLAIM_QUIET
            .saturating_mul(1 << self.empty_claims.min(16).saturating_sub(1))
            .min(MAX_QUIET);
        self.quiet_until = mono.saturating_add(quiet);
    }

    /// Claims no trigger asked for wait until then (monotonic).
    pub(super) fn quiet_until(&self) -> Millis {
        self.quiet_until
    }

    /// True the first time a record's `Retry-After` is cut (warn once per record).
    pub(super) fn first_cut(&mut self, id: RecordId) -> bool {
        if self.warned.contains(&id) {
            return false;
        }
        if self.warned.len() == MAX_WARNED {
            self.warned.pop_front();
        }
        self.warned.push_back(id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_narrows_the_window_to_one_and_answers_widen_it_after_the_hold() {
        let mut pace = Pace::new(8);
        pace.told_to_wait(1_000);
        assert!(pace.holds(999) && !pace.holds(1_000));
        assert_eq!(pace.window(), 1);
        pace.answered(500);
        assert_eq!(
            pace.window(),
            1,
            "an answer during the hold does not widen it"
        );
        for expected in [2, 4, 8, 8] {
            pace.answered(1_000);
            assert_eq!(pace.window(), expected);
        }
    }

    #[test]
    fn the_later_hold_wins_and_a_step_back_keeps_its_wait() {
        let mut pace = Pace::new(4);
        pace.hold(2_000);
        pace.hold(1_000);
        assert_eq!(pace.hold_until(), Some(2_000));
        assert_eq!(pace.window(), 4, "a spread hold keeps the window");
        pace.step_back(500);
        assert_eq!(pace.hold_until(), Some(1_500));
    }

    #[test]
    fn only_empty_claims_on_the_stores_word_make_a_quiet_period() {
        let mut pace = Pace::new(1);
        pace.claimed(0, false, 0);
        assert_eq!(
            pace.quiet_until(),
            0,
            "a trigger finding nothing is no disagreement"
        );
        pace.claimed(0, true, 0);
        assert_eq!(pace.quiet_until(), EMPTY_CLAIM_QUIET);
        pace.claimed(0, true, 100);
        assert_eq!(pace.quiet_until(), 100 + 2 * EMPTY_CLAIM_QUIET);
        for _ in 0..20 {
            pace.claimed(0, true, 100);
        }
        assert_eq!(pace.quiet_until(), 100 + MAX_QUIET);
        pace.claimed(3, true, 200);
        pace.claimed(0, true, 300);
        assert_eq!(
            pace.quiet_until(),
            300 + EMPTY_CLAIM_QUIET,
            "found work resets the count"
        );
    }

    #[test]
    fn a_cut_retry_after_is_warned_once_per_record_within_a_bound() {
        let mut pace = Pace::new(1);
        assert!(pace.first_cut(RecordId(1)));
        assert!(!pace.first_cut(RecordId(1)));
        for id in 2..=(MAX_WARNED as u64 + 1) {
            assert!(pace.first_cut(RecordId(id)));
        }
        assert!(pace.first_cut(RecordId(1)), "the oldest was forgotten");
    }
}
