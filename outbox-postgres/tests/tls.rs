//! TLS with rustls against the local server, when it offers TLS with a certificate this test
//! can read (a server on the same host): the store's pool and its listener connect encrypted
//! and verify the server; without the server's certificate among its roots the store refuses
//! the server.

mod common;

use std::io::Write;

use common::{admin, fresh_schema, server_ready};
use outbox_core::{NewRecord, Store};
use outbox_postgres::{PgConfig, PgStore, Tls};

/// Says loudly why the TLS test cannot run here.
fn skip(why: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: TLS against the test server: {why}. ***\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_connects_over_tls_and_verifies_the_server() {
    if !server_ready() {
        return;
    }
    let client = admin().await;
    let setting = |name: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    if setting("ssl").await != "on" {
        return skip("the server has ssl = off");
    }
    let cert_file = setting("ssl_cert_file").await;
    let Ok(pem) = std::fs::read(&cert_file) else {
        return skip(&format!(
            "the server's certificate {cert_file} is not readable here"
        ));
    };
    let target: tokio_postgres::Config = common::url().parse().unwrap();
    let port = target.get_ports().first().copied().unwrap_or(5432);
    // The certificate names `localhost` (Debian's snakeoil does); the socket goes to
    // 127.0.0.1 whatever `localhost` resolves to.
    let url = format!("host=localhost hostaddr=127.0.0.1 port={port} user=postgres dbname=test");
    let schema = fresh_schema();
    let app = format!("outbox-tls-{:08x}", fastrand::u32(..));
    let config = PgConfig::new(&url, &schema)
        .with_pool_size(2)
        .with_application_name(&app);

    let store = PgStore::connect(config.clone().with_tls(Tls::required_with_roots(pem)))
        .await
        .expect("a TLS connection verified against the server's certificate");
    let wakeups = store
        .listen()
        .await
        .expect("the listener connects over TLS");
    store
        .enqueue(vec![NewRecord::new(b"sealed".to_vec())], 1_000)
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), wakeups.notified())
        .await
        .expect("the NOTIFY reaches the TLS listener");
    assert_eq!(store.stats().await.unwrap().pending, 1);
    let sessions: Vec<bool> = client
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid \
             WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        sessions.len() >= 2,
        "the pool's and the listener's sessions: {sessions:?}"
    );
    assert!(
        sessions.iter().all(|ssl| *ssl),
        "every session is encrypted: {sessions:?}"
    );

    // The bundled roots alone do not vouch for a self-signed server.
    let refused = PgStore::connect(config.with_tls(Tls::required()))
        .await
        .expect_err("an unverified server is refused");
    assert!(refused.to_string().contains("certificate"), "{refused}");
    assert!(
        !refused.is_temporary(),
        "a refused certificate is not retried: {refused:?}"
    );
    drop((wakeups, store));
    common::drop_schemas(vec![schema]);
}
