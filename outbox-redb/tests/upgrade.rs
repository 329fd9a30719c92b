//! Upgrading files of an earlier schema: every earlier version converges to the current one in
//! one write transaction, its records read back as they were (with the defaults of the fields
//! their layout lacked), and a reader refuses such a file unchanged until then.

mod common;

use std::path::Path;

use common::fresh;
use outbox_core::{
    Attempt, AttemptClass, Change, Claim, Error, Guard, History, ListQuery, NewRecord, Record,
    RecordId, State, Store, TraceContext, Transition, DEFAULT_MAX_PAYLOAD,
};
use outbox_redb::{RedbConfig, RedbStore, SCHEMA_VERSION};
use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read file")
}

async fn open(path: &Path) -> Result<RedbStore, Error> {
    RedbStore::open(path, RedbConfig::default()).await
}

/// Layout 1 of a record, written by hand as schema version 1 stored it.
fn encode_v1(record: &Record) -> Vec<u8> {
    encode_old(record, 1)
}

/// Layout 2 of a record, written by hand as schema versions 2 and 3 stored it: layout 1 with
/// the `unanswered` and `interrupted` counters (no expected version, no coalescing key).
fn encode_v2(record: &Record) -> Vec<u8> {
    encode_old(record, 2)
}

/// Layout 3 of a record, written by hand as schema version 4 stored it: layout 2 with the
/// expected version and the coalescing key (no not-before time).
fn encode_v3(record: &Record) -> Vec<u8> {
    encode_old(record, 3)
}

/// Layout 4 of a record, written by hand as schema version 5 stored it: layout 3 with the
/// not-before time (no history).
fn encode_v4(record: &Record) -> Vec<u8> {
    encode_old(record, 4)
}

fn encode_old(record: &Record, layout: u8) -> Vec<u8> {
    fn opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
        match v {
            Some(v) => {
                out.push(1);
                out.extend(v.to_le_bytes());
            }
            None => out.push(0),
        }
    }
    fn text(out: &mut Vec<u8>, v: &[u8]) {
        out.extend((v.len() as u32).to_le_bytes());
        out.extend(v);
    }
    let mut out = vec![layout];
    out.extend(record.created_at.to_le_bytes());
    out.push(record.state.code());
    out.extend(record.attempts.to_le_bytes());
    if layout >= 2 {
        out.extend(record.unanswered.to_le_bytes());
        out.extend(record.interrupted.to_le_bytes());
    }
    opt_u64(&mut out, record.last_attempt_at);
    opt_u64(&mut out, record.next_attempt_at);
    match &record.last_error {
        Some(e) => {
            out.push(1);
            text(&mut out, e.as_bytes());
        }
        None => out.push(0),
    }
    match record.lease {
        Some(l) => {
            out.push(1);
            out.extend(l.token.to_le_bytes());
            out.extend(l.until.to_le_bytes());
        }
        None => out.push(0),
    }
    match &record.group {
        Some(g) => {
            out.push(1);
            text(&mut out, g.as_bytes());
        }
        None => out.push(0),
    }
    if layout >= 3 {
        for field in [&record.expected_version, &record.replaces] {
            match field {
                Some(v) => {
                    out.push(1);
                    text(&mut out, v.as_bytes());
                }
                None => out.push(0),
            }
        }
    }
    if layout >= 4 {
        opt_u64(&mut out, record.not_before);
    }
    text(&mut out, record.key.as_bytes());
    text(&mut out, &record.payload);
    out
}

