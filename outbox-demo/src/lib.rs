//! The `outbox` demo: a thousand writes delivered through a real local HTTP server that
//! misbehaves the way real servers do, on the embedded SQLite store.
//!
//! Run it with `cargo run -p outbox-demo` (add `-- --crash` to see the delivering process
//! killed with SIGKILL and resumed from the same file). [`run`] is the whole demo; the tests
//! call it with [`Options::fast`].
#![deny(missing_docs)]

mod crash;
pub mod device;
pub mod server;

/// The repository README, compiled here so its example cannot rot.
#[doc = include_str!("../../README.md")]
pub mod readme {}

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    Backoff, Event, ListQuery, NewRecord, Outbox, Record, RetryPolicy, RunnerConfig, State, Stats,
    Store,
};
use outbox_http::{HttpSink, Token};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use tokio::sync::watch;

pub use crash::deliver;
pub use server::{Script, Server, FIRST_TOKEN};

/// Boxed errors: the demo reports them and exits non-zero.
pub type DemoError = Box<dyn std::error::Error + Send + Sync>;

/// How the demo runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Writes to enqueue.
    pub records: usize,
    /// Ordering groups they are spread over.
    pub groups: usize,
    /// Short timings and fewer phases' worth of requests (for tests).
    pub fast: bool,
    /// Kill the delivering child process mid-drain and restart it on the same file.
    pub crash: bool,
    /// The SQLite file; a fresh temporary one when `None`.
    pub file: Option<PathBuf>,
    /// Print nothing while running (the verdict is still returned).
    pub quiet: bool,
}

impl Options {
    /// The full demo: about a thousand writes in eight groups.
    pub fn full() -> Self {
        Options {
            records: 1_000,
            groups: 8,
            fast: false,
            crash: false,
            file: None,
            quiet: false,
        }
    }

    /// A short run for tests.
    pub fn fast() -> Self {
        Options {
            records: 120,
            groups: 4,
            fast: true,
            crash: false,
            file: None,
            quiet: true,
        }
    }
}

/// Timings derived from [`Options::fast`].
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    fast: bool,
}

impl Timings {
    /// The timings for a full or a fast run.
    pub fn new(fast: bool) -> Self {
        Timings { fast }
    }

    fn scale(self, full: u64, fast: u64) -> Duration {
        Duration::from_millis(if self.fast { fast } else { full })
    }

    /// The retry policy: short delays so the demo finishes in seconds.
    pub fn policy(self) -> RetryPolicy {
        RetryPolicy::default().with_backoff(Backoff::exponential(
            self.scale(200, 20),
            2.0,
            self.scale(2_000, 200),
        ))
    }

    /// The runner's settings: short leases so a killed child's records come back quickly.
    pub fn runner(self) -> RunnerConfig {
        RunnerConfig {
            lease: self.scale(2_000, 600),
            safety_poll: Some(self.scale(1_000, 200)),
            ..RunnerConfig::default()
        }
    }

    /// The per-request timeout of the HTTP sink.
    pub fn request_timeout(self) -> Duration {
        self.scale(800, 300)
    }

    /// The server's script.
    pub fn script(self) -> Script {
        let (unavailable, throttled, expire_at, lost) = if self.fast {
            (10, 3, 60, 30..32)
        } else {
            (40, 8, 400, 200..203)
        };
        Script {
            unavailable,
            throttled,
            expire_at,
            lost_answers: lost,
            hang: self.request_timeout() * 2,
        }
    }

    fn deadline(self) -> Duration {
        self.scale(120_000, 60_000)
    }
}

/// How the run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Records the store counted delivered.
    pub delivered: u64,
    /// Records the server refused for good.
    pub rejected: u64,
    /// Enqueued writes neither at the server nor in the queue.
    pub lost: u64,
    /// Deliveries the server recognised by key and dropped.
    pub duplicates: u64,
}

impl Verdict {
    /// The one-line verdict.
    pub fn line(&self) -> String {
        format!(
            "{} delivered · {} rejected · {} lost · {} duplicates suppressed by the server",
            self.delivered, self.rejected, self.lost, self.duplicates
        )
    }
}

/// Prints progress: a live line on a terminal, plain lines otherwise.
#[derive(Clone, Debug)]
struct Screen {
    quiet: bool,
    live: bool,
}

impl Screen {
    fn new(quiet: bool) -> Self {
        Screen {
            quiet,
            live: std::io::stdout().is_terminal(),
        }
    }

    #[allow(clippy::print_stdout)] // the demo's job is to print
    fn say(&self, text: &str) {
        if self.quiet {
            return;
        }
        if self.live {
            print!("\r\x1b[2K");
        }
        println!("{text}");
    }

    #[allow(clippy::print_stdout)]
    fn status(&self, text: &str) {
        if self.quiet {
            return;
        }
        if self.live {
            print!("\r\x1b[2K{text}");
            let _ = std::io::stdout().flush();
        } else {
            println!("{text}");
        }
    }
}

