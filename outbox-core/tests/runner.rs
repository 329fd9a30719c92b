//! The runner on the memory store, under tokio's paused clock: no test waits on the wall clock.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::LogCapture;

use outbox_core::{
    async_trait, Backoff, Error, Event, Jitter, Lease, ListQuery, Millis, NewRecord, Outbox,
    Outcome, Record, RecordId, RetryAfter, RetryPolicy, RunnerConfig, Sink, State, Store,
    TokioClock,
};
use outbox_memory::MemoryStore;
use tokio::sync::watch;

const BASE: Millis = 1_700_000_000_000;

/// What the sink does for a payload: a script of outcomes, the last one repeating.
#[derive(Clone, Debug)]
enum Act {
    Answer(Outcome),
    /// Waits this long (tokio time) and then delivers.
    Slow(Duration),
    /// Never answers.
    Hang,
    Panic,
}

/// One delivery the sink saw: the payload and the clock reading.
type Seen = (Vec<u8>, Millis);

/// A sink scripted per payload, recording every delivery with the clock reading.
#[derive(Clone, Default)]
struct Script {
    plans: Arc<Mutex<HashMap<Vec<u8>, Vec<Act>>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    now: Arc<Mutex<Option<TokioClock>>>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Script {
    fn plan(&self, payload: &str, acts: Vec<Act>) {
        self.plans
            .lock()
            .unwrap()
            .insert(payload.as_bytes().to_vec(), acts);
    }

    fn times(&self, payload: &str) -> Vec<Millis> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == payload.as_bytes())
            .map(|(_, t)| *t)
            .collect()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn order(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| String::from_utf8(p.clone()).unwrap())
            .collect()
    }
}

#[async_trait]
impl Sink for Script {
    async fn deliver(&self, record: &Record) -> Outcome {
        use outbox_core::Clock;
        let now = self.now.lock().unwrap().map_or(0, |c| c.now());
        let act = {
            self.seen
                .lock()
                .unwrap()
                .push((record.payload.clone(), now));
            let mut plans = self.plans.lock().unwrap();
            match plans.get_mut(&record.payload) {
                Some(acts) if acts.len() > 1 => acts.remove(0),
                Some(acts) => acts[0].clone(),
                None => Act::Answer(Outcome::Delivered),
            }
        };
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(running, Ordering::SeqCst);
        let outcome = match act {
            Act::Answer(outcome) => {
                tokio::task::yield_now().await;
                outcome
            }
            Act::Slow(d) => {
                tokio::time::sleep(d).await;
                Outcome::Delivered
            }
            Act::Hang => std::future::pending().await,
            Act::Panic => {
                self.running.fetch_sub(1, Ordering::SeqCst);
                panic!("scripted panic in the sink")
            }
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        outcome
    }
}

fn exact_policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_jitter(Jitter::None)
        .with_backoff(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(8),
        ))
}

struct Rig {
    outbox: Outbox,
    sink: Script,
    clock: TokioClock,
}

async fn rig(
    policy: RetryPolicy,
    config: RunnerConfig,
    online: Option<watch::Receiver<bool>>,
) -> Rig {
    rig_on(Arc::new(MemoryStore::new()), policy, config, online).await
}

async fn rig_on(
    store: Arc<MemoryStore>,
    policy: RetryPolicy,
    config: RunnerConfig,
    online: Option<watch::Receiver<bool>>,
) -> Rig {
    let clock = TokioClock::starting_at(BASE);
    let sink = Script::default();
    *sink.now.lock().unwrap() = Some(clock);
    let mut builder = Outbox::builder(store.clone(), sink.clone())
        .policy(policy)
        .config(RunnerConfig {
            seed: Some(7),
            ..config
        })
        .clock(Arc::new(clock));
    if let Some(online) = online {
        builder = builder.connectivity(online);
    }
    let outbox = builder.start().await.unwrap();
    Rig {
        outbox,
        sink,
        clock,
    }
}

fn rec(payload: &str) -> NewRecord {
    NewRecord::new(payload.as_bytes().to_vec())
}

fn answer(outcome: Outcome) -> Act {
    Act::Answer(outcome)
}

fn http503() -> Act {
    answer(Outcome::transient("HTTP 503", None))
}

/// Lets the runner work until tokio time has moved `d` (timers fire on the way).
async fn run_for(d: Duration) {
    tokio::time::sleep(d).await;
}

fn gaps(times: &[Millis]) -> Vec<Millis> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn transient_failures_back_off_and_stop_growing_at_the_cap() {
    let r = rig(
        exact_policy().with_max_attempts(7),
        RunnerConfig::default(),
        None,
    )
    .await;
    r.sink.plan("a", vec![http503()]);
    let id = r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(120)).await;
    let times = r.sink.times("a");
    assert_eq!(times.len(), 7, "the ceiling stops the attempts");
    assert_eq!(gaps(&times), [1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
    let record = r.outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, State::NeedsAttention);
    assert_eq!(record.attempts, 7);
}