/// Writes a schema-version-1 file: no `leases` table, records in layout 1.
fn write_version_1(path: &Path) {
    let records: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
    let due: TableDefinition<(u64, u64), ()> = TableDefinition::new("due");
    let groups: TableDefinition<(&str, u64), ()> = TableDefinition::new("groups");
    let tombstones: TableDefinition<u64, &[u8]> = TableDefinition::new("tombstones");

    let mut in_flight = Record::fresh(
        RecordId(1),
        Some("g".into()),
        b"one".to_vec(),
        "k1".into(),
        100,
    );
    in_flight.state = State::InFlight;
    in_flight.lease = Some(common::lease(9, 50_000));
    let waiting = Record::fresh(
        RecordId(2),
        Some("g".into()),
        b"two".to_vec(),
        "k2".into(),
        200,
    );
    let mut retrying = Record::fresh(RecordId(3), None, b"three".to_vec(), "k3".into(), 300);
    retrying.state = State::Retrying;
    retrying.attempts = 2;
    retrying.last_attempt_at = Some(400);
    retrying.next_attempt_at = Some(700);
    retrying.last_error = Some("503".into());

    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut meta = txn.open_table(META).unwrap();
        meta.insert("schema_version", 1).unwrap();
        meta.insert("last_id", 3).unwrap();
        meta.insert("delivered", 5).unwrap();
        let mut table = txn.open_table(records).unwrap();
        for r in [&in_flight, &waiting, &retrying] {
            table.insert(r.id.0, encode_v1(r).as_slice()).unwrap();
        }
        txn.open_table(due).unwrap().insert((700, 3), ()).unwrap();
        let mut groups = txn.open_table(groups).unwrap();
        groups.insert(("g", 1), ()).unwrap();
        groups.insert(("g", 2), ()).unwrap();
        txn.open_table(tombstones).unwrap();
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn a_version_1_file_converges_to_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    write_version_1(&path);

    let store = open(&path).await.unwrap();
    let first = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(
        (
            first.state,
            first.lease,
            first.unanswered,
            first.interrupted
        ),
        (State::InFlight, Some(common::lease(9, 0)), 0, 0),
        "the dead process's lease expires at once"
    );
    assert_eq!(
        (&first.expected_version, &first.replaces),
        (&None, &None),
        "a record of layout 1 has no precondition and no coalescing key"
    );
    assert_eq!(store.expired(0, 10).await.unwrap(), [first]);
    // The waiting member of group g is indexed too: a clock step back finds it.
    let stepped = store.stepped_back(150, 10).await.unwrap();
    assert_eq!(stepped.iter().map(|r| r.id.0).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(store.halt().await.unwrap(), None, "no halt is invented");
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.in_flight,
            stats.pending,
            stats.retrying,
            stats.delivered,
            stats.superseded,
            stats.next_due
        ),
        (1, 1, 1, 5, 0, Some(700))
    );
    let claim = Claim {
        now: 1_000,
        limit: 10,
        lease: common::lease(1, 31_000),
    };
    let claimed = store.claim(claim).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].id, claimed[0].attempts), (RecordId(3), 2));
    let next = store
        .enqueue(vec![NewRecord::new(b"4".to_vec())], 0)
        .await
        .unwrap();
    assert_eq!(next.ids, [RecordId(4)]);
    drop(store);

    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        let version = meta.get("schema_version").unwrap().unwrap().value();
        assert_eq!(version, u64::from(SCHEMA_VERSION));
    }
    // Converged: a second open changes nothing it should not.
    let store = open(&path).await.unwrap();
    assert_eq!(store.stats().await.unwrap().in_flight, 2);
    assert_eq!(store.config().max_payload, DEFAULT_MAX_PAYLOAD);
}

const COALESCING: TableDefinition<(&str, u64), ()> = TableDefinition::new("coalescing");

/// Turns a current file holding `records` (none with an expected version or a coalescing key)
/// into the schema-version-3 layout: records in layout 2, no `coalescing` index and no
/// `superseded` counter.
fn downgrade_to_version_3(path: &Path, records: &[Record]) {
    let table: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(table).unwrap();
        assert_eq!(table.len().unwrap(), records.len() as u64);
        for r in records {
            assert_eq!((&r.expected_version, &r.replaces), (&None, &None));
            table.insert(r.id.0, encode_v2(r).as_slice()).unwrap();
        }
        let mut meta = txn.open_table(META).unwrap();
        assert!(meta.remove("superseded").unwrap().is_some());
        assert!(meta.remove("payload_bytes").unwrap().is_some());
        meta.insert("schema_version", 3).unwrap();
    }
    assert!(txn.delete_table(COALESCING).unwrap());
    txn.commit().unwrap();
}