fn status_line(stats: &Stats, server: &Server, link: &str) -> String {
    let (requests, dup) = server.with_counts(|c| (c.requests, c.duplicates));
    format!(
        "pending {:>4} · retrying {:>3} · in-flight {:>2} · needs-attention {} · rejected {} · delivered {:>4} | link {link} | server requests {requests}, duplicates {dup}",
        stats.pending, stats.retrying, stats.in_flight, stats.needs_attention, stats.rejected, stats.delivered
    )
}

fn payload(n: usize, poison: bool) -> Vec<u8> {
    if poison {
        format!("{{\"n\":{n},\"title\":null,\"poison\":true}}").into_bytes()
    } else {
        format!("{{\"n\":{n},\"title\":\"note {n}\"}}").into_bytes()
    }
}

/// The writes of a run: one, three quarters in, is the one the server always refuses.
fn writes(options: &Options) -> Vec<NewRecord> {
    let poison = options.records * 3 / 4;
    (0..options.records)
        .map(|n| {
            NewRecord::new(payload(n, n == poison)).in_group(format!("doc-{}", n % options.groups))
        })
        .collect()
}

fn free_port() -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()
}

async fn create_or_open(path: &Path) -> Result<SqliteStore, DemoError> {
    if path.exists() {
        Ok(SqliteStore::open(path, SqliteConfig::default()).await?)
    } else {
        Ok(SqliteStore::create(path, SqliteConfig::default()).await?)
    }
}

fn temp_file() -> PathBuf {
    std::env::temp_dir().join(format!(
        "outbox-demo-{}-{:x}.db",
        std::process::id(),
        outbox_core::fastrand::u32(..)
    ))
}

/// Starts an outbox over `store` delivering to `base`, which logs in again and resumes when a
/// credential is refused.
async fn start_outbox(
    store: Arc<dyn Store>,
    base: &str,
    timings: Timings,
    online: Option<watch::Receiver<bool>>,
) -> Result<Arc<Outbox>, DemoError> {
    // The sink reads the token for every request; the app replaces it after a 401.
    let token = Token::bearer(FIRST_TOKEN);
    let sink = HttpSink::post(&format!("{base}/writes"))?
        .timeout(timings.request_timeout())
        .credentials(token.clone());
    let mut builder = Outbox::builder(store, sink)
        .policy(timings.policy())
        .config(timings.runner());
    if let Some(online) = online {
        builder = builder.connectivity(online);
    }
    // Subscribed before the start, so nothing the runner says as it starts goes by.
    let mut events = builder.events();
    let outbox = Arc::new(builder.start().await?);
    let handle = Arc::clone(&outbox);
    let login = format!("{base}/login");
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        loop {
            match events.recv().await {
                Ok(Event::Halted { .. }) => {
                    // What an app does on a 401: log in again, store the new token, resume.
                    let fresh = match client.post(&login).send().await {
                        Ok(response) if response.status().is_success() => {
                            response.text().await.ok()
                        }
                        _ => None,
                    };
                    if let Some(fresh) = fresh {
                        token.set_bearer(fresh.trim());
                        handle.resume();
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
        }
    });
    Ok(outbox)
}

/// Waits, showing progress, until nothing is owed a delivery any more.
async fn until_done(
    store: &dyn Store,
    server: &Server,
    screen: &Screen,
    link: &str,
    deadline: Duration,
) -> Result<Stats, DemoError> {
    let tick = if screen.live {
        Duration::from_millis(100)
    } else {
        Duration::from_millis(500)
    };
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        let stats = store.stats().await?;
        screen.status(&status_line(&stats, server, link));
        if stats.undelivered() == 0 {
            return Ok(stats);
        }
        if tokio::time::Instant::now() > give_up {
            return Err(format!("not done after {deadline:?}: {stats:?}").into());
        }
        tokio::time::sleep(tick).await;
    }
}

