//! The transactional outbox on sqlx and PostgreSQL: an axum service whose `POST /orders`
//! handler inserts the order row and enqueues its outbox record in **one sqlx transaction**
//! ([`PgStore::enqueue_sqlx`]), then commits it with the pending enqueue, which wakes the
//! runner: the runner has no safety poll here, so every delivery it makes was woken by a
//! commit. The runner delivers the records to a local downstream HTTP service.
//!
//! Run it with `cargo run --example sqlx_orders`. It posts four orders to itself (one is
//! refused after both writes, and rolls back with its record), waits until the records are
//! delivered and checks that every stored order was delivered exactly once, ending with
//! `3 orders, 3 delivered, 0 lost`.
//!
//! The server is `OUTBOX_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`); the
//! example works in a fresh schema and drops it at the end. Without a reachable server it
//! prints `skipped: no PostgreSQL at ...` and exits successfully.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use outbox_core::{NewRecord, Outbox, RunnerConfig, Store};
use outbox_http::HttpSink;
use outbox_postgres::{PgConfig, PgStore};
use sqlx::{AssertSqlSafe, PgPool, Row};

use crate::downstream::Downstream;
use crate::postgres_fleet::{probe, url, SKIPPED};
use crate::{Log, Result};

/// The orders the example posts: item and quantity. A quantity of zero is refused.
pub const ORDERS: [(&str, i64); 4] = [("book", 1), ("lamp", 2), ("chair", 0), ("desk", 1)];

/// The application's state: its sqlx pool, the orders table's name, the store, the runner.
struct App {
    pool: PgPool,
    orders: String,
    store: PgStore,
    outbox: Outbox,
}

/// The idempotency key of an order's "placed" record: stable, so the downstream service can
/// drop a repeated delivery.
fn record_key(order: i64) -> String {
    format!("order-{order}-placed")
}

/// Writes the order and its outbox record in one transaction. The check runs after both
/// writes, to show that a refusal rolls back the record with the row.
async fn place_order(app: &App, item: &str, quantity: i64) -> std::result::Result<i64, String> {
    let mut tx = app.pool.begin().await.map_err(|e| e.to_string())?;
    let insert = format!(
        "INSERT INTO {} (item, quantity) VALUES ($1, $2) RETURNING id",
        app.orders
    );
    let id: i64 = sqlx::query(AssertSqlSafe(insert))
        .bind(item)
        .bind(quantity)
        .fetch_one(&mut *tx)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| e.to_string())?;
    let payload = serde_json::json!({
        "event": "order-placed",
        "order": id,
        "item": item,
        "quantity": quantity,
    });
    let record = NewRecord::new(payload.to_string())
        .in_group(format!("order-{id}"))
        .with_key(record_key(id));
    let pending = app
        .store
        .enqueue_sqlx(&mut tx, vec![record], app.outbox.now())
        .await
        .map_err(|e| e.to_string())?;
    if quantity <= 0 {
        // Dropping the transaction rolls back the order row and its outbox record together.
        return Err(format!("quantity must be positive, got {quantity}"));
    }
    // Commits the order and its record together, then wakes the runner: no `notify()`.
    pending
        .commit(tx, &app.outbox)
        .await
        .map_err(|e| e.to_string())?;
    Ok(id)
}

/// `POST /orders` with `{"item": "...", "quantity": N}`.
async fn create_order(State(app): State<Arc<App>>, body: Bytes) -> (StatusCode, String) {
    let order: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(order) => order,
        Err(err) => return (StatusCode::BAD_REQUEST, err.to_string()),
    };
    let (Some(item), Some(quantity)) = (order["item"].as_str(), order["quantity"].as_i64()) else {
        return (StatusCode::BAD_REQUEST, "item and quantity needed".into());
    };
    match place_order(&app, item, quantity).await {
        Ok(id) => (StatusCode::CREATED, format!("{{\"id\":{id}}}")),
        Err(why) if quantity <= 0 => (StatusCode::UNPROCESSABLE_ENTITY, why),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, why),
    }
}

/// Runs the example on the server at [`url`] and returns its final line, `3 orders,
/// 3 delivered, 0 lost`, or `skipped: no PostgreSQL at URL (why)` when no server answers.
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
    let result = shop(&log, url, &schema).await;
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await?;
    result
}

async fn shop(log: &Log, url: &str, schema: &str) -> Result<String> {
    // The store creates the outbox's schema; the app keeps its orders table beside it.
    let store = PgStore::connect(PgConfig::new(url, schema).with_pool_size(2)).await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await?;
    let orders = format!("\"{schema}\".orders");
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {orders} (id bigserial PRIMARY KEY, item text NOT NULL, \
         quantity bigint NOT NULL)"
    )))
    .execute(&pool)
    .await?;

    let downstream = Downstream::accepting().await?;
    let sink = HttpSink::post(&downstream.url())?.timeout(Duration::from_secs(5));
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // No safety poll: only the commits wake this runner.
    let outbox = Outbox::builder(shared, sink)
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await?;
    let app = Arc::new(App {
        pool: pool.clone(),
        orders: orders.clone(),
        store,
        outbox,
    });

    let router = Router::new()
        .route("/orders", post(create_order))
        .with_state(Arc::clone(&app));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    log.line(format!(
        "shop on http://{addr}, downstream on {}",
        downstream.url()
    ));

    let client = reqwest::Client::new();
    for (item, quantity) in ORDERS {
        let body = serde_json::json!({ "item": item, "quantity": quantity }).to_string();
        let response = client
            .post(format!("http://{addr}/orders"))
            .body(body.clone())
            .send()
            .await?;
        let status = response.status().as_u16();
        let answer = response.text().await?;
        log.line(format!("POST /orders {body} -> {status} {answer}"));
    }

    app.outbox.flush(Duration::from_secs(20)).await?;
    let stats = app.outbox.stats().await?;
    log.line(format!(
        "outbox: {} delivered, {} pending, {} retrying",
        stats.delivered, stats.pending, stats.retrying
    ));

    // Every stored order must have exactly one accepted delivery, and nothing else may have
    // gone out (the refused order's record rolled back with its row).
    let ids: Vec<i64> = sqlx::query(AssertSqlSafe(format!(
        "SELECT id FROM {orders} ORDER BY id"
    )))
    .fetch_all(&pool)
    .await?
    .iter()
    .map(|row| row.try_get(0))
    .collect::<std::result::Result<_, _>>()?;
    let accepted = downstream.accepted_by_key();
    let mut delivered = 0;
    let mut lost = 0;
    for &order in &ids {
        match accepted.get(&record_key(order)).copied().unwrap_or(0) {
            0 => lost += 1,
            1 => delivered += 1,
            n => return Err(format!("order {order} was delivered {n} times").into()),
        }
    }
    if accepted.len() != ids.len() {
        return Err(format!(
            "{} records delivered for {} orders",
            accepted.len(),
            ids.len()
        )
        .into());
    }

    app.outbox.shutdown(Duration::from_secs(5)).await?;
    server.abort();
    pool.close().await;
    Ok(format!(
        "{} orders, {delivered} delivered, {lost} lost",
        ids.len()
    ))
}
