use super::*;

/// The limit of the claim among `actions`, if one was made.
fn claim_limit(actions: &[Action]) -> Option<usize> {
    actions.iter().find_map(|a| match a {
        Action::Io(Io::Round { claim: Some(c), .. }) => Some(c.limit),
        _ => None,
    })
}

/// Answers every store call (nothing claimed, `due` next) until the scheduler waits; returns
/// the actions of the last drain.
fn quiet(s: &mut Scheduler, now: Now, due: Option<Millis>) -> Vec<Action> {
    loop {
        let actions = drain(s);
        let Some(io) = actions.iter().find_map(|a| match a {
            Action::Io(io) => Some(io),
            _ => None,
        }) else {
            return actions;
        };
        let answer = reply(io, vec![], due);
        s.handle(now, Input::Answer(Ok(answer)));
    }
}

/// Answers the claim in `actions` with `found` records from `first` on, then reports every
/// delivery the round starts with `outcome` at `now`, until the round asks the store again.
/// Returns the actions that end the round.
fn round(
    s: &mut Scheduler,
    now: Now,
    actions: &[Action],
    first: u64,
    found: u64,
    outcome: &Outcome,
) -> Vec<Action> {
    let records = (first..first + found).map(|i| record(i, None)).collect();
    answer(s, now, actions, records);
    let mut actions = drain(s);
    loop {
        let started = delivered(&actions);
        if started.is_empty() {
            return actions;
        }
        for id in started {
            s.handle(
                now,
                Input::Reported {
                    id,
                    report: Report::Outcome(outcome.clone()),
                },
            );
        }
        actions = drain(s);
    }
}

/// Starts the scheduler and answers `rounds` full claims whose deliveries all succeed at once;
/// returns the actions that end the last round, the claim limits in order and the next id.
fn grow(s: &mut Scheduler, rounds: usize) -> (Vec<Action>, Vec<usize>, u64) {
    let mut actions = drain(s);
    let mut limits = Vec::new();
    let mut next = 1;
    for _ in 0..rounds {
        let limit = claim_limit(&actions).expect("a claim");
        limits.push(limit);
        actions = round(s, at(1), &actions, next, limit as u64, &Outcome::Delivered);
        next += limit as u64;
    }
    (actions, limits, next)
}

#[test]
fn full_rounds_of_quick_deliveries_grow_to_the_maximum_and_an_idle_queue_starts_small() {
    let config = RunnerConfig::default()
        .with_batch(4)
        .with_max_batch(16)
        .with_concurrency(4);
    let mut s = scheduler(config);
    let (actions, limits, next) = grow(&mut s, 5);
    assert_eq!(limits, [4, 8, 16, 16, 16]);
    assert!(s.holding() <= 16 + 16, "a round and its outcomes at most");
    // The queue runs dry: a claim that comes back short ends the drain.
    let limit = claim_limit(&actions).expect("a claim");
    let actions = round(&mut s, at(2), &actions, next, 3, &Outcome::Delivered);
    assert_eq!(limit, 16);
    assert_eq!(
        claim_limit(&actions),
        None,
        "a short claim is not followed at once"
    );
    answer(&mut s, at(2), &actions, vec![]);
    quiet(&mut s, at(2), None);
    // The next enqueue starts a new drain at `batch`.
    s.handle(at(3), Input::Wake);
    let actions = drain(&mut s);
    assert_eq!(claim_limit(&actions), Some(4), "{actions:?}");
}

#[test]
fn a_round_with_a_failure_halves_the_next_one() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(8);
    let mut s = scheduler(config);
    let (actions, _, next) = grow(&mut s, 4);
    assert_eq!(claim_limit(&actions), Some(32));
    let failing = Outcome::transient("HTTP 503", None);
    let actions = round(&mut s, at(2), &actions, next, 32, &failing);
    assert_eq!(claim_limit(&actions), Some(16), "{actions:?}");
}

#[test]
fn a_slow_round_halves_the_next_one() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(8);
    let mut s = scheduler(config);
    let (actions, _, next) = grow(&mut s, 3);
    assert_eq!(claim_limit(&actions), Some(16));
    // Claimed at 1 ms, every delivery reported after the bound: the sink does not keep up.
    answer(
        &mut s,
        at(1),
        &actions,
        (next..next + 16).map(|i| record(i, None)).collect(),
    );
    let mut actions = drain(&mut s);
    let late = at(2 + KEEPING_UP);
    loop {
        let started = delivered(&actions);
        if started.is_empty() {
            break;
        }
        for id in started {
            s.handle(
                late,
                Input::Reported {
                    id,
                    report: Report::Outcome(Outcome::Delivered),
                },
            );
        }
        actions = drain(&mut s);
    }
    assert_eq!(claim_limit(&actions), Some(8));
}

#[test]
fn a_retry_after_starts_the_rounds_small_again() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(1);
    let mut s = scheduler(config);
    let (actions, _, next) = grow(&mut s, 3);
    assert_eq!(claim_limit(&actions), Some(16));
    let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(1)));
    let actions = round(
        &mut s,
        at(2),
        &actions,
        next,
        16,
        &Outcome::transient("HTTP 429", retry_after),
    );
    answer(&mut s, at(2), &actions, vec![]);
    quiet(&mut s, at(2), Some(WALL));
    // Once the hold (1 s, spread by up to half) has passed, the first claim is `batch`.
    s.handle(at(1_600), Input::Timer);
    let actions = drain(&mut s);
    // (The records that waited out the no-answer are released first: a read and a write.)
    let mut actions = actions;
    while claim_limit(&actions).is_none() {
        answer(&mut s, at(4), &actions, vec![]);
        actions = drain(&mut s);
    }
    assert_eq!(claim_limit(&actions), Some(2), "{actions:?}");
}

#[test]
fn a_link_down_starts_the_rounds_small_again() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(1);
    let mut s = scheduler(config);
    let (actions, _, next) = grow(&mut s, 3);
    assert_eq!(claim_limit(&actions), Some(16));
    let actions = round(
        &mut s,
        at(2),
        &actions,
        next,
        16,
        &Outcome::NoAnswer {
            error: "connection refused".into(),
        },
    );
    answer(&mut s, at(2), &actions, vec![]);
    quiet(&mut s, at(2), Some(WALL));
    // The device's own link comes back: the backlog goes at once, in rounds of `batch`.
    s.handle(at(3), Input::Online(false));
    s.handle(at(4), Input::Online(true));
    let actions = drain(&mut s);
    // (The records that waited out the no-answer are released first: a read and a write.)
    let mut actions = actions;
    while claim_limit(&actions).is_none() {
        answer(&mut s, at(4), &actions, vec![]);
        actions = drain(&mut s);
    }
    assert_eq!(claim_limit(&actions), Some(2), "{actions:?}");
}
