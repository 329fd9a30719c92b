use super::*;
use crate::runner::scheduler::chore;

#[test]
fn a_store_failure_keeps_the_outcomes_and_backs_off() {
    let mut s = scheduler(RunnerConfig::default().with_batch(1));
    claimed(&mut s, at(0), vec![record(1, None)]);
    report(&mut s, at(5), 1, Outcome::Delivered);
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
fn a_read_only_store_pauses_deliveries_says_so_once_and_goes_on_after_a_write() {
    let mut s = scheduler(RunnerConfig::default().with_batch(1));
    let read_only = || {
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::ReadOnly,
            error: "attempt to write a readonly database".into(),
        }))
    };
    assert_eq!(writes(&drain(&mut s)), [(0, true)]);
    s.handle(at(1), read_only());
    let first = drain(&mut s);
    assert!(
        matches!(
            first.as_slice(),
            [Action::Log(Notice::StorePaused {
                kind: FailureKind::ReadOnly,
                ..
            })]
        ),
        "{first:?}"
    );
    // Tried again on backoff (1 s, then 2 s), silently, claiming nothing in between.
    assert_eq!(s.poll_timeout(), Some(1_001));
    s.handle(at(1_001), Input::Timer);
    assert_eq!(writes(&drain(&mut s)), [(0, true)]);
    s.handle(at(1_002), read_only());
    assert!(drain(&mut s).is_empty(), "said once");
    assert_eq!(s.poll_timeout(), Some(3_002));
    s.handle(at(3_002), Input::Timer);
    let retry = drain(&mut s);
    answer(&mut s, at(3_003), &retry, vec![]);
    let back = drain(&mut s);
    assert!(back.contains(&Action::Log(Notice::StoreBack)), "{back:?}");
}

#[test]
fn a_store_call_that_timed_out_is_a_failure_and_the_round_is_tried_again() {
    // No other chore falls due meanwhile (far leases after one lease, the safety poll).
    let config = RunnerConfig::default()
        .with_batch(1)
        .with_lease(Duration::from_secs(600))
        .with_safety_poll(None);
    let mut s = scheduler(config);
    claimed(&mut s, at(0), vec![record(1, None)]);
    report(&mut s, at(5), 1, Outcome::Delivered);
    assert_eq!(writes(&drain(&mut s)), [(1, true)]);
    let timeout = StoreFailure::from(&crate::Error::Timeout(Duration::from_secs(30)));
    assert_eq!(timeout.kind, FailureKind::Timeout);
    s.handle(at(30_005), Input::Answer(Err(timeout.clone())));
    assert!(matches!(
        drain(&mut s).as_slice(),
        [Action::Log(Notice::StorePaused {
            kind: FailureKind::Timeout,
            ..
        })]
    ));
    assert_eq!(s.holding(), 1, "the outcome is kept");
    // Tried again on backoff; a second timeout is not said again, an answer says it is back.
    s.handle(at(31_005), Input::Timer);
    assert_eq!(
        writes(&drain(&mut s)),
        [(1, true)],
        "the outcome with the claim"
    );
    s.handle(at(61_005), Input::Answer(Err(timeout)));
    assert!(drain(&mut s).is_empty(), "said once");
    s.handle(at(63_005), Input::Timer);
    let retry = drain(&mut s);
    answer(&mut s, at(63_006), &retry, vec![]);
    assert!(drain(&mut s).contains(&Action::Log(Notice::StoreBack)));
}

#[test]
fn start_up_recovery_runs_before_the_first_claim_and_pages_through() {
    let mut s = scheduler(RunnerConfig::default());
    s.recover_left_over();
    assert!(s.is_recovering());
    let actions = drain(&mut s);
    assert!(matches!(
        actions.as_slice(),
        [Action::Io(Io::Expired { limit: 256, .. })]
    ));
    // A page of one expired lease: recovered (one interruption, its event once written).
    let mut dead = record(9, None);
    dead.lease = Some(crate::record::Lease {
        token: 3,
        until: WALL - 1,
    });
    answer(&mut s, at(0), &actions, vec![dead]);
    let apply = drain(&mut s);
    assert!(matches!(apply.as_slice(), [Action::Io(Io::Apply(t))] if t.len() == 1));
    answer(&mut s, at(0), &apply, vec![]);
    let next = drain(&mut s);
    assert!(
        next.iter()
            .any(|a| matches!(a, Action::Emit(Event::Retrying { .. }))),
        "{next:?}"
    );
    assert!(
        matches!(next.last(), Some(Action::Io(Io::Expired { .. }))),
        "reads the next page"
    );
    answer(&mut s, at(0), &next, vec![]);
    let rebase = drain(&mut s);
    assert!(matches!(
        rebase.as_slice(),
        [Action::Io(Io::SteppedBack { .. })]
    ));
    answer(&mut s, at(0), &rebase, vec![]);
    assert!(!s.is_recovering());
    assert_eq!(writes(&drain(&mut s)), [(0, true)], "then the first claim");
}

