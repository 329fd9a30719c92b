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

/// A store holding `left` due records from id `next` on that answers every store call at
/// once, and a sink that reports every delivery at once: the scheduler driven as the shell
/// drives it, claims made ahead of a round included.
struct Backlog {
    next: u64,
    left: u64,
    /// The limit of every claim answered, in order.
    limits: Vec<usize>,
    /// Records claimed and not yet reported, and the most there ever were.
    held: usize,
    most_held: usize,
}

impl Backlog {
    fn new(left: u64) -> Self {
        Backlog {
            next: 1,
            left,
            limits: Vec::new(),
            held: 0,
            most_held: 0,
        }
    }

    /// One turn: the actions until the scheduler waits, its store call answered, then the
    /// deliveries it started reported with `outcome`. False when it asked for nothing.
    fn turn(&mut self, s: &mut Scheduler, now: Now, outcome: &Outcome) -> bool {
        let actions = drain(s);
        let started = delivered(&actions);
        let io = actions.iter().find_map(|a| match a {
            Action::Io(io) => Some(io.clone()),
            _ => None,
        });
        if let Some(io) = &io {
            let found = match io {
                Io::Round { claim: Some(c), .. } => {
                    self.limits.push(c.limit);
                    (c.limit as u64).min(self.left)
                }
                _ => 0,
            };
            let records = (self.next..self.next + found)
                .map(|i| record(i, None))
                .collect();
            self.next += found;
            self.left -= found;
            self.held += found as usize;
            self.most_held = self.most_held.max(self.held);
            // The store still holds due records while any are left.
            let due = (self.left > 0).then_some(WALL);
            s.handle(now, Input::Answer(Ok(reply(io, records, due))));
        }
        for id in &started {
            self.held -= 1;
            s.handle(
                now,
                Input::Reported {
                    id: *id,
                    report: Report::Outcome(outcome.clone()),
                },
            );
        }
        io.is_some() || !started.is_empty()
    }

    /// Turns until the scheduler waits.
    fn settle(&mut self, s: &mut Scheduler, now: Now, outcome: &Outcome) {
        while self.turn(s, now, outcome) {}
    }

    /// Turns until `claims` claims were answered.
    fn until_claims(&mut self, s: &mut Scheduler, now: Now, outcome: &Outcome, claims: usize) {
        while self.limits.len() < claims {
            assert!(
                self.turn(s, now, outcome),
                "waiting after {:?}",
                self.limits
            );
        }
    }
}

#[test]
fn full_rounds_of_quick_deliveries_grow_to_the_maximum_and_an_idle_queue_starts_small() {
    let config = RunnerConfig::default()
        .with_batch(4)
        .with_max_batch(16)
        .with_concurrency(4);
    let mut s = scheduler(config);
    let mut backlog = Backlog::new(4 + 8 + 16 + 16 + 16 + 3);
    backlog.settle(&mut s, at(1), &Outcome::Delivered);
    // The queue ran dry at the sixth claim: a claim that comes back short ends the drain.
    assert_eq!(backlog.limits, [4, 8, 16, 16, 16, 16]);
    assert_eq!((backlog.left, backlog.held), (0, 0));
    assert!(
        backlog.most_held <= 2 * 16,
        "a round and the round claimed ahead at most: {}",
        backlog.most_held
    );
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
    let mut backlog = Backlog::new(10_000);
    backlog.until_claims(&mut s, at(1), &Outcome::Delivered, 5);
    // 2, 4, 8, 16, then 32: claimed ahead while the round of 16 delivered, at the size it
    // leads to when it keeps up.
    assert_eq!(backlog.limits, [2, 4, 8, 16, 32]);
    // From here every delivery fails: a failing round claims nothing ahead, and the round
    // after it is half its size.
    let failing = Outcome::transient("HTTP 503", None);
    backlog.until_claims(&mut s, at(2), &failing, 7);
    assert_eq!(backlog.limits[5..], [16, 8], "{:?}", backlog.limits);
}

#[test]
fn a_slow_round_halves_the_next_one() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(8);
    let mut s = scheduler(config);
    let mut backlog = Backlog::new(10_000);
    backlog.until_claims(&mut s, at(1), &Outcome::Delivered, 4);
    assert_eq!(backlog.limits, [2, 4, 8, 16]);
    // From here each turn of deliveries reports after the bound: the sink does not keep up,
    // nothing is claimed ahead, and the round after the slow one is half its size.
    let mut mono = 1;
    while backlog.limits.len() < 5 {
        mono += KEEPING_UP + 1;
        assert!(backlog.turn(&mut s, at(mono), &Outcome::Delivered));
    }
    assert_eq!(backlog.limits[4], 8, "{:?}", backlog.limits);
}

/// Answers the store calls of `actions` and those after them until a claim is asked for;
/// returns its limit.
fn next_claim(s: &mut Scheduler, now: Now, mut actions: Vec<Action>) -> usize {
    loop {
        if let Some(limit) = claim_limit(&actions) {
            return limit;
        }
        answer(s, now, &actions, vec![]);
        actions = drain(s);
    }
}

#[test]
fn a_retry_after_starts_the_rounds_small_again() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(1);
    let mut s = scheduler(config);
    let mut backlog = Backlog::new(10_000);
    backlog.until_claims(&mut s, at(1), &Outcome::Delivered, 4);
    assert_eq!(backlog.limits, [2, 4, 8, 16]);
    let retry_after = Some(crate::RetryAfter::Delay(Duration::from_secs(1)));
    backlog.settle(&mut s, at(2), &Outcome::transient("HTTP 429", retry_after));
    assert_eq!(backlog.limits.len(), 4, "nothing claimed during the hold");
    assert_eq!(
        s.holding(),
        0,
        "the round and the one claimed ahead released"
    );
    // Once the hold (1 s, spread by up to half) has passed, the first claim is `batch`.
    s.handle(at(1_600), Input::Timer);
    let actions = drain(&mut s);
    // (The records that waited out the no-answer are released first: a read and a write.)
    assert_eq!(next_claim(&mut s, at(1_600), actions), 2);
}

#[test]
fn a_link_down_starts_the_rounds_small_again() {
    let config = RunnerConfig::default()
        .with_batch(2)
        .with_max_batch(64)
        .with_concurrency(1);
    let mut s = scheduler(config);
    let mut backlog = Backlog::new(10_000);
    backlog.until_claims(&mut s, at(1), &Outcome::Delivered, 4);
    assert_eq!(backlog.limits, [2, 4, 8, 16]);
    let refused = Outcome::NoAnswer {
        error: "connection refused".into(),
    };
    backlog.settle(&mut s, at(2), &refused);
    assert_eq!(
        s.holding(),
        0,
        "the round and the one claimed ahead released"
    );
    // The device's own link comes back: the backlog goes at once, in rounds of `batch`.
    s.handle(at(3), Input::Online(false));
    s.handle(at(4), Input::Online(true));
    let actions = drain(&mut s);
    // (The records that waited out the no-answer are released first: a read and a write.)
    assert_eq!(next_claim(&mut s, at(4), actions), 2);
}