#[tokio::test(start_paused = true)]
async fn exhaustion_parks_the_record_and_an_event_says_so() {
    let r = rig(
        exact_policy().with_max_attempts(3),
        RunnerConfig::default(),
        None,
    )
    .await;
    let mut events = r.outbox.events();
    r.sink.plan("a", vec![http503()]);
    let id = r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(60)).await;
    assert_eq!(r.sink.times("a").len(), 3);
    let mut parked = vec![];
    while let Ok(event) = events.try_recv() {
        if let Event::Parked { id, reason } = event {
            parked.push((id, reason));
        }
    }
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].0, id);
    assert!(parked[0].1.contains("3 attempts"), "{}", parked[0].1);
    let stats = r.outbox.stats().await.unwrap();
    assert_eq!(stats.needs_attention, 1);
    assert_eq!(
        stats.next_due, None,
        "a parked record is never due on its own"
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminal_failure_is_one_attempt_one_log_line_and_rejected() {
    let logs = LogCapture::default();
    let _capturing = logs.capture();
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    r.sink
        .plan("bad", vec![answer(Outcome::rejected("HTTP 422"))]);
    let id = r.outbox.enqueue(rec("bad")).await.unwrap();
    run_for(Duration::from_secs(60)).await;
    assert_eq!(r.sink.times("bad").len(), 1, "exactly one attempt");
    let record = r.outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, State::Rejected);
    assert_eq!(record.attempts, 1);
    assert_eq!(record.last_error.as_deref(), Some("HTTP 422"));
    let lines = logs.lines();
    let rejected: Vec<_> = lines.iter().filter(|l| l.contains("rejected")).collect();
    assert_eq!(rejected.len(), 1, "{lines:?}");
    assert!(rejected[0].contains("WARN") && rejected[0].contains("record=1"));
}

#[tokio::test(start_paused = true)]
async fn recovery_after_success_starts_the_schedule_and_the_probe_over() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    // "a" fails three times (answered), then succeeds; "b" then fails once.
    r.sink.plan(
        "a",
        vec![http503(), http503(), http503(), answer(Outcome::Delivered)],
    );
    r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(30)).await;
    assert_eq!(gaps(&r.sink.times("a")), [1_000, 2_000, 4_000]);
    r.sink
        .plan("b", vec![http503(), answer(Outcome::Delivered)]);
    r.outbox.enqueue(rec("b")).await.unwrap();
    run_for(Duration::from_secs(30)).await;
    assert_eq!(
        gaps(&r.sink.times("b")),
        [1_000],
        "the initial interval, not 8 s"
    );

    // The link probe: three no-answers grow the probe delay, an answer resets it.
    r.sink.plan(
        "c",
        vec![
            answer(Outcome::no_answer("refused")),
            answer(Outcome::no_answer("refused")),
            answer(Outcome::no_answer("refused")),
            answer(Outcome::Delivered),
        ],
    );
    r.outbox.enqueue(rec("c")).await.unwrap();
    run_for(Duration::from_secs(30)).await;
    assert_eq!(gaps(&r.sink.times("c")), [1_000, 2_000, 4_000]);
    r.sink.plan(
        "d",
        vec![
            answer(Outcome::no_answer("refused")),
            answer(Outcome::Delivered),
        ],
    );
    r.outbox.enqueue(rec("d")).await.unwrap();
    run_for(Duration::from_secs(30)).await;
    assert_eq!(
        gaps(&r.sink.times("d")),
        [1_000],
        "the probe delay was reset"
    );
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 4);
}

#[tokio::test(start_paused = true)]
async fn the_timer_is_re_armed_for_the_next_deadline() {
    // The record fails once; nothing else happens (no enqueue, no call, no connectivity
    // change), and it is delivered at its deadline all the same.
    let config = RunnerConfig {
        safety_poll: None,
        ..RunnerConfig::default()
    };
    let policy = exact_policy().with_backoff(Backoff::Table(vec![Duration::from_secs(300)]));
    let r = rig(policy, config, None).await;
    r.sink
        .plan("a", vec![http503(), answer(Outcome::Delivered)]);
    let id = r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(1)).await;
    let record = r.outbox.get(id).await.unwrap().unwrap();
    assert_eq!(record.state, State::Retrying);
    let deadline = record.next_attempt_at.unwrap();
    run_for(Duration::from_secs(600)).await;
    assert_eq!(r.sink.times("a"), [BASE, deadline]);
    assert!(r.outbox.get(id).await.unwrap().is_none(), "delivered");
}

#[tokio::test(start_paused = true)]
async fn offline_records_go_out_when_the_link_comes_back_and_not_before() {
    let (online, online_rx) = watch::channel(false);
    let r = rig(exact_policy(), RunnerConfig::default(), Some(online_rx)).await;
    for i in 0..5 {
        r.outbox.enqueue(rec(&format!("r{i}"))).await.unwrap();
    }
    run_for(Duration::from_secs(3_600)).await;
    assert_eq!(r.sink.count(), 0, "nothing is attempted while offline");
    online.send(true).unwrap();
    run_for(Duration::from_millis(10)).await;
    assert_eq!(r.sink.order(), ["r0", "r1", "r2", "r3", "r4"]);
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 5);
}

#[tokio::test(start_paused = true)]
async fn a_write_made_just_after_going_offline_is_not_sent() {
    let (online, online_rx) = watch::channel(true);
    let r = rig(exact_policy(), RunnerConfig::default(), Some(online_rx)).await;
    run_for(Duration::from_millis(10)).await;
    for i in 0..20 {
        // The signal and the wake-up of the write reach the runner together.
        online.send(false).unwrap();
        r.outbox.enqueue(rec(&format!("w{i}"))).await.unwrap();
        run_for(Duration::from_secs(1)).await;
        assert_eq!(r.sink.count(), i, "write {i} went out while offline");
        online.send(true).unwrap();
        run_for(Duration::from_millis(10)).await;
        assert_eq!(r.sink.count(), i + 1, "write {i} goes out once online");
    }
}

#[tokio::test(start_paused = true)]
async fn a_backlog_after_reconnect_never_exceeds_the_concurrency() {
    let (online, online_rx) = watch::channel(false);
    let config = RunnerConfig {
        concurrency: 4,
        batch: 32,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy(), config, Some(online_rx)).await;
    let records = (0..500).map(|i| rec(&format!("r{i}"))).collect();
    r.outbox.enqueue_batch(records).await.unwrap();
    for i in 0..500 {
        r.sink.plan(
            &format!("r{i}"),
            vec![Act::Slow(Duration::from_millis(5 + i % 7))],
        );
    }
    online.send(true).unwrap();
    r.outbox.flush(Duration::from_secs(3_600)).await.unwrap();
    assert_eq!(r.sink.count(), 500);
    assert_eq!(
        r.sink.peak.load(Ordering::SeqCst),
        4,
        "exactly the concurrency, never more"
    );
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 500);
}

