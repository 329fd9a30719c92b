//! The HTTP sink under the runner, against a real local server, on tokio's paused clock: a
//! server whose clock is an hour off, a server that says `Retry-After: 0` forever, a
//! credential refused and replaced, and a server that comes back after an hour down.

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use outbox_core::{
    Backoff, Clock, Event, Jitter, Millis, NewRecord, Outbox, RetryPolicy, RunnerConfig,
    State as RecordState, TokioClock,
};
use outbox_http::{HttpSink, Token};
use outbox_memory::MemoryStore;
use tokio::sync::broadcast;

/// 2023-11-14T22:13:20Z: a whole second, so the server's `Date` loses nothing.
const BASE: Millis = 1_700_000_000_000;

/// What the server saw of one request: the local clock, and its `Authorization` header.
#[derive(Clone, Debug)]
struct Seen {
    at: Millis,
    authorization: Option<String>,
}

type Answer = dyn Fn(usize, &Seen) -> Response + Send + Sync;

#[derive(Clone)]
struct Server {
    clock: TokioClock,
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Arc<Answer>,
}

impl Server {
    /// Starts a server that answers request `n` (0-based) with `answer`.
    async fn start(
        clock: TokioClock,
        answer: impl Fn(usize, &Seen) -> Response + Send + Sync + 'static,
    ) -> (String, Self) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, clock, answer)
    }

    /// Like [`Server::start`], on a listener the test bound itself.
    fn serve(
        listener: tokio::net::TcpListener,
        clock: TokioClock,
        answer: impl Fn(usize, &Seen) -> Response + Send + Sync + 'static,
    ) -> (String, Self) {
        let server = Server {
            clock,
            seen: Arc::default(),
            answer: Arc::new(answer),
        };
        let app = Router::new()
            .route("/writes", post(write))
            .with_state(server.clone());
        let url = format!("http://{}/writes", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, server)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn write(State(server): State<Server>, headers: HeaderMap) -> Response {
    let seen = Seen {
        at: server.clock.now(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    let n = {
        let mut all = server.seen.lock().unwrap();
        all.push(seen.clone());
        all.len() - 1
    };
    (server.answer)(n, &seen)
}

fn http_date(ms: Millis) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(ms))
}

async fn start(sink: HttpSink, clock: TokioClock, policy: RetryPolicy) -> Outbox {
    start_with(sink, clock, policy, RunnerConfig::default()).await
}

async fn start_with(
    sink: HttpSink,
    clock: TokioClock,
    policy: RetryPolicy,
    config: RunnerConfig,
) -> Outbox {
    // The outbox owns one `Arc` of the sink; an app could keep another.
    Outbox::builder(Arc::new(MemoryStore::new()), Arc::new(sink))
        .clock(Arc::new(clock))
        .policy(policy)
        .config(RunnerConfig {
            seed: Some(7),
            ..config
        })
        .start()
        .await
        .unwrap()
}

/// The next event `what` picks, within a minute of (paused) tokio time.
async fn next<T>(events: &mut broadcast::Receiver<Event>, what: impl Fn(&Event) -> Option<T>) -> T {
    let wait = async {
        loop {
            if let Some(found) = what(&events.recv().await.unwrap()) {
                return found;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("no such event within a minute")
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_date_is_read_on_the_servers_clock_whatever_its_skew() {
    for skew in [3_600_000_i64, -3_600_000] {
        let clock = TokioClock::starting_at(BASE);
        let (url, server) = Server::start(clock, move |n, seen| {
            // The server's clock is `skew` off ours, and its `Date` says so.
            let server_now = seen.at.checked_add_signed(skew).unwrap();
            if n > 0 {
                return StatusCode::CREATED.into_response();
            }
            let headers = [
                ("date", http_date(server_now)),
                ("retry-after", http_date(server_now + 2_000)),
            ];
            (StatusCode::SERVICE_UNAVAILABLE, headers, "back in 2 s").into_response()
        })
        .await;
        // The local schedule alone would come back within 100 ms.
        let policy = RetryPolicy::default().with_backoff(Backoff::exponential(
            Duration::from_millis(100),
            2.0,
            Duration::from_secs(10),
        ));
        let outbox = start(HttpSink::post(&url).unwrap(), clock, policy).await;
        let mut events = outbox.events();
        let id = outbox
            .enqueue(NewRecord::new(b"{}".to_vec()))
            .await
            .unwrap();
        let at = next(&mut events, |e| match e {
            Event::Retrying { at, .. } => Some(*at),
            _ => None,
        })
        .await;
        let record = outbox.get(id).await.unwrap().unwrap();
        let now = clock.now();
        assert_eq!(record.state, RecordState::Retrying);
        assert_eq!(record.next_attempt_at, Some(at));
        let attempted = record.last_attempt_at.unwrap();
        assert_eq!(attempted, server.seen()[0].at);
        let wait = at - now;
        assert!(
            (1_000..=3_000).contains(&wait),
            "skew {skew} ms: scheduled {wait} ms out"
        );
        // It is the server's 2 s, spread by at most half.
        assert!((2_000..=3_000).contains(&(at - attempted)), "{skew}");

        next(&mut events, |e| {
            matches!(e, Event::Delivered { .. }).then_some(())
        })
        .await;
        let seen = server.seen();
        assert_eq!(seen.len(), 2);
        assert!(seen[1].at >= at, "the retry came before its deadline");
        outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_zero_forever_follows_the_local_schedule() {
    // 1, 2, 4, 8 s between five attempts, then the ceiling parks the record.
    let policy = RetryPolicy::default()
        .with_backoff(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(60),
        ))
        .with_jitter(Jitter::None)
        .with_max_attempts(5);
    let mut schedules = Vec::new();
    // The same server with no Retry-After, with `0`, and with a date in the past on its own
    // clock: a server asking for less than the local schedule cannot make a tight loop.
    for header in ["", "0", "past"] {
        let clock = TokioClock::starting_at(BASE);
        let (url, server) = Server::start(clock, move |_, seen| {
            let mut headers = HeaderMap::new();
            headers.insert("date", http_date(seen.at).parse().unwrap());
            match header {
                "" => {}
                "past" => {
                    let value = http_date(seen.at - 60_000).parse().unwrap();
                    headers.insert("retry-after", value);
                }
                value => {
                    headers.insert("retry-after", value.parse().unwrap());
                }
            }
            (StatusCode::SERVICE_UNAVAILABLE, headers, "down").into_response()
        })
        .await;
        let outbox = start(HttpSink::post(&url).unwrap(), clock, policy.clone()).await;
        let mut events = outbox.events();
        let id = outbox
            .enqueue(NewRecord::new(b"{}".to_vec()))
            .await
            .unwrap();
        next(&mut events, |e| {
            matches!(e, Event::Parked { .. }).then_some(())
        })
        .await;
        let parked_at = clock.now();
        // Two simulated minutes later, nothing more was sent.
        tokio::time::sleep(Duration::from_secs(120)).await;
        let times: Vec<Millis> = server.seen().iter().map(|s| s.at - BASE).collect();
        let record = outbox.get(id).await.unwrap().unwrap();
        assert_eq!(record.state, RecordState::NeedsAttention, "{header:?}");
        assert_eq!(record.attempts, 5, "{header:?}");
        schedules.push((times, parked_at - BASE));
        outbox.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let expected = (vec![0, 1_000, 3_000, 7_000, 15_000], 15_000);
    assert_eq!(
        schedules,
        vec![expected.clone(), expected.clone(), expected]
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_credential_is_replaced_and_the_runner_resumed() {
    let clock = TokioClock::starting_at(BASE);
    // The server has moved on to a new token; the app still holds the old one.
    let (url, server) = Server::start(clock, |_, seen| {
        if seen.authorization.as_deref() == Some("Bearer new") {
            StatusCode::CREATED.into_response()
        } else {
            (StatusCode::UNAUTHORIZED, "token expired").into_response()
        }
    })
    .await;
    let token = Token::bearer("old");
    let sink = HttpSink::post(&url).unwrap().credentials(token.clone());
    // The default concurrency: both requests are in flight when the refusals come back.
    let outbox = start_with(sink, clock, RetryPolicy::default(), RunnerConfig::default()).await;
    let mut events = outbox.events();
    let ids = outbox
        .enqueue_batch(vec![
            NewRecord::new(b"1".to_vec()),
            NewRecord::new(b"2".to_vec()),
        ])
        .await
        .unwrap();
    let (first, second) = (ids[0], ids[1]);

    let reason = next(&mut events, |e| match e {
        Event::Halted { reason, .. } => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert!(reason.contains("HTTP 401: token expired"), "{reason}");
    assert!(outbox.is_halted());
    // Nothing was spent: the records were not at fault.
    for id in [first, second] {
        assert_eq!(outbox.get(id).await.unwrap().unwrap().attempts, 0);
    }
    // What the app does on `Halted`: log in again, store the new token, resume.
    token.set_bearer("new");
    outbox.resume();
    let mut delivered = Vec::new();
    let mut halts = 0;
    while delivered.len() < 2 {
        match next(&mut events, |e| Some(e.clone())).await {
            Event::Delivered { id } => delivered.push(id),
            Event::Halted { .. } => halts += 1,
            _ => {}
        }
    }
    delivered.sort();
    assert_eq!(delivered, [first, second]);
    assert_eq!(halts, 0, "two refusals in flight, one halt");
    let record = outbox.get(first).await;
    assert!(
        record.unwrap().is_none(),
        "delivered records leave the queue"
    );
    let stats = outbox.stats().await.unwrap();
    assert_eq!(stats.delivered, 2);
    let sent: Vec<_> = server
        .seen()
        .into_iter()
        .map(|s| s.authorization.unwrap_or_default())
        .collect();
    assert_eq!(
        sent,
        ["Bearer old", "Bearer old", "Bearer new", "Bearer new"]
    );
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_server_back_after_an_hour_gets_the_backlog_spread_out_not_at_once() {
    let clock = TokioClock::starting_at(BASE);
    // Nothing listens on the port for an hour: every connection is refused.
    let addr = {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        taken.local_addr().unwrap()
    };
    let url = format!("http://{addr}/writes");
    let outbox = start(HttpSink::post(&url).unwrap(), clock, RetryPolicy::default()).await;
    let mut events = outbox.events();
    outbox.enqueue(NewRecord::new(b"0".to_vec())).await.unwrap();
    next(&mut events, |e| {
        matches!(e, Event::LinkDown { .. }).then_some(())
    })
    .await;
    for i in 1..=4u8 {
        tokio::time::sleep(Duration::from_secs(600)).await;
        outbox
            .enqueue(NewRecord::new(vec![b'0' + i]))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1_200)).await;
    let back = clock.now();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let (_, server) = Server::serve(listener, clock, |_, _| StatusCode::CREATED.into_response());
    let mut delivered = 0;
    let wait = async {
        while delivered < 5 {
            if let Event::Delivered { .. } = events.recv().await.unwrap() {
                delivered += 1;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3_600), wait)
        .await
        .expect("all five delivered within the hour after the server is back");
    let seen: Vec<Millis> = server.seen().iter().map(|s| s.at).collect();
    assert_eq!(seen.len(), 5, "one request each: {seen:?}");
    // The first request the server sees is the probe, within the 15 min backoff cap.
    let probe = seen[0];
    assert!(probe >= back && probe <= back + 900_000, "{seen:?}");
    // The other four wait a random part of the hour without an answer (at most 5 min), and
    // then go together: not in the probe's instant, not later than the spread allows.
    let rest = &seen[1..];
    assert!(
        rest.iter().all(|t| *t > probe && *t <= probe + 300_000),
        "probe at +{} ms, the rest at {:?}",
        probe - back,
        rest.iter().map(|t| t - probe).collect::<Vec<_>>()
    );
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}
