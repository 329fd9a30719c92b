//! The look for rows PostgreSQL's store cannot decode: the server passes by the rows that
//! decode, so only the others travel, a page at a time. Every rule of the decoding is met
//! here by a row that breaks it, and rows damaged where the decoding forgives (history,
//! trace) or at the edge of a range are not listed; between them `list` and `unreadable`
//! account for every row. In a `SQL_ASCII` database, where text is stored unchecked, rows whose
//! text is not UTF-8 are listed with the column that is not, a claim sets them aside and
//! delivers the others, and their tombstones can be read.

mod common;

use common::{admin, server_ready, Scratch};
use outbox_core::{Claim, Lease, ListQuery, NewRecord, RecordId, Store};

const T0: u64 = 1_700_000_000_000;

/// An id as the table stores it.
fn raw(id: RecordId) -> i64 {
    i64::try_from(id.0).unwrap()
}

/// Enqueues `records` at [`T0`]; their ids as the table stores them.
async fn enqueue(store: &outbox_postgres::PgStore, records: Vec<NewRecord>) -> Vec<i64> {
    let enqueued = store.enqueue(records, T0).await.unwrap();
    enqueued.into_iter().map(raw).collect()
}

/// A fresh schema holding `n` ungrouped records, with their ids.
async fn filled(n: usize) -> (Scratch, outbox_postgres::PgStore, Vec<i64>) {
    let scratch = Scratch::new();
    let store = scratch.store().await;
    let records = (0..n)
        .map(|i| NewRecord::new(format!("r{i}").into_bytes()))
        .collect();
    let ids = enqueue(&store, records).await;
    (scratch, store, ids)
}

