use std::time::Duration;

use crate::config::RunnerConfig;
use crate::event::Event;
use crate::machine;
use crate::outcome::Outcome;
use crate::policy::RetryPolicy;
use crate::policy::{Backoff, Jitter};
use crate::record::{Millis, Record, RecordId};
use crate::runner::scheduler::*;
use crate::state::State;
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
        Io::Stats => Answer::Stats(Stats::default()),
    }
}

/// Answers the store call the last actions asked for, claiming `records` if it claimed.
pub(super) fn answer(s: &mut Scheduler, now: Now, actions: &[Action], records: Vec<Record>) {
    let Some(Action::Io(io)) = actions.last() else {
        panic!("no store call in {actions:?}");
    };
    let answer = reply(io, records, None);
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
        let answer = reply(io, vec![], due);
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

#[test]
fn a_round_starts_concurrency_deliveries_and_writes_outcomes_with_the_next_claim() {
    let config = RunnerConfig::default().with_batch(3).with_concurrency(2);
    let mut s = scheduler(config);
    let actions = claimed(&mut s, at(0), (1..=3).map(|i| record(i, None)).collect());
    assert_eq!(delivered(&actions), [RecordId(1), RecordId(2)]);
    assert_eq!(s.holding(), 3);
    s.handle(
        at(5),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::Delivered),
        },
    );
    let actions = drain(&mut s);
    assert_eq!(delivered(&actions), [RecordId(3)]);
    assert!(writes(&actions).is_empty(), "outcomes wait for the round");
    for id in [2, 3] {
        s.handle(
            at(6),
            Input::Reported {
                id: RecordId(id),
                report: Report::Outcome(Outcome::Delivered),
            },
        );
    }
    // The claim was full: the three outcomes travel with the next claim, in one write.
    let actions = drain(&mut s);
    assert_eq!(writes(&actions), [(3, true)]);
    assert_eq!(s.holding(), 4, "three outcomes and a claim under way");
    answer(&mut s, at(7), &actions, vec![]);
    let after = drain(&mut s);
    let events = after
        .iter()
        .filter(|a| matches!(a, Action::Emit(Event::Delivered { .. })))
        .count();
    assert_eq!(events, 3, "events only once written: {after:?}");
    assert_eq!(s.holding(), 0);
    assert!(matches!(after.last(), Some(Action::Io(Io::NextDue))));
}

#[test]
fn slow_deliveries_let_the_finished_ones_be_written_after_the_commit_delay() {
    let mut s = scheduler(RunnerConfig::default().with_concurrency(2));
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    s.handle(
        at(1),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::Delivered),
        },
    );
    assert!(writes(&drain(&mut s)).is_empty());
    assert_eq!(s.poll_timeout(), Some(1 + COMMIT_DELAY));
    s.handle(at(1 + COMMIT_DELAY), Input::Timer);
    assert_eq!(writes(&drain(&mut s)), [(1, false)]);
}

#[test]
fn leases_are_renewed_every_third_of_a_lease_for_running_and_waiting_records() {
    let config = RunnerConfig::default().with_concurrency(1);
    let mut s = scheduler(config);
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    assert_eq!(s.poll_timeout(), Some(10_000));
    s.handle(at(10_000), Input::Timer);
    let actions = drain(&mut s);
    let Some(Action::Io(Io::Renew { ids, lease })) = actions.first() else {
        panic!("{actions:?}");
    };
    assert_eq!(ids.len(), 2);
    assert_eq!(lease.until, WALL + 40_000);
}

#[test]
fn shutdown_aborts_deliveries_at_the_grace_deadline_and_releases_them() {
    let mut s = scheduler(RunnerConfig::default());
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    s.handle(at(100), Input::Shutdown { grace: 500 });
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.poll_timeout(), Some(500));
    s.handle(at(500), Input::Timer);
    assert_eq!(drain(&mut s), [Action::AbortDeliveries]);
    for id in [1, 2] {
        s.handle(
            at(501),
            Input::Reported {
                id: RecordId(id),
                report: Report::Abandoned,
            },
        );
    }
    let actions = drain(&mut s);
    assert_eq!(writes(&actions), [(2, false)], "released, nothing claimed");
    answer(&mut s, at(502), &actions, vec![]);
    assert!(drain(&mut s).is_empty());
    assert!(s.is_finished());
}

