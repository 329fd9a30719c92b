use super::*;

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

#[test]
fn a_retry_drawn_a_few_milliseconds_after_a_failure_goes_at_its_deadline() {
    // The claim at start finds nothing (a trigger's claim); the write enqueued next fails at
    // once and draws a 10 ms wait. Counting the start's empty claim held that retry until its
    // quiet period ended, 50 ms after the start: a fleet that failed together retried together.
    let policy = RetryPolicy::default()
        .with_backoff(crate::policy::Backoff::exponential(
            Duration::from_millis(10),
            2.0,
            Duration::from_secs(60),
        ))
        .with_jitter(crate::policy::Jitter::None);
    let mut s = Scheduler::new(RunnerConfig::default(), policy, 1, 2, at(0), None);
    settle(&mut s, at(0), None);
    s.handle(at(1), Input::Wake);
    let first = drain(&mut s);
    answer(&mut s, at(1), &first, vec![record(1, None)]);
    drain(&mut s);
    s.handle(
        at(2),
        Input::Reported {
            id: RecordId(1),
            report: Report::Outcome(Outcome::transient("HTTP 503", None)),
        },
    );
    settle(&mut s, at(2), Some(WALL + 12));
    assert_eq!(
        s.poll_timeout(),
        Some(12),
        "the drawn deadline, not the end of a quiet"
    );
    s.handle(at(12), Input::Timer);
    assert_eq!(writes(&drain(&mut s)), [(0, true)]);
}
