//! Errors from the server say why: its own message and SQLSTATE are in the error's text, not
//! only in its source chain.

mod common;

use common::{admin, config, key_value, server_ready, Scratch};
use outbox_core::{Error, NewRecord, Store};
use outbox_postgres::{PgConfig, PgStore};

const T0: u64 = 1_700_000_000_000;

/// A NUL is fine in a payload (bytes), and refused by the core's rules in a group and in an
/// idempotency key, before anything reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_byte_is_kept_in_a_payload_and_explained_elsewhere() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let ids = store
        .enqueue(vec![NewRecord::new(b"a\0b".to_vec())], T0)
        .await
        .unwrap();
    let record = store.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(record.payload, b"a\0b");

    let group = store
        .enqueue(vec![NewRecord::new(b"x".to_vec()).in_group("a\0b")], T0)
        .await;
    assert!(
        matches!(group, Err(Error::InvalidGroup { .. })),
        "{group:?}"
    );

    // The core refuses it before the server sees it, as every backend does: a key travels in
    // a header, and a NUL is no visible ASCII.
    let key = store
        .enqueue(vec![NewRecord::new(b"x".to_vec()).with_key("k\0")], T0)
        .await
        .expect_err("a key is visible ASCII");
    assert!(
        matches!(key, Error::InvalidIdempotencyKey { .. }),
        "{key:?}"
    );
    assert_eq!(
        store.stats().await.unwrap().pending,
        1,
        "nothing of the batch was written"
    );
}

/// A role that may read the outbox but not write it: the refusal names the privilege.
/// A role whose sessions are read-only gets the typed `ReadOnly`, with the server's message
/// kept as its source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_role_is_told_what_it_may_not_do() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    scratch.store().await;
    let role = format!("{s}_reader");
    let client = admin().await;
    client
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN; \
             GRANT USAGE ON SCHEMA \"{s}\" TO \"{role}\"; \
             GRANT SELECT ON ALL TABLES IN SCHEMA \"{s}\" TO \"{role}\";"
        ))
        .await
        .unwrap();
    let url = format!("{} user={role}", key_value(&common::url()));
    let outcome = async {
        let reader = PgStore::connect(PgConfig::new(&url, s).with_pool_size(2))
            .await
            .expect("a reader may open the outbox");
        assert_eq!(reader.stats().await.unwrap().pending, 0);
        let err = reader
            .enqueue(vec![NewRecord::new(b"x".to_vec())], T0)
            .await
            .expect_err("the reader may not enqueue");
        let text = err.to_string();
        assert!(text.contains("permission denied"), "{text}");
        assert!(text.contains("SQLSTATE 42501"), "{text}");

        client
            .batch_execute(&format!(
                "ALTER ROLE \"{role}\" SET default_transaction_read_only = on; \
                 GRANT ALL ON ALL TABLES IN SCHEMA \"{s}\" TO \"{role}\"; \
                 GRANT ALL ON ALL SEQUENCES IN SCHEMA \"{s}\" TO \"{role}\";"
            ))
            .await
            .unwrap();
        let read_only = PgStore::connect(PgConfig::new(&url, s).with_pool_size(2))
            .await
            .expect("a read-only session may open the outbox");
        let err = read_only
            .enqueue(vec![NewRecord::new(b"x".to_vec())], T0)
            .await
            .expect_err("a read-only session may not enqueue");
        assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
        let source = std::error::Error::source(&err).map(|e| format!("{e:?}"));
        assert!(
            source
                .as_deref()
                .is_some_and(|s| s.contains("read-only transaction")),
            "{source:?}"
        );
    };
    outcome.await;
    client
        .batch_execute(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .await
        .unwrap();
}

/// A table dropped under a running store: the error names the missing relation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_table_is_named_in_the_error() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let store = PgStore::connect(config(&scratch.schema)).await.unwrap();
    admin()
        .await
        .batch_execute(&format!("DROP TABLE \"{}\".tombstones", scratch.schema))
        .await
        .unwrap();
    let err = store
        .tombstones(None, 10)
        .await
        .expect_err("the table is gone");
    let text = err.to_string();
    assert!(text.contains("tombstones\" does not exist"), "{text}");
    assert!(text.contains("SQLSTATE 42P01"), "{text}");
}
