//! Several processes on one file, and a process killed with SIGKILL in the middle of its
//! writes. The test binary runs itself again as the child processes: a child is told its role
//! by an environment variable and reports each acknowledged write on stdout as it happens.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use outbox_core::{Claim, Lease, ListQuery, NewRecord, RecordId, State, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};

const ROLE: &str = "OUTBOX_SQLITE_TEST_CHILD";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Starts this test binary again, running only `test`, as a child with `role`.
fn spawn_child(test: &str, role: String) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

/// Writes one report line and flushes it, so it is out before the process can be killed.
fn report(line: String) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("flush");
}

/// The text after `tag` in a report line. The test harness may have printed the start of its
/// own line ("test name ... ") before the child's first report, so the tag is searched for.
fn after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|at| &line[at + tag.len()..])
}

/// The child's side of the claim test: claim until nothing is left, reporting each id.
fn claim_child(path: &str, token: u64) {
    runtime().block_on(async {
        let store = SqliteStore::open(path, SqliteConfig::default())
            .await
            .expect("child open");
        let lease = Lease {
            token,
            until: 1_000_000,
        };
        let mut empty_rounds = 0;
        while empty_rounds < 3 {
            let claimed = store
                .claim(Claim {
                    now: 1_000,
                    limit: 4,
                    lease,
                })
                .await
                .expect("child claim");
            if claimed.is_empty() {
                empty_rounds += 1;
            }
            for record in claimed {
                report(format!("claimed {}", record.id.0));
            }
        }
    });
}

#[test]
fn processes_claiming_one_file_never_share_a_record() {
    const TEST: &str = "processes_claiming_one_file_never_share_a_record";
    if let Ok(role) = std::env::var(ROLE) {
        if let Some((token, path)) = role.split_once(':') {
            claim_child(path, token.parse().expect("token"));
        }
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("shared.db");
    let all: BTreeSet<RecordId> = runtime().block_on(async {
        let store = SqliteStore::create(&path, SqliteConfig::default())
            .await
            .expect("create");
        let records = (0..400).map(|i| NewRecord::new(vec![i as u8])).collect();
        let ids = store.enqueue(records, 1_000).await.expect("enqueue");
        store.close().await;
        ids.into_iter().collect()
    });

    let children: Vec<(u64, Child)> = (1..=3)
        .map(|token| {
            let role = format!("{token}:{}", path.display());
            (token, spawn_child(TEST, role))
        })
        .collect();
    let mut owner: BTreeMap<RecordId, u64> = BTreeMap::new();
    for (token, mut child) in children {
        let stdout = child.stdout.take().expect("stdout");
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("line");
            if let Some(id) = after(&line, "claimed ") {
                let id = RecordId(id.parse().expect("id"));
                let earlier = owner.insert(id, token);
                assert_eq!(earlier, None, "{id} was claimed by two processes");
            }
        }
        assert!(
            child.wait().expect("wait").success(),
            "child {token} failed"
        );
    }
    assert_eq!(owner.keys().copied().collect::<BTreeSet<_>>(), all);

    // The file agrees: every record in flight under the lease of the process that said so.
    runtime().block_on(async {
        let store = SqliteStore::open(&path, SqliteConfig::default())
            .await
            .expect("open");
        for record in store.list(&ListQuery::new(1_000)).await.expect("list") {
            assert_eq!(record.state, State::InFlight);
            assert_eq!(
                record.lease.map(|l| l.token),
                owner.get(&record.id).copied()
            );
        }
    });
}

/// The child's side of the kill test: enqueue one record at a time forever, reporting each id
/// once `enqueue` has returned; every tenth round also claims what is due.
fn enqueue_child(path: &str) {
    runtime().block_on(async {
        let store = SqliteStore::open(path, SqliteConfig::default())
            .await
            .expect("child open");
        for i in 0u64.. {
            let payload = i.to_le_bytes().to_vec();
            let ids = store
                .enqueue(
                    vec![NewRecord::new(payload).in_group(format!("g{}", i % 5))],
                    1_000 + i,
                )
                .await
                .expect("child enqueue");
            report(format!("acked {} {i}", ids[0].0));
            if i % 10 == 9 {
                let lease = Lease {
                    token: 9,
                    until: 500_000,
                };
                let claimed = store
                    .claim(Claim {
                        now: 1_000 + i,
                        limit: 3,
                        lease,
                    })
                    .await
                    .expect("child claim");
                for record in claimed {
                    report(format!("claimed {}", record.id.0));
                }
            }
        }
    });
}

fn kill_after(path: &Path, acks: usize) -> (BTreeMap<RecordId, u64>, BTreeSet<RecordId>) {
    const TEST: &str = "a_process_killed_mid_write_loses_no_acknowledged_record";
    let mut child = spawn_child(TEST, format!("enqueue:{}", path.display()));
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut acked = BTreeMap::new();
    let mut claimed = BTreeSet::new();
    let mut record = |line: &str| {
        if let Some(rest) = after(line, "acked ") {
            let (id, i) = rest.split_once(' ').expect("acked line");
            acked.insert(RecordId(id.parse().expect("id")), i.parse().expect("i"));
        } else if let Some(id) = after(line, "claimed ") {
            claimed.insert(RecordId(id.parse().expect("id")));
        }
    };
    let mut seen = 0;
    for line in lines.by_ref() {
        let line = line.expect("line");
        if line.contains("acked ") {
            seen += 1;
        }
        record(&line);
        if seen == acks {
            break;
        }
    }
    // SIGKILL: no destructor, no checkpoint, a transaction perhaps half written.
    child.kill().expect("kill");
    child.wait().expect("wait");
    // Reports written before the kill are still in the pipe.
    for line in lines {
        record(&line.expect("line"));
    }
    (acked, claimed)
}

#[test]
fn a_process_killed_mid_write_loses_no_acknowledged_record() {
    if let Ok(role) = std::env::var(ROLE) {
        if let Some(path) = role.strip_prefix("enqueue:") {
            enqueue_child(path);
        }
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("killed.db");
    runtime().block_on(async {
        SqliteStore::create(&path, SqliteConfig::default())
            .await
            .expect("create")
            .close()
            .await;
    });
    let mut expected = BTreeMap::new();
    let mut in_flight = BTreeSet::new();
    // Three kills at different points; each life goes on from the file the last one left.
    for acks in [37, 120, 251] {
        let (acked, claimed) = kill_after(&path, acks);
        assert!(acked.len() >= acks);
        expected.extend(acked);
        in_flight.extend(claimed);
        runtime().block_on(async {
            let store = SqliteStore::open(&path, SqliteConfig::default())
                .await
                .expect("reopen after the kill");
            for (id, i) in &expected {
                let record = store.get(*id).await.expect("get");
                let record = record.unwrap_or_else(|| panic!("acknowledged {id} was lost"));
                assert_eq!(record.payload, i.to_le_bytes().to_vec(), "{id}");
            }
            // A claim may have committed just before the kill without being reported, so
            // the reported claims are a subset of what is in flight.
            let actual: BTreeSet<RecordId> = store
                .list(&ListQuery::new(100_000).state(State::InFlight))
                .await
                .expect("list")
                .into_iter()
                .map(|r| r.id)
                .collect();
            assert!(
                in_flight.is_subset(&actual),
                "{in_flight:?} not all in {actual:?}"
            );
            // The leases of the dead process expire and its records come back.
            let expired = store.expired(500_000, 10_000).await.expect("expired");
            assert_eq!(
                expired.iter().map(|r| r.id).collect::<BTreeSet<_>>(),
                actual
            );
            store.close().await;
        });
    }
}