#[tokio::test(start_paused = true)]
async fn poison_at_the_head_does_not_block_the_rest() {
    let r = rig(
        exact_policy().with_max_attempts(2),
        RunnerConfig::default(),
        None,
    )
    .await;
    r.sink
        .plan("poison", vec![answer(Outcome::transient("HTTP 500", None))]);
    r.outbox
        .enqueue_batch(vec![rec("poison"), rec("a"), rec("b"), rec("c")])
        .await
        .unwrap();
    run_for(Duration::from_secs(60)).await;
    let stats = r.outbox.stats().await.unwrap();
    let line = format!(
        "{} processed · {} parked · {} blocked",
        stats.delivered,
        stats.needs_attention,
        stats.undelivered() - stats.needs_attention
    );
    assert_eq!(line, "3 processed · 1 parked · 0 blocked");
}

#[tokio::test(start_paused = true)]
async fn groups_go_in_order_one_at_a_time_and_a_parked_head_holds_only_its_group() {
    let config = RunnerConfig {
        concurrency: 8,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy().with_max_attempts(1), config, None).await;
    r.sink
        .plan("a1", vec![Act::Slow(Duration::from_millis(50))]);
    r.sink
        .plan("b1", vec![answer(Outcome::transient("HTTP 500", None))]);
    let batch = ["a1", "b1", "a2", "b2", "a3", "b3", "c1"]
        .iter()
        .map(|p| rec(p).in_group(&p[..1]))
        .collect();
    r.outbox.enqueue_batch(batch).await.unwrap();
    run_for(Duration::from_secs(5)).await;
    let order = r.sink.order();
    // Group a in order; a1 was slow yet a2 never overtook it.
    let a: Vec<_> = order.iter().filter(|p| p.starts_with('a')).collect();
    assert_eq!(a, ["a1", "a2", "a3"]);
    // Group b's head is parked: b2 and b3 are held, never attempted.
    assert!(!order.iter().any(|p| p == "b2" || p == "b3"), "{order:?}");
    // Across groups, work went in parallel: c1 did not wait for a1.
    assert!(r.sink.times("c1")[0] < r.sink.times("a2")[0]);
    let stats = r.outbox.stats().await.unwrap();
    assert_eq!(
        (stats.needs_attention, stats.held, stats.delivered),
        (1, 2, 4)
    );
    assert_eq!(
        r.sink.peak.load(Ordering::SeqCst),
        3,
        "one per group at most"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_credential_halts_everything_until_resume() {
    // One delivery at a time, so "after the 401" is exact: deliveries already under way when
    // a 401 arrives cannot be called back, but nothing new starts.
    let config = RunnerConfig {
        concurrency: 1,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy(), config, None).await;
    let mut events = r.outbox.events();
    r.sink.plan(
        "a",
        vec![
            answer(Outcome::halt("HTTP 401")),
            answer(Outcome::Delivered),
        ],
    );
    let ids = r
        .outbox
        .enqueue_batch(vec![rec("a"), rec("b"), rec("c")])
        .await
        .unwrap();
    run_for(Duration::from_secs(3_600)).await;
    r.outbox.enqueue(rec("d")).await.unwrap();
    run_for(Duration::from_secs(3_600)).await;
    assert!(r.outbox.is_halted());
    assert_eq!(r.sink.order(), ["a"], "nothing attempted after the 401");
    for id in &ids {
        let record = r.outbox.get(*id).await.unwrap().unwrap();
        assert_eq!(
            (record.attempts, record.unanswered),
            (0, 0),
            "no budget spent"
        );
        assert!(record.state.is_due_kind());
    }
    assert!(
        std::iter::from_fn(|| events.try_recv().ok()).any(|e| matches!(e, Event::Halted { .. }))
    );
    r.outbox.resume();
    r.outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.sink.order(), ["a", "a", "b", "c", "d"]);
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 4);
}

#[tokio::test(start_paused = true)]
async fn retry_after_wins_over_the_local_schedule() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    let later = Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(7))));
    r.sink
        .plan("a", vec![answer(later), answer(Outcome::Delivered)]);
    r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(30)).await;
    // The server's 7 s, spread by up to half of it (never below).
    let gaps = gaps(&r.sink.times("a"));
    assert!(
        gaps.len() == 1 && (7_000..=10_500).contains(&gaps[0]),
        "{gaps:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_deliveries_leaves_nothing_in_flight() {
    let store = Arc::new(MemoryStore::new());
    let r = rig_on(store.clone(), exact_policy(), RunnerConfig::default(), None).await;
    for i in 0..6 {
        r.sink.plan(&format!("r{i}"), vec![Act::Hang]);
    }
    r.outbox
        .enqueue_batch((0..6).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    run_for(Duration::from_millis(10)).await;
    assert_eq!(
        r.outbox.stats().await.unwrap().in_flight,
        6,
        "claimed a batch"
    );
    r.outbox.shutdown(Duration::from_secs(2)).await.unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.in_flight, stats.pending), (0, 6));
    let all = store.list(&ListQuery::new(10)).await.unwrap();
    assert!(all.iter().all(|r| r.attempts == 0 && r.lease.is_none()));
}

