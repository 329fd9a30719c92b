use super::*;

/// Record `id`'s delivery is refused: a halt.
fn refused(s: &mut Scheduler, now: Now, id: u64) {
    s.handle(
        now,
        Input::Reported {
            id: RecordId(id),
            report: Report::Outcome(Outcome::halt("HTTP 401")),
        },
    );
}

/// The halt a runner starts with: persisted by an earlier refusal.
fn persisted() -> Halt {
    Halt {
        reason: "HTTP 401".into(),
        since: WALL - 5,
    }
}

/// A halt persisted after [`persisted`] by another runner of the fleet.
fn newer() -> Halt {
    Halt {
        reason: "HTTP 403: key revoked".into(),
        since: WALL - 2,
    }
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
                // The refusal is one of its attempts: ended at 5, 5 ms after the claim.
                let kept: Vec<_> = p
                    .history
                    .attempts()
                    .iter()
                    .map(|a| (a.at, a.class, a.status, a.took_ms))
                    .collect();
                let refused = crate::AttemptClass::Refused;
                assert_eq!(kept, [(WALL + 5, refused, Some(401), Some(5))]);
            }
        }
    }
    // Halted: a wake claims nothing; resume clears the persisted halt, then claims.
    s.handle(at(6), Input::Wake);
    assert!(writes(&settle(&mut s, at(6), None))
        .iter()
        .all(|(_, claim)| !claim));
    let held = s.halt().cloned().expect("halted");
    s.handle(at(7), Input::Resume);
    let resume = drain(&mut s);
    assert_eq!(resume, [Action::Io(Io::ClearHaltIf(held))]);
    answer(&mut s, at(7), &resume, vec![]);
    let after = drain(&mut s);
    assert_eq!(after.first(), Some(&Action::Emit(Event::Resumed)));
    assert_eq!(writes(&after), [(0, true)]);
}

#[test]
fn a_halt_cleared_elsewhere_resumes_the_runner_at_its_next_wake_or_poll() {
    let halt = persisted();
    let config = RunnerConfig::default().with_safety_poll(Some(Duration::from_secs(60)));
    let mut s = Scheduler::new(config.clone(), policy(), 1, 2, at(0), Some(halt.clone()));
    let start = settle(&mut s, at(0), None);
    assert!(writes(&start).is_empty(), "{start:?}");

    // Woken while the store still holds the halt: one read of it, nothing claimed.
    s.handle(at(10), Input::Wake);
    let woken = drain(&mut s);
    assert_eq!(woken, [Action::Io(Io::Halt)]);
    s.handle(at(10), Input::Answer(Ok(Answer::Halt(Some(halt.clone())))));
    let still = settle(&mut s, at(10), None);
    assert!(writes(&still).is_empty(), "{still:?}");
    assert!(s.halt().is_some());

    // Woken again and again within the spacing (a busy fleet's enqueues): no read each time.
    for ms in [20, 100, 300, 509] {
        s.handle(at(ms), Input::Wake);
        assert_eq!(drain(&mut s), [], "woken at {ms}");
    }
    assert_eq!(s.poll_timeout(), Some(510));

    // Another process cleared it meanwhile (its NOTIFY was one of those wakes): the one read
    // after the spacing finds it cleared; the runner resumes, says so once, clears nothing
    // (the store holds no halt) and claims.
    s.handle(at(510), Input::Timer);
    assert_eq!(drain(&mut s), [Action::Io(Io::Halt)]);
    s.handle(at(510), Input::Answer(Ok(Answer::Halt(None))));
    let resumed = drain(&mut s);
    assert_eq!(resumed.first(), Some(&Action::Emit(Event::Resumed)));
    assert!(s.halt().is_none());
    assert!(!resumed
        .iter()
        .any(|a| matches!(a, Action::Io(Io::SetHalt(_)))));
    assert_eq!(writes(&resumed), [(0, true)]);

    // With no wake at all (a store that cannot notify), the safety poll reads it.
    let mut s = Scheduler::new(config, policy(), 1, 2, at(0), Some(halt));
    settle(&mut s, at(0), None);
    s.handle(at(59_999), Input::Timer);
    let early = settle_cleared(&mut s, at(59_999));
    assert!(!early.contains(&Action::Io(Io::Halt)), "{early:?}");
    s.handle(at(60_000), Input::Timer);
    let polled = settle_cleared(&mut s, at(60_000));
    assert!(polled.contains(&Action::Io(Io::Halt)), "{polled:?}");
    assert!(polled.contains(&Action::Emit(Event::Resumed)), "{polled:?}");
    assert!(
        writes(&polled).iter().any(|(_, claim)| *claim),
        "{polled:?}"
    );
}

