use super::commit::{steps, Step};
use super::*;

type Reply = oneshot::Receiver<Result<i64>>;

/// A write that inserts `value` into `t`, then fails if `fail` says so.
fn insert(value: i64, fail: Option<&'static str>) -> (Box<dyn Job>, Reply) {
    let (reply, answer) = oneshot::channel();
    let work = move |conn: &Connection| -> Result<i64> {
        conn.execute("INSERT INTO t VALUES (?1)", [value])
            .map_err(db)?;
        match fail {
            None => Ok(value),
            Some(sql) => {
                // Let the test decide what the failure leaves behind.
                let _ = conn.execute_batch(sql);
                Err(Error::InvalidConfig(format!("write {value} failed")))
            }
        }
    };
    (
        Box::new(Task {
            work,
            reply,
            kind: Kind::Grows,
        }),
        answer,
    )
}

fn table() -> Connection {
    let conn = Connection::open_in_memory().expect("open");
    conn.execute_batch("CREATE TABLE t (v INTEGER)")
        .expect("table");
    conn
}

fn values(conn: &Connection) -> Vec<i64> {
    let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").expect("prepare");
    stmt.query_map([], |row| row.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
}

fn answer(reply: &mut Reply) -> Result<i64> {
    reply.try_recv().expect("answered")
}

#[test]
fn writes_waiting_together_share_one_commit() {
    let (closed, _) = oneshot::channel();
    let writer = Writer::start(table(), 1024, false, None, closed, None).expect("writer");
    // Hold the writer thread in a first write until fifty others are queued.
    let (release, held) = mpsc::channel::<()>();
    let (entered, inside) = mpsc::channel::<()>();
    let (reply, first) = oneshot::channel();
    let work = move |_: &Connection| -> Result<i64> {
        let _ = entered.send(());
        let _ = held.recv();
        Ok(0)
    };
    let send = |job: Box<dyn Job>| writer.queue.send(Work::Write(job)).expect("queued");
    send(Box::new(Task {
        work,
        reply,
        kind: Kind::Grows,
    }));
    inside.recv().expect("the writer runs the first write");
    let replies: Vec<Reply> = (1..=50)
        .map(|v| {
            let (job, reply) = insert(v, None);
            send(job);
            reply
        })
        .collect();
    release.send(()).expect("release");
    assert_eq!(first.blocking_recv().expect("answer").expect("first"), 0);
    for (v, reply) in (1..=50).zip(replies) {
        assert_eq!(reply.blocking_recv().expect("answer").expect("write"), v);
    }
    assert_eq!(
        writer.commits(),
        2,
        "the held write, then the fifty together"
    );
}

/// A job that reports the `synchronous` level its transaction commits at.
fn sync_level(lease_only: bool) -> (Box<dyn Job>, Reply) {
    let (reply, answer) = oneshot::channel();
    let work = |conn: &Connection| -> Result<i64> {
        conn.execute("INSERT INTO t VALUES (1)", []).map_err(db)?;
        conn.pragma_query_value(None, "synchronous", |row| row.get(0))
            .map_err(db)
    };
    let kind = if lease_only {
        Kind::LeaseOnly
    } else {
        Kind::Grows
    };
    let task = Task { work, reply, kind };
    (Box::new(task), answer)
}

/// A job of `kind` that reports the page limit its transaction runs under.
fn page_limit(kind: Kind) -> (Box<dyn Job>, Reply) {
    let (reply, answer) = oneshot::channel();
    let work = |conn: &Connection| -> Result<i64> {
        conn.pragma_query_value(None, "max_page_count", |row| row.get(0))
            .map_err(db)
    };
    (Box::new(Task { work, reply, kind }), answer)
}

/// An enqueue of `records` at `now`, with the receiver of its answer.
fn enqueue(records: Vec<NewRecord>) -> (Box<dyn Job>, oneshot::Receiver<Result<Enqueued>>) {
    capped(records, Cap::none())
}

/// An enqueue of `records` at `now` held to `cap`, with the receiver of its answer.
fn capped(
    records: Vec<NewRecord>,
    cap: Cap,
) -> (Box<dyn Job>, oneshot::Receiver<Result<Enqueued>>) {
    let (reply, answer) = oneshot::channel();
    let job = EnqueueJob(Some(Enqueue {
        records,
        now: 1_000,
        cap,
        reply,
    }));
    (Box::new(job), answer)
}

fn outbox() -> Connection {
    let mut conn = Connection::open_in_memory().expect("open");
    crate::schema::migrate(&mut conn, 0).expect("schema");
    conn
}

fn pending(conn: &Connection) -> (i64, i64) {
    let counted = conn
        .query_row("SELECT value FROM meta WHERE name = 'state 0'", [], |row| {
            row.get(0)
        })
        .expect("counter");
    let rows = conn
        .query_row("SELECT count(*) FROM records WHERE state = 0", [], |row| {
            row.get(0)
        })
        .expect("rows");
    (counted, rows)
}

#[test]
fn enqueues_waiting_together_run_as_one_insert_with_one_answer_each() {
    let mut conn = outbox();
    let (a, mut ra) = enqueue(vec![NewRecord::new(b"a".to_vec())]);
    let (b, mut rb) = enqueue(vec![
        NewRecord::new(b"b1".to_vec()).in_group("g"),
        NewRecord::new(b"b2".to_vec()).in_group("g"),
    ]);
    let (c, mut rc) = enqueue(vec![NewRecord::new(b"c".to_vec()).in_group("g")]);
    let batch = vec![a, b, c];
    let commits = AtomicU64::new(0);
    commit_batch(&mut conn, batch, &commits, false);
    let ids = |r: &mut oneshot::Receiver<Result<Enqueued>>| -> Vec<u64> {
        r.try_recv()
            .expect("answered")
            .expect("enqueued")
            .ids
            .iter()
            .map(|id| id.0)
            .collect()
    };
    assert_eq!(
        (ids(&mut ra), ids(&mut rb), ids(&mut rc)),
        (vec![1], vec![2, 3], vec![4])
    );
    assert_eq!(commits.load(Ordering::Relaxed), 1);
    assert_eq!(pending(&conn), (4, 4));
    // Only the group's first record is its head.
    let claimable: Vec<i64> = conn
        .prepare("SELECT id FROM records WHERE claimable = 1 ORDER BY id")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    assert_eq!(claimable, [1, 2]);
}

#[test]
fn enqueues_waiting_together_past_the_cap_are_refused_alone() {
    let mut conn = outbox();
    let cap = Cap::none().with_max_records(3);
    let one = |body: &[u8]| NewRecord::new(body.to_vec());
    let (a, mut ra) = capped(vec![one(b"a")], cap);
    let (b, mut rb) = capped(vec![one(b"b1"), one(b"b2")], cap);
    let (c, mut rc) = capped(vec![one(b"c")], cap);
    commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
    assert!(ra.try_recv().expect("answered").is_ok());
    assert!(rb.try_recv().expect("answered").is_ok());
    let refused = rc.try_recv().expect("answered");
    assert!(
        matches!(
            refused,
            Err(Error::QueueFull {
                limit: outbox_core::CapLimit::Records,
                max: 3,
                used: 3,
                adding: 1
            })
        ),
        "{refused:?}"
    );
    assert_eq!(pending(&conn), (3, 3));
}

#[test]
fn only_enqueues_that_arrived_one_after_another_are_merged() {
    let shapes = |batch: Vec<Box<dyn Job>>| -> Vec<usize> {
        steps(batch)
            .iter()
            .map(|step| match step {
                Step::One(_) => 1,
                Step::Merged(group) => group.len(),
            })
            .collect()
    };
    let one = || enqueue(vec![NewRecord::new(b"x".to_vec())]).0;
    let other = || insert(1, None).0;
    assert_eq!(shapes(vec![one(), one(), one(), other(), one()]), [3, 1, 1]);
    assert_eq!(shapes(vec![other(), one(), other()]), [1, 1, 1]);
    assert_eq!(shapes(vec![one(), one()]), [2]);
}

#[test]
fn an_enqueue_that_fails_in_a_merged_run_fails_alone() {
    let mut conn = outbox();
    // A row the coalescing lookup of key `k` meets and cannot read: an unknown state.
    conn.execute_batch(
        "INSERT INTO records (id, payload, key, created_at, state, replaces) \
         VALUES (100, x'00', 'bad', 1, 99, 'k')",
    )
    .expect("plant");
    let (a, mut ra) = enqueue(vec![NewRecord::new(b"a".to_vec())]);
    let (b, mut rb) = enqueue(vec![NewRecord::new(b"b".to_vec()).replacing("k")]);
    let (c, mut rc) = enqueue(vec![NewRecord::new(b"c".to_vec())]);
    commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
    assert!(ra.try_recv().expect("answered").is_ok());
    assert!(rb.try_recv().expect("answered").is_err());
    assert!(rc.try_recv().expect("answered").is_ok());
    assert_eq!(pending(&conn), (2, 2), "the failed one left nothing");
}

#[test]
fn draining_writes_alone_may_use_the_headroom_and_a_growing_one_may_not() {
    let mut conn = table();
    let room = Room {
        limit: 100,
        headroom: 20,
    };
    let mut pages = None;
    let mut run = |batch: Vec<Box<dyn Job>>, pages: &mut Option<u64>| {
        size(&conn, &batch, room, pages);
        commit_batch(&mut conn, batch, &AtomicU64::new(0), false);
    };
    let (a, mut ra) = page_limit(Kind::Drains);
    let (b, mut rb) = page_limit(Kind::LeaseOnly);
    run(vec![a, b], &mut pages);
    assert_eq!(answer(&mut ra).expect("a"), 120);
    assert_eq!(answer(&mut rb).expect("b"), 120);
    assert_eq!(pages, Some(120));

    let (a, mut ra) = page_limit(Kind::Drains);
    let (b, mut rb) = page_limit(Kind::Grows);
    run(vec![a, b], &mut pages);
    assert_eq!(
        answer(&mut ra).expect("a"),
        100,
        "held by the growing write"
    );
    assert_eq!(answer(&mut rb).expect("b"), 100);
    assert_eq!(pages, Some(100));
}

#[test]
fn only_a_transaction_of_lease_only_writes_commits_without_a_sync() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut conn = Connection::open(dir.path().join("sync.db")).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE t (v INTEGER)",
    )
    .expect("setup");
    let commits = AtomicU64::new(0);
    let level = |conn: &Connection| -> i64 {
        conn.pragma_query_value(None, "synchronous", |row| row.get(0))
            .expect("synchronous")
    };

    let (a, mut ra) = sync_level(true);
    let (b, mut rb) = sync_level(true);
    commit_batch(&mut conn, vec![a, b], &commits, true);
    assert_eq!(answer(&mut ra).expect("a"), 1, "NORMAL for leases alone");
    assert_eq!(answer(&mut rb).expect("b"), 1);
    assert_eq!(level(&conn), 2, "FULL again after the commit");

    let (a, mut ra) = sync_level(true);
    let (b, mut rb) = sync_level(false);
    commit_batch(&mut conn, vec![a, b], &commits, true);
    assert_eq!(
        answer(&mut ra).expect("a"),
        2,
        "a lease shares a synced commit"
    );
    assert_eq!(answer(&mut rb).expect("b"), 2);

    let (a, mut ra) = sync_level(true);
    commit_batch(&mut conn, vec![a], &commits, false);
    assert_eq!(answer(&mut ra).expect("a"), 2, "not relaxed unless asked");
    assert_eq!(commits.load(Ordering::Relaxed), 3);
    assert_eq!(values(&conn), vec![1; 5]);
}

