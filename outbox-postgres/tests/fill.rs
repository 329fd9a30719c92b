//! The records' pages keep room for the row versions a claim writes (schema version 7): a new
//! schema gets it, and so does one upgraded from version 6, with its records untouched.

mod common;

use common::{admin, down_to_6, records_fillfactor, server_ready, Scratch};
use outbox_core::{Claim, Lease, ListQuery, NewRecord, Store};

const T0: u64 = 1_700_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_pages_are_half_filled_on_a_new_schema_and_after_an_upgrade_from_version_6() {
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
    let claimed = store
        .claim(Claim {
            now: T0,
            limit: 2,
            lease: Lease {
                token: 1,
                until: T0 + 30_000,
            },
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let all = ListQuery::new(100);
    let before = store.list(&all).await.unwrap();
    let stats_before = store.stats().await.unwrap();
    drop(store);

    client
        .batch_execute(&format!(
            "{} UPDATE \"{s}\".schema_version SET version = 6;",
            down_to_6(s)
        ))
        .await
        .unwrap();
    assert_eq!(
        records_fillfactor(&client, s).await,
        None,
        "full pages, as version 6 left them"
    );

    let store = scratch.store().await;
    let version: i32 = client
        .query_one(&format!("SELECT version FROM \"{s}\".schema_version"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, outbox_postgres::SCHEMA_VERSION as i32);
    assert_eq!(records_fillfactor(&client, s).await.as_deref(), Some("50"));
    assert_eq!(
        store.list(&all).await.unwrap(),
        before,
        "every record as it was"
    );
    assert_eq!(store.stats().await.unwrap(), stats_before);
    assert_eq!(before.len(), ids.len());

    // The step runs again harmlessly.
    client
        .batch_execute(&format!("UPDATE \"{s}\".schema_version SET version = 6"))
        .await
        .unwrap();
    let again = scratch.store().await;
    assert_eq!(records_fillfactor(&client, s).await.as_deref(), Some("50"));
    assert_eq!(again.list(&all).await.unwrap(), before);
}
