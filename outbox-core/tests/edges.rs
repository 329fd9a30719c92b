//! The runner at the edges devices live at: a wall clock that steps, a link that goes and
//! comes back, a credential refused with several requests in flight, a fleet failing at once.
//! All on tokio's paused clock and the memory store.

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::LogCapture;

use outbox_core::store::Halt;
use outbox_core::{
    async_trait, Clock, Event, LinkState, Millis, NewRecord, Outbox, Outcome, Record, RunnerConfig,
    Sink, SteppedClock, Store,
};
use outbox_memory::MemoryStore;
use tokio::sync::watch;
use tokio::time::Instant;

const BASE: Millis = 1_700_000_000_000;
const DAY: Duration = Duration::from_secs(86_400);

/// A sink that answers from a script (the last answer repeats) and records when, on tokio's
/// monotonic clock, each delivery came, with the header a server would have seen.
#[derive(Clone)]
struct Scripted {
    script: Arc<Mutex<VecDeque<Outcome>>>,
    seen: Arc<Mutex<Vec<(Instant, Record)>>>,
}

impl Scripted {
    fn new(script: Vec<Outcome>) -> Self {
        Scripted {
            script: Arc::new(Mutex::new(script.into())),
            seen: Arc::default(),
        }
    }

    fn set(&self, script: Vec<Outcome>) {
        *self.script.lock().unwrap() = script.into();
    }

