//! The storage settings an open makes. The records' pages keep room for the row versions a
//! claim writes: a new schema gets the fill setting, and so does one written by a build before
//! it, at its next open, with its records and its version untouched; a fill an operator chose
//! stands; a role that may not alter the table still opens it, and so does an open that cannot
//! take the table's lock in time. The lease rows' id lists are stored uncompressed, on a new
//! schema and on an older one from its next open, unless an operator chose otherwise; an open
//! that cannot take the lease table's lock at once opens and makes the change at a later open.

mod common;

use common::{
    admin, claim, compressed_lease_ids, full_pages, key_value, lease_ids_storage,
    records_fillfactor, server_ready, Scratch,
};
use outbox_core::{ListQuery, NewRecord, Store};
use outbox_postgres::{PgConfig, PgStore};

const T0: u64 = 1_700_000_000_000;

/// A schema a store created, then changed by `alter` (the statements for the schema's name)
/// in an admin session, which is returned with it.
async fn created_then(alter: impl Fn(&str) -> String) -> (Scratch, tokio_postgres::Client) {
    let scratch = Scratch::new();
    drop(scratch.store().await);
    let client = admin().await;
    client.batch_execute(&alter(&scratch.schema)).await.unwrap();
    (scratch, client)
}

/// A store that would wait for a lock for ever: the storage settings wait briefly all the same.
fn patient(s: &str) -> PgConfig {
    common::config(s)
        .with_lock_timeout(None)
        .with_statement_timeout(None)
}

