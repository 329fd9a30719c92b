//! The `--crash` run: this process enqueues and serves; a child process (this binary with
//! `--deliver`) delivers, is killed with SIGKILL mid-drain, and is started again on the same
//! file, which resumes the persisted schedule.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{ListQuery, NewRecord, State, Stats, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};

use crate::{start_outbox, status_line, until_done, DemoError, Options, Screen, Server, Timings};

/// The `--crash` run: this process enqueues and serves; a child process delivers, is killed
/// with SIGKILL mid-drain, and is started again on the same file.
pub(crate) async fn run(
    options: &Options,
    timings: Timings,
    screen: &Screen,
    store: &Arc<SqliteStore>,
    server: &Server,
    addr: SocketAddr,
    writes: Vec<NewRecord>,
) -> Result<Stats, DemoError> {
    let total = writes.len() as u64;
    store
        .enqueue(writes, outbox_core::clock::system_now())
        .await?;
    server.start(addr).await?;
    let child = || -> Result<tokio::process::Child, DemoError> {
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        cmd.arg("--deliver")
            .arg(store.path())
            .arg(format!("http://{addr}"))
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        if options.fast {
            cmd.arg("--fast");
        }
        Ok(cmd.spawn()?)
    };
    screen.say(&format!(
        "crash demo · {total} writes enqueued; starting the delivering child process"
    ));
    let mut first = child()?;
    let give_up = tokio::time::Instant::now() + timings.deadline();
    loop {
        let stats = store.stats().await?;
        screen.status(&status_line(&stats, server, "child #1"));
        // Kill it while some records wait on a backoff, so their schedule can be checked.
        if stats.delivered >= 5 && stats.retrying > 0 || stats.delivered >= total / 2 {
            break;
        }
        if tokio::time::Instant::now() > give_up {
            return Err("the child delivered nothing".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().await?;
    let before = schedule(store.as_ref()).await?;
    let stats = store.stats().await?;
    screen.say(&format!(
        "SIGKILL · child #1 killed mid-drain with {} delivered, {} in flight (their leases will expire), {} retrying",
        stats.delivered, stats.in_flight, stats.retrying
    ));
    for line in &before {
        screen.say(&format!("  before restart: {line}"));
    }
    screen.say("restarting the child on the same file: it recovers expired leases and resumes the schedule");
    let mut second = child()?;
    // The new process starts from the persisted schedule: the same attempts and deadlines.
    let after = schedule(store.as_ref()).await?;
    for line in &before {
        let kept = if after.contains(line) {
            "kept"
        } else {
            "moved on (delivered or due)"
        };
        screen.say(&format!("  after restart:  {line}  [{kept}]"));
    }
    let stats = until_done(
        store.as_ref(),
        server,
        screen,
        "child #2",
        timings.deadline(),
    )
    .await?;
    let status = second.wait().await?;
    if !status.success() {
        return Err(format!("the second child ended with {status}").into());
    }
    Ok(stats)
}

/// The schedule of the retrying records, one line each.
async fn schedule(store: &dyn Store) -> Result<Vec<String>, DemoError> {
    let page = store
        .list(&ListQuery::new(5).state(State::Retrying))
        .await?;
    Ok(page
        .iter()
        .map(|r| {
            format!(
                "{} {:<6} attempts {} unanswered {} next attempt at {}",
                r.id,
                r.group.as_deref().unwrap_or("-"),
                r.attempts,
                r.unanswered,
                r.next_attempt_at.map_or("never".into(), clock_time)
            )
        })
        .collect())
}

/// A wall-clock time in milliseconds as `HH:MM:SS.mmm` (UTC).
fn clock_time(ms: u64) -> String {
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1_000 % 60,
        day_ms % 1_000
    )
}

/// The delivering child of `--crash`: delivers until nothing is owed, then exits.
pub async fn deliver(path: &Path, base: &str, fast: bool) -> Result<(), DemoError> {
    let timings = Timings::new(fast);
    let store = Arc::new(SqliteStore::open(path, SqliteConfig::default()).await?);
    let outbox = start_outbox(store.clone(), base, timings, None).await?;
    let give_up = tokio::time::Instant::now() + timings.deadline();
    loop {
        if store.stats().await?.undelivered() == 0 {
            break;
        }
        if tokio::time::Instant::now() > give_up {
            return Err("not done in time".into());
        }
        let _ = outbox.flush(Duration::from_millis(200)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Ok(outbox) = Arc::try_unwrap(outbox) {
        outbox.shutdown(Duration::from_secs(5)).await?;
    }
    Ok(())
}