#[test]
fn wakes_read_the_halt_at_most_once_per_spacing_and_once_after_the_last() {
    let halt = persisted();
    let config = RunnerConfig::default().with_safety_poll(None);
    let mut s = Scheduler::new(config, policy(), 1, 2, at(0), Some(halt.clone()));
    settle(&mut s, at(0), None);
    let mut reads = Vec::new();
    // A wake every 10 ms for three seconds, each read answered at once: still halted.
    for ms in (10..3_000).step_by(10) {
        s.handle(at(ms), Input::Wake);
        while s.poll_timeout().is_some_and(|t| t <= ms) {
            s.handle(at(ms), Input::Timer);
        }
        for action in drain(&mut s) {
            if action == Action::Io(Io::Halt) {
                reads.push(ms);
                s.handle(at(ms), Input::Answer(Ok(Answer::Halt(Some(halt.clone())))));
                assert!(drain(&mut s).is_empty());
            }
        }
    }
    assert_eq!(reads, [10, 510, 1_010, 1_510, 2_010, 2_510], "{reads:?}");
    // The wakes stop: one read follows the last (at 2,990), when the spacing is over.
    assert_eq!(s.poll_timeout(), Some(3_010));
    s.handle(at(3_010), Input::Timer);
    assert_eq!(drain(&mut s), [Action::Io(Io::Halt)]);
    s.handle(at(3_010), Input::Answer(Ok(Answer::Halt(Some(halt)))));
    assert!(drain(&mut s).is_empty());
    // Then nothing more until the next wake, which reads at once.
    assert_eq!(s.poll_timeout(), Some(3_510));
    s.handle(at(3_510), Input::Timer);
    assert!(drain(&mut s).is_empty());
    assert!(
        s.poll_timeout().is_none_or(|t| t > 5_000),
        "{:?}",
        s.poll_timeout()
    );
    s.handle(at(5_000), Input::Wake);
    assert_eq!(drain(&mut s), [Action::Io(Io::Halt)]);
}

#[test]
fn a_runner_shutting_down_reads_no_halt() {
    let halt = persisted();
    let mut s = Scheduler::new(RunnerConfig::default(), policy(), 1, 2, at(0), Some(halt));
    settle(&mut s, at(0), None);
    s.handle(at(5), Input::Shutdown { grace: 1_000 });
    s.handle(at(6), Input::Wake);
    let after = settle(&mut s, at(6), None);
    assert!(!after.contains(&Action::Io(Io::Halt)), "{after:?}");
    assert!(s.halt().is_some());
}

#[test]
fn a_resume_on_a_runner_that_is_not_halted_clears_the_stores_halt_quietly() {
    let mut s = scheduler(RunnerConfig::default());
    settle(&mut s, at(0), None);
    s.handle(at(5), Input::Resume);
    let resume = drain(&mut s);
    assert_eq!(
        resume,
        [Action::Io(Io::SetHalt(None))],
        "another runner's halt is cleared"
    );
    answer(&mut s, at(5), &resume, vec![]);
    let after = drain(&mut s);
    assert!(!after.contains(&Action::Emit(Event::Resumed)), "{after:?}");
}

#[test]
fn a_read_that_finds_the_halt_cleared_does_not_lift_a_newer_halt() {
    let mut s = scheduler(RunnerConfig::default());
    let started = claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    assert_eq!(delivered(&started), [RecordId(1), RecordId(2)]);
    // Record 1's refusal halts the runner; record 2 is still with the sink.
    refused(&mut s, at(5), 1);
    settle(&mut s, at(5), None);
    let first = s.halt().cloned().expect("halted");
    // Woken: the read of the persisted halt is under way when the app resumes and record
    // 2's refusal halts the runner again, before that halt is written.
    s.handle(at(6), Input::Wake);
    assert_eq!(drain(&mut s), [Action::Io(Io::Halt)]);
    s.handle(at(7), Input::Resume);
    refused(&mut s, at(8), 2);
    let newer = s.halt().cloned().expect("halted again");
    assert_ne!(newer, first);
    // The read answers that the store holds no halt (someone cleared the first one).
    s.handle(at(9), Input::Answer(Ok(Answer::Halt(None))));
    let after = settle(&mut s, at(9), None);
    assert_eq!(s.halt(), Some(&newer), "the newer halt holds: {after:?}");
    assert!(
        after.contains(&Action::Io(Io::SetHalt(Some(newer)))),
        "{after:?}"
    );
    assert!(writes(&after).iter().all(|(_, claim)| !claim), "{after:?}");
}

