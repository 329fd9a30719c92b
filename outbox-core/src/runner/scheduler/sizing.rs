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
//! The next round is twice or half the size of the one that ended. A round claimed ahead
//! (`ahead`, made while the round before it still delivers) asks for the size that round
//! leads to if it keeps up to its end; it is claimed only once a delivery of that round went
//! through and none failed, so a failing or slow round claims nothing ahead, and the round
//! after it is half its size.
//!
//! Memory is bounded by two of the largest rounds, the one delivering and the one claimed
//! ahead: `2 × max(batch, max_batch)` records with their payloads (see
//! [`RunnerConfig`](crate::RunnerConfig) for the figure in bytes).

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
    /// The round under way, if it counts (a full claim, not a probe).
    round: Option<Running>,
    /// The last round that ended failed or was slow: a round claimed ahead before that was
    /// known neither counts nor claims ahead in turn.
    shrank: bool,
}

/// What the round under way has shown so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Running {
    /// When its claim came back (monotonic).
    at: Millis,
    /// How many records it claimed: the next round is twice or half that.
    limit: usize,
    /// Any of its records was not delivered.
    failed: bool,
    /// Any of its records was delivered.
    delivered: bool,
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
            shrank: false,
        }
    }

    /// Records the next claim asks for.
    pub(super) fn limit(&self) -> usize {
        self.size
    }

    /// Rounds grew past `batch`: a drain has shown a backlog and a sink that keeps up.
    pub(super) fn grown(&self) -> bool {
        self.size > self.base
    }

    /// A claim for `limit` records found `found`, and its round starts at `mono`; `ahead`: it
    /// was claimed ahead of the round before (`ahead`), at [`Self::ahead_limit`].
    pub(super) fn claimed(&mut self, found: usize, limit: usize, mono: Millis, ahead: bool) {
        if found < limit {
            // The queue ran dry: whatever comes next is a new drain.
            self.size = self.base;
            self.round = None;
        } else if ahead && self.shrank {
            // Claimed at the size a round led to before it failed or slowed: the round after
            // this one goes back to the halved size.
            self.round = None;
        } else if ahead || limit == self.size {
            self.round = Some(Running {
                at: mono,
                limit,
                failed: false,
                delivered: false,
            });
        } else {
            // A probe of one while the link is down says nothing of the sink's pace.
            self.round = None;
        }
    }

    /// A record of the round was not delivered (any failure, a release, an interruption).
    pub(super) fn not_delivered(&mut self) {
        if let Some(round) = &mut self.round {
            round.failed = true;
        }
    }

    /// A record of the round was delivered.
    pub(super) fn delivered(&mut self) {
        if let Some(round) = &mut self.round {
            round.delivered = true;
        }
    }

    /// The round under way keeps up so far at `mono`: records of it were delivered, none
    /// failed, and it is within [`KEEPING_UP`] of its claim. Only then is the next round
    /// claimed ahead (`ahead`), at [`Self::ahead_limit`].
    pub(super) fn keeping_up(&self, mono: Millis) -> bool {
        self.round
            .is_some_and(|r| r.delivered && !r.failed && mono.saturating_sub(r.at) <= KEEPING_UP)
    }

    /// Records a claim ahead asks for: the size the round under way leads to if it keeps up
    /// to its end (the claim is made before it ends).
    pub(super) fn ahead_limit(&self) -> usize {
        match self.round {
            Some(round) => round.limit.saturating_mul(2).min(self.max),
            None => self.size,
        }
    }

    /// The server asked to wait, or the link went down: start small when it is over.
    pub(super) fn start_small(&mut self) {
        self.size = self.base;
        self.round = None;
    }

    /// The round is over at `mono` (every record reported or released).
    pub(super) fn round_over(&mut self, mono: Millis) {
        let Some(round) = self.round.take() else {
            return;
        };
        self.shrank = round.failed || mono.saturating_sub(round.at) > KEEPING_UP;
        self.size = if self.shrank {
            (round.limit / 2).max(self.base)
        } else {
            round.limit.saturating_mul(2).min(self.max)
        };
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
            sizing.claimed(limit, limit, mono, false);
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
        sizing.claimed(255, 256, 10, false);
        assert_eq!(sizing.limit(), 32);
        sizing.round_over(11);
        assert_eq!(sizing.limit(), 32, "a short claim's round does not grow");
    }

    #[test]
    fn a_hold_or_a_link_down_starts_small_at_once() {
        let mut sizing = Sizing::new(4, 64);
        rounds(&mut sizing, 1, &[false; 4]);
        assert_eq!(sizing.limit(), 64);
        sizing.claimed(64, 64, 100, false);
        sizing.start_small();
        assert_eq!(sizing.limit(), 4);
        sizing.round_over(101);
        assert_eq!(sizing.limit(), 4, "the cut round does not count");
    }

    #[test]
    fn a_probe_smaller_than_the_round_size_does_not_count() {
        let mut sizing = Sizing::new(8, 64);
        sizing.claimed(1, 1, 0, false);
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