#[tokio::test(start_paused = true)]
async fn flush_on_a_stuck_sink_returns_the_timeout_error() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    r.sink.plan("stuck", vec![Act::Hang]);
    r.outbox.enqueue(rec("stuck")).await.unwrap();
    let err = r
        .outbox
        .flush(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(d) if d == Duration::from_millis(200)));
    drop(r.outbox);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_sink_does_not_kill_the_runner() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    r.sink
        .plan("boom", vec![Act::Panic, answer(Outcome::Delivered)]);
    let boom = r.outbox.enqueue(rec("boom")).await.unwrap();
    r.outbox.enqueue(rec("fine")).await.unwrap();
    run_for(Duration::from_millis(10)).await;
    let record = r.outbox.get(boom).await.unwrap();
    // Interrupted once, then due again at once, and delivered on the next round.
    r.outbox.flush(Duration::from_secs(5)).await.unwrap();
    assert_eq!(r.sink.times("boom").len(), 2);
    assert!(record.is_none_or(|r| r.interrupted == 1));
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 2);
}

#[tokio::test(start_paused = true)]
async fn start_up_recovers_expired_leases_parks_crash_loops_and_rebases_deadlines() {
    let store = Arc::new(MemoryStore::new());
    let ids = store
        .enqueue(
            vec![rec("crashed"), rec("looping"), rec("far")],
            BASE - 60_000,
        )
        .await
        .unwrap();
    // A previous process claimed two records and died.
    let claim = outbox_core::Claim {
        now: BASE - 60_000,
        limit: 2,
        lease: Lease {
            token: 1,
            until: BASE - 30_000,
        },
    };
    let claimed = store.claim(claim).await.unwrap();
    assert_eq!(claimed.len(), 2);
    // "looping" had already been interrupted twice in a row.
    let mut looping = claimed[1].progress();
    looping.interrupted = 2;
    looping.state = State::Retrying;
    store
        .apply(vec![outbox_core::Transition {
            id: ids[1],
            guard: outbox_core::Guard::Lease(1),
            change: outbox_core::Change::Update(looping),
        }])
        .await
        .unwrap();
    let relapse = store
        .claim(outbox_core::Claim {
            now: BASE - 60_000,
            limit: 1,
            lease: Lease {
                token: 2,
                until: BASE - 30_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(relapse[0].id, ids[1]);
    // "far" failed a year ahead of the clock now and was given a 1.5 s wait (the wall clock
    // stepped back a year since).
    let year = 365 * 86_400_000;
    let mut far = store.get(ids[2]).await.unwrap().unwrap().progress();
    far.state = State::Retrying;
    far.last_attempt_at = Some(BASE + year);
    far.next_attempt_at = Some(BASE + year + 1_500);
    store
        .apply(vec![outbox_core::Transition {
            id: ids[2],
            guard: outbox_core::Guard::Idle,
            change: outbox_core::Change::Update(far),
        }])
        .await
        .unwrap();

    let policy = exact_policy().with_max_interruptions(3);
    let r = rig_on(store.clone(), policy, RunnerConfig::default(), None).await;
    r.sink.plan("crashed", vec![Act::Hang]);
    run_for(Duration::from_millis(1)).await;
    let crashed = r.outbox.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(crashed.interrupted, 1);
    assert_eq!(
        crashed.state,
        State::InFlight,
        "due at once and claimed again"
    );
    let looping = r.outbox.get(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        (looping.state, looping.interrupted),
        (State::NeedsAttention, 3)
    );
    // It keeps the wait it was given, counted from the start: due 1.5 s in, not in a year.
    let far = r.outbox.get(ids[2]).await.unwrap().unwrap();
    assert_eq!(
        (far.last_attempt_at, far.next_attempt_at),
        (Some(BASE), Some(BASE + 1_500)),
        "re-based"
    );
    let _ = r.clock;
}

#[tokio::test(start_paused = true)]
async fn manual_verbs_retry_discard_and_prune() {
    let r = rig(
        exact_policy().with_max_attempts(1),
        RunnerConfig::default(),
        None,
    )
    .await;
    let mut events = r.outbox.events();
    r.sink
        .plan("x", vec![http503(), answer(Outcome::Delivered)]);
    r.sink.plan("y", vec![http503()]);
    r.sink
        .plan("z", vec![answer(Outcome::rejected("HTTP 410"))]);
    let ids = r
        .outbox
        .enqueue_batch(vec![rec("x"), rec("y"), rec("z")])
        .await
        .unwrap();
    run_for(Duration::from_secs(5)).await;
    assert_eq!(r.outbox.stats().await.unwrap().needs_attention, 2);
    assert!(matches!(
        r.outbox.retry(ids[2]).await,
        Err(Error::RecordRejected(_))
    ));
    assert!(matches!(
        r.outbox.retry(RecordId(99)).await,
        Err(Error::NoSuchRecord(_))
    ));
    r.outbox.discard(ids[1], "user dismissed it").await.unwrap();
    assert_eq!(r.outbox.retry_all().await.unwrap(), 1);
    r.outbox.flush(Duration::from_secs(5)).await.unwrap();
    let stats = r.outbox.stats().await.unwrap();
    assert_eq!(
        (stats.delivered, stats.discarded, stats.rejected),
        (1, 1, 1)
    );
    let tombstones = r.outbox.tombstones(None, 10).await.unwrap();
    assert_eq!(tombstones[0].reason, "user dismissed it");
    assert!(std::iter::from_fn(|| events.try_recv().ok()).any(|e| e
        == Event::Discarded {
            id: ids[1],
            reason: "user dismissed it".into()
        }));
    // Both are seconds old at most: a day's retention keeps them, a second's does not.
    assert_eq!(
        r.outbox.prune(Duration::from_secs(86_400)).await.unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(r.outbox.prune(Duration::from_secs(1)).await.unwrap(), 2);
    assert_eq!(r.outbox.stats().await.unwrap().rejected, 0);
}

#[tokio::test(start_paused = true)]
async fn coming_online_releases_a_no_answer_wait_at_once() {
    let (online, online_rx) = watch::channel(true);
    let policy = exact_policy().with_backoff(Backoff::Table(vec![Duration::from_secs(600)]));
    let r = rig(policy, RunnerConfig::default(), Some(online_rx)).await;
    r.sink.plan(
        "a",
        vec![
            answer(Outcome::no_answer("no route")),
            answer(Outcome::Delivered),
        ],
    );
    r.sink.plan("b", vec![answer(Outcome::Delivered)]);
    r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(1)).await;
    // The link is down: "b" waits for the probe, 10 minutes out.
    r.outbox.enqueue(rec("b")).await.unwrap();
    run_for(Duration::from_secs(60)).await;
    assert_eq!(r.sink.order(), ["a"], "no hammering while the link is down");
    // The operating system reports a transition: offline, then online.
    online.send(false).unwrap();
    run_for(Duration::from_secs(1)).await;
    online.send(true).unwrap();
    run_for(Duration::from_millis(10)).await;
    // The link was at fault, not "a": its 10-minute wait is released too.
    assert_eq!(
        r.sink.order(),
        ["a", "b", "a"],
        "both go as soon as the link came back"
    );
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_stops_the_runner_and_releases_its_records() {
    let store = Arc::new(MemoryStore::new());
    let r = rig_on(store.clone(), exact_policy(), RunnerConfig::default(), None).await;
    for i in 0..3 {
        r.sink.plan(&format!("r{i}"), vec![Act::Hang]);
    }
    r.outbox
        .enqueue_batch((0..3).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    run_for(Duration::from_millis(10)).await;
    assert_eq!(store.stats().await.unwrap().in_flight, 3);
    drop(r.outbox);
    run_for(Duration::from_secs(1)).await;
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.in_flight, stats.pending),
        (0, 3),
        "released, nothing spent"
    );
    // Nothing runs any more: a new due record is never attempted.
    store.enqueue(vec![rec("late")], BASE).await.unwrap();
    run_for(Duration::from_secs(3_600)).await;
    assert_eq!(r.sink.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn every_park_reject_halt_and_discard_writes_one_log_line() {
    let logs = LogCapture::default();
    let _capturing = logs.capture();
    let config = RunnerConfig {
        concurrency: 1,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy().with_max_attempts(1), config, None).await;
    r.sink.plan("park", vec![http503()]);
    r.sink
        .plan("reject", vec![answer(Outcome::rejected("HTTP 404"))]);
    r.sink.plan(
        "halt",
        vec![
            answer(Outcome::halt("HTTP 401")),
            answer(Outcome::Delivered),
        ],
    );
    let ids = r
        .outbox
        .enqueue_batch(vec![rec("park"), rec("reject"), rec("halt")])
        .await
        .unwrap();
    run_for(Duration::from_secs(5)).await;
    r.outbox.discard(ids[0], "dismissed").await.unwrap();
    let lines = logs.lines();
    let find = |level: &str, text: &str, id: RecordId| {
        lines
            .iter()
            .filter(|l| {
                l.contains(level) && l.contains(text) && l.contains(&format!("record={}", id.0))
            })
            .count()
    };
    assert_eq!(find("WARN", "parked", ids[0]), 1, "{lines:?}");
    assert_eq!(find("WARN", "rejected", ids[1]), 1, "{lines:?}");
    assert_eq!(find("ERROR", "halted", ids[2]), 1, "{lines:?}");
    assert_eq!(find("WARN", "discarded", ids[0]), 1, "{lines:?}");
}

/// A store that counts claims, to tell a quiet runner from a spinning one.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryStore,
    claims: AtomicUsize,
    applies: AtomicUsize,
    rounds: AtomicUsize,
    expired_reads: AtomicUsize,
    /// The limit of every claim and what it found, in order.
    claimed: Mutex<Vec<(usize, usize)>>,
}

#[async_trait]
impl outbox_core::layer::StoreLayer for Counting {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn claim(&self, c: outbox_core::Claim) -> outbox_core::Result<Vec<Record>> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(c).await
    }

    async fn apply(
        &self,
        t: Vec<outbox_core::Transition>,
    ) -> outbox_core::Result<outbox_core::Applied> {
        self.applies.fetch_add(1, Ordering::SeqCst);
        self.inner.apply(t).await
    }

    async fn round(
        &self,
        outcomes: Vec<outbox_core::Transition>,
        claim: Option<outbox_core::Claim>,
    ) -> outbox_core::Result<outbox_core::Round> {
        self.rounds.fetch_add(1, Ordering::SeqCst);
        if claim.is_some() {
            self.claims.fetch_add(1, Ordering::SeqCst);
        }
        let round = self.inner.round(outcomes, claim).await?;
        if let Some(claim) = claim {
            let found = round.claimed.len();
            self.claimed.lock().unwrap().push((claim.limit, found));
        }
        Ok(round)
    }

    async fn expired(&self, now: Millis, limit: usize) -> outbox_core::Result<Vec<Record>> {
        self.expired_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.expired(now, limit).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_down_link_with_nothing_due_sleeps_instead_of_spinning() {
    let store = Arc::new(Counting::default());
    let clock = TokioClock::starting_at(BASE);
    let sink = Script::default();
    sink.plan("a", vec![answer(Outcome::no_answer("refused"))]);
    let config = RunnerConfig {
        safety_poll: None,
        seed: Some(3),
        ..RunnerConfig::default()
    };
    // Full jitter: the probe time and the record's own deadline differ.
    let outbox = Outbox::builder(store.clone(), sink.clone())
        .config(config)
        .clock(Arc::new(clock))
        .start()
        .await
        .unwrap();
    let id = outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_millis(10)).await;
    outbox.discard(id, "no longer wanted").await.unwrap();
    let before = store.claims.load(Ordering::SeqCst);
    run_for(Duration::from_secs(3_600)).await;
    let claims = store.claims.load(Ordering::SeqCst) - before;
    assert!(claims <= 2, "{claims} claims in an hour with nothing due");
}

#[tokio::test(start_paused = true)]
async fn a_sink_that_never_reports_times_out_and_does_not_stall_the_queue() {
    let config = RunnerConfig {
        delivery_timeout: Duration::from_secs(10),
        concurrency: 1,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy(), config, None).await;
    r.sink
        .plan("hang", vec![Act::Hang, answer(Outcome::Delivered)]);
    let ids = r
        .outbox
        .enqueue_batch(vec![rec("hang"), rec("later")])
        .await
        .unwrap();
    run_for(Duration::from_secs(60)).await;
    let stats = r.outbox.stats().await.unwrap();
    assert_eq!(stats.delivered, 2, "{stats:?}");
    assert_eq!(r.sink.order(), ["hang", "later", "hang"]);
    assert!(r.outbox.get(ids[0]).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn leases_are_renewed_for_running_and_waiting_records() {
    let store = Arc::new(MemoryStore::new());
    let config = RunnerConfig {
        lease: Duration::from_secs(3),
        concurrency: 1,
        batch: 8,
        ..RunnerConfig::default()
    };
    let r = rig_on(store.clone(), exact_policy(), config, None).await;
    for i in 0..8 {
        r.sink
            .plan(&format!("r{i}"), vec![Act::Slow(Duration::from_secs(2))]);
    }
    r.outbox
        .enqueue_batch((0..8).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    use outbox_core::Clock;
    for _ in 0..12 {
        run_for(Duration::from_secs(1)).await;
        let expired = store.expired(r.clock.now(), 100).await.unwrap();
        assert!(expired.is_empty(), "lapsed while held: {expired:?}");
    }
    r.outbox.flush(Duration::from_secs(60)).await.unwrap();
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 8);
    let interrupted = store.list(&ListQuery::new(10)).await.unwrap();
    assert!(interrupted.is_empty());
}

#[tokio::test(start_paused = true)]
async fn going_offline_mid_batch_stops_new_attempts() {
    let (online, online_rx) = watch::channel(true);
    let config = RunnerConfig {
        concurrency: 1,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy(), config, Some(online_rx)).await;
    for i in 0..6 {
        r.sink
            .plan(&format!("r{i}"), vec![Act::Slow(Duration::from_secs(1))]);
    }
    r.outbox
        .enqueue_batch((0..6).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    run_for(Duration::from_millis(1_500)).await;
    online.send(false).unwrap();
    run_for(Duration::from_secs(3_600)).await;
    assert_eq!(
        r.sink.count(),
        2,
        "the one under way finished; nothing new started"
    );
    assert_eq!(r.outbox.stats().await.unwrap().in_flight, 0);
    online.send(true).unwrap();
    r.outbox.flush(Duration::from_secs(60)).await.unwrap();
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 6);
}

#[tokio::test(start_paused = true)]
async fn concurrent_no_answers_count_once_against_the_link() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    for i in 0..4 {
        r.sink.plan(
            &format!("r{i}"),
            vec![
                answer(Outcome::no_answer("refused")),
                answer(Outcome::Delivered),
            ],
        );
    }
    r.outbox
        .enqueue_batch((0..4).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    run_for(Duration::from_secs(30)).await;
    // Four deliveries went unanswered together: one failure of the link, so the probe goes
    // after the initial 1 s, not after 8 s (as four failures would make it).
    let second_wave: Vec<Millis> = (0..4).map(|i| r.sink.times(&format!("r{i}"))[1]).collect();
    assert_eq!(second_wave.iter().min(), Some(&(BASE + 1_000)));
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 4);
}

#[tokio::test(start_paused = true)]
async fn the_discard_ceiling_leaves_a_tombstone_and_an_event() {
    let policy = exact_policy()
        .with_max_attempts(2)
        .with_ceiling(outbox_core::Ceiling::Discard);
    let r = rig(policy, RunnerConfig::default(), None).await;
    let mut events = r.outbox.events();
    r.sink.plan("a", vec![http503()]);
    let id = r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(60)).await;
    assert!(r.outbox.get(id).await.unwrap().is_none());
    let tombstones = r.outbox.tombstones(None, 10).await.unwrap();
    assert_eq!(tombstones.len(), 1);
    assert_eq!((tombstones[0].id, tombstones[0].attempts), (id, 2));
    assert!(std::iter::from_fn(|| events.try_recv().ok())
        .any(|e| matches!(e, Event::Discarded { id: d, .. } if d == id)));
}

#[tokio::test(start_paused = true)]
async fn a_conflict_resolver_decides_what_409_means() {
    let clock = TokioClock::starting_at(BASE);
    let sink = Script::default();
    sink.plan("dup", vec![answer(Outcome::conflict("HTTP 409"))]);
    sink.plan("other", vec![answer(Outcome::conflict("HTTP 409"))]);
    let store = Arc::new(MemoryStore::new());
    let outbox = Outbox::builder(store.clone(), sink)
        .clock(Arc::new(clock))
        .conflict_resolver(|record: &Record, _: &str| {
            if record.payload == b"dup" {
                outbox_core::ConflictResolution::AlreadyDelivered
            } else {
                outbox_core::ConflictResolution::NeedsAttention
            }
        })
        .start()
        .await
        .unwrap();
    let ids = outbox
        .enqueue_batch(vec![rec("dup"), rec("other")])
        .await
        .unwrap();
    run_for(Duration::from_secs(1)).await;
    assert!(
        outbox.get(ids[0]).await.unwrap().is_none(),
        "counted delivered"
    );
    let other = outbox.get(ids[1]).await.unwrap().unwrap();
    assert_eq!((other.state, other.attempts), (State::NeedsAttention, 1));
}

#[tokio::test(start_paused = true)]
async fn shutdown_accepts_any_timeout() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    r.outbox.shutdown(Duration::MAX).await.unwrap();
}

/// One "process": a fresh runtime with its own runner on the shared store, dropped with a
/// delivery still under way, as a crash would leave it (no release, no outcome).
fn crashing_process(store: &Arc<MemoryStore>, round: u64, sink: &Script) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        // Each process starts an hour after the last, so the dead one's leases have expired.
        let clock = TokioClock::starting_at(BASE + round * 3_600_000);
        *sink.now.lock().unwrap() = Some(clock);
        let outbox = Outbox::builder(store.clone(), sink.clone())
            .policy(exact_policy().with_max_interruptions(3))
            .config(RunnerConfig {
                concurrency: 1,
                ..RunnerConfig::default()
            })
            .clock(Arc::new(clock))
            .start()
            .await
            .unwrap();
        run_for(Duration::from_secs(1)).await;
        std::mem::forget(outbox);
    });
    drop(runtime);
}

