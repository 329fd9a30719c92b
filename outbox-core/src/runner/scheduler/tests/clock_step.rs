use super::*;

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
