//! The binary on SQLite files the tests make.
#![cfg(feature = "sqlite")]

mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use outbox_sqlite::{SqliteConfig, SqliteStore, SCHEMA_VERSION};

async fn seeded(dir: &Path) -> PathBuf {
    let path = dir.join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::seed(&store).await;
    store.close().await;
    path
}

#[tokio::test]
async fn read_commands_print_the_golden_output_and_never_change_the_file() {
    let dir = tempfile::tempdir().unwrap();
    support::golden_reads(&seeded(dir.path()).await);
}

#[tokio::test]
async fn verbs_change_records_through_the_core_rules() {
    let dir = tempfile::tempdir().unwrap();
    support::verbs(&seeded(dir.path()).await);
}

#[tokio::test]
async fn resume_lifts_the_persisted_halt() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    support::resume_lifts_the_halt(&[path.to_str().unwrap()]);
}

#[tokio::test]
async fn a_record_rejected_between_show_and_retry_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let seen = support::revision(&path, 3);
    // The application, still running, records the server's verdict meanwhile.
    let app = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::reject_now(&app, 3).await;
    support::retry_refused_after_a_change(&path, 3, &seen);
    app.close().await;
}

#[tokio::test]
async fn user_errors_are_one_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    support::user_errors(dir.path(), &path);

    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let (code, err) = support::fails(&["stats", foreign.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        format!(
            "error: {} is not an outbox: an SQLite database of another application (application_id 0x0)",
            foreign.display()
        )
    );

    let newer = dir.path().join("newer.db");
    SqliteStore::create(&newer, SqliteConfig::default())
        .await
        .unwrap()
        .close()
        .await;
    rusqlite::Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let (code, err) = support::fails(&["list", newer.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("was written by a newer outbox"), "{err}");
    assert_eq!(err.lines().count(), 1);
}

#[tokio::test]
async fn reads_and_verbs_work_beside_a_running_application() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    // The application keeps the file open for writing the whole time.
    let app = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .unwrap();
    let p = path.to_str().unwrap();
    let started = Instant::now();
    assert!(support::ok(&["stats", p]).contains("needs-attention          2"));
    support::ok(&["retry", p, "9"]);
    assert_eq!(
        outbox_core::Store::get(&app, outbox_core::RecordId(9))
            .await
            .unwrap()
            .unwrap()
            .state,
        outbox_core::State::Pending,
        "the application sees the retry"
    );
    assert!(started.elapsed().as_secs() < 10);
    app.close().await;
}

/// The must-show: a record that failed with 503, 503, a timeout and 422 is shown with
/// its four attempts in order, each with its time, class, status, how long it took and its
/// error; eleven attempts show the last ten, the oldest dropped.
#[tokio::test]
async fn show_lists_each_attempt_in_order_and_keeps_the_last_ten() {
    use outbox_core::{machine, NewRecord, Outcome, RetryPolicy, Store};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    let ids = store
        .enqueue(vec![NewRecord::new(b"{}".to_vec()).with_key("note-7")], 0)
        .await
        .unwrap();
    let policy = RetryPolicy::default().with_max_attempts(100);
    let mut rng = outbox_core::fastrand::Rng::with_seed(3);
    let mut now = support::NOW - 20 * 3_600_000;
    let replies = [
        Outcome::transient("HTTP 503 Service Unavailable", None),
        Outcome::transient("HTTP 503 Service Unavailable", None),
        Outcome::no_answer("timed out after 30s"),
        Outcome::rejected("HTTP 422 Unprocessable Entity: title is empty"),
    ];
    for outcome in replies {
        now += 3_600_000;
        fail(&store, &policy, &mut rng, outcome, now).await;
        if now > support::NOW - 17 * 3_600_000 {
            // The 422 rejected it; a person requeues it so it can fail again below.
            let rejected = store.get(ids[0]).await.unwrap().unwrap();
            let requeue = machine::requeue(&rejected, now).unwrap();
            store.apply(vec![requeue]).await.unwrap();
        }
    }
    let id = ids[0].0.to_string();
    let shown = support::ok(&["show", path.to_str().unwrap(), &id]);
    let history: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("history"))
        .take(6)
        .collect();
    assert_eq!(
        history,
        [
            "history        4 attempts, oldest first",
            "   #  ended                class        status  took      error",
            "   1  2026-11-30 14:15:00  later        503     -         HTTP 503 Service Unavailable",
            "   2  2026-11-30 15:15:00  later        503     -         HTTP 503 Service Unavailable",
            "   3  2026-11-30 16:15:00  no answer    -       -         timed out after 30s",
            "   4  2026-11-30 17:15:00  rejected     422     -         HTTP 422 Unprocessable Entity: title is empty",
        ],
        "{shown}"
    );

    // Seven more: the eleventh drops the first.
    for _ in 0..7 {
        now += 3_600_000;
        let outcome = Outcome::transient("HTTP 502 Bad Gateway", None);
        fail(&store, &policy, &mut rng, outcome, now).await;
    }
    let json = support::show(&path, ids[0].0);
    let attempts = json["history"].as_array().unwrap();
    assert_eq!(attempts.len(), 10);
    assert_eq!(attempts[0]["error"], "HTTP 503 Service Unavailable");
    assert_eq!(attempts[0]["at"], support::NOW - 18 * 3_600_000);
    assert_eq!(attempts[3]["class"], "later");
    assert_eq!(attempts[9]["status"], 502);
    let shown = support::ok(&["show", path.to_str().unwrap(), &id]);
    assert!(
        shown.contains("history        the last 10 attempts, oldest first"),
        "{shown}"
    );
    store.close().await;
}