async fn version(client: &tokio_postgres::Client, s: &str) -> i32 {
    client
        .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_pages_are_half_filled_on_a_new_schema_and_an_older_one_at_its_next_open() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let client = admin().await;
    let store = scratch.store().await;
    assert_eq!(records_fillfactor(&client, s).await.as_deref(), Some("50"));

    let ids = store
        .enqueue(
            (0..20)
                .map(|i| NewRecord::new(vec![i; 256]).in_group(format!("g{}", i % 3)))
                .collect(),
            T0,
        )
        .await
        .unwrap()
        .ids;
    let claimed = store.claim(claim(T0, 2, 1)).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let all = ListQuery::new(100);
    let before = store.list(&all).await.unwrap();
    assert_eq!(before.len(), ids.len());
    let stats_before = store.stats().await.unwrap();
    drop(store);

    // As a build before the setting left it: full pages, the same version.
    client.batch_execute(&full_pages(s)).await.unwrap();
    assert_eq!(records_fillfactor(&client, s).await, None);

    let store = scratch.store().await;
    assert_eq!(records_fillfactor(&client, s).await.as_deref(), Some("50"));
    assert_eq!(
        version(&client, s).await,
        outbox_postgres::SCHEMA_VERSION as i32
    );
    assert_eq!(
        store.list(&all).await.unwrap(),
        before,
        "every record as it was"
    );
    assert_eq!(store.stats().await.unwrap(), stats_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_an_operator_chose_stand_at_the_next_open() {
    if !server_ready() {
        return;
    }
    let (scratch, client) = created_then(|s| {
        format!(
            "ALTER TABLE \"{s}\".records SET (fillfactor = 70); \
             ALTER TABLE \"{s}\".leases ALTER COLUMN ids SET STORAGE MAIN"
        )
    })
    .await;
    let s = &scratch.schema;
    let store = scratch.store().await;
    assert_eq!(records_fillfactor(&client, s).await.as_deref(), Some("70"));
    assert_eq!(lease_ids_storage(&client, s).await, "m");
    drop(store);
}

/// How the lease row of the claim made under `token` was stored: `None` uncompressed, else the
/// compression method.
async fn lease_compression(client: &tokio_postgres::Client, s: &str, token: i64) -> Option<String> {
    client
        .query_one(
            &format!("SELECT pg_column_compression(ids) FROM \"{s}\".leases WHERE token = $1"),
            &[&token],
        )
        .await
        .expect("the claim's lease row")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_id_lists_are_stored_uncompressed_on_a_new_schema_and_an_older_one_at_its_next_open()
{
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let client = admin().await;
    let store = scratch.store().await;
    assert_eq!(lease_ids_storage(&client, s).await, "e");
    store
        .enqueue((0..900).map(|_| NewRecord::new(vec![7; 16])).collect(), T0)
        .await
        .unwrap();
    // 300 ids (2,400 bytes) pass the size past which PostgreSQL compresses a value.
    assert_eq!(store.claim(claim(T0, 300, 1)).await.unwrap().len(), 300);
    assert_eq!(
        lease_compression(&client, s, 1).await,
        None,
        "stored as it is"
    );

    // As a build before the setting left it: the type's default, which compresses the list.
    client
        .batch_execute(&compressed_lease_ids(s))
        .await
        .unwrap();
    assert_eq!(store.claim(claim(T0, 300, 2)).await.unwrap().len(), 300);
    assert!(
        lease_compression(&client, s, 2).await.is_some(),
        "the default compresses a list this long"
    );
    let stats_before = store.stats().await.unwrap();
    drop(store);

    let store = scratch.store().await;
    assert_eq!(
        lease_ids_storage(&client, s).await,
        "e",
        "set at the next open"
    );
    assert_eq!(
        version(&client, s).await,
        outbox_postgres::SCHEMA_VERSION as i32
    );
    assert_eq!(store.stats().await.unwrap(), stats_before);
    assert_eq!(store.claim(claim(T0, 300, 3)).await.unwrap().len(), 300);
    assert_eq!(lease_compression(&client, s, 3).await, None);
    assert_eq!(store.stats().await.unwrap().in_flight, 900);
}

/// Opens the outbox with `config` while another session holds `lock` (a `LOCK TABLE` target
/// and mode) in a transaction it commits only later; checks that the open did not wait for it
/// (bounded: an open that waited would wait for ever, so it fails here rather than hanging)
/// and that the store takes a write; returns the session, still holding the lock.
async fn opened_while_held(s: &str, lock: &str, config: &PgConfig) -> tokio_postgres::Client {
    let holder = admin().await;
    holder
        .batch_execute(&format!("BEGIN; LOCK TABLE \"{s}\".{lock}"))
        .await
        .unwrap();
    let store = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        PgStore::connect(config.clone()),
    )
    .await
    .expect("the open does not wait for the session holding the table")
    .expect("the outbox opens while the table is held");
    let enqueued = store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], T0)
        .await
        .expect("and takes writes");
    assert_eq!(enqueued.ids.len(), 1);
    holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_waits_briefly_for_the_lease_table_and_stores_the_ids_uncompressed_at_a_later_open()
{
    if !server_ready() {
        return;
    }
    let (scratch, client) = created_then(compressed_lease_ids).await;
    let s = &scratch.schema;
    // Another session is in the middle of a round (it holds the lock every claim takes on the
    // lease table), and every runner's next claim would queue behind a longer wait.
    let holder = opened_while_held(s, "leases IN ROW EXCLUSIVE MODE", &patient(s)).await;
    assert_eq!(
        lease_ids_storage(&client, s).await,
        "x",
        "the storage waits"
    );

    holder.batch_execute("COMMIT").await.unwrap();
    let store = PgStore::connect(patient(s)).await.expect("the next open");
    assert_eq!(
        lease_ids_storage(&client, s).await,
        "e",
        "the next open sets it"
    );
    assert_eq!(
        store.claim(claim(T0, 1, 9)).await.unwrap().len(),
        1,
        "the record kept"
    );
}

/// Formatted log lines, kept.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_alter_the_table_opens_it_with_full_pages() {
    if !server_ready() {
        return;
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    // The process's subscriber (the store works on threads of its own); this test alone sets
    // it, and reads only its schema's lines.
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let (scratch, client) = created_then(full_pages).await;
    let s = &scratch.schema;
    let role = format!("{s}_filler");
    client
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN; \
             GRANT USAGE ON SCHEMA \"{s}\" TO \"{role}\"; \
             GRANT ALL ON ALL TABLES IN SCHEMA \"{s}\" TO \"{role}\"; \
             GRANT ALL ON ALL SEQUENCES IN SCHEMA \"{s}\" TO \"{role}\";"
        ))
        .await
        .unwrap();
    let url = format!("{} user={role}", key_value(&common::url()));
    lines.0.lock().unwrap().clear();
    let opened = PgStore::connect(PgConfig::new(&url, s).with_pool_size(2)).await;
    let worked = match &opened {
        Ok(store) => store
            .enqueue(vec![NewRecord::new(b"x".to_vec())], T0)
            .await
            .map(|e| e.ids.len()),
        Err(err) => Err(outbox_core::Error::InvalidConfig(err.to_string())),
    };
    let fill = records_fillfactor(&client, s).await;
    drop(opened);
    client
        .batch_execute(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .await
        .unwrap();
    assert_eq!(worked.expect("the role opens the outbox and enqueues"), 1);
    assert_eq!(fill, None, "only the table's owner sets the fill");
    // No refused attempt: the open says once what the owner can run, and warns of nothing.
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("fill") && l.contains(s.as_str()))
        .collect();
    assert_eq!(said.len(), 1, "{text}");
    assert!(said[0].contains("INFO"), "{text}");
    assert!(
        said[0].contains(&format!(
            "ALTER TABLE \"{s}\".records SET (fillfactor = 50)"
        )),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_waits_briefly_for_the_records_table_and_sets_the_fill_at_a_later_open() {
    if !server_ready() {
        return;
    }
    let (scratch, client) = created_then(full_pages).await;
    let s = &scratch.schema;
    // Another session holds the lock a change of the table's settings waits for, as a long
    // `VACUUM` or an operator's own `ALTER` would.
    let holder = opened_while_held(s, "records IN SHARE UPDATE EXCLUSIVE MODE", &patient(s)).await;
    assert_eq!(records_fillfactor(&client, s).await, None, "the fill waits");

    holder.batch_execute("COMMIT").await.unwrap();
    let store = PgStore::connect(patient(s)).await.expect("the next open");
    assert_eq!(
        records_fillfactor(&client, s).await.as_deref(),
        Some("50"),
        "the next open sets the fill"
    );
    assert_eq!(store.stats().await.unwrap().pending, 1, "the record kept");
}
