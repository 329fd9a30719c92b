//! Records whose bytes do not decode, on a redb file: one such record never fails a call that
//! reads many records; it is passed by, and the others are read as if it were not there.

mod common;

use common::{failed, fresh, lease, plant_unreadable};
use outbox_core::{Change, Claim, ErrorCount, Guard, NewRecord, Store, Transition};
use outbox_redb::{RedbConfig, RedbStore};

/// `common_errors` tallies the failed records that read and passes an unreadable failed
/// record by, where it used to fail the whole call.
#[tokio::test]
async fn common_errors_pass_an_unreadable_record_by() {
    let (_dir, path, store) = fresh().await;
    let batch = (0..3)
        .map(|n| NewRecord::new(format!("r{n}").into_bytes()))
        .collect();
    let ids = store.enqueue(batch, 1_000).await.unwrap().ids;
    let claimed = store
        .claim(Claim {
            now: 1_000,
            limit: 3,
            lease: lease(1, 61_000),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    // All three fail with "503" and wait to be retried.
    let failures = claimed
        .iter()
        .map(|r| Transition {
            id: r.id,
            guard: Guard::Lease(1),
            change: Change::Update(failed(r, 2_000, 9_000)),
        })
        .collect();
    store.apply(failures).await.unwrap();
    let three = vec![ErrorCount {
        error: "503".into(),
        count: 3,
    }];
    assert_eq!(store.common_errors(10).await.unwrap(), three);
    store.close().await;
    plant_unreadable(&path, ids[1]);

    let store = RedbStore::open(&path, RedbConfig::default()).await.unwrap();
    assert_eq!(
        store.common_errors(10).await.unwrap(),
        vec![ErrorCount {
            error: "503".into(),
            count: 2,
        }],
        "the two that read are counted, the unreadable one passed by"
    );
    assert_eq!(store.stats().await.unwrap().retrying, 2, "as stats count");
    assert_eq!(
        store
            .unreadable(10)
            .await
            .unwrap()
            .iter()
            .map(|u| u.id)
            .collect::<Vec<_>>(),
        [ids[1]],
        "listed as unreadable instead"
    );
}