/// Runs the whole demo and returns its verdict.
pub async fn run(options: Options) -> Result<Verdict, DemoError> {
    let timings = Timings::new(options.fast);
    let screen = Screen::new(options.quiet);
    let path = options.file.clone().unwrap_or_else(temp_file);
    let fresh = options.file.is_none();
    let store = Arc::new(create_or_open(&path).await?);
    let addr = free_port()?;
    let base = format!("http://{addr}");
    let server = Server::new(timings.script());
    let writes = writes(&options);
    let keys: Vec<String> = writes.iter().map(|w| w.key.clone()).collect();
    screen.say(&format!(
        "outbox demo · SQLite file {} · server {base}",
        path.display()
    ));

    let stats = if options.crash {
        crash::run(&options, timings, &screen, &store, &server, addr, writes).await?
    } else {
        // The device's own signal, as an app wires it, with the demo's simulated switch.
        let (os, os_signal) = device::os_signal();
        screen.say(&os_signal.describe());
        let (online, simulated) = watch::channel(true);
        let connectivity = device::both(os, simulated);
        let outbox =
            start_outbox(store.clone(), &base, timings, Some(connectivity.clone())).await?;
        let mut events = outbox.events();
        let third = writes.len() / 3;
        let mut writes = writes.into_iter();

        screen.say("phase 1 · server down (connection refused): the runner probes with one record on backoff");
        outbox
            .enqueue_batch(writes.by_ref().take(third).collect())
            .await?;
        wait_for(&mut events, |e| {
            matches!(e, Event::Retrying { spent: false, .. })
        })
        .await;

        screen.say("phase 2 · device offline: writes queue up, nothing is attempted");
        device::simulate(&online, &connectivity, false).await;
        outbox
            .enqueue_batch(writes.by_ref().take(third).collect())
            .await?;

        screen.say("phase 3 · server up and online: 503 burst, 429 with Retry-After, one write refused with 422, a 401 later");
        server.start(addr).await?;
        device::simulate(&online, &connectivity, true).await;
        let rest: Vec<NewRecord> = writes.collect();
        let slices: Vec<Vec<NewRecord>> = rest
            .chunks(rest.len().div_ceil(4).max(1))
            .map(<[NewRecord]>::to_vec)
            .collect();
        for (i, slice) in slices.into_iter().enumerate() {
            if i == 2 {
                screen.say("phase 4 · a connectivity blip: offline, a few writes, online again");
                device::simulate(&online, &connectivity, false).await;
                outbox.enqueue_batch(slice).await?;
                device::simulate(&online, &connectivity, true).await;
            } else {
                outbox.enqueue_batch(slice).await?;
            }
        }
        let stats = until_done(
            store.as_ref(),
            &server,
            &screen,
            "online",
            timings.deadline(),
        )
        .await?;
        drop(events);
        if let Ok(outbox) = Arc::try_unwrap(outbox) {
            outbox.shutdown(Duration::from_secs(5)).await?;
        }
        stats
    };

    let verdict = report(&screen, store.as_ref(), &server, &keys, &stats).await?;
    if fresh {
        drop(store);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    Ok(verdict)
}

async fn wait_for(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    what: impl Fn(&Event) -> bool,
) {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if what(&event) => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), wait).await;
}

/// Prints the final table and computes the verdict.
async fn report(
    screen: &Screen,
    store: &dyn Store,
    server: &Server,
    keys: &[String],
    stats: &Stats,
) -> Result<Verdict, DemoError> {
    let mut queued: Vec<Record> = Vec::new();
    let mut query = ListQuery::new(500);
    loop {
        let page = store.list(&query).await?;
        let Some(last) = page.last() else { break };
        query.after = Some(last.id);
        queued.extend(page);
    }
    let in_queue: HashSet<&str> = queued.iter().map(|r| r.key.as_str()).collect();
    let (lost, duplicates, spent, requests, refused, logins) = server.with_counts(|c| {
        let lost = keys
            .iter()
            .filter(|k| !c.accepted.contains(k.as_str()) && !in_queue.contains(k.as_str()))
            .count() as u64;
        let spent = c.later + c.rejected;
        (lost, c.duplicates, spent, c.requests, c.refused, c.logins)
    });
    screen.say("");
    screen.say("state            records");
    for state in State::ALL {
        screen.say(&format!("{:<16} {:>7}", state.as_str(), stats.count(state)));
    }
    screen.say(&format!("{:<16} {:>7}", "discarded", stats.discarded));
    screen.say(&format!("{:<16} {:>7}", "delivered", stats.delivered));
    screen.say(&format!(
        "attempts spent on answered failures: {spent} · server requests: {requests} · \
         credential refused {refused} time(s), new token fetched {logins} time(s)"
    ));
    for record in queued.iter().filter(|r| r.state != State::Pending) {
        screen.say(&format!(
            "{} {} {} after {} attempt(s): {}",
            record.state,
            record.id,
            record.group.as_deref().unwrap_or("-"),
            record.attempts,
            record.last_error.as_deref().unwrap_or("")
        ));
    }
    let verdict = Verdict {
        delivered: stats.delivered,
        rejected: stats.rejected,
        lost,
        duplicates,
    };
    screen.say(&verdict.line());
    Ok(verdict)
}

/// Sends the runner's warnings (park, reject, halt, discard) to stderr; with `RUST_LOG` set
/// (for example `RUST_LOG=outbox=debug`), what it selects instead, with each span printed as it
/// closes: `outbox.round` per round and `outbox.deliver` per delivery, with the record, its
/// group, its attempts, the outcome and how long the sink took.
pub fn show_warnings() {
    show_logs(std::env::var("RUST_LOG").ok().as_deref());
}

/// [`show_warnings`] with the filter given (`None`: warnings only). A filter that does not
/// parse is reported on stderr and warnings are shown.
pub fn show_logs(filter: Option<&str>) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::prelude::*;

    let warnings = Targets::new().with_default(LevelFilter::WARN);
    let (targets, spans) = match filter.map(str::parse::<Targets>) {
        None => (warnings, FmtSpan::NONE),
        Some(Ok(targets)) => (targets, FmtSpan::CLOSE),
        Some(Err(err)) => {
            eprintln!("outbox-demo: RUST_LOG: {err}; showing warnings only");
            (warnings, FmtSpan::NONE)
        }
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_span_events(spans);
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(targets))
        .try_init();
}
