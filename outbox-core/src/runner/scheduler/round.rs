//! A round: the records one claim took, and the table of those in flight.
//!
//! A claim is sorted first ([`sort_claim`]): records older than the age policy allows are
//! parked, and a record whose delivery was interrupted goes alone, the others released, so
//! that if it kills the process again only it is charged. The [`Round`] then starts deliveries
//! up to its concurrency and the pacing window, and knows when it is over. The scheduler's
//! part is here too: starting a round from a claim, starting deliveries as slots free up,
//! cutting a round short, and what follows its end.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::ahead::Ahead;
use super::timer::Timer;
use super::{Action, Scheduler};
use crate::event::Event;
use crate::machine::{self, Change, Step, Transition};
use crate::policy::RetryPolicy;
use crate::record::{Lease, Millis, Record, RecordId};
use crate::store::Claim;

/// A transition waiting to be written, with the event to send once it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Write {
    pub(super) transition: Transition,
    pub(super) event: Option<Event>,
}

impl Write {
    /// A claimed record given back without an attempt.
    pub(super) fn release(record: &Record) -> Self {
        Write::silent(machine::release(record))
    }

    /// The write with how long the delivery took set on the attempt it adds (a write that
    /// adds none, such as a delivered record's removal, is unchanged).
    pub(super) fn took(mut self, ms: Millis) -> Self {
        if let Change::Update(progress) = &mut self.transition.change {
            progress.history.set_took(ms);
        }
        self
    }

    /// A transition nobody is told of.
    pub(super) fn silent(transition: Transition) -> Self {
        Write {
            transition,
            event: None,
        }
    }
}

impl From<Step> for Write {
    fn from(step: Step) -> Self {
        Write {
            transition: step.transition,
            event: Some(step.event),
        }
    }
}

/// The events of the writes whose guard held (those not in `skipped`).
pub(super) fn written_events(
    writes: Vec<Write>,
    skipped: &[RecordId],
) -> impl Iterator<Item = Event> + '_ {
    writes
        .into_iter()
        .filter(|w| !skipped.contains(&w.transition.id))
        .filter_map(|w| w.event)
}

/// A claim, sorted: what to deliver, and what to write without delivering.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Sorted {
    pub(super) queue: VecDeque<Record>,
    /// Parked as stale, or released to let a suspect go alone.
    pub(super) writes: Vec<Write>,
    /// A suspect goes alone.
    pub(super) solo: bool,
}

/// Parks the stale records of a claim and puts a suspect (a record whose delivery was
/// interrupted) alone, releasing the others.
pub(super) fn sort_claim(mut claimed: Vec<Record>, policy: &RetryPolicy, now: Millis) -> Sorted {
    let mut writes = Vec::new();
    // Records older than the age policy allows are parked, not sent: a person decides.
    claimed.retain(|r| match machine::on_stale(r, policy, now) {
        Some(step) => {
            writes.push(Write::from(step));
            false
        }
        None => true,
    });
    let suspect = claimed
        .iter()
        .position(|r| r.interrupted > 0)
        .map(|at| claimed.remove(at));
    match suspect {
        Some(suspect) => {
            writes.extend(claimed.iter().map(Write::release));
            Sorted {
                queue: VecDeque::from([suspect]),
                writes,
                solo: true,
            }
        }
        None => Sorted {
            queue: claimed.into(),
            writes,
            solo: false,
        },
    }
}

/// The records a round holds.
#[derive(Debug)]
pub(super) struct Round {
    pub(super) lease: Lease,
    /// Claimed, not yet started.
    queue: VecDeque<Record>,
    /// Being delivered: the records, shared with their deliveries, with when each started
    /// (monotonic milliseconds, for the attempt's duration).
    running: HashMap<RecordId, (Arc<Record>, Millis)>,
    /// The claim was full: more may be due right away.
    pub(super) full: bool,
    /// A suspect record goes alone (see the crash-loop guard).
    pub(super) solo: bool,
    /// No delivery starts any more (no answer, halt, offline or shutdown).
    pub(super) cut_short: bool,
    /// The next round was claimed ahead while this one delivered (see `ahead`).
    pub(super) asked_ahead: bool,
    concurrency: usize,
}

impl Round {
    pub(super) fn new(
        lease: Lease,
        queue: VecDeque<Record>,
        full: bool,
        solo: bool,
        concurrency: usize,
    ) -> Self {
        Round {
            lease,
            queue,
            running: HashMap::new(),
            full,
            solo,
            cut_short: false,
            asked_ahead: false,
            concurrency: if solo { 1 } else { concurrency },
        }
    }

    /// Records claimed and not yet reported.
    pub(super) fn held(&self) -> usize {
        self.queue.len() + self.running.len()
    }