#[test]
fn while_a_failed_call_waits_nothing_wakes_the_runner_before_its_retry() {
    // With the gauges on, a reading falls due while the store is backing off: it waits for
    // the retry instead of waking the runner for nothing (a spin until then).
    let mut s = scheduler(RunnerConfig::default()).with_gauges();
    let first = drain(&mut s);
    assert!(
        matches!(first.as_slice(), [Action::Io(Io::Stats)]),
        "{first:?}"
    );
    answer(&mut s, at(0), &first, vec![]);
    let claim = drain(&mut s);
    assert_eq!(writes(&claim), [(0, true)]);
    s.handle(
        at(2_000),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "connection reset".into(),
        })),
    );
    drain(&mut s);
    let wake = s.poll_timeout().expect("a wake-up for the retry");
    assert!(wake >= 3_000, "not before the retry at 3 s: {wake}");
    s.handle(at(wake), Input::Timer);
    assert!(!drain(&mut s).is_empty(), "at the retry, the runner acts");
}

/// Wakes the runner at `mono` and answers its claim with nothing ([`empty_claim_answered`]).
fn empty_claim_at(s: &mut Scheduler, mono: Millis) -> Vec<Action> {
    s.handle(at(mono), Input::Wake);
    let claim = drain(s);
    assert_eq!(writes(&claim), [(0, true)], "{claim:?}");
    empty_claim_answered(s, mono, &claim)
}

/// Answers the claim that ends `claim` with nothing, and every store call after it as an empty
/// store would, up to a look for unreadable rows (left unanswered) or the runner's wait;
/// returns what it did after the claim.
fn empty_claim_answered(s: &mut Scheduler, mono: Millis, claim: &[Action]) -> Vec<Action> {
    answer(s, at(mono), claim, vec![]);
    settle_until_look(s, mono)
}

/// Answers every store call as an empty store would, at `mono`, until the runner looks for
/// unreadable rows (left unanswered) or waits; returns every action.
fn settle_until_look(s: &mut Scheduler, mono: Millis) -> Vec<Action> {
    let mut all = Vec::new();
    loop {
        let actions = drain(s);
        let reply = match actions.last() {
            Some(Action::Io(Io::Unreadable { .. })) | None => None,
            Some(Action::Io(io)) => Some(store_reply(s, io, vec![], None)),
            Some(_) => None,
        };
        all.extend(actions);
        match reply {
            Some(reply) => s.handle(at(mono), Input::Answer(Ok(reply))),
            None => return all,
        }
    }
}

/// Asks for the look at start, as the shell does, and answers the first claim with nothing:
/// idle, the runner makes the look (left unanswered). Returns what it did after the claim.
fn look_at_start(s: &mut Scheduler, mono: Millis) -> Vec<Action> {
    s.look_for_unreadable();
    let claim = drain(s);
    assert_eq!(
        writes(&claim),
        [(0, true)],
        "the claim goes first: {claim:?}"
    );
    assert_eq!(looks(&claim), 0, "{claim:?}");
    let idle = empty_claim_answered(s, mono, &claim);
    assert_eq!(
        idle.last(),
        Some(&Action::Io(Io::Unreadable { limit: chore::PAGE })),
        "{idle:?}"
    );
    idle
}

fn looks(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Io(Io::Unreadable { .. })))
        .count()
}