#[test]
fn a_failing_write_is_undone_alone_and_the_others_commit() {
    let mut conn = table();
    let (a, mut ra) = insert(1, None);
    let (b, mut rb) = insert(2, Some("SELECT 1"));
    let (c, mut rc) = insert(3, None);
    commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
    assert_eq!(answer(&mut ra).expect("first"), 1);
    assert!(matches!(answer(&mut rb), Err(Error::InvalidConfig(_))));
    assert_eq!(answer(&mut rc).expect("third"), 3);
    assert_eq!(values(&conn), vec![1, 3]);
    assert!(conn.is_autocommit(), "no transaction left open");
}

#[test]
fn a_write_alone_commits_or_leaves_nothing() {
    let mut conn = table();
    let commits = AtomicU64::new(0);
    let (a, mut ra) = insert(1, None);
    commit_batch(&mut conn, vec![a], &commits, false);
    assert_eq!(answer(&mut ra).expect("committed"), 1);
    assert_eq!(commits.load(Ordering::Relaxed), 1);

    let (b, mut rb) = insert(2, Some("SELECT 1"));
    commit_batch(&mut conn, vec![b], &commits, false);
    assert!(matches!(answer(&mut rb), Err(Error::InvalidConfig(_))));
    assert_eq!(values(&conn), vec![1], "the failed write left nothing");
    assert_eq!(commits.load(Ordering::Relaxed), 1, "and committed nothing");
    assert!(conn.is_autocommit(), "no transaction left open");
}