    fn times(&self) -> Vec<Instant> {
        self.seen.lock().unwrap().iter().map(|(t, _)| *t).collect()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

#[async_trait]
impl Sink for Scripted {
    async fn deliver(&self, record: &Record) -> Outcome {
        self.seen
            .lock()
            .unwrap()
            .push((Instant::now(), record.clone()));
        let mut script = self.script.lock().unwrap();
        if script.len() > 1 {
            script.pop_front().unwrap()
        } else {
            script.front().cloned().unwrap_or(Outcome::Delivered)
        }
    }
}

fn config() -> RunnerConfig {
    RunnerConfig::default().with_seed(11)
}

async fn start(
    store: Arc<dyn Store>,
    sink: Scripted,
    clock: SteppedClock,
    config: RunnerConfig,
) -> Outbox {
    Outbox::builder(store, sink)
        .clock(Arc::new(clock))
        .config(config)
        .start()
        .await
        .unwrap()
}

async fn run_for(d: Duration) {
    tokio::time::sleep(d).await;
}

fn http503() -> Outcome {
    Outcome::transient("HTTP 503", None)
}

#[tokio::test(start_paused = true)]
async fn a_step_back_of_a_day_while_waiting_keeps_the_records_wait() {
    let store = Arc::new(MemoryStore::new());
    let clock = SteppedClock::starting_at(BASE);
    let sink = Scripted::new(vec![http503(), Outcome::Delivered]);
    let outbox = start(store.clone(), sink.clone(), clock.clone(), config()).await;
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    run_for(Duration::from_millis(10)).await;
    let failed = outbox.get(id).await.unwrap().unwrap();
    let wait = failed.next_attempt_at.unwrap() - failed.last_attempt_at.unwrap();
    assert!(wait <= 1_000, "first wait within the 1 s window: {wait}");
    // NTP sets the clock back a day while the record waits.
    clock.step_back(DAY);
    run_for(Duration::from_secs(2)).await;
    let times = sink.times();
    assert_eq!(times.len(), 2, "retried, not a day later");
    let gap = times[1] - times[0];
    assert!(
        gap <= Duration::from_millis(wait + 50),
        "retried within its intended wait ({wait} ms): {gap:?}"
    );
    assert_eq!(outbox.stats().await.unwrap().delivered, 1);
}

#[tokio::test(start_paused = true)]
async fn a_step_back_of_a_day_across_a_restart_keeps_the_records_wait() {
    let store = Arc::new(MemoryStore::new());
    let clock = SteppedClock::starting_at(BASE);
    let sink = Scripted::new(vec![http503()]);
    let outbox = start(store.clone(), sink.clone(), clock.clone(), config()).await;
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    run_for(Duration::from_millis(10)).await;
    outbox.shutdown(Duration::from_secs(1)).await.unwrap();
    let failed = store.get(id).await.unwrap().unwrap();
    let wait = failed.next_attempt_at.unwrap() - failed.last_attempt_at.unwrap();
    // The device is off; when it starts again its clock reads a day earlier.
    clock.step_back(DAY);
    sink.set(vec![Outcome::Delivered]);
    let restarted = Instant::now();
    let outbox = start(store.clone(), sink.clone(), clock.clone(), config()).await;
    run_for(Duration::from_secs(2)).await;
    let times = sink.times();
    assert_eq!(times.len(), 2, "retried after the restart, not a day later");
    assert!(
        times[1] - restarted <= Duration::from_millis(wait + 50),
        "within the wait it was given ({wait} ms): {:?}",
        times[1] - restarted
    );
    assert_eq!(outbox.stats().await.unwrap().delivered, 1);
}

#[tokio::test(start_paused = true)]
async fn a_fleet_failing_at_once_spreads_its_second_attempts() {
    // 200 devices, one record each, all without an answer at the same instant.
    let mut fleet = Vec::new();
    for seed in 0..200 {
        let store = Arc::new(MemoryStore::new());
        let sink = Scripted::new(vec![Outcome::no_answer("refused"), Outcome::Delivered]);
        let clock = SteppedClock::starting_at(BASE);
        let outbox = start(store, sink.clone(), clock, config().with_seed(seed)).await;
        outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
        fleet.push((outbox, sink));
    }
    run_for(Duration::from_secs(5)).await;
    let waits: Vec<f64> = fleet
        .iter()
        .map(|(_, sink)| {
            let t = sink.times();
            assert_eq!(t.len(), 2);
            (t[1] - t[0]).as_secs_f64()
        })
        .collect();
    let mean = waits.iter().sum::<f64>() / waits.len() as f64;
    let var = waits.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / waits.len() as f64;
    let cv = var.sqrt() / mean;
    // One full-jitter draw over the 1 s window: mean about 0.5 s, CV about 0.58.
    assert!(
        cv > 0.5,
        "coefficient of variation {cv:.3} (mean {mean:.3} s)"
    );
    assert!((0.4..0.6).contains(&mean), "mean {mean:.3} s");
}

#[tokio::test(start_paused = true)]
async fn back_online_after_a_long_outage_the_record_goes_at_once() {
    let (online, online_rx) = watch::channel(true);
    let store = Arc::new(MemoryStore::new());
    let sink = Scripted::new(vec![Outcome::no_answer("no route to host")]);
    let outbox = Outbox::builder(store.clone(), sink.clone())
        .clock(Arc::new(SteppedClock::starting_at(BASE)))
        .config(config())
        .connectivity(online_rx)
        .start()
        .await
        .unwrap();
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    // 25 minutes of unanswered tries: the wait has grown to the 15-minute cap.
    run_for(Duration::from_secs(25 * 60)).await;
    let tries = sink.count();
    assert!(tries >= 5, "{tries} tries");
    let waiting = store.get(id).await.unwrap().unwrap();
    assert!(waiting.unanswered >= 5 && waiting.attempts == 0);
    // A minute offline, then the signal says online and the server is reachable.
    online.send(false).unwrap();
    run_for(Duration::from_secs(60)).await;
    sink.set(vec![Outcome::Delivered]);
    let back = Instant::now();
    online.send(true).unwrap();
    run_for(Duration::from_millis(50)).await;
    let times = sink.times();
    assert_eq!(times.len(), tries + 1, "attempted once the link came back");
    assert!(times[tries] - back < Duration::from_millis(50));
    assert_eq!(outbox.stats().await.unwrap().delivered, 1);
}

#[tokio::test(start_paused = true)]
async fn four_refusals_in_flight_halt_once_and_a_restart_stays_halted() {
    let logs = LogCapture::default();
    let _capturing = logs.capture();
    let store = Arc::new(MemoryStore::new());
    let clock = SteppedClock::starting_at(BASE);
    // Each delivery takes a moment, so all four are in flight when the first 401 lands.
    let sink = SlowRefusals::default();
    let outbox = Outbox::builder(store.clone(), sink.clone())
        .clock(Arc::new(clock.clone()))
        .config(config())
        .start()
        .await
        .unwrap();
    let mut events = outbox.events();
    let records = (0..4).map(|i| NewRecord::new(vec![i])).collect();
    outbox.enqueue_batch(records).await.unwrap();
    run_for(Duration::from_secs(5)).await;
    assert_eq!(sink.peak(), 4, "four deliveries in flight");
    let halts = std::iter::from_fn(|| events.try_recv().ok())
        .filter(|e| matches!(e, Event::Halted { .. }))
        .count();
    assert_eq!(halts, 1, "one Halted event");
    let lines: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("halted"))
        .collect();
    assert_eq!(lines.len(), 1, "one log line: {lines:?}");
    assert!(lines[0].contains("ERROR"));
    let stats = outbox.stats().await.unwrap();
    assert_eq!(
        stats.halt.as_ref().map(|h| h.reason.as_str()),
        Some("HTTP 401")
    );
    let spent: u32 = store
        .list(&outbox_core::ListQuery::new(10))
        .await
        .unwrap()
        .iter()
        .map(|r| r.attempts)
        .sum();
    assert_eq!(spent, 0, "a refused credential spends nothing");
    outbox.shutdown(Duration::from_secs(1)).await.unwrap();

    // Restart: still halted, nothing sent with the refused credential.
    let sent = sink.calls();
    let outbox = Outbox::builder(store.clone(), sink.clone())
        .clock(Arc::new(clock.clone()))
        .config(config())
        .start()
        .await
        .unwrap();
    run_for(Duration::from_secs(60)).await;
    assert!(outbox.is_halted());
    assert_eq!(sink.calls(), sent, "nothing sent while halted");
    // The app refreshes the credential and resumes: all four go.
    sink.accept();
    outbox.resume();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(outbox.stats().await.unwrap().delivered, 4);
    assert!(outbox.stats().await.unwrap().halt.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_link_that_never_answers_is_logged_down_once_then_at_a_slow_pace() {
    let logs = LogCapture::default();
    let _capturing = logs.capture();
    let store = Arc::new(MemoryStore::new());
    let sink = Scripted::new(vec![Outcome::no_answer("dns error: no such host")]);
    let outbox = start(
        store.clone(),
        sink.clone(),
        SteppedClock::starting_at(BASE),
        config(),
    )
    .await;
    let mut events = outbox.events();
    outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    run_for(Duration::from_secs(2 * 3600)).await;
    let lines = logs.lines();
    let down: Vec<&String> = lines.iter().filter(|l| l.contains("link down")).collect();
    let still: Vec<&String> = lines.iter().filter(|l| l.contains("still down")).collect();
    assert_eq!(down.len(), 1, "{lines:#?}");
    assert!(down[0].contains("WARN") && down[0].contains("no such host"));
    // One line per 15 minutes after the first: at 15, 30, ..., 105 minutes.
    assert_eq!(still.len(), 7, "{still:#?}");
    assert!(sink.count() > 8, "it kept probing");
    assert!(matches!(
        outbox.stats().await.unwrap().link,
        Some(LinkState::Down { .. })
    ));
    // The server answers again: one up line, one event.
    sink.set(vec![Outcome::Delivered]);
    run_for(Duration::from_secs(16 * 60)).await;
    let lines = logs.lines();
    let up: Vec<&String> = lines.iter().filter(|l| l.contains("link up")).collect();
    assert_eq!(up.len(), 1, "{lines:#?}");
    assert!(up[0].contains("INFO"));
    let events: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    let downs = events
        .iter()
        .filter(|e| matches!(e, Event::LinkDown { .. }))
        .count();
    let ups = events
        .iter()
        .filter(|e| matches!(e, Event::LinkUp { .. }))
        .count();
    assert_eq!((downs, ups), (1, 1));
    let stats = outbox.stats().await.unwrap();
    assert_eq!(stats.delivered, 1);
    assert_eq!(
        stats.needs_attention, 0,
        "never parked for lack of an answer"
    );
    assert_eq!(stats.link, Some(LinkState::Up));
}

/// Refuses every credential after a short delay, until told to accept; tracks the peak of
/// deliveries in flight.
#[derive(Clone, Default)]
struct SlowRefusals {
    state: Arc<Mutex<(bool, usize, usize, usize)>>,
}

impl SlowRefusals {
    fn peak(&self) -> usize {
        self.state.lock().unwrap().2
    }
    fn calls(&self) -> usize {
        self.state.lock().unwrap().3
    }
    fn accept(&self) {
        self.state.lock().unwrap().0 = true;
    }
}

#[async_trait]
impl Sink for SlowRefusals {
    async fn deliver(&self, _: &Record) -> Outcome {
        {
            let mut s = self.state.lock().unwrap();
            s.1 += 1;
            s.2 = s.2.max(s.1);
            s.3 += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut s = self.state.lock().unwrap();
        s.1 -= 1;
        if s.0 {
            Outcome::Delivered
        } else {
            Outcome::halt("HTTP 401")
        }
    }
}

#[test]
fn the_clock_in_use_is_the_stepped_one() {
    // Guard against a test above silently using another clock: SteppedClock moves with
    // tokio's paused time and steps.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = SteppedClock::starting_at(BASE);
        run_for(Duration::from_secs(1)).await;
        clock.step_back(DAY);
        assert_eq!(clock.now(), BASE + 1_000 - 86_400_000);
    });
}

/// A server behind a route that is wrong until fixed: 404 for everything, then 2xx; records
/// what it accepted, in order.
#[derive(Clone, Default)]
struct Route {
    fixed: Arc<Mutex<bool>>,
    accepted: Arc<Mutex<Vec<Vec<u8>>>>,
}

#[async_trait]
impl Sink for Route {
    async fn deliver(&self, record: &Record) -> Outcome {
        if *self.fixed.lock().unwrap() {
            self.accepted.lock().unwrap().push(record.payload.clone());
            Outcome::Delivered
        } else {
            Outcome::rejected("HTTP 404")
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_wrong_route_halts_after_five_rejections_and_requeue_brings_all_back_in_order() {
    let store = Arc::new(MemoryStore::new());
    let sink = Route::default();
    let outbox = Outbox::builder(store.clone(), sink.clone())
        .clock(Arc::new(SteppedClock::starting_at(BASE)))
        .config(config())
        .start()
        .await
        .unwrap();
    let mut events = outbox.events();
    // 20 records in 10 groups of two: order inside a group must survive the requeue.
    let records = (0..20u8)
        .map(|i| NewRecord::new(vec![i]).in_group(format!("g{}", i % 10)))
        .collect();
    outbox.enqueue_batch(records).await.unwrap();
    run_for(Duration::from_secs(5)).await;
    let stats = outbox.stats().await.unwrap();
    let halt = stats.halt.expect("halted");
    assert_eq!(
        halt.reason,
        "suspected misconfiguration: 5 rejections in a row (HTTP 404)"
    );
    // A round in flight may finish what it started (concurrency 4), no more.
    assert!(
        (5..=8).contains(&stats.rejected),
        "{} rejected before the halt",
        stats.rejected
    );
    let halts = std::iter::from_fn(|| events.try_recv().ok())
        .filter(|e| matches!(e, Event::Halted { .. }))
        .count();
    assert_eq!(halts, 1);
    // The operator fixes the route, requeues what was rejected, and resumes.
    *sink.fixed.lock().unwrap() = true;
    let requeued = outbox
        .requeue_rejected(outbox_core::ListQuery::new(100))
        .await
        .unwrap();
    assert_eq!(requeued, stats.rejected);
    outbox.resume();
    outbox.flush(Duration::from_secs(30)).await.unwrap();
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.rejected), (20, 0));
    let accepted = sink.accepted.lock().unwrap().clone();
    assert_eq!(accepted.len(), 20);
    for group in 0..10u8 {
        let order: Vec<u8> = accepted
            .iter()
            .map(|p| p[0])
            .filter(|i| i % 10 == group)
            .collect();
        assert_eq!(order, [group, group + 10], "group g{group} kept its order");
    }
}

#[tokio::test(start_paused = true)]
async fn a_resume_on_any_runner_of_the_store_lifts_a_halt_the_others_hold() {
    let store = Arc::new(MemoryStore::new());
    let clock = SteppedClock::starting_at(BASE);
    // Runner B of the store (another process of the app, offline for now, so it takes none
    // of the work) started before the halt: it is not halted itself (a runner that starts
    // while the store holds a halt is).
    let (_b_online, b_offline) = watch::channel(false);
    let b = Outbox::builder(store.clone(), Scripted::new(vec![]))
        .clock(Arc::new(clock.clone()))
        .config(config())
        .connectivity(b_offline)
        .start()
        .await
        .unwrap();
    let mut b_events = b.events();
    // Runner A's credential is refused once.
    let a_sink = Scripted::new(vec![Outcome::halt("HTTP 401"), Outcome::Delivered]);
    let a = start(store.clone(), a_sink.clone(), clock.clone(), config()).await;
    let mut a_events = a.events();
    a.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    run_for(Duration::from_secs(1)).await;
    assert!(a.is_halted());
    assert!(!b.is_halted());
    assert!(store.halt().await.unwrap().is_some(), "persisted");

    // The app resumes on B: the persisted halt is cleared; B says nothing of a resume it did
    // not need.
    b.resume();
    run_for(Duration::from_millis(10)).await;
    assert!(store.halt().await.unwrap().is_none(), "cleared by B");
    assert!(a.is_halted(), "A has not looked yet");

    // A reads the cleared halt at its next wake (here an enqueue of its own) and resumes.
    a.enqueue(NewRecord::new(b"y".to_vec())).await.unwrap();
    run_for(Duration::from_secs(1)).await;
    assert!(!a.is_halted());
    let a_said: Vec<Event> = std::iter::from_fn(|| a_events.try_recv().ok()).collect();
    assert_eq!(
        a_said
            .iter()
            .filter(|e| matches!(e, Event::Resumed))
            .count(),
        1,
        "{a_said:?}"
    );
    let b_said: Vec<Event> = std::iter::from_fn(|| b_events.try_recv().ok()).collect();
    assert!(
        !b_said.iter().any(|e| matches!(e, Event::Resumed)),
        "{b_said:?}"
    );
    a.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(store.stats().await.unwrap().delivered, 2);
    assert_eq!(a_sink.count(), 3, "refused once, then both delivered by A");
}

#[tokio::test(start_paused = true)]
async fn a_resume_never_lifts_a_halt_persisted_after_the_one_the_runner_held() {
    let store = Arc::new(MemoryStore::new());
    let clock = SteppedClock::starting_at(BASE);
    let sink = Scripted::new(vec![Outcome::halt("HTTP 401"), Outcome::Delivered]);
    let outbox = start(store.clone(), sink.clone(), clock.clone(), config()).await;
    let mut events = outbox.events();
    outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    run_for(Duration::from_secs(1)).await;
    assert!(outbox.is_halted());
    let held = store.halt().await.unwrap().expect("persisted");
    // Another process's credential is refused too, later: its halt replaces this one in the
    // store before this runner reads it.
    let newer = Halt {
        reason: "HTTP 403: key revoked".into(),
        since: held.since + 1_000,
    };
    store.set_halt(Some(newer.clone())).await.unwrap();

    // The app resumes what it saw halted: the newer halt holds, and so does the runner.
    outbox.resume();
    assert!(outbox.is_halted(), "halted until the store has cleared it");
    run_for(Duration::from_secs(1)).await;
    assert_eq!(store.halt().await.unwrap(), Some(newer), "not lifted");
    assert!(outbox.is_halted());
    assert_eq!(sink.count(), 1, "nothing sent while the newer halt holds");
    let said: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert!(
        !said.iter().any(|e| matches!(e, Event::Resumed)),
        "{said:?}"
    );
    assert!(
        said.contains(&Event::StillHalted {
            reason: "HTTP 403: key revoked".into()
        }),
        "{said:?}"
    );

    // Resumed again, now that the runner holds the newer halt: lifted, and the record goes.
    outbox.resume();
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(store.halt().await.unwrap(), None);
    assert!(!outbox.is_halted());
    assert_eq!(store.stats().await.unwrap().delivered, 1);
    let said: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(
        said.iter().filter(|e| matches!(e, Event::Resumed)).count(),
        1,
        "{said:?}"
    );
}
