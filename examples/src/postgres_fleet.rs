//! A fleet: three runners, each with its own [`PgStore`] (its own connection pool, as three
//! processes or hosts would have), sharing one PostgreSQL schema. They claim disjoint records
//! with `SKIP LOCKED`, every enqueue wakes all of them through `LISTEN/NOTIFY`
//! ([`PgStore::wake_on_enqueue`]), and each runner judges leases and deadlines by the
//! server's clock, which the store names to the plain builder, so leases mean the same
//! everywhere with nothing wired.
//!
//! Run it with `cargo run --example postgres_fleet`. It delivers 300 records to one local
//! HTTP service that notes which runner sent each request, checks that every record arrived
//! exactly once, and ends with `300 records, 3 runners, each delivered once`.
//!
//! The server is `OUTBOX_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`); the
//! example works in a fresh schema and drops it at the end. Without a reachable server it
//! prints `skipped: no PostgreSQL at ...` and exits successfully.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{Event, NewRecord, Outbox, RunnerConfig, Store};
use outbox_http::HttpSink;
use outbox_postgres::{PgConfig, PgStore};

use crate::downstream::{Downstream, RUNNER_HEADER};
use crate::{Log, Result};

/// The variable naming the server.
pub const URL_ENV: &str = "OUTBOX_PG_URL";
/// The server used when [`URL_ENV`] is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Records the fleet delivers.
pub const RECORDS: usize = 300;
/// Runners in the fleet.
pub const RUNNERS: usize = 3;
/// The start of the line printed when no server answers.
pub const SKIPPED: &str = "skipped: no PostgreSQL at";

/// The server URL from the environment, or the default.
pub fn url() -> String {
    std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Connects once to see whether a server answers; the error says why not.
pub(crate) async fn probe(url: &str) -> std::result::Result<tokio_postgres::Client, String> {
    let config: tokio_postgres::Config = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    match tokio::time::timeout(
        Duration::from_secs(5),
        config.connect(tokio_postgres::NoTls),
    )
    .await
    {
        Ok(Ok((client, connection))) => {
            tokio::spawn(connection);
            Ok(client)
        }
        Ok(Err(err)) => {
            let mut why = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                why = format!("{why}: {cause}");
                source = cause.source();
            }
            Err(why)
        }
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// Runs the example on the server at [`url`] and returns its final line, `300 records,
/// 3 runners, each delivered once`, or `skipped: no PostgreSQL at URL (why)` when no server
/// answers.
pub async fn run(log: Log) -> Result<String> {
    run_at(log, &url()).await
}

/// [`run`] on the server at `url`.
pub async fn run_at(log: Log, url: &str) -> Result<String> {
    let admin = match probe(url).await {
        Ok(client) => client,
        Err(why) => return Ok(format!("{SKIPPED} {url} ({why})")),
    };
    let schema = format!(
        "outbox_example_{}_{:08x}",
        outbox_core::clock::system_now() / 1000,
        fastrand::u32(..)
    );
    log.line(format!("schema {schema} on {url}"));
    let result = fleet(&log, url, &schema).await;
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await?;
    result
}

async fn fleet(log: &Log, url: &str, schema: &str) -> Result<String> {
    let downstream = Downstream::accepting().await?;
    let mut runners = Vec::new();
    let mut wakeups = Vec::new();
    for n in 1..=RUNNERS {
        // One store per runner, as separate processes would have; all on the same schema.
        let store = PgStore::connect(
            PgConfig::new(url, schema)
                .with_pool_size(2)
                .with_application_name(format!("outbox-example-runner-{n}")),
        )
        .await?;
        let sink = HttpSink::post(&downstream.url())?
            .timeout(Duration::from_secs(5))
            .header(RUNNER_HEADER, &n.to_string())?;
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let outbox = Outbox::builder(shared, sink)
            .config(RunnerConfig::default().with_batch(10))
            .start()
            .await?;
        wakeups.push(store.wake_on_enqueue(outbox.notifier()).await?);
        runners.push(outbox);
    }
    log.line(format!("{RUNNERS} runners started"));
    let (delivered_tx, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
    for runner in &runners {
        let mut events = runner.events();
        let delivered_tx = delivered_tx.clone();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if matches!(event, Event::Delivered { .. }) && delivered_tx.send(()).is_err() {
                    break;
                }
            }
        });
    }
    drop(delivered_tx);

    // Each runner enqueues a third; whichever runner is free delivers.
    for (n, runner) in runners.iter().enumerate() {
        let batch = (0..RECORDS / RUNNERS)
            .map(|i| {
                let record = n * (RECORDS / RUNNERS) + i;
                let payload = serde_json::json!({ "record": record }).to_string();
                NewRecord::new(payload).with_key(format!("record-{record}"))
            })
            .collect();
        runner.enqueue_batch(batch).await?;
    }
    log.line(format!("{RECORDS} records enqueued"));

    // Every runner tells of its deliveries; the fleet is done when they add up.
    let wait = async {
        let mut delivered = 0;
        while delivered < RECORDS {
            match deliveries.recv().await {
                Some(()) => delivered += 1,
                None => break,
            }
        }
        delivered
    };
    let Ok(delivered) = tokio::time::timeout(Duration::from_secs(60), wait).await else {
        let stats = runners[0].stats().await?;
        return Err(format!("not delivered within 60 s: {stats:?}").into());
    };
    if delivered < RECORDS {
        return Err(format!("the runners stopped after {delivered} deliveries").into());
    }
    for runner in &runners {
        runner.flush(Duration::from_secs(10)).await?;
    }

    let requests = downstream.requests();
    let mut per_runner = BTreeMap::new();
    for request in requests.iter().filter(|r| r.accepted()) {
        let runner = request.runner.clone().unwrap_or_default();
        *per_runner.entry(runner).or_insert(0usize) += 1;
    }
    for (runner, count) in &per_runner {
        log.line(format!("runner {runner} delivered {count}"));
    }
    let accepted = downstream.accepted_by_key();
    if let Some((key, n)) = accepted.iter().find(|(_, &n)| n != 1) {
        return Err(format!("{key} was delivered {n} times").into());
    }
    if accepted.len() != RECORDS {
        return Err(format!("{} of {RECORDS} records delivered", accepted.len()).into());
    }

    drop(wakeups);
    for runner in &runners {
        runner.shutdown(Duration::from_secs(5)).await?;
    }
    Ok(format!(
        "{RECORDS} records, {RUNNERS} runners, each delivered once"
    ))
}