/// Turns a current file holding `records` (none held for later) into the schema-version-4
/// layout: records in layout 3, without a not-before time.
fn downgrade_to_version_4(path: &Path, records: &[Record]) {
    let table: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(table).unwrap();
        assert_eq!(table.len().unwrap(), records.len() as u64);
        for r in records {
            assert_eq!(r.not_before, None);
            table.insert(r.id.0, encode_v3(r).as_slice()).unwrap();
        }
        let mut meta = txn.open_table(META).unwrap();
        assert!(meta.remove("payload_bytes").unwrap().is_some());
        meta.insert("schema_version", 4).unwrap();
    }
    txn.commit().unwrap();
}

/// Turns a current file holding `records` into the schema-version-5 layout: records in
/// layout 4, without a history or a trace context (whatever they had is lost, as version 5
/// never kept either).
fn downgrade_to_version_5(path: &Path, records: &[Record]) {
    let table: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(table).unwrap();
        assert_eq!(table.len().unwrap(), records.len() as u64);
        for r in records {
            table.insert(r.id.0, encode_v4(r).as_slice()).unwrap();
        }
        let mut meta = txn.open_table(META).unwrap();
        assert!(meta.remove("payload_bytes").unwrap().is_some());
        meta.insert("schema_version", 5).unwrap();
    }
    txn.commit().unwrap();
}

/// The layout byte of every stored record, by id.
fn stored_layouts(path: &Path) -> Vec<(u64, u8)> {
    let table: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(table).unwrap();
    let rows = redb::ReadableTable::iter(&table).unwrap();
    rows.map(|row| {
        let (id, value) = row.unwrap();
        (id.value(), value.value()[0])
    })
    .collect()
}

/// Turns a current file holding `records` into the schema-version-2 layout: version 3 without
/// the `queued` index (a waiting member of a group had no index entry) and the `runner` table.
fn downgrade_to_version_2(path: &Path, records: &[Record]) {
    downgrade_to_version_3(path, records);
    let queued: TableDefinition<(u64, u64), ()> = TableDefinition::new("queued");
    let runner: TableDefinition<&str, &[u8]> = TableDefinition::new("runner");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    assert!(txn.delete_table(queued).unwrap());
    assert!(txn.delete_table(runner).unwrap());
    txn.open_table(META)
        .unwrap()
        .insert("schema_version", 2)
        .unwrap();
    txn.commit().unwrap();
}

async fn all(store: &RedbStore) -> Vec<Record> {
    store.list(&ListQuery::new(usize::MAX)).await.unwrap()
}

fn stored_version(path: &Path) -> u64 {
    stored_meta(path, "schema_version").expect("a schema version")
}

/// The counter `name` of the `meta` table, read with no store open.
fn stored_meta(path: &Path, name: &str) -> Option<u64> {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let value = txn
        .open_table(META)
        .unwrap()
        .get(name)
        .unwrap()
        .map(|v| v.value());
    value
}

/// The payload bytes of `records`, as the `payload_bytes` counter must hold them.
fn payload_bytes(records: &[Record]) -> u64 {
    records.iter().map(|r| r.payload.len() as u64).sum()
}

