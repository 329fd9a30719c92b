//! The transactional outbox: an axum service whose `POST /orders` handler writes the order
//! row and its outbox record in **one SQLite transaction**, so the order and the event that
//! announces it are stored together or not at all. The runner then delivers the records to a
//! downstream HTTP service with [`HttpSink`].
//!
//! The app and the outbox share one file: the store creates it
//! ([`SqliteStore::create`]), the app opens its own `rusqlite` connection on it, adds its
//! `orders` table, and enqueues with [`SqliteStore::enqueue_pending`] inside its own immediate
//! transaction; `PendingEnqueue::commit` commits it and wakes the runner.
//!
//! Run it with `cargo run --example transactional_outbox`. It posts four orders to itself
//! (one is refused after both writes, and rolls back with its record), waits until the
//! records are delivered and checks that every stored order was delivered exactly once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use outbox_core::{NewRecord, Outbox, Store};
use outbox_http::HttpSink;
use outbox_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::{params, Connection, TransactionBehavior};

use crate::downstream::Downstream;
use crate::{Log, Result};

/// The orders the example posts: item and quantity. A quantity of zero is refused.
pub const ORDERS: [(&str, i64); 4] = [("book", 1), ("lamp", 2), ("chair", 0), ("desk", 1)];

/// The application's state: its own connection to the file, the store, the running outbox.
struct App {
    db: Mutex<Connection>,
    store: Arc<SqliteStore>,
    outbox: Arc<Outbox>,
}

/// Why an order was not placed.
enum Refused {
    /// The order itself is wrong: 422.
    Invalid(String),
    /// The database failed: 500.
    Failed(String),
}

/// The idempotency key of an order's "placed" record: stable, so the downstream service can
/// drop a repeated delivery.
fn record_key(order: i64) -> String {
    format!("order-{order}-placed")
}

/// Writes the order and its outbox record in one immediate transaction. The check runs after
/// both writes, to show that a refusal rolls back the record with the row.
fn place_order(app: &App, item: &str, quantity: i64) -> std::result::Result<i64, Refused> {
    let failed = |err: &dyn std::fmt::Display| Refused::Failed(err.to_string());
    let mut db = app
        .db
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tx = db
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| failed(&e))?;
    tx.execute(
        "INSERT INTO orders (item, quantity) VALUES (?1, ?2)",
        params![item, quantity],
    )
    .map_err(|e| failed(&e))?;
    let id = tx.last_insert_rowid();
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
        .enqueue_pending(&tx, vec![record], app.outbox.now())
        .map_err(|e| failed(&e))?;
    if quantity <= 0 {
        // Dropping the transaction rolls back the order row and its outbox record together.
        return Err(Refused::Invalid(format!(
            "quantity must be positive, got {quantity}"
        )));
    }
    // Commits the order and its record together, then tells the runner (and the event
    // stream) of the record: no separate wake-up to forget.
    pending.commit(tx, &app.outbox).map_err(|e| failed(&e))?;
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
    let item = item.to_owned();
    let writer = Arc::clone(&app);
    // SQLite calls block: keep them off the async workers.
    let placed = tokio::task::spawn_blocking(move || place_order(&writer, &item, quantity)).await;
    match placed {
        Ok(Ok(id)) => (StatusCode::CREATED, format!("{{\"id\":{id}}}")),
        Ok(Err(Refused::Invalid(why))) => (StatusCode::UNPROCESSABLE_ENTITY, why),
        Ok(Err(Refused::Failed(why))) => (StatusCode::INTERNAL_SERVER_ERROR, why),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

/// Runs the example and returns its final line, `3 orders, 3 delivered, 0 lost`.
pub async fn run(log: Log) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shop.db");

    // The store makes the file an outbox; the app's tables live in the same file.
    let store = Arc::new(SqliteStore::create(&path, SqliteConfig::default()).await?);
    let db = Connection::open(&path)?;
    db.busy_timeout(Duration::from_secs(5))?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS orders (
             id INTEGER PRIMARY KEY,
             item TEXT NOT NULL,
             quantity INTEGER NOT NULL
         )",
    )?;

    let downstream = Downstream::accepting().await?;
    let sink = HttpSink::post(&downstream.url())?.timeout(Duration::from_secs(5));
    let shared: Arc<dyn Store> = store.clone();
    let outbox = Arc::new(Outbox::builder(shared, sink).start().await?);
    let app = Arc::new(App {
        db: Mutex::new(db),
        store,
        outbox: Arc::clone(&outbox),
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

    outbox.flush(Duration::from_secs(20)).await?;
    let stats = outbox.stats().await?;
    log.line(format!(
        "outbox: {} delivered, {} pending, {} retrying",
        stats.delivered, stats.pending, stats.retrying
    ));

    // Every stored order must have exactly one accepted delivery, and nothing else may have
    // gone out (the refused order's record rolled back with its row).
    let orders: Vec<i64> = {
        let db = app
            .db
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut query = db.prepare("SELECT id FROM orders ORDER BY id")?;
        let ids = query
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        ids
    };
    let accepted = downstream.accepted_by_key();
    let mut delivered = 0;
    let mut lost = 0;
    for &order in &orders {
        match accepted.get(&record_key(order)).copied().unwrap_or(0) {
            0 => lost += 1,
            1 => delivered += 1,
            n => return Err(format!("order {order} was delivered {n} times").into()),
        }
    }
    if accepted.len() != orders.len() {
        return Err(format!(
            "{} records delivered for {} orders",
            accepted.len(),
            orders.len()
        )
        .into());
    }

    outbox.shutdown(Duration::from_secs(5)).await?;
    server.abort();
    Ok(format!(
        "{} orders, {delivered} delivered, {lost} lost",
        orders.len()
    ))
}