#[test]
fn a_look_for_unreadable_rows_that_timed_out_waits_for_an_idle_queue_and_says_its_rows_once() {
    let timeout = || {
        Input::Answer(Err(StoreFailure::from(&crate::Error::Timeout(
            Duration::from_secs(30),
        ))))
    };
    let put_off = |actions: &[Action]| -> Vec<(Duration, u32)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Log(Notice::UnreadableLookPutOff {
                    retry_in, timeouts, ..
                }) => Some((*retry_in, *timeouts)),
                _ => None,
            })
            .collect()
    };
    let delivered_now = |s: &mut Scheduler, mono: Millis, id: u64| {
        report(s, at(mono), id, Outcome::Delivered);
        drain(s)
    };
    // No other chore falls due meanwhile (far leases after one lease, the safety poll).
    let config = RunnerConfig::default()
        .with_batch(1)
        .with_lease(Duration::from_secs(24 * 3_600))
        .with_safety_poll(None)
        .with_store_timeout(Duration::from_secs(30));
    let mut s = scheduler(config);
    look_at_start(&mut s, 0);
    s.handle(at(30_000), timeout());
    let after = drain(&mut s);
    // Said, with when it may be made again (ten store deadlines)...
    assert_eq!(
        put_off(&after),
        [(Duration::from_secs(300), 1)],
        "{after:?}"
    );
    // ...and a write's claim is made at once: not paused, the look not tried again first.
    s.handle(at(30_000), Input::Wake);
    let after = drain(&mut s);
    assert_eq!(writes(&after), [(0, true)], "{after:?}");
    answer(&mut s, at(30_001), &after, vec![record(1, None)]);
    assert_eq!(delivered(&drain(&mut s)), [RecordId(1)]);
    // The wait ends while the round is in flight: the look waits for the queue to idle.
    assert_eq!(s.poll_timeout(), Some(330_000));
    s.handle(at(330_000), Input::Timer);
    assert_eq!(looks(&drain(&mut s)), 0);
    // The round was full: the outcome goes out with the next claim, which finds more work.
    let next = delivered_now(&mut s, 330_500, 1);
    assert_eq!(writes(&next), [(1, true)], "{next:?}");
    answer(&mut s, at(330_501), &next, vec![record(2, None)]);
    assert_eq!(delivered(&drain(&mut s)), [RecordId(2)]);
    let next = delivered_now(&mut s, 330_600, 2);
    assert_eq!(looks(&next), 0, "{next:?}");
    // That claim finds nothing: once the deadline is read, the runner has nothing else to do,
    // and the look is made.
    answer(&mut s, at(330_601), &next, vec![]);
    let idle = drain(&mut s);
    assert_eq!(idle.last(), Some(&Action::Io(Io::NextDue)), "{idle:?}");
    answer(&mut s, at(330_601), &idle, vec![]);
    let idle = drain(&mut s);
    assert_eq!(
        idle.last(),
        Some(&Action::Io(Io::Unreadable { limit: chore::PAGE })),
        "{idle:?}"
    );
    // It times out again: put off twice as long, said again (the shell logs it at debug).
    s.handle(at(360_601), timeout());
    let again = settle(&mut s, at(360_601), None);
    assert_eq!(
        put_off(&again),
        [(Duration::from_secs(600), 2)],
        "{again:?}"
    );
    assert_eq!(looks(&again), 0, "{again:?}");
    // The wait ends as a write wakes the runner: its claim goes first, and the look waits
    // while claims come back full.
    let over = 960_601;
    assert_eq!(s.poll_timeout(), Some(over));
    s.handle(at(over), Input::Wake);
    s.handle(at(over), Input::Timer);
    let woken = drain(&mut s);
    assert_eq!(writes(&woken), [(0, true)], "{woken:?}");
    assert_eq!(looks(&woken), 0, "{woken:?}");
    answer(&mut s, at(over), &woken, vec![record(3, None)]);
    assert_eq!(delivered(&drain(&mut s)), [RecordId(3)]);
    let next = delivered_now(&mut s, over + 1, 3);
    assert_eq!(looks(&next), 0, "{next:?}");
    let idle = empty_claim_answered(&mut s, over + 2, &next);
    assert_eq!(looks(&idle), 1, "{idle:?}");
    // This time it ends: its row is said, once.
    let row = crate::unreadable::Unreadable::new(RecordId(42), "unknown state code 9");
    s.handle(
        at(over + 3),
        Input::Answer(Ok(Answer::Unreadable(vec![row.clone()]))),
    );
    let said = settle(&mut s, at(over + 3), None);
    assert_eq!(
        said.iter()
            .filter(|a| matches!(a, Action::Emit(Event::Unreadable { .. })))
            .collect::<Vec<_>>(),
        [&Action::Emit(Event::Unreadable {
            id: row.id,
            reason: row.reason
        })],
        "{said:?}"
    );
    // And the look is done with: no timer of its own (the one left is the far-lease check,
    // one lease after the start), idle claims do not make it.
    assert_eq!(s.poll_timeout(), Some(24 * 3_600_000));
    assert_eq!(looks(&empty_claim_at(&mut s, over + 10)), 0);
}

