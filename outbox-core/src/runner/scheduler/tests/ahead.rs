use super::*;
use crate::machine::Change;

/// Batch 2 growing to 64, two deliveries at a time.
fn config() -> RunnerConfig {
    RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(2)
}

fn records(ids: std::ops::RangeInclusive<u64>) -> Vec<Record> {
    ids.map(|i| record(i, None)).collect()
}

/// The claims among `actions`: (transitions written, limit).
fn claims(actions: &[Action]) -> Vec<(usize, usize)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Io(Io::Round {
                transitions,
                claim: Some(c),
            }) => Some((transitions.len(), c.limit)),
            _ => None,
        })
        .collect()
}

/// The ids the writes among `actions` give back with no attempt spent (a release, or a
/// record no server answered).
fn released(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Io(Io::Round { transitions, .. }) => Some(transitions),
            _ => None,
        })
        .flatten()
        .filter(|t| matches!(&t.change, Change::Update(p) if p.attempts == 0))
        .map(|t| t.id.0)
        .collect()
}

/// A drain under way: a first round of 2 delivered, the second (records 3 to 6, grown to 4)
/// claimed with its outcomes, and record 3 of it delivered. Returns the actions after that
/// report: the round's next delivery and the claim ahead.
fn grown(s: &mut Scheduler) -> Vec<Action> {
    let actions = claimed(s, at(0), records(1..=2));
    assert_eq!(delivered(&actions), [RecordId(1), RecordId(2)]);
    assert!(
        claims(&actions).is_empty(),
        "a round of `batch` claims nothing ahead"
    );
    report(s, at(1), 1, Outcome::Delivered);
    report(s, at(1), 2, Outcome::Delivered);
    let actions = drain(s);
    assert_eq!(
        claims(&actions),
        [(2, 4)],
        "the full round's outcomes travel with the claim"
    );
    answer(s, at(2), &actions, records(3..=6));
    let actions = drain(s);
    assert_eq!(delivered(&actions), [RecordId(3), RecordId(4)]);
    assert!(
        claims(&actions).is_empty(),
        "nothing claimed ahead before a delivery showed the pace"
    );
    report(s, at(3), 3, Outcome::Delivered);
    drain(s)
}

#[test]
fn a_round_that_keeps_up_claims_the_next_one_while_it_delivers() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    assert_eq!(delivered(&actions), [RecordId(5)]);
    // The claim ahead carries the outcome known so far and asks for what the round leads to.
    assert_eq!(claims(&actions), [(1, 8)], "{actions:?}");
    let Some(Action::Io(Io::Round {
        claim: Some(ahead), ..
    })) = actions.last()
    else {
        panic!("{actions:?}");
    };
    assert_eq!(ahead.lease.until, WALL + 3 + 30_000);
    // Deliveries go on while the store works on it: a report starts the next one at once.
    report(&mut s, at(4), 4, Outcome::Delivered);
    assert_eq!(delivered(&drain(&mut s)), [RecordId(6)]);
    answer(&mut s, at(5), &actions, records(7..=14));
    let actions = drain(&mut s);
    assert_eq!(
        actions,
        [Action::Emit(Event::Delivered { id: RecordId(3) })],
        "the outcome written is said; the records claimed ahead wait for the round"
    );
    assert_eq!(
        s.holding(),
        2 + 1 + 8,
        "two running, one outcome, eight claimed ahead"
    );
    report(&mut s, at(6), 5, Outcome::Delivered);
    report(&mut s, at(6), 6, Outcome::Delivered);
    // The round is over: the next one starts with no store call, and claims ahead in turn
    // once one of its deliveries is through, with the outcomes waiting (4, 5 and 6 of the
    // round before, 7 of this one).
    let actions = drain(&mut s);
    assert_eq!(delivered(&actions), [RecordId(7), RecordId(8)]);
    assert!(claims(&actions).is_empty(), "{actions:?}");
    report(&mut s, at(7), 7, Outcome::Delivered);
    let actions = drain(&mut s);
    assert_eq!(delivered(&actions), [RecordId(9)]);
    assert_eq!(claims(&actions), [(4, 16)]);
}