/// A runner started halted by `held` (persisted before it) and resumed at 5: its clearing of
/// `held` is asked, and not answered yet. No safety poll, so no read of the halt interleaves.
fn resumed_from(held: &Halt) -> Scheduler {
    let config = RunnerConfig::default().with_safety_poll(None);
    let mut s = Scheduler::new(config, policy(), 1, 2, at(0), Some(held.clone()));
    settle(&mut s, at(0), None);
    s.handle(at(5), Input::Resume);
    assert_eq!(drain(&mut s), [Action::Io(Io::ClearHaltIf(held.clone()))]);
    s
}

#[test]
fn a_resume_lifts_only_the_halt_the_runner_held_never_a_newer_one() {
    let held = persisted();
    let newer = newer();
    // Another process's refusal persisted a newer halt, not read here yet; the application
    // resumes: the clearing compares with the halt this runner holds.
    let mut s = resumed_from(&held);
    s.handle(at(5), Input::Answer(Ok(Answer::Halt(Some(newer.clone())))));
    let kept = settle(&mut s, at(5), None);
    assert_eq!(s.halt(), Some(&newer), "{kept:?}");
    assert!(
        kept.contains(&Action::Emit(Event::StillHalted {
            reason: newer.reason.clone()
        })),
        "{kept:?}"
    );
    assert!(!kept.contains(&Action::Emit(Event::Resumed)), "{kept:?}");
    assert!(writes(&kept).is_empty(), "nothing claimed: {kept:?}");
    // A resume once that halt was seen lifts it.
    s.handle(at(9), Input::Resume);
    assert_eq!(drain(&mut s), [Action::Io(Io::ClearHaltIf(newer.clone()))]);
    s.handle(at(9), Input::Answer(Ok(Answer::Halt(Some(newer)))));
    let resumed = settle(&mut s, at(9), None);
    assert_eq!(resumed.first(), Some(&Action::Emit(Event::Resumed)));
    assert!(s.halt().is_none());
    assert_eq!(writes(&resumed), [(0, true)]);

    // A store that holds no halt any more (a person cleared it): resumed as well.
    let mut s = resumed_from(&held);
    s.handle(at(5), Input::Answer(Ok(Answer::Halt(None))));
    let resumed = settle(&mut s, at(5), None);
    assert_eq!(resumed.first(), Some(&Action::Emit(Event::Resumed)));
    assert!(s.halt().is_none());
}

#[test]
fn resumes_while_a_clearing_waits_on_the_store_are_that_clearings_and_the_runner_stays_halted() {
    let held = persisted();
    let newer = newer();
    let mut s = resumed_from(&held);
    assert!(s.is_halted(), "halted until the store has cleared it");
    // The store does not answer; the person clicks again, and again, during the backoff.
    s.handle(
        at(5),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "connection reset".into(),
        })),
    );
    let mut calls = Vec::new();
    for ms in [6, 7] {
        s.handle(at(ms), Input::Resume);
        calls.extend(drain(&mut s));
    }
    assert!(s.is_halted());
    // The backoff over, the one clearing is made again, of the halt the runner held: no
    // clearing of whatever the store holds (here a newer halt) is ever queued.
    let retry_at = s.poll_timeout().expect("a retry");
    s.handle(at(retry_at), Input::Timer);
    calls.extend(drain(&mut s));
    let clearings: Vec<&Action> = calls
        .iter()
        .filter(|a| matches!(a, Action::Io(Io::ClearHaltIf(_) | Io::SetHalt(_))))
        .collect();
    assert_eq!(clearings, [&Action::Io(Io::ClearHaltIf(held))], "{calls:?}");
    s.handle(
        at(retry_at),
        Input::Answer(Ok(Answer::Halt(Some(newer.clone())))),
    );
    let kept = settle(&mut s, at(retry_at), None);
    assert!(s.is_halted());
    assert_eq!(s.halt(), Some(&newer), "{kept:?}");
    assert!(writes(&kept).is_empty(), "{kept:?}");
}

/// Two records claimed; record 1's refusal halts the runner, which is resumed; while the
/// clearing of that first halt is under way, record 2's refusal halts it again. Returns the
/// scheduler (the clearing unanswered) and the two halts.
fn halted_again_while_clearing() -> (Scheduler, Halt, Halt) {
    let mut s = scheduler(RunnerConfig::default());
    claimed(&mut s, at(0), vec![record(1, None), record(2, None)]);
    refused(&mut s, at(5), 1);
    settle(&mut s, at(5), None);
    let first = s.halt().cloned().expect("halted");
    s.handle(at(6), Input::Resume);
    assert_eq!(drain(&mut s), [Action::Io(Io::ClearHaltIf(first.clone()))]);
    refused(&mut s, at(7), 2);
    let second = s.halt().cloned().expect("halted again");
    (s, first, second)
}