#[test]
fn a_no_answer_takes_the_link_down_and_the_probe_waits_for_the_records_own_deadline() {
    let mut s = scheduler(RunnerConfig::default().with_concurrency(1));
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    s.handle(
        at(10),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::no_answer("refused")),
        },
    );
    let actions = drain(&mut s);
    assert!(actions.contains(&Action::Emit(Event::LinkDown {
        since: WALL + 10,
        error: "refused".into()
    })));
    // Record 2 is not hammered: released with record 1's outcome.
    assert!(delivered(&actions).is_empty());
    let Some(Action::Io(Io::Round { transitions, claim })) = actions.last() else {
        panic!("{actions:?}");
    };
    assert_eq!((transitions.len(), claim.is_none()), (2, true));
    let Some(machine::Change::Update(p)) = transitions
        .iter()
        .find(|t| t.id == RecordId(1))
        .map(|t| &t.change)
    else {
        panic!()
    };
    // No jitter: the first no-answer waits the backoff's 1 s, and so does the probe.
    assert_eq!(p.next_attempt_at, Some(WALL + 1_010));
    answer(&mut s, at(11), &actions, vec![]);
    // Record 2 is due now, but the link waits for the probe.
    settle(&mut s, at(11), Some(WALL));
    s.handle(at(12), Input::Wake);
    assert!(drain(&mut s).is_empty(), "an enqueue does not probe early");
    assert_eq!(s.poll_timeout(), Some(1_010));
    s.handle(at(1_010), Input::Timer);
    let probe = drain(&mut s);
    let Some(Action::Io(Io::Round {
        claim: Some(claim), ..
    })) = probe.last()
    else {
        panic!("{probe:?}");
    };
    assert_eq!(claim.limit, 1, "one record probes the link");
}

/// The link goes down at 10 ms; the probe claims record 2 at 1 s and the server's answer
/// to it (`outcome`) comes back at `answered_at`. Returns the actions right after it.
pub(super) fn probe_answered(s: &mut Scheduler, answered_at: Now, outcome: Outcome) -> Vec<Action> {
    claimed(s, at(0), vec![record(1, None)]);
    s.handle(
        at(10),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::no_answer("refused")),
        },
    );
    settle(s, at(10), Some(WALL + 1_010));
    assert_eq!(s.poll_timeout(), Some(1_010));
    // The probe, 1 s later, is another record; the server answers.
    s.handle(at(1_010), Input::Timer);
    let probe = drain(s);
    answer(s, at(1_010), &probe, vec![record(2, None)]);
    drain(s);
    s.handle(
        answered_at,
        Input::Reported {
            id: RecordId(2),
            report: Report::Outcome(outcome),
        },
    );
    drain(s)
}

#[test]
fn an_answer_brings_the_link_up_and_releases_the_no_answer_waits() {
    let mut s = scheduler(RunnerConfig::default().with_concurrency(1));
    let actions = probe_answered(&mut s, at(1_020), Outcome::transient("HTTP 503", None));
    assert!(actions.contains(&Action::Emit(Event::LinkUp {
        down_for: Duration::from_millis(1_010)
    })));
    assert!(
        actions.contains(&Action::Io(Io::Get(RecordId(1)))),
        "record 1 is read to be made due: {actions:?}"
    );
    assert!(s.link().is_up());
}

/// [`probe_answered`] with a delivery at `answered_at`, then every store call answered
/// with record 1 and more due: the claims made by then, and the scheduler.
pub(super) fn answered_after(
    config: RunnerConfig,
    answered_at: Millis,
) -> (Scheduler, Vec<(usize, bool)>) {
    let mut s = scheduler(config.with_concurrency(1).with_safety_poll(None));
    let mut actions = probe_answered(&mut s, at(answered_at), Outcome::Delivered);
    let Some(Action::Io(io)) = actions.last() else {
        return (s, writes(&actions));
    };
    let gone = reply(io, vec![], None);
    s.handle(at(answered_at), Input::Answer(Ok(gone)));
    actions.extend(settle(&mut s, at(answered_at), Some(WALL)));
    let claims = writes(&actions);
    (s, claims)
}

