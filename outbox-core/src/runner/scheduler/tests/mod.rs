//! The scheduler's behaviour, driven as the shell drives it: inputs in, actions out, every
//! store call answered by hand. One file per concept of the room; the helpers are here.

mod ahead;
mod clock_step;
mod halt;
mod link;
mod pace;
mod round;
mod sizing;
mod store;

pub(super) use std::time::Duration;

pub(super) use crate::config::RunnerConfig;
pub(super) use crate::event::Event;
pub(super) use crate::machine;
pub(super) use crate::outcome::Outcome;
pub(super) use crate::policy::RetryPolicy;
use crate::policy::{Backoff, Jitter};
pub(super) use crate::record::{Millis, Record, RecordId};
pub(super) use crate::runner::scheduler::*;
pub(super) use crate::state::State;
use crate::store::Stats;

pub(super) const WALL: Millis = 1_700_000_000_000;

pub(super) fn at(mono: Millis) -> Now {
    Now {
        wall: WALL + mono,
        mono,
    }
}

pub(super) fn policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(60),
        ))
        .with_jitter(Jitter::None)
}

pub(super) fn scheduler(config: RunnerConfig) -> Scheduler {
    Scheduler::new(config, policy(), 1, 2, at(0), None)
}

pub(super) fn record(id: u64, group: Option<&str>) -> Record {
    let mut r = Record::fresh(
        RecordId(id),
        group.map(str::to_owned),
        vec![],
        format!("k{id}"),
        WALL,
    );
    r.state = State::InFlight;
    r
}

/// The delivery of record `id` ended with `outcome`.
pub(super) fn report(s: &mut Scheduler, now: Now, id: u64, outcome: Outcome) {
    s.handle(
        now,
        Input::Reported {
            id: RecordId(id),
            report: Report::Outcome(outcome),
        },
    );
}

/// Every action until the scheduler waits.
pub(super) fn drain(s: &mut Scheduler) -> Vec<Action> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

/// The answer a store with nothing in it gives to `io`, claiming `records` and reporting `due`.
pub(super) fn reply(io: &Io, records: Vec<Record>, due: Option<Millis>) -> Answer {
    match io {
        Io::Round { claim, .. } => Answer::Round {
            skipped: vec![],
            claimed: claim
                .map(|c| {
                    records
                        .into_iter()
                        .map(|mut r| {
                            r.lease = Some(c.lease);
                            r
                        })
                        .collect()
                })
                .unwrap_or_default(),
        },
        Io::Renew { .. } => Answer::Renewed,
        Io::NextDue => Answer::NextDue(due),
        Io::Expired { .. } | Io::SteppedBack { .. } => Answer::Records(records),
        Io::Get(_) => Answer::Record(records.into_iter().next()),
        Io::Apply(_) => Answer::Applied { skipped: vec![] },
        Io::SetHalt(_) => Answer::HaltSet,
        // The store held the halt the runner cleared.
        Io::ClearHaltIf(seen) => Answer::Halt(Some(seen.clone())),
        Io::Halt => Answer::Halt(None),
        Io::Stats => Answer::Stats(Stats::default()),
        Io::Unreadable { .. } => Answer::Unreadable(Vec::new()),
    }
}

/// [`reply`] from a store that holds the halt this runner persisted, and no other.
pub(super) fn store_reply(
    s: &Scheduler,
    io: &Io,
    records: Vec<Record>,
    due: Option<Millis>,
) -> Answer {
    match io {
        Io::Halt => Answer::Halt(s.halt().cloned()),
        _ => reply(io, records, due),
    }
}

/// Answers the store call the last actions asked for, claiming `records` if it claimed.
pub(super) fn answer(s: &mut Scheduler, now: Now, actions: &[Action], records: Vec<Record>) {
    let Some(Action::Io(io)) = actions.last() else {
        panic!("no store call in {actions:?}");
    };
    let answer = store_reply(s, io, records, None);
    s.handle(now, Input::Answer(Ok(answer)));
}

/// Drains and answers every store call (nothing claimed, `due` as the next deadline)
/// until the scheduler waits; returns every action.
pub(super) fn settle(s: &mut Scheduler, now: Now, due: Option<Millis>) -> Vec<Action> {
    let mut all = Vec::new();
    loop {
        let actions = drain(s);
        if actions.is_empty() {
            return all;
        }
        let Some(Action::Io(io)) = actions.last() else {
            all.extend(actions);
            return all;
        };
        let answer = store_reply(s, io, vec![], due);
        all.extend(actions);
        s.handle(now, Input::Answer(Ok(answer)));
    }
}

pub(super) fn delivered(actions: &[Action]) -> Vec<RecordId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deliver(r) => Some(r.id),
            _ => None,
        })
        .collect()
}

pub(super) fn writes(actions: &[Action]) -> Vec<(usize, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Io(Io::Round { transitions, claim }) => {
                Some((transitions.len(), claim.is_some()))
            }
            _ => None,
        })
        .collect()
}

/// Starts a round that claims `records`; returns the actions after the claim.
pub(super) fn claimed(s: &mut Scheduler, now: Now, records: Vec<Record>) -> Vec<Action> {
    let first = drain(s);
    assert_eq!(writes(&first), [(0, true)], "{first:?}");
    answer(s, now, &first, records);
    drain(s)
}
