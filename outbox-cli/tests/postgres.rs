//! The binary on a PostgreSQL schema, when a server answers at `OUTBOX_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Without one the test says so and skips, except
//! with `OUTBOX_PG_REQUIRED=1` (CI), where it fails.
#![cfg(feature = "postgres")]

mod support;

use std::time::Duration;

use outbox_postgres::{PgConfig, PgStore};

fn url() -> String {
    std::env::var("OUTBOX_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A client to the server, or `None` (said loudly) when none answers and it is not required.
async fn server() -> Option<tokio_postgres::Client> {
    let config: tokio_postgres::Config = url().parse().expect("OUTBOX_PG_URL");
    let connect = config.connect(tokio_postgres::NoTls);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok((client, connection))) => {
            tokio::spawn(connection);
            Some(client)
        }
        failed => {
            let why = match failed {
                Ok(Err(err)) => err.to_string(),
                _ => "no answer within 5 s".to_owned(),
            };
            assert!(
                std::env::var("OUTBOX_PG_REQUIRED").as_deref() != Ok("1"),
                "OUTBOX_PG_REQUIRED=1 but no PostgreSQL server answers: {why}"
            );
            // Straight to the stderr handle: the harness captures `eprintln!`.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("\n*** SKIPPED: no PostgreSQL server answers ({why}) ***\n").as_bytes(),
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_and_repairs_a_postgres_outbox() {
    let Some(client) = server().await else { return };
    let schema = format!("outbox_cli_test_{}", std::process::id());
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
    let url = url();

    // A read of a schema that does not exist says so, and creates nothing.
    let (code, err) = support::fails(&["stats", &url, "--schema", &schema]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        format!("error: no outbox at schema {schema} at {url}")
    );
    let created = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .unwrap();
    assert!(created.is_none(), "a read created the schema");

    let store = PgStore::connect(PgConfig::new(&url, &schema))
        .await
        .unwrap();
    support::seed(&store).await;
    let stats = support::ok(&["stats", &url, "--schema", &schema]);
    golden!("stats", stats);
    let list = support::ok(&["list", &url, "--schema", &schema, "--json"]);
    golden!("list_json", list);
    let show = support::ok(&["show", &url, "--schema", &schema, "3", "--json"]);
    golden!("show_json", show);
    assert_eq!(
        support::ok(&["retry", &url, "--schema", &schema, "9"]),
        "retried #9: due now with a fresh budget\n"
    );
    let nine = outbox_core::Store::get(&store, outbox_core::RecordId(9))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(nine.state, outbox_core::State::Pending);
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