#[test]
fn after_an_hour_without_an_answer_the_backlog_waits_a_random_twelfth_at_most_relink_spread() {
    let hour = 3_600_010;
    let (mut s, claims) = answered_after(RunnerConfig::default(), hour);
    assert!(claims.iter().all(|(_, claim)| !claim), "{claims:?}");
    assert!(s.link().is_up());
    let hold = s.poll_timeout().expect("a timer for the end of the wait");
    // Down for an hour: a twelfth is 5 min, which is also the default `relink_spread`.
    assert!((hour..=hour + 300_000).contains(&hold), "{hold}");
    // A write during the wait waits too.
    s.handle(at(hold - 1), Input::Wake);
    let early = writes(&settle(&mut s, at(hold - 1), Some(WALL)));
    assert!(early.iter().all(|(_, claim)| !claim), "{early:?}");
    s.handle(at(hold), Input::Timer);
    let claims = writes(&settle(&mut s, at(hold), Some(WALL)));
    assert!(
        claims.iter().any(|(_, claim)| *claim),
        "claims once it passed"
    );

    // A minute without an answer: at most 5 s. A shorter cap wins over the twelfth.
    let (s, _) = answered_after(RunnerConfig::default(), 60_010);
    let hold = s.poll_timeout().expect("a timer");
    assert!((60_010..=65_010).contains(&hold), "{hold}");
    let capped = RunnerConfig::default().with_relink_spread(Duration::from_secs(2));
    let (s, _) = answered_after(capped, hour);
    let hold = s.poll_timeout().expect("a timer");
    assert!((hour..=hour + 2_000).contains(&hold), "{hold}");
}

#[test]
fn the_outage_is_measured_on_the_monotonic_clock_not_the_wall() {
    // A minute without an answer, during which the wall clock jumped a day ahead: the wait
    // after it is a minute's (at most 5 s), not the whole `relink_spread`.
    let mut s = scheduler(
        RunnerConfig::default()
            .with_concurrency(1)
            .with_safety_poll(None),
    );
    let stepped = Now {
        wall: WALL + 60_010 + 86_400_000,
        mono: 60_010,
    };
    let actions = probe_answered(&mut s, stepped, Outcome::Delivered);
    assert!(
        actions.contains(&Action::Emit(Event::LinkUp {
            down_for: Duration::from_millis(60_000)
        })),
        "{actions:?}"
    );
    let hold = s.pace.hold_until().expect("a wait after the outage");
    assert!(
        (stepped.wall..=stepped.wall + 5_000).contains(&hold),
        "{}",
        hold - stepped.wall
    );
}

#[test]
fn with_no_relink_spread_the_backlog_goes_as_soon_as_the_server_answers() {
    let off = RunnerConfig::default().with_relink_spread(Duration::ZERO);
    let (_, claims) = answered_after(off, 3_600_010);
    assert!(claims.iter().any(|(_, claim)| *claim), "{claims:?}");
}

#[test]
fn going_online_releases_the_waits_and_claims_at_once() {
    let mut s = scheduler(RunnerConfig::default());
    claimed(&mut s, at(0), vec![record(1, None)]);
    s.handle(
        at(10),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::no_answer("no route")),
        },
    );
    let actions = drain(&mut s);
    answer(&mut s, at(10), &actions, vec![]);
    let next = drain(&mut s);
    answer(&mut s, at(10), &next, vec![]);
    s.handle(at(20), Input::Online(false));
    assert!(drain(&mut s).is_empty());
    s.handle(at(30), Input::Online(true));
    let actions = drain(&mut s);
    assert_eq!(actions.last(), Some(&Action::Io(Io::Get(RecordId(1)))));
    let mut waiting = record(1, None);
    waiting.state = State::Retrying;
    waiting.lease = None;
    waiting.unanswered = 1;
    waiting.next_attempt_at = Some(WALL + 1_010);
    answer(&mut s, at(31), &actions, vec![waiting]);
    let relink = drain(&mut s);
    let Some(Action::Io(Io::Apply(transitions))) = relink.last() else {
        panic!("{relink:?}");
    };
    assert_eq!(transitions.len(), 1, "made due now");
    answer(&mut s, at(31), &relink, vec![]);
    let claim = drain(&mut s);
    assert_eq!(writes(&claim), [(0, true)], "claimed at once: {claim:?}");
}