    /// Every record the round holds, running or waiting for a slot.
    pub(super) fn ids(&self) -> impl Iterator<Item = RecordId> + '_ {
        self.running
            .keys()
            .copied()
            .chain(self.queue.iter().map(|r| r.id))
    }

    pub(super) fn is_running(&self) -> bool {
        !self.running.is_empty()
    }

    pub(super) fn is_waiting(&self) -> bool {
        !self.queue.is_empty()
    }

    pub(super) fn is_over(&self) -> bool {
        self.held() == 0
    }

    /// No delivery starts any more; the records not started are returned to be released.
    pub(super) fn cut(&mut self) -> Vec<Write> {
        self.cut_short = true;
        self.queue.drain(..).map(|r| Write::release(&r)).collect()
    }

    /// Starts deliveries up to the round's concurrency and `window`, at most `allowed` of them
    /// (the rate limit's word), at monotonic time `now`: the records to deliver. Each is
    /// shared with its delivery, not copied: its payload is held once, by both, until the
    /// delivery is reported.
    pub(super) fn start(&mut self, window: usize, allowed: usize, now: Millis) -> Vec<Arc<Record>> {
        let mut started = Vec::new();
        while !self.cut_short
            && self.running.len() < self.concurrency.min(window)
            && started.len() < allowed
        {
            let Some(held) = self.queue.pop_front() else {
                break;
            };
            let held = Arc::new(held);
            started.push(Arc::clone(&held));
            self.running.insert(held.id, (held, now));
        }
        started
    }

    /// The record of a delivery that ended, if this round delivers it, with the monotonic
    /// time its delivery started.
    pub(super) fn finish(&mut self, id: RecordId) -> Option<(Arc<Record>, Millis)> {
        self.running.remove(&id)
    }
}

/// A round as the scheduler drives it: started from a claim, deliveries started as slots
/// free up, cut short, and over.
impl Scheduler {
    /// No delivery of this round starts any more; the records not started go back.
    pub(super) fn cut_round(&mut self) {
        if let Some(round) = &mut self.round {
            let released = round.cut();
            self.writes.extend(released);
            self.release_ahead();
            if !self.writes.is_empty() {
                self.commit_soon();
            }
        }
    }

    /// Starts the round `claim` found (`ahead`: claimed ahead while the last one delivered).
    pub(super) fn start_round(
        &mut self,
        claim: Claim,
        claimed: Vec<Record>,
        on_deadline: bool,
        ahead: bool,
    ) {
        // Whatever the claim found, the earliest deadline is read again before waiting.
        self.next_due = None;
        self.next_due_stale = true;
        self.pace.claimed(claimed.len(), on_deadline, self.now.mono);
        self.sizing
            .claimed(claimed.len(), claim.limit, self.now.mono, ahead);
        self.backlog = claimed.len() >= claim.limit;
        if claimed.is_empty() {
            return;
        }
        self.rounds += 1;
        let full = claimed.len() >= claim.limit;
        let sorted = sort_claim(claimed, &self.policy, self.now.wall);
        let has_writes = !sorted.writes.is_empty();
        self.writes.extend(sorted.writes);
        if sorted.solo {
            // A suspect goes alone: its round shows nothing of how fast the sink is.
            self.sizing.not_delivered();
            // The records claimed with a suspect are released before it goes (`drive_round`).
            if has_writes {
                self.commit_soon();
            }
        } else {
            self.timers.stop(Timer::Commit);
        }
        self.link.new_round();
        let renew = self.now.mono.saturating_add(self.lease_ms() / 3);
        self.timers.set(Timer::Renew, renew);
        self.round = Some(Round::new(
            claim.lease,
            sorted.queue,
            full,
            sorted.solo,
            self.config.concurrency,
        ));
        if !self.may_start() {
            self.cut_round();
        }
    }

    pub(super) fn drive_round(&mut self) {
        let may_start = self.may_start();
        if !may_start {
            self.cut_round();
        }
        let Some(round) = &mut self.round else {
            return;
        };
        if round.solo && !round.is_running() && round.is_waiting() && !self.writes.is_empty() {
            // The records claimed with a suspect are released before it is delivered: if it
            // kills the process again, they must not be charged with it.
            self.timers.stop(Timer::Commit);
            self.write(None, false);
            return;
        }
        if self.start_deliveries() || !self.actions.is_empty() {
            return;
        }
        let Some(round) = &mut self.round else {
            return;
        };
        if round.is_over() {
            if round.cut_short {
                self.sizing.not_delivered();
            }
            self.sizing.round_over(self.now.mono);
            let again = !round.cut_short && (round.full || round.solo) && may_start;
            self.round = None;
            self.timers.stop(Timer::Renew);
            self.timers.stop(Timer::Commit);
            if let Some(Ahead { claim, claimed }) = self.ahead.take() {
                // Claimed while the round delivered: the next round starts with no store
                // call, and the outcomes not yet written wait for its own claim ahead (or
                // the commit delay, if it makes none).
                self.start_round(claim, claimed, false, true);
                if !self.writes.is_empty() {
                    self.commit_soon();
                }
                self.decide();
            } else if again {
                // The round's outcomes travel with the next claim: one commit.
                self.wanted = true;
                self.decide();
            } else if !self.writes.is_empty() {
                self.write(None, false);
            }
            return;
        }
        if self.may_claim_ahead() {
            self.timers.stop(Timer::Commit);
            self.claim_ahead();
            return;
        }
        if !self.writes.is_empty() && self.timers.is_expired(Timer::Commit, self.now.mono) {
            // Deliveries are still running: record what is known so far.
            self.timers.stop(Timer::Commit);
            self.write(None, false);
        }
    }