#[test]
fn the_leases_of_the_records_claimed_ahead_are_renewed_with_the_round() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    answer(&mut s, at(4), &actions, records(7..=14));
    s.handle(at(10_002), Input::Timer);
    let actions = drain(&mut s);
    let Some((ids, lease)) = actions.iter().find_map(|a| match a {
        Action::Io(Io::Renew { ids, lease }) => Some((ids, lease)),
        _ => None,
    }) else {
        panic!("{actions:?}");
    };
    let mut ids: Vec<u64> = ids.iter().map(|id| id.0).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (4..=14).collect::<Vec<_>>(),
        "the round's and those claimed ahead"
    );
    assert_eq!(lease.until, WALL + 10_002 + 30_000);
}

#[test]
fn a_round_cut_short_releases_the_records_claimed_ahead() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    answer(&mut s, at(4), &actions, records(7..=14));
    // No answer: the link goes down and the round is cut; the records claimed ahead go back
    // with those not started.
    report(
        &mut s,
        at(5),
        4,
        Outcome::NoAnswer {
            error: "connection refused".into(),
        },
    );
    report(&mut s, at(5), 5, Outcome::Delivered);
    let actions = settle(&mut s, at(6), None);
    assert!(delivered(&actions).is_empty());
    let gone = released(&actions);
    for id in 6..=14 {
        assert!(gone.contains(&id), "{id} not released: {actions:?}");
    }
    assert_eq!(s.holding(), 0);
}

#[test]
fn records_claimed_ahead_of_a_round_cut_meanwhile_go_back_at_once() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    // Shutdown while the claim ahead is under way: its records are released when it answers.
    s.handle(at(4), Input::Shutdown { grace: 1_000 });
    answer(&mut s, at(5), &actions, records(7..=14));
    report(&mut s, at(6), 4, Outcome::Delivered);
    report(&mut s, at(6), 5, Outcome::Delivered);
    let actions = drain(&mut s);
    assert!(delivered(&actions).is_empty());
    assert_eq!(claims(&actions), [], "nothing claimed at shutdown");
    let mut gone = released(&actions);
    gone.sort_unstable();
    assert_eq!(gone, [6, 7, 8, 9, 10, 11, 12, 13, 14], "{actions:?}");
    answer(&mut s, at(7), &actions, vec![]);
    drain(&mut s);
    assert!(s.is_finished());
    assert_eq!(s.holding(), 0);
}

#[test]
fn a_failing_round_claims_nothing_ahead() {
    let mut s = scheduler(config());
    let actions = claimed(&mut s, at(0), records(1..=2));
    assert_eq!(delivered(&actions).len(), 2);
    report(&mut s, at(1), 1, Outcome::Delivered);
    report(&mut s, at(1), 2, Outcome::Delivered);
    let actions = drain(&mut s);
    answer(&mut s, at(2), &actions, records(3..=6));
    assert_eq!(delivered(&drain(&mut s)).len(), 2);
    report(&mut s, at(3), 3, Outcome::transient("HTTP 503", None));
    let actions = drain(&mut s);
    assert_eq!(delivered(&actions), [RecordId(5)]);
    assert!(claims(&actions).is_empty(), "{actions:?}");
}

#[test]
fn fixed_rounds_and_a_rate_limit_claim_nothing_ahead() {
    let limited = config().with_rate_limit(1_000, Duration::from_secs(1));
    for config in [config().with_max_batch(2), limited] {
        let mut s = scheduler(config.clone());
        let mut next = 1;
        let mut actions = drain(&mut s);
        let mut rounds = Vec::new();
        let mut later = Vec::new();
        // Four full rounds, each delivered at once.
        for _ in 0..4 {
            let limit = claims(&actions).last().expect("a claim").1 as u64;
            rounds.push(limit as usize);
            answer(&mut s, at(1), &actions, records(next..=next + limit - 1));
            next += limit;
            loop {
                actions = drain(&mut s);
                later.extend(claims(&actions));
                let started = delivered(&actions);
                if started.is_empty() {
                    break;
                }
                for id in started {
                    report(&mut s, at(1), id.0, Outcome::Delivered);
                }
            }
        }
        // Each claim came once its round was over, with every outcome of that round.
        let written: Vec<usize> = later.iter().map(|(w, _)| *w).collect();
        assert_eq!(written, rounds, "{config:?}");
    }
}