#[test]
fn a_step_back_rebases_by_the_measured_step_and_shifts_the_probe() {
    let mut s = scheduler(RunnerConfig::default());
    settle(&mut s, at(0), None);
    // The wall clock is set back a day between two wakes one second apart.
    let day = 86_400_000;
    s.handle(
        Now {
            wall: WALL + 1_000 - day,
            mono: 1_000,
        },
        Input::Timer,
    );
    let actions = drain(&mut s);
    assert_eq!(
        actions.first(),
        Some(&Action::Io(Io::SteppedBack {
            now: WALL + 1_000 - day,
            limit: 256
        }))
    );
    // A forward step or a small drift re-bases nothing.
    let mut s = scheduler(RunnerConfig::default());
    s.handle(
        Now {
            wall: WALL + 1_500 + day,
            mono: 1_000,
        },
        Input::Timer,
    );
    assert!(!drain(&mut s)
        .iter()
        .any(|a| matches!(a, Action::Io(Io::SteppedBack { .. }))));
}

#[test]
fn a_hold_set_before_a_step_back_keeps_its_wait() {
    // Told to wait 30 s (spread to at most 45 s), then the wall clock is set back a day:
    // the runner claims again within the wait it was given, not a day later.
    let mut s = scheduler(
        RunnerConfig::default()
            .with_concurrency(1)
            .with_safety_poll(None),
    );
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(30)));
    s.handle(
        at(10),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::transient("HTTP 429", retry_after)),
        },
    );
    settle(&mut s, at(10), Some(WALL));
    let day = 86_400_000;
    let stepped = Now {
        wall: WALL + 1_000 - day,
        mono: 1_000,
    };
    s.handle(stepped, Input::Timer);
    settle(&mut s, stepped, Some(WALL - day));
    let hold = s.pace.hold_until().expect("still held");
    assert!(
        (stepped.wall + 29_000..=stepped.wall + 45_000).contains(&hold),
        "held {} ms past the stepped clock",
        hold as i64 - stepped.wall as i64
    );
}

#[test]
fn concurrent_refusals_halt_once_and_release_the_rest() {
    let mut s = scheduler(RunnerConfig::default());
    claimed(&mut s, at(0), (1..=4).map(|i| record(i, None)).collect());
    let mut actions = Vec::new();
    for id in 1..=4 {
        s.handle(
            at(5),
            Input::Reported {
                id: RecordId(id),
                report: Report::Outcome(Outcome::halt("HTTP 401")),
            },
        );
        actions.extend(settle(&mut s, at(5), None));
    }
    let set_halts: Vec<_> = actions
        .iter()
        .filter(|a| matches!(a, Action::Io(Io::SetHalt(Some(_)))))
        .collect();
    assert_eq!(set_halts.len(), 1, "{actions:?}");
    let halted = actions
        .iter()
        .filter(|a| matches!(a, Action::Emit(Event::Halted { .. })))
        .count();
    assert_eq!(halted, 1, "{actions:?}");
    assert_eq!(s.halt().map(|h| h.reason.as_str()), Some("HTTP 401"));
    // Every record was released: nothing spent.
    for a in &actions {
        if let Action::Io(Io::Round { transitions, .. }) = a {
            for t in transitions {
                let machine::Change::Update(p) = &t.change else {
                    panic!()
                };
                assert_eq!(p.attempts, 0);
            }
        }
    }
    // Halted: a wake claims nothing; resume clears the persisted halt, then claims.
    s.handle(at(6), Input::Wake);
    assert!(writes(&settle(&mut s, at(6), None))
        .iter()
        .all(|(_, claim)| !claim));
    s.handle(at(7), Input::Resume);
    let resume = drain(&mut s);
    assert_eq!(resume, [Action::Io(Io::SetHalt(None))]);
    answer(&mut s, at(7), &resume, vec![]);
    let after = drain(&mut s);
    assert_eq!(after.first(), Some(&Action::Emit(Event::Resumed)));
    assert_eq!(writes(&after), [(0, true)]);
}

