use super::*;

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