#[tokio::test]
async fn a_version_2_file_converges_once_and_a_reader_leaves_it_alone() {
    let (dir, path, store) = fresh().await;
    let g = |p: &[u8]| NewRecord::new(p.to_vec()).in_group("g");
    store.enqueue(vec![g(b"1"), g(b"2")], 500).await.unwrap();
    let records = all(&store).await;
    drop(store);
    downgrade_to_version_2(&path, &records);
    let before = bytes(&path);

    // A reader cannot migrate: refused, with the file unchanged.
    let err = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("migration"), "{err}");
    assert_eq!(bytes(&path), before);

    let store = open(&path).await.unwrap();
    assert_eq!(store.halt().await.unwrap(), None);
    let stepped = store.stepped_back(100, 10).await.unwrap();
    assert_eq!(
        stepped.iter().map(|r| r.id.0).collect::<Vec<_>>(),
        [1, 2],
        "the waiting member got its index entry"
    );
    let halt = outbox_core::Halt {
        reason: "HTTP 401".into(),
        since: 9,
    };
    store.set_halt(Some(halt.clone())).await.unwrap();
    drop(store);

    // Converged: opening again migrates nothing and keeps the halt.
    let store = open(&path).await.unwrap();
    assert_eq!(store.halt().await.unwrap(), Some(halt));
    assert_eq!(store.stepped_back(100, 10).await.unwrap().len(), 2);
    assert_eq!(all(&store).await, records, "the records survive unchanged");
    drop(store);
    assert_eq!(stored_version(&path), u64::from(SCHEMA_VERSION));
    drop(dir);
}

/// A file of the previous schema (3: records without an expected version or a coalescing key,
/// no `coalescing` index, no `superseded` counter) converges: every record reads back as it
/// was, with `None` for the new fields and 0 merged; coalescing works on it at once and its
/// count survives the next open. A reader refuses it unchanged until then.
#[tokio::test]
async fn a_version_3_file_converges_with_no_versions_keys_or_merges() {
    let (dir, path, store) = fresh().await;
    let g = |p: &[u8]| NewRecord::new(p.to_vec()).in_group("g");
    store
        .enqueue(
            vec![g(b"1"), g(b"2"), NewRecord::new(b"free".to_vec())],
            500,
        )
        .await
        .unwrap();
    let claimed = store
        .claim(Claim {
            now: 1_000,
            limit: 1,
            lease: common::lease(3, 40_000),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    store
        .apply(vec![outbox_core::Transition {
            id: RecordId(3),
            guard: outbox_core::Guard::Idle,
            change: outbox_core::Change::Delivered,
        }])
        .await
        .unwrap();
    let records = all(&store).await;
    assert_eq!(records.len(), 2);
    drop(store);
    downgrade_to_version_3(&path, &records);
    let before = bytes(&path);

    let err = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("migration"), "{err}");
    assert_eq!(bytes(&path), before);

    let store = open(&path).await.unwrap();
    let expired = |r: &Record| Record {
        lease: r.lease.map(|l| common::lease(l.token, 0)),
        ..r.clone()
    };
    assert_eq!(
        all(&store).await,
        records.iter().map(expired).collect::<Vec<_>>(),
        "every record survives; the dead process's lease expires"
    );
    assert!(all(&store)
        .await
        .iter()
        .all(|r| r.expected_version.is_none() && r.replaces.is_none()));
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.in_flight,
            stats.pending,
            stats.delivered,
            stats.superseded
        ),
        (1, 1, 1, 0)
    );
    // Coalescing on the converged file: the second edit replaces the first.
    let edit = |p: &[u8]| {
        NewRecord::new(p.to_vec())
            .replacing("doc/body")
            .expecting("2")
    };
    let first = store.enqueue(vec![edit(b"e1")], 2_000).await.unwrap();
    assert_eq!(
        (first.ids.clone(), first.superseded),
        (vec![RecordId(4)], vec![])
    );
    let second = store.enqueue(vec![edit(b"e2")], 2_001).await.unwrap();
    assert_eq!(
        (second.ids, second.superseded),
        (vec![RecordId(4)], vec![0])
    );
    drop(store);

    assert_eq!(stored_version(&path), u64::from(SCHEMA_VERSION));
    // Converged: the next open migrates nothing and keeps the new fields and the count.
    let store = open(&path).await.unwrap();
    let edited = store.get(RecordId(4)).await.unwrap().unwrap();
    assert_eq!(
        (
            edited.payload.as_slice(),
            edited.expected_version.as_deref(),
            edited.replaces.as_deref()
        ),
        (b"e2".as_slice(), Some("2"), Some("doc/body"))
    );
    assert_eq!(store.stats().await.unwrap().superseded, 1);
    let third = store.enqueue(vec![edit(b"e3")], 2_002).await.unwrap();
    assert_eq!((third.ids, third.superseded), (vec![RecordId(4)], vec![0]));
    drop(dir);
}