/// The ids `claim` takes, as the table stores them.
async fn claimed(store: &outbox_postgres::PgStore, claim: Claim) -> Vec<i64> {
    let records = store.claim(claim).await.unwrap();
    records.into_iter().map(|r| raw(r.id)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_look_lists_every_row_that_breaks_a_rule_and_only_those_across_pages() {
    if !server_ready() {
        return;
    }
    let (scratch, store, ids) = filled(800).await;
    let client = admin().await;
    let s = &scratch.schema;
    let damage = |set: &'static str, id: i64| {
        let client = &client;
        async move {
            let sql = format!("UPDATE \"{s}\".records SET {set} WHERE id = $1");
            assert_eq!(client.execute(&sql, &[&id]).await.unwrap(), 1, "{set}");
        }
    };
    // One row for each rule, spread over the table.
    let rules = [
        "state = 9",
        "state = -1",
        "created_at = -1",
        "attempts = -1",
        "unanswered = 4294967296",
        "interrupted = -3",
        "last_attempt_at = -1",
        "next_attempt_at = -5",
        "not_before = -2",
        // In flight without a lease: what a claim leaves of a row it set aside.
        "state = 2, lease_token = NULL, lease_until = NULL",
        // Claimed (a token on a pending or retrying row) without a valid expiry.
        "lease_token = 7, lease_until = NULL",
        "lease_token = 7, lease_until = -1",
        "state = 1, lease_token = 7, lease_until = -1",
    ];
    let mut bad = Vec::new();
    for (i, set) in rules.iter().enumerate() {
        let id = ids[i * 60 + 3];
        damage(set, id).await;
        bad.push(id);
    }
    // Enough more that the rows found take several pages.
    for &id in ids.iter().skip(1).step_by(2).take(300) {
        if !bad.contains(&id) {
            damage("attempts = -7", id).await;
            bad.push(id);
        }
    }
    // Damage the decoding forgives, and values at the edge of their range: still records.
    let forgiven = [
        "history = '\\x00ff'::bytea",
        "trace = 'not a trace context'",
        "attempts = 4294967295",
        "next_attempt_at = 0",
        "lease_token = -1, lease_until = 0",
        "state = 1, lease_token = 5, lease_until = 0",
        "state = 3, lease_token = 9",
    ];
    for (i, set) in forgiven.iter().enumerate() {
        let id = ids[i * 100 + 50];
        assert!(!bad.contains(&id));
        damage(set, id).await;
    }
    bad.sort_unstable();

    let listed = store.unreadable(10_000).await.unwrap();
    let listed_ids: Vec<i64> = listed.iter().map(|row| raw(row.id)).collect();
    assert_eq!(listed_ids, bad);
    assert!(listed.iter().all(|row| !row.reason.is_empty()));
    // A limit takes the lowest ids.
    let first: Vec<RecordId> = store
        .unreadable(5)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.id)
        .collect();
    assert_eq!(first, listed[..5].iter().map(|r| r.id).collect::<Vec<_>>());

    // Every row is a record `list` reads, or a row the look found: none is lost between.
    let mut readable = 0;
    let mut after = None;
    loop {
        let page = store
            .list(&ListQuery {
                after,
                ..ListQuery::new(100)
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        readable += page.len();
    }
    assert_eq!(readable + bad.len(), ids.len());
}

/// A database of its own, dropped (its sessions ended) when this guard goes.
struct ScratchDatabase {
    name: String,
}

impl ScratchDatabase {
    /// A fresh `SQL_ASCII` database: the server keeps text as it is given, unchecked.
    async fn sql_ascii() -> Self {
        let name = format!("outbox_sql_ascii_{}", std::process::id());
        let client = admin().await;
        drop_database(&client, &name).await.unwrap();
        client
            .batch_execute(&format!(
                "CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' \
                 TEMPLATE template0"
            ))
            .await
            .unwrap();
        ScratchDatabase { name }
    }

    /// The test server's URL with this database in place of its own.
    fn url(&self) -> String {
        let url = common::url();
        let (head, query) = url.split_once('?').unwrap_or((&url, ""));
        let (server, _db) = head.rsplit_once('/').expect("a URL with a database");
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("{server}/{}{query}", self.name)
    }
}

/// Drops the database `name` if it is there, ending its sessions first (`WITH (FORCE)` needs
/// PostgreSQL 13; the store supports 11).
async fn drop_database(
    client: &tokio_postgres::Client,
    name: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await?;
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        common::block_on_side(async move {
            let client = admin().await;
            if let Err(err) = drop_database(&client, &name).await {
                eprintln!("could not drop test database {name}: {err}");
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_sql_ascii_database_rows_with_text_that_is_not_utf8_are_listed_and_only_those() {
    if !server_ready() {
        return;
    }
    let db = ScratchDatabase::sql_ascii().await;
    let config = outbox_postgres::PgConfig::new(db.url(), "outbox").with_pool_size(2);
    let store = outbox_postgres::PgStore::connect(config).await.unwrap();
    // Each in a group of its own, and one more in the group of the fourth (ids[8]).
    let records = (0..9)
        .map(|i| {
            NewRecord::new(format!("r{i}").into_bytes())
                .in_group(format!("g{}", if i == 8 { 3 } else { i }))
                .with_key(format!("k{i}"))
        })
        .collect();
    let ids = enqueue(&store, records).await;
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // A byte past ASCII in each text column the decoding reads; the server takes them as is.
    let damages = [
        (ids[1], "grp = E'caf\\xe9'"),
        (ids[3], "key = E'k\\x80'"),
        (ids[4], "state = 1, last_error = E'\\xff'"),
        (ids[6], "replaces = E'c\\xfe'"),
    ];
    for (id, set) in damages {
        let sql = format!("UPDATE outbox.records SET {set} WHERE id = $1");
        assert_eq!(client.execute(&sql, &[&id]).await.unwrap(), 1, "{set}");
    }
    // Text past ASCII that is UTF-8 is a record like any other.
    let sql = "UPDATE outbox.records SET last_error = E'caf\\xc3\\xa9' WHERE id = $1";
    assert_eq!(client.execute(sql, &[&ids[5]]).await.unwrap(), 1);

    let listed: Vec<(i64, String)> = store
        .unreadable(100)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (raw(row.id), row.reason))
        .collect();
    let named = |id: i64, column: &str| (id, format!("{column} is not UTF-8"));
    assert_eq!(
        listed,
        [
            named(ids[1], "grp"),
            named(ids[3], "key"),
            named(ids[4], "last_error"),
            named(ids[6], "replaces")
        ]
    );
    let readable: Vec<i64> = store
        .list(&ListQuery::new(100))
        .await
        .unwrap()
        .into_iter()
        .map(|r| raw(r.id))
        .collect();
    assert_eq!(readable, [ids[0], ids[2], ids[5], ids[7], ids[8]]);

    let one = store.unreadable_row(RecordId(ids[1] as u64)).await.unwrap();
    assert_eq!(
        one.map(|row| row.reason),
        Some("grp is not UTF-8".to_owned())
    );

    // The tally of failures reads such text as it can (a retrying record's error here).
    let tally = store.common_errors(5).await.unwrap();
    assert_eq!(tally.len(), 1, "{tally:?}");
    assert_eq!((tally[0].error.as_str(), tally[0].count), ("\u{FFFD}", 1));

    // A claim meets them and sets them aside: the others are claimed, the queue goes on
    // (ids[8] waits behind the head of its group).
    let lease = Lease {
        token: 7,
        until: T0 + 60_000,
    };
    let claim = Claim {
        now: T0 + 1,
        limit: 100,
        lease,
    };
    let mut taken = claimed(&store, claim).await;
    taken.sort_unstable();
    assert_eq!(taken, [ids[0], ids[2], ids[5], ids[7]]);
    assert_eq!(store.unreadable(100).await.unwrap().len(), 4);

    // Discarded, each leaves a tombstone with its group and key as stored, read lossily.
    for &id in &[ids[1], ids[3]] {
        let id = RecordId(u64::try_from(id).unwrap());
        assert!(store.discard_unreadable(id, T0 + 2).await.unwrap());
    }
    let tombstones = store.tombstones(None, 10).await.unwrap();
    let told: Vec<(i64, Option<String>, String)> = tombstones
        .into_iter()
        .map(|t| (raw(t.id), t.group, t.key))
        .collect();
    assert_eq!(
        told,
        [
            (ids[1], Some("caf\u{FFFD}".to_owned()), "k1".to_owned()),
            (ids[3], Some("g3".to_owned()), "k\u{FFFD}".to_owned()),
        ]
    );
    assert_eq!(store.unreadable(100).await.unwrap().len(), 2);
    // With the head of its group gone, the group's next record is claimed.
    let next = Claim {
        now: T0 + 3,
        ..claim
    };
    assert_eq!(claimed(&store, next).await, [ids[8]]);
    drop(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_with_a_negative_id_fails_neither_a_claim_nor_a_listing() {
    if !server_ready() {
        return;
    }
    let (scratch, store, ids) = filled(3).await;
    // Ids come from a sequence that starts at 1: only a hand edit makes one negative.
    let client = admin().await;
    let sql = format!(
        "UPDATE \"{}\".records SET id = -7 WHERE id = $1",
        scratch.schema
    );
    assert_eq!(client.execute(&sql, &[&ids[1]]).await.unwrap(), 1);

    let listed: Vec<i64> = store
        .list(&ListQuery::new(10))
        .await
        .unwrap()
        .into_iter()
        .map(|r| raw(r.id))
        .collect();
    assert_eq!(listed, [ids[0], ids[2]]);
    let claim = Claim {
        now: T0 + 1,
        limit: 10,
        lease: Lease {
            token: 3,
            until: T0 + 60_000,
        },
    };
    assert_eq!(claimed(&store, claim).await, [ids[0], ids[2]]);
    // Set aside by that claim: no later claim meets it, and no deadline is reported for it.
    let again = Claim {
        now: T0 + 2,
        ..claim
    };
    assert_eq!(claimed(&store, again).await, Vec::<i64>::new());
    assert_eq!(store.next_due().await.unwrap(), None);
}