#[test]
fn after_a_failure_the_round_claimed_ahead_claims_nothing_ahead_and_the_next_is_halved() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    assert_eq!(claims(&actions), [(1, 8)]);
    // A failure in the round, once the claim ahead (at the size a round that keeps up leads
    // to) is made.
    report(&mut s, at(4), 4, Outcome::transient("HTTP 503", None));
    drain(&mut s);
    answer(&mut s, at(5), &actions, records(7..=14));
    report(&mut s, at(6), 5, Outcome::Delivered);
    report(&mut s, at(6), 6, Outcome::Delivered);
    // The round claimed ahead goes, but claims nothing ahead in turn...
    let mut actions = drain(&mut s);
    let mut during = Vec::new();
    loop {
        let started = delivered(&actions);
        if started.is_empty() {
            break;
        }
        during.extend(claims(&actions));
        for id in started {
            report(&mut s, at(7), id.0, Outcome::Delivered);
        }
        actions = drain(&mut s);
    }
    assert_eq!(during, [], "nothing claimed ahead after a failure");
    // ...and the claim at its end asks for half the failed round, not twice the round
    // claimed ahead.
    assert_eq!(claims(&actions).last().map(|c| c.1), Some(2), "{actions:?}");
}

#[test]
fn a_store_failure_gives_back_the_records_claimed_ahead() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    answer(&mut s, at(4), &actions, records(7..=14));
    report(&mut s, at(5), 4, Outcome::Delivered);
    assert_eq!(delivered(&drain(&mut s)), [RecordId(6)]);
    // The outcomes known so far are written after the commit delay, and the store fails.
    s.handle(at(5 + COMMIT_DELAY), Input::Timer);
    let actions = drain(&mut s);
    assert_eq!(writes(&actions), [(1, false)]);
    s.handle(
        at(6 + COMMIT_DELAY),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "disk I/O error".into(),
        })),
    );
    // The round goes on; the records claimed ahead are given back with the next write.
    report(&mut s, at(30), 5, Outcome::Delivered);
    report(&mut s, at(30), 6, Outcome::Delivered);
    drain(&mut s);
    // After the store's backoff.
    s.handle(at(2_000), Input::Timer);
    let actions = settle(&mut s, at(2_000), None);
    assert!(delivered(&actions).is_empty(), "{actions:?}");
    let mut gone = released(&actions);
    gone.sort_unstable();
    assert_eq!(gone, (7..=14).collect::<Vec<_>>(), "{actions:?}");
    assert_eq!(s.holding(), 0);
}

#[test]
fn the_end_of_a_shutdown_grace_aborts_deliveries_while_a_store_call_is_under_way() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    // The claim ahead is under way when shutdown comes: only the grace wakes the runner.
    s.handle(at(4), Input::Shutdown { grace: 500 });
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.poll_timeout_during_io(), Some(500));
    s.handle(at(500), Input::Timer);
    assert_eq!(drain(&mut s), [Action::AbortDeliveries]);
    assert_eq!(s.poll_timeout_during_io(), None);
    answer(&mut s, at(600), &actions, records(7..=14));
    for id in [4, 5] {
        s.handle(
            at(600),
            Input::Reported {
                id: RecordId(id),
                report: Report::Abandoned,
            },
        );
    }
    let actions = drain(&mut s);
    let mut gone = released(&actions);
    gone.sort_unstable();
    assert_eq!(gone, [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], "{actions:?}");
    answer(&mut s, at(601), &actions, vec![]);
    drain(&mut s);
    assert!(s.is_finished());
}