/// A file of the previous schema (4: records without a not-before time) converges: every
/// record reads back as it was, with no not-before time, and a record held for later is kept
/// as such, due at its time and passed by a re-base, on the converged file and after a reopen.
#[tokio::test]
async fn a_version_4_file_converges_with_no_not_before_times() {
    let (dir, path, store) = fresh().await;
    let edit = NewRecord::new(b"e1".to_vec())
        .in_group("g")
        .replacing("doc/body")
        .expecting("2");
    store
        .enqueue(vec![edit, NewRecord::new(b"free".to_vec())], 500)
        .await
        .unwrap();
    let records = all(&store).await;
    drop(store);
    downgrade_to_version_4(&path, &records);
    let before = bytes(&path);

    let err = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("migration"), "{err}");
    assert_eq!(bytes(&path), before);

    let store = open(&path).await.unwrap();
    assert_eq!(
        all(&store).await,
        records,
        "every record survives unchanged"
    );
    assert_eq!(store.stats().await.unwrap().scheduled, 0);
    let held = store
        .enqueue(
            vec![NewRecord::new(b"later".to_vec()).not_before(90_000)],
            1_000,
        )
        .await
        .unwrap();
    drop(store);
    assert_eq!(stored_version(&path), u64::from(SCHEMA_VERSION));

    let store = open(&path).await.unwrap();
    let record = store.get(held.ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (record.next_attempt_at, record.not_before),
        (Some(90_000), Some(90_000))
    );
    assert_eq!(store.stats().await.unwrap().scheduled, 1);
    let stepped = store.stepped_back(100, 10).await.unwrap();
    assert_eq!(
        stepped.iter().map(|r| r.id.0).collect::<Vec<_>>(),
        [1, 2],
        "the records enqueued at 500, not the one held until 90 000"
    );
    drop(dir);
}

#[tokio::test]
async fn open_or_create_converges_an_earlier_version_as_open_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    write_version_1(&path);

    let store = RedbStore::open_or_create(&path, RedbConfig::default())
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.in_flight,
            stats.pending,
            stats.retrying,
            stats.delivered
        ),
        (1, 1, 1, 5),
        "the version 1 file's records, not a new outbox"
    );
    let first = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(
        first.lease,
        Some(common::lease(9, 0)),
        "the lease expired at once"
    );
    store.close().await;
    assert_eq!(stored_version(&path), u64::from(SCHEMA_VERSION));
}