#[test]
fn a_persisted_halt_holds_from_the_start() {
    let halt = Halt {
        reason: "HTTP 401".into(),
        since: WALL - 5,
    };
    let mut s = Scheduler::new(RunnerConfig::default(), policy(), 1, 2, at(0), Some(halt));
    let actions = drain(&mut s);
    assert!(writes(&actions).is_empty(), "{actions:?}");
}

#[test]
fn rejections_of_different_groups_in_a_row_halt_as_a_misconfiguration() {
    let mut s = scheduler(RunnerConfig::default().with_rejection_storm(3));
    let records = vec![
        record(1, Some("a")),
        record(2, Some("a")),
        record(3, Some("b")),
        record(4, None),
    ];
    claimed(&mut s, at(0), records);
    for id in 1..=4 {
        s.handle(
            at(5),
            Input::Reported {
                id: RecordId(id),
                report: Report::Outcome(Outcome::rejected("HTTP 404")),
            },
        );
    }
    assert_eq!(
        s.halt().map(|h| h.reason.as_str()),
        Some("suspected misconfiguration: 3 rejections in a row (HTTP 404)")
    );
    // One delivery answered otherwise resets the count.
    let mut s = scheduler(RunnerConfig::default().with_rejection_storm(3));
    claimed(&mut s, at(0), (1..=4).map(|i| record(i, None)).collect());
    for (id, outcome) in [
        (1, Outcome::rejected("HTTP 404")),
        (2, Outcome::rejected("HTTP 404")),
        (3, Outcome::Delivered),
        (4, Outcome::rejected("HTTP 404")),
    ] {
        s.handle(
            at(5),
            Input::Reported {
                id: RecordId(id),
                report: Report::Outcome(outcome),
            },
        );
    }
    assert!(s.halt().is_none());
}

#[test]
fn a_store_failure_keeps_the_outcomes_and_backs_off() {
    let mut s = scheduler(RunnerConfig::default().with_batch(1));
    claimed(&mut s, at(0), vec![record(1, None)]);
    s.handle(
        at(5),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::Delivered),
        },
    );
    assert_eq!(writes(&drain(&mut s)), [(1, true)]);
    s.handle(
        at(6),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "disk full".into(),
        })),
    );
    let actions = drain(&mut s);
    assert!(matches!(
        actions.as_slice(),
        [Action::Log(Notice::StoreFailed { .. })]
    ));
    assert_eq!(s.holding(), 1, "the outcome is kept");
    assert_eq!(s.poll_timeout(), Some(1_006));
    s.handle(at(1_006), Input::Timer);
    assert_eq!(
        writes(&drain(&mut s)),
        [(1, true)],
        "written with the claim"
    );
}

#[test]
fn a_suspect_goes_alone_and_the_others_are_released_at_once() {
    let mut s = scheduler(RunnerConfig::default());
    let mut suspect = record(2, None);
    suspect.interrupted = 1;
    let actions = claimed(
        &mut s,
        at(0),
        vec![record(1, None), suspect, record(3, None)],
    );
    // The others are released first, and only then is the suspect delivered.
    assert_eq!(writes(&actions), [(2, false)]);
    assert!(delivered(&actions).is_empty());
    answer(&mut s, at(1), &actions, vec![]);
    assert_eq!(delivered(&drain(&mut s)), [RecordId(2)]);
}

#[test]
fn a_store_that_says_due_but_claims_nothing_does_not_spin_the_runner() {
    let mut s = scheduler(RunnerConfig::default());
    let mut claims = Vec::new();
    let mut mono = 0;
    // The store's next_due always says "due now" and its claim always finds nothing.
    while mono < 1_000 {
        let actions = settle(&mut s, at(mono), Some(WALL + mono));
        claims.extend(
            writes(&actions)
                .into_iter()
                .filter(|(_, claim)| *claim)
                .map(|_| mono),
        );
        mono = s.poll_timeout().unwrap_or(mono + 1).max(mono + 1);
        s.handle(at(mono), Input::Timer);
    }
    // The start's claim (a trigger's) and the first on the store's word at 0, then 50, 150,
    // 350, 750 ms: backing off, not thousands of claims.
    assert_eq!(claims, [0, 0, 50, 150, 350, 750], "{claims:?}");
    // An enqueue is served at once whatever the quiet period.
    s.handle(at(mono), Input::Wake);
    let actions = drain(&mut s);
    assert_eq!(writes(&actions), [(0, true)]);
}