#[test]
fn a_runner_halted_again_while_its_clearing_waits_says_it_resumed_only_if_it_did() {
    // Resumed: the clearing of the first halt is under way when record 2's refusal halts the
    // runner again.
    let (mut s, first, second) = halted_again_while_clearing();
    s.handle(at(8), Input::Answer(Ok(Answer::Halt(Some(first)))));
    let after = settle(&mut s, at(8), None);
    assert!(!after.contains(&Action::Emit(Event::Resumed)), "{after:?}");
    assert!(
        after.contains(&Action::Io(Io::SetHalt(Some(second.clone())))),
        "{after:?}"
    );
    assert_eq!(s.halt(), Some(&second));
    assert!(writes(&after).iter().all(|(_, claim)| !claim), "{after:?}");
}

#[test]
fn a_runner_halted_and_resumed_again_while_its_first_clearing_waits_answers_with_the_second() {
    // While that clearing waits: halted again by record 2, and resumed again.
    let (mut s, first, second) = halted_again_while_clearing();
    s.handle(at(8), Input::Resume);
    // The first clearing answers: the runner is still resuming from the second halt.
    s.handle(at(9), Input::Answer(Ok(Answer::Halt(Some(first)))));
    let next = drain(&mut s);
    assert!(!next.contains(&Action::Emit(Event::Resumed)), "{next:?}");
    assert!(s.is_halted(), "until the second halt is cleared");
    // The second halt is written, then cleared: resumed, said once, and claims.
    assert_eq!(next, [Action::Io(Io::SetHalt(Some(second.clone())))]);
    s.handle(at(9), Input::Answer(Ok(Answer::HaltSet)));
    let clearing = drain(&mut s);
    assert!(
        clearing.contains(&Action::Emit(Event::Halted {
            id: RecordId(2),
            reason: "HTTP 401".into()
        })),
        "{clearing:?}"
    );
    assert_eq!(
        clearing.last(),
        Some(&Action::Io(Io::ClearHaltIf(second.clone())))
    );
    s.handle(at(10), Input::Answer(Ok(Answer::Halt(Some(second)))));
    let resumed = settle(&mut s, at(10), None);
    assert_eq!(
        resumed
            .iter()
            .filter(|a| **a == Action::Emit(Event::Resumed))
            .count(),
        1,
        "{resumed:?}"
    );
    assert!(!s.is_halted());
    assert!(
        writes(&resumed).iter().any(|(_, claim)| *claim),
        "{resumed:?}"
    );
}

#[test]
fn a_resume_the_store_never_recorded_is_said_when_the_runner_stops() {
    let mut s = resumed_from(&persisted());
    s.handle(
        at(5),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "connection reset".into(),
        })),
    );
    drain(&mut s);
    s.handle(at(6), Input::Shutdown { grace: 6 });
    let stopped = drain(&mut s);
    assert!(
        stopped.contains(&Action::Log(Notice::ResumeNotRecorded)),
        "{stopped:?}"
    );
    assert!(s.is_halted(), "the halt holds");
}

/// [`settle`] against a store whose halt was cleared by someone else.
fn settle_cleared(s: &mut Scheduler, now: Now) -> Vec<Action> {
    let mut all = Vec::new();
    loop {
        let actions = drain(s);
        let Some(Action::Io(io)) = actions.last() else {
            all.extend(actions);
            return all;
        };
        let answer = reply(io, vec![], None);
        all.extend(actions);
        s.handle(now, Input::Answer(Ok(answer)));
    }
}

#[test]
fn a_persisted_halt_holds_from_the_start() {
    let halt = persisted();
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
fn a_wrong_route_whose_404_names_each_path_halts_as_a_storm() {
    // A deploy broke the route: a framework's default 404 names the path of every write, so
    // no two reasons are alike; the status is the same.
    let mut s = scheduler(RunnerConfig::default().with_rejection_storm(5));
    let records = (1..=20)
        .map(|i| record(i, Some(&format!("note-{i}"))))
        .collect();
    claimed(&mut s, at(0), records);
    let mut rejected = 0;
    for id in 1..=20 {
        if s.halt().is_some() {
            break;
        }
        let reason = format!("HTTP 404: Cannot PUT /v1/notes/note-{id}");
        s.handle(
            at(5),
            Input::Reported {
                id: RecordId(id),
                report: Report::Outcome(Outcome::rejected(reason)),
            },
        );
        drain(&mut s);
        rejected += 1;
    }
    let reason = s.halt().map(|h| h.reason.clone()).unwrap_or_default();
    assert!(
        reason.starts_with("suspected misconfiguration: 5 rejections in a row (HTTP 404"),
        "halted after five, not twenty: {reason:?} after {rejected}"
    );
    assert_eq!(rejected, 5);
}