/// Claims the one waiting record of `store` and reports `outcome` for it, ended at `at`.
async fn fail(
    store: &SqliteStore,
    policy: &outbox_core::RetryPolicy,
    rng: &mut outbox_core::fastrand::Rng,
    outcome: outbox_core::Outcome,
    at: u64,
) {
    use outbox_core::{machine, Claim, Lease, Store};
    // Claimed far ahead, so whatever backoff the last report drew has passed.
    let later = support::NOW + 1_000 * 86_400_000;
    let claim = Claim {
        now: later,
        limit: 1,
        lease: Lease {
            token: at,
            until: later + 60_000,
        },
    };
    let claimed = store.claim(claim).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let step = machine::on_outcome(&claimed[0], &outcome, policy, at, rng);
    store.apply(vec![step.transition]).await.unwrap();
}

#[tokio::test]
async fn a_file_an_older_build_wrote_is_looked_at_through_an_upgraded_copy() {
    let dir = tempfile::tempdir().unwrap();
    let current = seeded(dir.path()).await;
    let older_dir = tempfile::tempdir().unwrap();
    let older = seeded(older_dir.path()).await;
    // Written by the build before this one (its layout differs by what the last step adds,
    // which the step creates where it is missing).
    let conn = rusqlite::Connection::open(&older).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION - 1)
        .unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    drop(conn);
    let before = support::digest(&older);

    let path = older.to_str().unwrap();
    let out = support::run(&["stats", path, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.trim_end(),
        format!(
            "note: {path} was written by an older outbox (schema version {}): read from an \
             upgraded copy made now (the file is not changed)",
            SCHEMA_VERSION - 1
        )
    );
    let stats = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stats,
        support::ok(&["stats", current.to_str().unwrap(), "--json"])
    );
    // The copy goes with the command: nothing is left in the temporary directory.
    let temp = tempfile::tempdir().unwrap();
    let out = support::outbox()
        .args(["show", path, "1", "--now", &support::NOW.to_string()])
        .env("TMPDIR", temp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let left: Vec<_> = std::fs::read_dir(temp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let listed = support::ok(&["list", path, "--json"]);
    assert_eq!(
        listed,
        support::ok(&["list", current.to_str().unwrap(), "--json"])
    );
    assert_eq!(support::digest(&older), before, "the file is not changed");

    // Following it would follow a copy, not the file: refused, with what to do.
    let (code, err) = support::fails(&["watch", path]);
    assert_eq!(code, 1);
    assert!(err.contains("older schema"), "{err}");
    assert!(err.contains("`stats`, `list` or `show`"), "{err}");
    assert_eq!(support::digest(&older), before);
}

#[tokio::test]
async fn a_row_that_cannot_be_read_is_listed_shown_and_discarded_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let file = path.to_str().unwrap();
    // A state code no build writes, as a hand edit or a bit flip leaves it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let id: i64 = conn
        .query_row("SELECT min(id) FROM records", [], |row| row.get(0))
        .unwrap();
    conn.execute("UPDATE records SET state = 9 WHERE id = ?1", [id])
        .unwrap();
    drop(conn);
    let id = id.to_string();

    // `get` passes such a row by; the commands still find it, and say why it cannot be read.
    let listed = support::ok(&["list", file, "--state", "unreadable"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{id} ")) && l.ends_with("unknown state code 9")),
        "{listed}"
    );
    assert!(listed.contains("no runner delivers them"), "{listed}");
    let json = support::ok(&["list", file, "--state", "unreadable", "--json"]);
    let page: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        page["records"],
        serde_json::json!([{ "id": id.parse::<u64>().unwrap(), "state": "unreadable",
            "reason": "unknown state code 9" }])
    );
    let shown = support::ok(&["show", file, &id]);
    assert!(shown.contains("unreadable (damaged on disk)"), "{shown}");
    assert!(shown.contains("unknown state code 9"), "{shown}");

    // Not by group: the group may be what cannot be read.
    let (_, by_group) = support::fails(&["list", file, "--state", "unreadable", "--group", "g"]);
    assert!(by_group.contains("leave --group out"), "{by_group}");
    // Only a discard applies, without a revision (such a row has none), and it keeps a
    // tombstone.
    let (_, refused) = support::fails(&["retry", file, &id]);
    assert!(refused.contains("it cannot be read"), "{refused}");
    let (_, seen) = support::fails(&[
        "discard",
        file,
        &id,
        "--reason",
        "damaged",
        "--seen",
        "0123456789abcdef",
        "--yes",
    ]);
    assert!(seen.contains("no revision"), "{seen}");
    let discarded = support::ok(&["discard", file, &id, "--reason", "damaged", "--yes"]);
    assert!(
        discarded.contains(&format!("discarded #{id}")),
        "{discarded}"
    );
    let tombstone = support::ok(&["show", file, &id]);
    assert!(tombstone.contains("discarded (a tombstone"), "{tombstone}");
    assert!(
        tombstone.contains("unreadable row discarded: unknown state code 9"),
        "{tombstone}"
    );
    let left = support::ok(&["list", file, "--state", "unreadable"]);
    assert_eq!(left, "no records match\n");
}