/// A file of the previous schema (5: records without a history or a trace context) converges:
/// every record reads back as it was with an empty history and no trace context, every row is
/// rewritten in the current layout, and a history written on the converged file survives the
/// next open. A reader refuses it unchanged until then.
#[tokio::test]
async fn a_version_5_file_converges_with_empty_histories() {
    let (dir, path, store) = fresh().await;
    let cx = TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("congo=t61rcWkgMzE".into()),
    )
    .unwrap();
    let edit = NewRecord::new(b"e1".to_vec())
        .in_group("g")
        .replacing("doc/body")
        .expecting("2")
        .trace_context(cx);
    let held = NewRecord::new(b"later".to_vec()).not_before(90_000);
    store
        .enqueue(vec![edit, NewRecord::new(b"free".to_vec()), held], 500)
        .await
        .unwrap();
    // One record already has a history on the current file; version 5 could not keep it.
    let claim = |token| Claim {
        now: 1_000,
        limit: 1,
        lease: common::lease(token, 31_000),
    };
    let claimed = store.claim(claim(1)).await.unwrap();
    let mut failed = common::failed(&claimed[0], 1_000, 2_000);
    failed
        .history
        .push(Attempt::new(1_000, AttemptClass::Later, "HTTP 503"));
    let transition = |id, token, progress| Transition {
        id,
        guard: Guard::Lease(token),
        change: Change::Update(progress),
    };
    store
        .apply(vec![transition(claimed[0].id, 1, failed)])
        .await
        .unwrap();
    let records = all(&store).await;
    assert_eq!(records.iter().filter(|r| !r.history.is_empty()).count(), 1);
    assert_eq!(records.iter().filter(|r| r.trace.is_some()).count(), 1);
    drop(store);
    downgrade_to_version_5(&path, &records);
    assert!(stored_layouts(&path).iter().all(|&(_, layout)| layout == 4));
    assert_eq!(stored_meta(&path, "payload_bytes"), None);
    let before = bytes(&path);

    let err = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("migration"), "{err}");
    assert_eq!(bytes(&path), before);

    let store = open(&path).await.unwrap();
    let without_history: Vec<Record> = records
        .iter()
        .map(|r| Record {
            history: History::default(),
            trace: None,
            ..r.clone()
        })
        .collect();
    let upgraded = all(&store).await;
    assert_eq!(
        upgraded, without_history,
        "every record survives, with an empty history and no trace context"
    );
    assert!(upgraded.iter().all(|r| !r.history.is_unreadable()));
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.payload_bytes), (1, 11));
    drop(store);
    assert_eq!(stored_version(&path), u64::from(SCHEMA_VERSION));
    assert_eq!(
        stored_meta(&path, "payload_bytes"),
        Some(payload_bytes(&records)),
        "the byte counter is set from the records"
    );
    assert!(
        stored_layouts(&path).iter().all(|&(_, layout)| layout == 5),
        "every record rewritten in the current layout"
    );

    // A history written on the converged file is kept across a reopen.
    let store = open(&path).await.unwrap();
    let claimed = store
        .claim(Claim {
            now: 3_000,
            ..claim(2)
        })
        .await
        .unwrap();
    assert_eq!(claimed[0].history, History::default());
    let mut failed = common::failed(&claimed[0], 3_000, 4_000);
    failed.history.push(Attempt::new(
        3_000,
        AttemptClass::NoAnswer,
        "connection refused",
    ));
    let expected = failed.history.clone();
    store
        .apply(vec![transition(claimed[0].id, 2, failed)])
        .await
        .unwrap();
    drop(store);
    let store = open(&path).await.unwrap();
    let record = store.get(claimed[0].id).await.unwrap().unwrap();
    assert_eq!((record.history.len(), &record.history), (1, &expected));
    drop(store);
    assert_eq!(stored_version(&path), u64::from(SCHEMA_VERSION));
    drop(dir);
}

#[tokio::test]
async fn a_version_6_file_without_the_byte_counter_gets_it_once() {
    let (dir, path, store) = fresh().await;
    let batch = vec![
        NewRecord::new(b"alpha".to_vec()),
        NewRecord::new(b"be".to_vec()).in_group("g"),
        NewRecord::new(vec![7; 300]).replacing("doc"),
    ];
    store.enqueue(batch, 500).await.unwrap();
    let records = all(&store).await;
    drop(store);
    // A file written at version 6 before the counter existed.
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert_eq!(
            txn.open_table(META)
                .unwrap()
                .remove("payload_bytes")
                .unwrap()
                .map(|v| v.value()),
            Some(307)
        );
        txn.commit().unwrap();
    }

    // A reader cannot set it, and counts the records instead.
    let reader = RedbStore::open_read_only(&path, RedbConfig::default())
        .await
        .unwrap();
    assert_eq!(reader.stats().await.unwrap().payload_bytes, 307);
    drop(reader);
    assert_eq!(stored_meta(&path, "payload_bytes"), None);

    let store = open(&path).await.unwrap();
    assert_eq!(
        all(&store).await,
        records,
        "the records are left as they were"
    );
    assert_eq!(store.stats().await.unwrap().payload_bytes, 307);
    store
        .enqueue(vec![NewRecord::new(b"x".to_vec())], 600)
        .await
        .unwrap();
    drop(store);
    assert_eq!(stored_meta(&path, "payload_bytes"), Some(308));
    // Opening again keeps the counter as the writes left it.
    drop(open(&path).await.unwrap());
    assert_eq!(stored_meta(&path, "payload_bytes"), Some(308));
    drop(dir);
}