#[test]
fn writes_of_a_transaction_lost_to_another_write_fail_too() {
    let mut conn = table();
    let (a, mut ra) = insert(1, None);
    // The failure takes the whole transaction with it, as a full disk may.
    let (b, mut rb) = insert(2, Some("ROLLBACK"));
    let (c, mut rc) = insert(3, None);
    commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
    assert!(answer(&mut ra).is_err(), "its transaction was rolled back");
    assert!(answer(&mut rb).is_err());
    assert_eq!(answer(&mut rc).expect("third, in a new transaction"), 3);
    assert_eq!(values(&conn), vec![3]);
}

/// A write that puts every row of `big` in flight, as a claim does, growing the rows past the
/// page limit; `OR FAIL` or not.
fn grow(or_fail: bool) -> (Box<dyn Job>, Reply) {
    let (reply, answer) = oneshot::channel();
    let work = move |conn: &Connection| -> Result<i64> {
        let sql = if or_fail {
            "UPDATE OR FAIL big SET state = 2, lease = 123456789012"
        } else {
            "UPDATE big SET state = 2, lease = 123456789012"
        };
        conn.execute(sql, []).map_err(db)?;
        Ok(0)
    };
    let job = Task {
        work,
        reply,
        kind: Kind::Drains,
    };
    (Box::new(job), answer)
}