#[test]
fn a_retry_after_holds_the_whole_runner_until_it_passes() {
    let mut s = scheduler(RunnerConfig::default().with_concurrency(1));
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(30)));
    s.handle(
        at(10),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::transient("HTTP 429", retry_after)),
        },
    );
    let actions = settle(&mut s, at(10), Some(WALL));
    assert!(
        delivered(&actions).is_empty(),
        "record 2 waits too: {actions:?}"
    );
    // An enqueue waits for the server's word as well.
    s.handle(at(20), Input::Wake);
    let actions = settle(&mut s, at(20), Some(WALL));
    assert!(
        writes(&actions).iter().all(|(_, claim)| !claim),
        "{actions:?}"
    );
    // (At 30 s, one lease after the start, the runner looks for leases from the future.)
    s.handle(at(30_000), Input::Timer);
    settle(&mut s, at(30_000), Some(WALL));
    // The server's 30 s, spread by up to half of it.
    let hold = s.poll_timeout().expect("a timer for the end of the hold");
    assert!((30_010..=45_010).contains(&hold), "{hold}");
    s.handle(at(hold - 1), Input::Timer);
    let early = writes(&settle(&mut s, at(hold - 1), Some(WALL)));
    assert!(early.iter().all(|(_, claim)| !claim), "{early:?}");
    s.handle(at(hold), Input::Timer);
    let claims = writes(&settle(&mut s, at(hold), Some(WALL)));
    // The wake's claim once it passed, then one on the store's word (this store says "due"
    // and claims nothing: the quiet period starts after that one).
    assert_eq!(claims, [(0, true), (0, true)], "claims once it passed");
}

#[test]
fn after_a_retry_after_one_delivery_goes_first_and_the_window_doubles_on_answers() {
    let mut s = scheduler(RunnerConfig::default().with_concurrency(4));
    let first = claimed(&mut s, at(0), (1..=4).map(|i| record(i, None)).collect());
    assert_eq!(delivered(&first).len(), 4, "the full window at start");
    let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(10)));
    // The server sheds load: one request is told to wait, the three sent with it pass.
    s.handle(
        at(10),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::transient("HTTP 429", retry_after)),
        },
    );
    for id in 2..=4 {
        s.handle(
            at(11),
            Input::Reported {
                id: RecordId(id),
                report: Report::Outcome(Outcome::Delivered),
            },
        );
    }
    settle(&mut s, at(10), Some(WALL));
    let hold = s.poll_timeout().expect("a timer for the end of the hold");
    s.handle(at(hold), Input::Timer);
    let mut batch: Vec<Record> = (1..=8).map(|i| record(i, None)).collect();
    let mut actions = drain(&mut s);
    while delivered(&actions).is_empty() {
        let claims = matches!(
            actions.last(),
            Some(Action::Io(Io::Round { claim: Some(_), .. }))
        );
        let records = if claims {
            std::mem::take(&mut batch)
        } else {
            Vec::new()
        };
        answer(&mut s, at(hold), &actions, records);
        actions = drain(&mut s);
    }
    assert!(batch.is_empty(), "the eight were claimed");
    let mut now = hold;
    let mut windows = Vec::new();
    let mut next = 1;
    loop {
        let started = delivered(&actions);
        if started.is_empty() {
            break;
        }
        windows.push(started.len());
        now += 10;
        for id in started {
            s.handle(
                at(now),
                Input::Reported {
                    id,
                    report: Report::Outcome(Outcome::Delivered),
                },
            );
            next += 1;
        }
        actions = drain(&mut s);
    }
    assert_eq!(next, 9, "all eight delivered");
    // One request first; each answer that does not ask to wait doubles the window.
    assert_eq!(windows, [1, 2, 4, 1], "deliveries started at each step");
}
