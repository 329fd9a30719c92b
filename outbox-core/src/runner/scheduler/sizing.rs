//! Rounds that grow: how many records the next claim asks for.
//!
//! A device that sends a few writes and a service that wakes to a backlog of a million want
//! different rounds. Every round costs one durable commit, so a backlog drains faster in large
//! rounds; a round holds its records in memory and under lease until they are reported, so a
//! slow or failing sink wants small ones. The runner therefore starts every drain at `batch`
//! and sizes each round on what the last one showed:
//!
//! - **grows** (doubles, up to `max_batch`) when the claim came back full (more is waiting) and
//!   every record of the round was delivered within [`KEEPING_UP`] of the claim;
//! - **shrinks** (halves, never below `batch`) after a round with any outcome other than
//!   delivered, or one that took longer than [`KEEPING_UP`] (a slow sink);
//! - **starts small again** (`batch`) on a claim that found fewer records than it asked for (the
//!   queue ran dry: the next one is a new drain), on a `Retry-After` hold and on a link that
//!   went down.
//!
//! Memory is bounded by the largest round: `max(batch, max_batch)` records with their
//! payloads (see [`RunnerConfig`](crate::RunnerConfig) for the figure in bytes).

use crate::record::Millis;

/// The longest a round may take, from its claim to its last report, and still grow: a round of
/// quick deliveries doubles, one that takes longer halves. Half a second keeps a grown round's
/// leases far inside the shortest useful lease and a shutdown's grace, and is long enough that
/// a sink answering in a few milliseconds grows the round to its maximum.
pub const KEEPING_UP: Millis = 500;

/// The size of the next claim (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sizing {
    base: usize,
    max: usize,
    size: usize,
    /// The round under way: when its claim came back (monotonic), and whether any of its
    /// records was not delivered.
    round: Option<(Millis, bool)>,
}

impl Sizing {
    /// Rounds of `base` records, growing up to `max` (never below `base`).
    pub(super) fn new(base: usize, max: usize) -> Self {
        let base = base.max(1);
        Sizing {
            base,
            max: max.max(base),
            size: base,
            round: None,
        }
    }

    /// Records the next claim asks for.
    pub(super) fn limit(&self) -> usize {
        self.size
    }

    /// A claim for `limit` records found `found` at `mono`.
    pub(super) fn claimed(&mut self, found: usize, limit: usize, mono: Millis) {
        if found < limit {
            // The queue ran dry: whatever comes next is a new drain.
            self.size = self.base;
            self.round = None;
        } else if limit == self.size {
            self.round = Some((mono, false));
        } else {
            // A probe of one while the link is down says nothing of the sink's pace.
            self.round = None;
        }
    }

    /// A record of the round was not delivered (any failure, a release, an interruption).
    pub(super) fn not_delivered(&mut self) {
        if let Some((_, failed)) = &mut self.round {
            *failed = true;
        }
    }

    /// The server asked to wait, or the link went down: start small when it is over.
    pub(super) fn start_small(&mut self) {
        self.size = self.base;
        self.round = None;
    }

    /// The round is over at `mono` (every record reported or released).
    pub(super) fn round_over(&mut self, mono: Millis) {
        let Some((claimed, failed)) = self.round.take() else {
            return;
        };
        if failed || mono.saturating_sub(claimed) > KEEPING_UP {
            self.size = (self.size / 2).max(self.base);
        } else {
            self.size = self.size.saturating_mul(2).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs full rounds that each take `took` ms and fail as `failed` says; returns the sizes.
    fn rounds(sizing: &mut Sizing, took: Millis, failed: &[bool]) -> Vec<usize> {
        let mut mono = 0;
        let mut sizes = Vec::new();
        for &failed in failed {
            let limit = sizing.limit();
            sizes.push(limit);
            sizing.claimed(limit, limit, mono);
            if failed {
                sizing.not_delivered();
            }
            mono += took;
            sizing.round_over(mono);
        }
        sizes
    }

    #[test]
    fn full_rounds_of_quick_deliveries_double_up_to_the_maximum() {
        let mut sizing = Sizing::new(32, 512);
        assert_eq!(
            rounds(&mut sizing, 3, &[false; 7]),
            [32, 64, 128, 256, 512, 512, 512]
        );
    }

    #[test]
    fn a_round_with_a_failure_halves_but_never_below_the_base() {
        let mut sizing = Sizing::new(32, 512);
        rounds(&mut sizing, 3, &[false; 4]);
        assert_eq!(sizing.limit(), 512);
        assert_eq!(
            rounds(&mut sizing, 3, &[true, true, true, true, true]),
            [512, 256, 128, 64, 32]
        );
        assert_eq!(sizing.limit(), 32);
    }

    #[test]
    fn a_slow_round_halves_and_a_round_at_the_bound_still_grows() {
        let mut sizing = Sizing::new(10, 80);
        assert_eq!(rounds(&mut sizing, KEEPING_UP, &[false; 3]), [10, 20, 40]);
        assert_eq!(sizing.limit(), 80);
        assert_eq!(
            rounds(&mut sizing, KEEPING_UP + 1, &[false; 3]),
            [80, 40, 20]
        );
        assert_eq!(sizing.limit(), 10);
    }

    #[test]
    fn a_claim_that_comes_back_short_starts_the_next_drain_small() {
        let mut sizing = Sizing::new(32, 1_024);
        rounds(&mut sizing, 1, &[false; 3]);
        assert_eq!(sizing.limit(), 256);
        sizing.claimed(255, 256, 10);
        assert_eq!(sizing.limit(), 32);
        sizing.round_over(11);
        assert_eq!(sizing.limit(), 32, "a short claim's round does not grow");
    }

    #[test]
    fn a_hold_or_a_link_down_starts_small_at_once() {
        let mut sizing = Sizing::new(4, 64);
        rounds(&mut sizing, 1, &[false; 4]);
        assert_eq!(sizing.limit(), 64);
        sizing.claimed(64, 64, 100);
        sizing.start_small();
        assert_eq!(sizing.limit(), 4);
        sizing.round_over(101);
        assert_eq!(sizing.limit(), 4, "the cut round does not count");
    }

    #[test]
    fn a_probe_smaller_than_the_round_size_does_not_count() {
        let mut sizing = Sizing::new(8, 64);
        sizing.claimed(1, 1, 0);
        sizing.round_over(1);
        assert_eq!(sizing.limit(), 8);
    }

    #[test]
    fn a_maximum_below_the_base_keeps_rounds_fixed() {
        let mut sizing = Sizing::new(32, 8);
        assert_eq!(rounds(&mut sizing, 1, &[false; 3]), [32, 32, 32]);
        let mut fixed = Sizing::new(100, 100);
        assert_eq!(rounds(&mut fixed, 1, &[false, true, false]), [100; 3]);
    }
}
