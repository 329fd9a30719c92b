//! The claim ahead: the next round claimed while this one delivers.
//!
//! A round's store call writes the outcomes of the round before it and claims the next, in
//! one commit. While it runs the runner has nothing to deliver, and while the runner delivers
//! the store has nothing to do: over a backlog the two take turns, and a drain lasts as long
//! as both added up. So in a drain that has shown a backlog and a sink that keeps up, the
//! next round is claimed while this one delivers:
//!
//! - **when**: the round came back full, rounds grew past `batch` (`sizing`), and one of its
//!   deliveries went through with none failed, within [`KEEPING_UP`](super::KEEPING_UP) of
//!   its start;
//! - **how**: one store call that writes the outcomes known so far and claims, under the
//!   round's lease token (the round's renewals keep both sets of leases), for the size the
//!   round leads to if it keeps up. Deliveries go on while it runs: the shell goes on feeding
//!   reports, and the scheduler starts deliveries, not store calls, while one is under way;
//! - **then**: the records wait here until the round is over, and start as the next round
//!   with no store call of their own, which claims ahead in turn.
//!
//! One claim ahead at most, so a runner holds at most two rounds:
//! `2 × max(batch, max_batch)` records (see [`RunnerConfig`](crate::RunnerConfig)). Group
//! order and single flight hold as for any claim: the store claims only the heads of groups
//! with nothing in flight. Nothing is claimed ahead with a rate limit (the records would wait
//! on it), in a suspect's round, while the link is down or a `Retry-After` hold runs, or when
//! the look for expired leases is due (it goes before any claim). A round cut short (no
//! answer, a halt, offline, shutdown, `Retry-After`) releases the records claimed ahead with
//! those it had not started, and a claim ahead that answers after the cut is released at
//! once. So does a claim ahead held when any store call fails: the store may not let the
//! round end soon. A claim ahead that comes back short ends the drain: the round's end
//! claims nothing more. A round that ends failed or slow while its claim ahead is held
//! leaves that round uncounted: it claims nothing ahead, and the round after it is half the
//! failed one (`sizing`).
//!
//! A process that dies holds up to two rounds of records under lease instead of one: each is
//! recovered with one interruption when its lease expires, as a round's are.

use super::round::Write;
use super::Scheduler;
use crate::record::{Lease, Record};
use crate::store::Claim;

/// Records claimed ahead of the round under way.
#[derive(Debug)]
pub(super) struct Ahead {
    pub(super) claim: Claim,
    pub(super) claimed: Vec<Record>,
}

impl Scheduler {
    /// Whether the next round may be claimed now, while this one delivers.
    pub(super) fn may_claim_ahead(&self) -> bool {
        let Some(round) = &self.round else {
            return false;
        };
        round.full
            && !round.solo
            && !round.cut_short
            && !round.asked_ahead
            && self.ahead.is_none()
            && self.sizing.grown()
            && self.sizing.keeping_up(self.now.mono)
            && self.rate.is_none()
            && self.chores.is_empty()
            && !self.look_is_due()
            && self.recover_at > self.now.mono
            && self.may_start()
            && !self.link.is_down()
            && self.link.probe_at().is_none()
            && !self.pace.holds(self.now.wall)
    }

    /// Claims the next round under the round's lease token, with the outcomes known so far.
    pub(super) fn claim_ahead(&mut self) {
        let Some(round) = &mut self.round else {
            return;
        };
        round.asked_ahead = true;
        let lease = Lease {
            token: round.lease.token,
            until: self.now.wall.saturating_add(self.lease_ms()),
        };
        self.write_claim(Some(lease), false, true);
    }

    /// The claim ahead came back: its records wait for the round, unless it was cut short
    /// meanwhile (they go back then).
    pub(super) fn claimed_ahead(&mut self, claim: Claim, claimed: Vec<Record>) {
        if claimed.len() < claim.limit {
            // The backlog ends with the records claimed ahead: the round's end claims nothing
            // more, and the earliest deadline is read again before the runner waits.
            if let Some(round) = &mut self.round {
                round.full = false;
            }
            self.backlog = false;
            self.next_due = None;
            self.next_due_stale = true;
        }
        if claimed.is_empty() {
            // The queue ran dry: the next drain starts small (a round that found something
            // tells the sizing when it starts).
            self.sizing.claimed(0, claim.limit, self.now.mono, true);
            return;
        }
        let cut = self.round.as_ref().is_none_or(|r| r.cut_short);
        if cut || !self.may_start() {
            self.writes.extend(claimed.iter().map(Write::release));
            self.commit_soon();
        } else {
            self.ahead = Some(Ahead { claim, claimed });
        }
    }

    /// The records claimed ahead, released (the round was cut short).
    pub(super) fn release_ahead(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            self.writes.extend(ahead.claimed.iter().map(Write::release));
        }
    }
}