#[test]
fn a_look_that_was_put_off_and_fails_otherwise_waits_for_an_idle_queue_again() {
    let config = RunnerConfig::default()
        .with_batch(1)
        .with_lease(Duration::from_secs(600))
        .with_safety_poll(None)
        .with_store_timeout(Duration::from_secs(1));
    let mut s = scheduler(config);
    look_at_start(&mut s, 0);
    s.handle(
        at(1_000),
        Input::Answer(Err(StoreFailure::from(&crate::Error::Timeout(
            Duration::from_secs(1),
        )))),
    );
    settle(&mut s, at(1_000), None);
    // Ten seconds on, idle: the look is made, and fails for another reason.
    s.handle(at(11_000), Input::Timer);
    let look = drain(&mut s);
    assert_eq!(looks(&look), 1, "{look:?}");
    s.handle(
        at(11_001),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "database is locked".into(),
        })),
    );
    drain(&mut s);
    // A write wakes the runner after the store's backoff: the claim goes first.
    s.handle(at(13_000), Input::Wake);
    let woken = drain(&mut s);
    assert_eq!(writes(&woken), [(0, true)], "{woken:?}");
    assert_eq!(looks(&woken), 0, "{woken:?}");
    // Once the queue is idle, the look is made again.
    let idle = empty_claim_answered(&mut s, 13_001, &woken);
    assert_eq!(looks(&idle), 1, "{idle:?}");
}

#[test]
fn a_look_under_way_at_shutdown_is_not_put_off_nor_said() {
    let mut s = scheduler(RunnerConfig::default().with_safety_poll(None));
    look_at_start(&mut s, 0);
    // The shell cuts the look short when shutdown is asked: the scheduler hears of the
    // shutdown, then of the look's end as a time out.
    s.handle(at(10), Input::Shutdown { grace: 5_000 });
    s.handle(
        at(10),
        Input::Answer(Err(StoreFailure::from(&crate::Error::Timeout(
            Duration::from_secs(30),
        )))),
    );
    let last = drain(&mut s);
    assert!(
        !last
            .iter()
            .any(|a| matches!(a, Action::Log(Notice::UnreadableLookPutOff { .. }))),
        "{last:?}"
    );
    assert_eq!(looks(&last), 0, "{last:?}");
    assert!(s.is_finished());
}

#[test]
fn a_look_that_failed_otherwise_waits_for_an_idle_runner_and_claims_go_on() {
    let mut s = scheduler(
        RunnerConfig::default()
            .with_batch(1)
            .with_max_batch(1)
            .with_safety_poll(None),
    );
    look_at_start(&mut s, 0);
    s.handle(
        at(1),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "database disk image is malformed".into(),
        })),
    );
    let failed = drain(&mut s);
    assert!(
        matches!(failed.as_slice(), [Action::Log(Notice::StoreFailed { .. })]),
        "{failed:?}"
    );
    // After the store's backoff a write wakes the runner: its claims go first, and go on
    // while they come back full (a look that keeps failing never stops deliveries).
    s.handle(at(1_001), Input::Timer);
    s.handle(at(1_001), Input::Wake);
    let mut actions = drain(&mut s);
    for id in 1..=3 {
        assert_eq!(looks(&actions), 0, "{actions:?}");
        assert_eq!(
            writes(&actions).last().map(|w| w.1),
            Some(true),
            "{actions:?}"
        );
        answer(&mut s, at(1_001 + id), &actions, vec![record(id, None)]);
        assert_eq!(delivered(&drain(&mut s)), [RecordId(id)]);
        report(&mut s, at(1_001 + id), id, Outcome::Delivered);
        actions = drain(&mut s);
    }
    // Idle again: the look is made.
    let idle = empty_claim_answered(&mut s, 1_010, &actions);
    assert_eq!(looks(&idle), 1, "{idle:?}");
}

#[test]
fn the_look_at_start_waits_for_the_backlog_to_drain() {
    let mut s = scheduler(RunnerConfig::default().with_batch(2).with_max_batch(2));
    s.look_for_unreadable();
    // The backlog is claimed and delivered first: two full rounds, no look.
    let mut actions = drain(&mut s);
    for ids in [[1, 2], [3, 4]] {
        assert_eq!(looks(&actions), 0, "{actions:?}");
        assert_eq!(
            writes(&actions).last().map(|w| w.1),
            Some(true),
            "{actions:?}"
        );
        answer(
            &mut s,
            at(ids[0]),
            &actions,
            ids.iter().map(|&i| record(i, None)).collect(),
        );
        assert_eq!(delivered(&drain(&mut s)).len(), 2);
        for id in ids {
            report(&mut s, at(id), id, Outcome::Delivered);
        }
        actions = drain(&mut s);
    }
    // The claim that finds nothing leaves the runner idle: the look is made then.
    let idle = empty_claim_answered(&mut s, 5, &actions);
    assert_eq!(looks(&idle), 1, "{idle:?}");
    s.handle(at(6), Input::Answer(Ok(Answer::Unreadable(Vec::new()))));
    // Once.
    assert_eq!(looks(&settle(&mut s, at(6), None)), 0);
    assert_eq!(looks(&empty_claim_at(&mut s, 10)), 0);
}