/// A file in WAL mode, as the store's, with `t` beside a table `big` of 2,000 rows, limited
/// to two pages more than it holds. (An in-memory database undoes only the statement.)
fn nearly_full(dir: &tempfile::TempDir) -> Connection {
    let conn = Connection::open(dir.path().join("full.db")).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE t (v INTEGER);
         CREATE TABLE big (b BLOB NOT NULL, state INTEGER NOT NULL, lease INTEGER);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
         INSERT INTO big (b, state) SELECT zeroblob(100), 0 FROM n;
         INSERT INTO t VALUES (0);",
    )
    .expect("fill");
    let pages: i64 = conn
        .pragma_query_value(None, "page_count", |row| row.get(0))
        .expect("page count");
    conn.pragma_update(None, "max_page_count", pages + 2)
        .expect("limit");
    conn
}

/// One batch on a [`nearly_full`] file: insert 1, a [`grow`] (`OR FAIL` or not) that finds
/// the file full, insert 3. Returns the three answers and the values `t` keeps.
fn batch_finding_the_file_full(or_fail: bool) -> ([Result<i64>; 3], Vec<i64>) {
    let dir = tempfile::tempdir().expect("directory");
    let mut conn = nearly_full(&dir);
    let (a, mut ra) = insert(1, None);
    let (b, mut rb) = grow(or_fail);
    let (c, mut rc) = insert(3, None);
    commit_batch(&mut conn, vec![a, b, c], &AtomicU64::new(0), false);
    let answers = [answer(&mut ra), answer(&mut rb), answer(&mut rc)];
    (answers, values(&conn))
}

#[test]
fn a_statement_without_a_journal_that_finds_the_file_full_loses_its_transaction() {
    // The store's many-row writes keep no statement journal (`OR FAIL`, see the module
    // docs): one that finds the file full undoes the whole transaction, so the write before
    // it fails too (with an error, nothing kept), and the one after goes on in a new one.
    let ([a, b, c], kept) = batch_finding_the_file_full(true);
    assert!(a.is_err(), "its transaction was undone");
    assert!(matches!(b, Err(Error::StorageFull { .. })));
    assert_eq!(c.expect("third, in a new transaction"), 3);
    assert_eq!(kept, vec![0, 3]);

    // With a statement journal, SQLite undoes that statement alone: the others commit.
    let ([a, b, c], kept) = batch_finding_the_file_full(false);
    assert_eq!(a.expect("kept"), 1);
    assert!(b.is_err());
    assert_eq!(c.expect("kept"), 3);
    assert_eq!(kept, vec![0, 1, 3]);
}

#[test]
fn a_failed_commit_fails_every_write_of_the_batch() {
    let mut conn = table();
    // A deferred foreign key that is broken at commit time makes COMMIT fail.
    conn.execute_batch(
        "PRAGMA foreign_keys = ON;
         CREATE TABLE parent (id INTEGER PRIMARY KEY);
         CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
    )
    .expect("tables");
    let (a, mut ra) = insert(1, None);
    let (reply, mut rb) = oneshot::channel();
    let broken = Task {
        work: |conn: &Connection| -> Result<i64> {
            conn.execute("INSERT INTO child VALUES (42)", [])
                .map_err(db)?;
            Ok(42)
        },
        reply,
        kind: Kind::Grows,
    };
    commit_batch(
        &mut conn,
        vec![a, Box::new(broken)],
        &AtomicU64::new(0),
        false,
    );
    assert!(answer(&mut ra).is_err());
    assert!(answer(&mut rb).is_err());
    assert_eq!(values(&conn), Vec::<i64>::new());
    assert!(
        conn.is_autocommit(),
        "the failed transaction was rolled back"
    );
}