#[test]
fn a_crash_charges_only_the_record_being_delivered() {
    let store = Arc::new(MemoryStore::new());
    let sink = Script::default();
    sink.plan("poison", vec![Act::Hang]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let batch = std::iter::once(rec("poison"))
        .chain((0..7).map(|i| rec(&format!("ok{i}"))))
        .collect();
    runtime.block_on(store.enqueue(batch, BASE)).unwrap();
    // The poison record hangs its process every time it is delivered.
    for round in 0..4 {
        crashing_process(&store, round, &sink);
    }
    let records = runtime.block_on(store.list(&ListQuery::new(10))).unwrap();
    assert_eq!(
        records.len(),
        1,
        "the healthy records were delivered: {records:?}"
    );
    assert_eq!(records[0].payload, b"poison");
    assert_eq!(records[0].state, State::NeedsAttention);
    assert_eq!(records[0].interrupted, 3);
    assert_eq!(runtime.block_on(store.stats()).unwrap().delivered, 7);
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_round_returns_without_waiting_out_its_timeout() {
    let config = RunnerConfig {
        safety_poll: None,
        ..RunnerConfig::default()
    };
    let r = rig(exact_policy(), config, None).await;
    r.sink.plan("slow", vec![Act::Slow(Duration::from_secs(1))]);
    r.outbox.enqueue(rec("slow")).await.unwrap();
    run_for(Duration::from_millis(10)).await;
    let started = tokio::time::Instant::now();
    r.outbox.shutdown(Duration::from_secs(600)).await.unwrap();
    // The delivery under way reports within its second; the runner then stops at once.
    assert!(
        started.elapsed() <= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.sink.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_notifier_wakes_the_runner_from_another_task() {
    let store = Arc::new(MemoryStore::new());
    let config = RunnerConfig {
        safety_poll: None,
        ..RunnerConfig::default()
    };
    let r = rig_on(store.clone(), exact_policy(), config, None).await;
    // The runner goes idle with nothing due; then a record is enqueued behind the handle's
    // back (as inside the caller's own transaction).
    run_for(Duration::from_secs(1)).await;
    use outbox_core::Clock;
    store.enqueue(vec![rec("a")], r.clock.now()).await.unwrap();
    run_for(Duration::from_secs(3_600)).await;
    assert_eq!(r.sink.count(), 0, "nothing polls");
    let notifier = r.outbox.notifier();
    tokio::spawn(async move { notifier.notify() })
        .await
        .unwrap();
    run_for(Duration::from_millis(10)).await;
    assert_eq!(r.sink.order(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn a_round_of_quick_deliveries_is_written_in_one_store_call() {
    let store = Arc::new(Counting::default());
    let clock = TokioClock::starting_at(BASE);
    let batch = RunnerConfig::default().batch;
    let outbox = Outbox::builder(store.clone(), Script::default())
        .clock(Arc::new(clock))
        .config(RunnerConfig::default().with_max_batch(batch))
        .start()
        .await
        .unwrap();
    outbox
        .enqueue_batch((0..batch * 3).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(outbox.stats().await.unwrap().delivered, batch as u64 * 3);
    // Three full rounds: each round's outcomes travel with the next claim, so the drain is
    // four store calls (durable commits are what a drain is bound by), and no other write.
    assert_eq!(store.rounds.load(Ordering::SeqCst), 4);
    assert_eq!(store.applies.load(Ordering::SeqCst), 0);
    // Expired leases are looked for at start-up, not by every round of the drain.
    assert!(store.expired_reads.load(Ordering::SeqCst) <= 2);
}

#[tokio::test(start_paused = true)]
async fn a_backlog_drains_in_rounds_that_grow_to_max_batch() {
    let store = Arc::new(Counting::default());
    let clock = TokioClock::starting_at(BASE);
    let config = RunnerConfig::default();
    let (batch, max) = (config.batch, config.max_batch);
    let outbox = Outbox::builder(store.clone(), Script::default())
        .clock(Arc::new(clock))
        .config(config)
        .start()
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    store.claimed.lock().unwrap().clear();
    // Rounds of 32, 64, ... up to 1,024, then two more at the maximum.
    let sizes: Vec<usize> = std::iter::successors(Some(batch), |s| Some((s * 2).min(max)))
        .take_while(|&s| s < max)
        .chain([max, max, max])
        .collect();
    let backlog: usize = sizes.iter().sum();
    outbox
        .enqueue_batch((0..backlog).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(60)).await.unwrap();
    assert_eq!(outbox.stats().await.unwrap().delivered, backlog as u64);
    // Every claim came back full and grew the next, up to the maximum; the last one found
    // the queue empty. Ten store calls for 4,064 records, where rounds of 32 take 128.
    let mut expected: Vec<(usize, usize)> = sizes.iter().map(|&s| (s, s)).collect();
    expected.push((max, 0));
    assert_eq!(*store.claimed.lock().unwrap(), expected);
    // The next enqueue is a new drain: it starts at `batch` again.
    store.claimed.lock().unwrap().clear();
    outbox
        .enqueue_batch((0..batch + 1).map(|i| rec(&format!("s{i}"))).collect())
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        *store.claimed.lock().unwrap(),
        [(batch, batch), (2 * batch, 1)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_from_a_clock_far_ahead_is_recovered_at_start() {
    let store = Arc::new(MemoryStore::new());
    let ids = store.enqueue(vec![rec("a")], BASE).await.unwrap();
    // A process whose clock ran a year ahead claimed it, then died.
    let year = 365 * 86_400_000;
    store
        .claim(outbox_core::Claim {
            now: BASE + year,
            limit: 1,
            lease: Lease {
                token: 5,
                until: BASE + year + 30_000,
            },
        })
        .await
        .unwrap();
    let r = rig_on(store.clone(), exact_policy(), RunnerConfig::default(), None).await;
    // A live runner renews its lease within one lease; after one lease with no renewal, the
    // lease from the future is the dead process's.
    run_for(Duration::from_secs(29)).await;
    assert_eq!(r.sink.count(), 0, "not before one lease");
    run_for(Duration::from_secs(2)).await;
    r.outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert!(
        r.outbox.get(ids[0]).await.unwrap().is_none(),
        "recovered and delivered"
    );
    assert_eq!(r.sink.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_safety_poll_recovers_a_lease_another_process_left_to_expire() {
    let store = Arc::new(MemoryStore::new());
    let config = RunnerConfig {
        safety_poll: Some(Duration::from_secs(60)),
        ..RunnerConfig::default()
    };
    let r = rig_on(store.clone(), exact_policy(), config, None).await;
    run_for(Duration::from_secs(1)).await;
    // Another process (sharing the store) claims a record under a 30 s lease and dies.
    use outbox_core::Clock;
    let now = r.clock.now();
    let ids = store.enqueue(vec![rec("orphan")], now).await.unwrap();
    let claimed = store
        .claim(outbox_core::Claim {
            now,
            limit: 1,
            lease: Lease {
                token: 77,
                until: now + 30_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    // No enqueue through the handle, no notify, no connectivity change: only the poll.
    run_for(Duration::from_secs(90)).await;
    assert!(
        r.outbox.get(ids[0]).await.unwrap().is_none(),
        "recovered and delivered"
    );
    assert_eq!(r.sink.order(), ["orphan"]);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_head_lets_the_rest_of_its_group_go() {
    let r = rig(exact_policy(), RunnerConfig::default(), None).await;
    r.sink
        .plan("a1", vec![answer(Outcome::rejected("HTTP 422"))]);
    r.outbox
        .enqueue_batch(vec![rec("a1").in_group("a"), rec("a2").in_group("a")])
        .await
        .unwrap();
    r.outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.sink.order(), ["a1", "a2"]);
    let stats = r.outbox.stats().await.unwrap();
    assert_eq!((stats.rejected, stats.delivered, stats.held), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_of_ten_a_second_never_lets_eleven_into_any_second() {
    let config = RunnerConfig::default()
        .with_concurrency(8)
        .with_rate_limit(10, Duration::from_secs(1));
    let r = rig(exact_policy(), config, None).await;
    r.outbox
        .enqueue_batch((0..100).map(|i| rec(&format!("r{i}"))).collect())
        .await
        .unwrap();
    run_for(Duration::from_secs(30)).await;
    assert_eq!(r.outbox.stats().await.unwrap().delivered, 100);
    let mut times: Vec<Millis> = r.sink.seen.lock().unwrap().iter().map(|s| s.1).collect();
    times.sort_unstable();
    for (i, &start) in times.iter().enumerate() {
        let within = times[i..]
            .iter()
            .take_while(|&&t| t < start + 1_000)
            .count();
        assert!(
            within <= 10,
            "{within} deliveries in the second from {start}"
        );
    }
    // Ten a second and no slower: the hundredth goes nine seconds after the first.
    let span = times[99] - times[0];
    assert!((9_000..=9_050).contains(&span), "{span} ms");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_and_the_rate_limit_compose_the_later_wins() {
    // The limit is later: the server asks for 1 s, the limit allows one start per 5 s.
    let r = rig(
        exact_policy(),
        RunnerConfig::default().with_rate_limit(1, Duration::from_secs(5)),
        None,
    )
    .await;
    let busy = Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(1))));
    r.sink
        .plan("a", vec![answer(busy), answer(Outcome::Delivered)]);
    r.outbox.enqueue(rec("a")).await.unwrap();
    run_for(Duration::from_secs(20)).await;
    let times = r.sink.times("a");
    assert_eq!(times.len(), 2);
    assert!((5_000..=5_050).contains(&gaps(&times)[0]), "{times:?}");

    // The hold is later: the server asks for 10 s (spread by up to half), the limit one start
    // a second.
    let r = rig(
        exact_policy(),
        RunnerConfig::default().with_rate_limit(1, Duration::from_secs(1)),
        None,
    )
    .await;
    let busy = Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(10))));
    r.sink
        .plan("b", vec![answer(busy), answer(Outcome::Delivered)]);
    r.outbox.enqueue(rec("b")).await.unwrap();
    run_for(Duration::from_secs(60)).await;
    let times = r.sink.times("b");
    assert_eq!(times.len(), 2);
    assert!((10_000..=15_050).contains(&gaps(&times)[0]), "{times:?}");
}