#[test]
fn records_claimed_while_the_far_lease_check_waits_are_spared_as_ours() {
    let mut s = scheduler(config());
    let actions = grown(&mut s);
    // The far-lease check falls due while the claim ahead is under way; it runs once the
    // claim answers, so the records that claim took are ours by then.
    s.handle(at(30_001), Input::Timer);
    assert!(drain(&mut s).is_empty(), "one store call at a time");
    answer(&mut s, at(30_002), &actions, records(7..=14));
    // The wall clock then steps back two leases: every lease of ours now looks far ahead,
    // beside one a gone process took before the step.
    let back = Now {
        wall: WALL + 30_003 - 60_000,
        mono: 30_003,
    };
    let mut theirs = record(99, None);
    theirs.lease = Some(crate::record::Lease {
        token: 77,
        until: WALL + 30_000,
    });
    let mut in_flight: Vec<Record> = records(4..=14);
    for r in &mut in_flight {
        r.lease = Some(crate::record::Lease {
            token: 1,
            until: WALL + 30_003,
        });
    }
    in_flight.push(theirs);
    let mut given_back = Vec::new();
    let mut checked = false;
    loop {
        let actions = drain(&mut s);
        let Some(Action::Io(io)) = actions.last() else {
            break;
        };
        let answer = match io {
            Io::Expired { now, .. } if *now == Millis::MAX => {
                checked = true;
                Answer::Records(in_flight.clone())
            }
            Io::Apply(transitions) => {
                given_back.extend(transitions.iter().map(|t| t.id.0));
                reply(io, vec![], None)
            }
            _ => reply(io, vec![], None),
        };
        s.handle(back, Input::Answer(Ok(answer)));
    }
    assert!(checked, "the far-lease check ran");
    assert_eq!(
        given_back,
        [99],
        "only the gone process's record is taken back"
    );
}

#[test]
fn no_claim_is_made_ahead_once_the_look_at_start_is_due() {
    let config = config()
        .with_lease(Duration::from_secs(24 * 3_600))
        .with_safety_poll(None);
    let mut s = scheduler(config);
    s.look_for_unreadable();
    // A backlog that never ends, each delivery 5 ms: rounds grow and claim ahead, and the
    // runner is never idle.
    let wait = duration_ms(LOOK_WAIT);
    let (mut next, mut mono, mut ahead) = (1, 0, 0);
    let mut running = std::collections::VecDeque::new();
    let mut actions = drain(&mut s);
    loop {
        running.extend(delivered(&actions).iter().map(|id| id.0));
        if actions
            .iter()
            .any(|a| matches!(a, Action::Io(Io::Unreadable { .. })))
        {
            break;
        }
        match actions.last() {
            Some(Action::Io(io @ Io::Round { claim: Some(c), .. })) => {
                assert!(mono < wait, "a claim at {mono} ms, after the look's wait");
                if !running.is_empty() {
                    ahead += 1;
                }
                let limit = c.limit as u64;
                let answer = reply(io, records(next..=next + limit - 1), None);
                next += limit;
                s.handle(at(mono), Input::Answer(Ok(answer)));
            }
            Some(Action::Io(io)) => {
                let answer = reply(io, vec![], None);
                s.handle(at(mono), Input::Answer(Ok(answer)));
            }
            _ => {
                let id = running.pop_front().expect("a delivery under way");
                report(&mut s, at(mono), id, Outcome::Delivered);
            }
        }
        mono += 5;
        actions = drain(&mut s);
    }
    assert!(
        ahead > 100,
        "claims were made ahead until the wait's end: {ahead}"
    );
    // The round under way at the wait's end, and the one it had claimed ahead, went out in
    // full with no claim ahead; the look came before the claim after them.
    assert!(
        (wait..=wait + 2 * 64 * 5 + 10).contains(&mono),
        "looked at {mono} ms"
    );
    assert!(running.is_empty());
}
