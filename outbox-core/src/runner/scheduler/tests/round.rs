use super::*;

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