    /// Starts what the round's concurrency, the pacing window and the rate limit allow, each
    /// with its event; true if any started.
    pub(super) fn start_deliveries(&mut self) -> bool {
        let Some(round) = &mut self.round else {
            return false;
        };
        let allowed = self
            .rate
            .as_mut()
            .map_or(usize::MAX, |rate| rate.available(self.now.mono));
        let started = round.start(self.pace.window(), allowed, self.now.mono);
        if let Some(rate) = &mut self.rate {
            rate.started(started.len(), self.now.mono);
        }
        let any = !started.is_empty();
        for record in started {
            self.actions.push_back(Action::Emit(Event::Attempted {
                id: record.id,
                attempts: record.attempts,
            }));
            self.actions.push_back(Action::Deliver(record));
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::RetryPolicy;
    use crate::state::State;
    use std::time::Duration;

    fn record(id: u64) -> Record {
        let mut r = Record::fresh(RecordId(id), None, b"x".to_vec(), format!("k{id}"), 0);
        r.state = State::InFlight;
        r
    }

    fn lease() -> Lease {
        Lease {
            token: 1,
            until: 30_000,
        }
    }

    #[test]
    fn a_suspect_goes_alone_and_the_others_are_released() {
        let mut suspect = record(2);
        suspect.interrupted = 1;
        let sorted = sort_claim(
            vec![record(1), suspect, record(3)],
            &RetryPolicy::default(),
            0,
        );
        assert!(sorted.solo);
        assert_eq!(sorted.queue.iter().map(|r| r.id.0).collect::<Vec<_>>(), [2]);
        let released: Vec<u64> = sorted.writes.iter().map(|w| w.transition.id.0).collect();
        assert_eq!(released, [1, 3]);
    }

    #[test]
    fn stale_records_are_parked_not_queued() {
        let policy = RetryPolicy::default().with_max_age(Duration::from_secs(1));
        let sorted = sort_claim(vec![record(1)], &policy, 5_000);
        assert!(sorted.queue.is_empty());
        assert!(matches!(sorted.writes[0].event, Some(Event::Parked { .. })));
    }

    #[test]
    fn deliveries_start_up_to_the_smaller_of_concurrency_and_window() {
        let queue = (1..=5).map(record).collect();
        let mut round = Round::new(lease(), queue, true, false, 3);
        let started = round.start(2, usize::MAX, 0);
        assert_eq!(started.len(), 2);
        assert_eq!(started[0].payload, b"x", "the delivery carries the payload");
        assert_eq!(round.held(), 5);
        assert!(
            round
                .finish(RecordId(1))
                .is_some_and(|(r, _)| Arc::ptr_eq(&r, &started[0])),
            "the round and the delivery share one record, its payload held once"
        );
        assert_eq!(round.start(8, 1, 0).len(), 1, "the rate limit allows one");
        assert_eq!(
            round.start(8, usize::MAX, 0).len(),
            1,
            "concurrency 3: one more"
        );
        assert_eq!(round.ids().count(), 4);
        assert_eq!(round.start(8, 0, 0).len(), 0);
    }

    #[test]
    fn a_cut_round_starts_nothing_and_gives_back_the_waiting_records() {
        let mut round = Round::new(lease(), (1..=3).map(record).collect(), false, false, 1);
        assert_eq!(round.start(1, usize::MAX, 0).len(), 1);
        let released = round.cut();
        assert_eq!(released.len(), 2);
        assert!(round.start(1, usize::MAX, 0).is_empty());
        assert!(round.finish(RecordId(1)).is_some());
        assert!(round.is_over());
    }

    #[test]
    fn a_solo_round_delivers_one_at_a_time() {
        let mut round = Round::new(lease(), (1..=2).map(record).collect(), false, true, 8);
        assert_eq!(round.start(8, 2, 0).len(), 1);
    }

    #[test]
    fn events_are_sent_only_for_writes_whose_guard_held() {
        let mut idle = record(1);
        idle.state = State::Pending;
        let discard = machine::discard(&idle, "x", 0).map(Write::from);
        let writes = vec![
            discard.unwrap_or_else(|| Write::release(&idle)),
            Write::release(&record(2)),
        ];
        assert_eq!(written_events(writes.clone(), &[]).count(), 1);
        assert_eq!(written_events(writes, &[RecordId(1)]).count(), 0);
    }
}