#[test]
fn a_runner_that_never_idles_looks_before_its_first_claim_after_the_wait() {
    let config = RunnerConfig::default()
        .with_batch(1)
        .with_max_batch(1)
        .with_lease(Duration::from_secs(24 * 3_600))
        .with_safety_poll(None);
    let mut s = scheduler(config);
    s.look_for_unreadable();
    let wait = duration_ms(LOOK_WAIT);
    let mut actions = drain(&mut s);
    let mut id = 1;
    // Every claim comes back full; each delivery takes ten seconds.
    loop {
        let mono = id * 10_000;
        if looks(&actions) > 0 {
            break;
        }
        assert!(mono <= wait + 10_000, "no look after the wait");
        assert_eq!(
            writes(&actions).last().map(|w| w.1),
            Some(true),
            "{actions:?}"
        );
        answer(&mut s, at(mono - 10_000), &actions, vec![record(id, None)]);
        assert_eq!(delivered(&drain(&mut s)), [RecordId(id)]);
        report(&mut s, at(mono), id, Outcome::Delivered);
        actions = drain(&mut s);
        id += 1;
    }
    // The round that ended at the wait's end made the look ahead of its claim; its outcome
    // waits for the claim after it.
    assert_eq!(id, 7, "{actions:?}");
    assert_eq!(writes(&actions), [], "{actions:?}");
    s.handle(
        at(wait + 1),
        Input::Answer(Ok(Answer::Unreadable(Vec::new()))),
    );
    assert_eq!(writes(&drain(&mut s)), [(1, true)]);
}

#[test]
fn flush_waits_for_the_look_at_start_until_it_ends_fails_or_is_put_off() {
    let config = RunnerConfig::default()
        .with_safety_poll(None)
        .with_store_timeout(Duration::from_secs(5));
    // Until it ends.
    let mut s = scheduler(config.clone());
    assert!(!s.owes_look());
    look_at_start(&mut s, 0);
    assert!(s.owes_look(), "made, not ended");
    s.handle(at(1), Input::Answer(Ok(Answer::Unreadable(Vec::new()))));
    settle(&mut s, at(1), None);
    assert!(!s.owes_look());
    // Until it is put off.
    let mut s = scheduler(config.clone());
    look_at_start(&mut s, 0);
    s.handle(
        at(5_000),
        Input::Answer(Err(StoreFailure::from(&crate::Error::Timeout(
            Duration::from_secs(5),
        )))),
    );
    assert!(!s.owes_look(), "put off");
    // Not once it failed otherwise: it is made again once the runner is idle (here at once),
    // but a look that keeps failing must not make every flush time out.
    let mut s = scheduler(config.clone());
    look_at_start(&mut s, 0);
    s.handle(
        at(1),
        Input::Answer(Err(StoreFailure {
            kind: FailureKind::Transient,
            error: "database disk image is malformed".into(),
        })),
    );
    assert!(!s.owes_look(), "failed");
    s.handle(at(2_000), Input::Timer);
    assert_eq!(looks(&drain(&mut s)), 1, "made again");
    // Not once the runner stops, made or not.
    let mut s = scheduler(config);
    s.look_for_unreadable();
    s.handle(at(1), Input::Shutdown { grace: 1_000 });
    assert!(!s.owes_look());
}

#[test]
fn a_runner_halted_at_start_looks_at_once() {
    let halt = crate::halt::Halt {
        reason: "401 Unauthorized".into(),
        since: WALL,
    };
    let mut s = Scheduler::new(RunnerConfig::default(), policy(), 1, 2, at(0), Some(halt));
    s.look_for_unreadable();
    // Nothing may be claimed: idle, it looks before anything else.
    let actions = settle_until_look(&mut s, 0);
    assert_eq!(writes(&actions), [], "{actions:?}");
    assert_eq!(looks(&actions), 1, "{actions:?}");
}
