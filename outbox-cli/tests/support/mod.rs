//! What the CLI tests share: the scenario every output is checked on, the binary under test,
//! and a small DevTools client for the browser test.
#![allow(dead_code, unreachable_pub)] // each test file uses a part

pub mod cdp;
mod scenario;

use std::path::Path;
use std::process::{Command, Output};

pub use scenario::*;

/// The `outbox` binary with a fixed time zone, so local times are the same on every machine.
pub fn outbox() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.env("TZ", "UTC").env_remove("RUST_LOG");
    command
}

/// Runs `outbox ARGS` at [`NOW`] with no standard input.
pub fn run(args: &[&str]) -> Output {
    let now = NOW.to_string();
    outbox()
        .args(args)
        .args(["--now", &now])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the outbox binary")
}

/// Standard output of a run that must succeed.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "outbox {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Standard error of a run that must fail, with its exit code.
pub fn fails(args: &[&str]) -> (i32, String) {
    let out = run(args);
    assert!(!out.status.success(), "outbox {args:?} succeeded");
    let err = String::from_utf8(out.stderr).expect("UTF-8 errors");
    (out.status.code().unwrap_or(-1), err)
}

/// A hash of every byte of the file, to prove a read left it unchanged.
pub fn digest(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).expect("read file");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Checks output against the snapshot every backend shares (`tests/snapshots/NAME.snap`).
#[macro_export]
macro_rules! golden {
    ($name:expr, $value:expr) => {{
        let value = $value;
        insta::with_settings!({ prepend_module_to_snapshot => false, snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots") }, {
            insta::assert_snapshot!($name, value);
        })
    }};
}

/// Every read command on the seeded file at `path`: the golden output, and the file's bytes
/// unchanged by all of them.
pub fn golden_reads(path: &Path) {
    let p = path.to_str().expect("UTF-8 path");
    let before = digest(path);
    let reads: [(&str, &[&str]); 16] = [
        ("stats", &["stats", p]),
        ("stats_json", &["stats", p, "--json"]),
        ("list", &["list", p]),
        ("list_json", &["list", p, "--json"]),
        ("list_page", &["list", p, "--limit", "2", "--after", "#2"]),
        (
            "list_needs_attention",
            &["list", p, "--state", "needs-attention"],
        ),
        ("list_group", &["list", p, "--group", "doc-1", "--json"]),
        ("list_discarded", &["list", p, "--state", "discarded"]),
        (
            "list_discarded_json",
            &["list", p, "--state", "discarded", "--json"],
        ),
        ("show_json_payload", &["show", p, "1"]),
        ("show_binary_payload", &["show", p, "3"]),
        ("show_text_payload", &["show", p, "4"]),
        ("show_in_flight", &["show", p, "5"]),
        ("show_tombstone", &["show", p, "8"]),
        ("show_json", &["show", p, "3", "--json"]),
        ("show_tombstone_json", &["show", p, "8", "--json"]),
    ];
    for (name, args) in reads {
        crate::golden!(name, ok(args));
        assert_eq!(digest(path), before, "`outbox {args:?}` changed the file");
    }
}

/// `show --json` of one record, parsed.
pub fn show(path: &Path, id: u64) -> serde_json::Value {
    let out = ok(&["show", path.to_str().unwrap(), &id.to_string(), "--json"]);
    serde_json::from_str(&out).expect("show --json is JSON")
}

/// Runs `outbox ARGS` at [`NOW`] with `answer` on standard input.
pub fn answering(args: &[&str], answer: &str) -> Output {
    use std::io::Write;
    let now = NOW.to_string();
    let mut child = outbox()
        .args(args)
        .args(["--now", &now])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the outbox binary");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    child.wait_with_output().expect("outbox output")
}

/// The verbs on the seeded file at `path`, checked through `show --json`.
pub fn verbs(path: &Path) {
    let p = path.to_str().unwrap();
    assert_eq!(
        ok(&["retry", p, "1"]),
        "retried #1: due now with a fresh budget\n"
    );
    let one = show(path, 1);
    assert_eq!(
        (&one["state"], &one["attempts"], &one["next_attempt_at"]),
        (&"retrying".into(), &0.into(), &NOW.into())
    );
    assert_eq!(
        ok(&["requeue", p, "#4"]),
        "requeued #4: pending in its place, due now with a fresh budget\n"
    );
    let four = show(path, 4);
    assert_eq!(
        (&four["state"], &four["attempts"], &four["last_error"]),
        (&"pending".into(), &0.into(), &serde_json::Value::Null)
    );
    let (code, err) = fails(&["requeue", p, "4"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: cannot requeue #4: it is pending"),
        "{err}"
    );

    // A filter asks first, with the count.
    let args = [
        "discard",
        p,
        "--group",
        "doc-1",
        "--reason",
        "document deleted",
    ];
    let declined = answering(&args, "n\n");
    assert_eq!(declined.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&declined.stderr),
        "discard 2 records (group doc-1)? [y/N] error: not confirmed; nothing was changed\n"
    );
    assert_eq!(show(path, 2)["state"], "pending");
    let confirmed = answering(&args, "y\n");
    assert!(confirmed.status.success(), "{confirmed:?}");
    let log = String::from_utf8_lossy(&confirmed.stderr);
    assert!(
        log.contains(" via=command verb=discard record=#1 done reason=\"document deleted\"")
            && log.contains(" verb=discard record=#2 done"),
        "{log}"
    );
    assert_eq!(
        String::from_utf8_lossy(&confirmed.stdout),
        "discarded #1; its tombstone stays until pruned\n\
         discarded #2; its tombstone stays until pruned\n\
         discard: 2 of 2 records changed\n"
    );
    let reason = show(path, 2)["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.starts_with("document deleted (discarded by a person, ")
            && reason.ends_with(", with the outbox command)"),
        "{reason}"
    );

    // An in-flight record is left alone, and said so.
    let (code, err) = fails(&["discard", p, "5", "--reason", "x"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: cannot discard #5: it is in flight"),
        "{err}"
    );

    // Prune: the discard of #8 (T2) is 5 minutes old, the new tombstones were made at NOW.
    assert_eq!(
        ok(&["prune", p, "--older-than", "1m", "--yes"]),
        "pruned 1 (asked about 0 rejected records and 1 tombstone from before 2026-12-01 09:14:00)\n"
    );
    let (code, err) = fails(&["show", p, "8"]);
    assert_eq!(code, 1, "{err}");
}

/// Mistakes a person can make, each one line on stderr and a non-zero exit.
pub fn user_errors(dir: &Path, seeded: &Path) {
    let p = seeded.to_str().unwrap();
    let missing = dir.join("missing.db");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a database at all").unwrap();
    let empty = dir.join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        (
            vec!["stats".into(), missing.display().to_string()],
            1,
            format!("error: no such file: {}", missing.display()),
        ),
        (
            vec!["list".into(), text.display().to_string()],
            1,
            format!(
                "error: {} is not an outbox file (neither SQLite nor redb)",
                text.display()
            ),
        ),
        (
            vec!["show".into(), empty.display().to_string(), "1".into()],
            1,
            format!("error: {} is empty, not an outbox file", empty.display()),
        ),
        (
            vec!["show".into(), p.into(), "99".into()],
            1,
            "error: no record #99 in the outbox (delivered and pruned records are not kept)".into(),
        ),
        (
            vec![
                "stats".into(),
                p.into(),
                "--schema".into(),
                "billing".into(),
            ],
            2,
            format!("error: --schema applies to a PostgreSQL URL only, and {p} is a file path"),
        ),
        (
            vec!["retry".into(), p.into()],
            2,
            "error: say which records to retry: a record id, or --state and/or --group".into(),
        ),
    ];
    for (args, code, line) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (got, err) = fails(&args);
        assert_eq!((got, err.trim_end()), (code, line.as_str()), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // A bad filter is refused by the parser, with clap's usage hint.
    let (code, err) = fails(&["list", p, "--state", "done"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with(
            "error: invalid value 'done' for '--state <STATE>': unknown state \"done\""
        ),
        "{err}"
    );
}

/// `show --json` of one record of a PostgreSQL schema, parsed.
pub fn show_on(url: &str, schema: &str, id: u64) -> serde_json::Value {
    let out = ok(&["show", url, "--schema", schema, &id.to_string(), "--json"]);
    serde_json::from_str(&out).expect("show --json is JSON")
}

/// The revision `show --json` gives record `id`: what a person saw.
pub fn revision(path: &Path, id: u64) -> String {
    show(path, id)["revision"]
        .as_str()
        .expect("a revision")
        .to_owned()
}

/// Records the server's verdict on the idle record `id`, as a runner's report would (for a
/// test that changes a record between a person's look and their repair).
pub async fn reject_now(store: &dyn outbox_core::Store, id: u64) {
    report(
        store,
        id,
        outbox_core::State::Rejected,
        "HTTP 422 Unprocessable Entity: the server changed its mind",
    )
    .await;
}

/// Records a failure of the idle record `id` with the server's words `error`, leaving it in
/// `state` (not due again before an hour has passed).
pub async fn report(
    store: &dyn outbox_core::Store,
    id: u64,
    state: outbox_core::State,
    error: &str,
) {
    use outbox_core::{Change, Guard, Progress, RecordId, State, Transition};
    let record = store.get(RecordId(id)).await.unwrap().expect("the record");
    let verdict = Transition {
        id: record.id,
        guard: Guard::Idle,
        change: Change::Update(Progress {
            state,
            attempts: record.attempts + 1,
            last_attempt_at: Some(NOW),
            next_attempt_at: (state == State::Retrying).then_some(NOW + 60 * MINUTE),
            last_error: Some(error.into()),
            ..record.progress()
        }),
    };
    let applied = store.apply(vec![verdict]).await.unwrap();
    assert!(applied.skipped.is_empty());
}

/// A retry of record `id` with the revision seen before it was rejected: refused, exit 1,
/// "changed since you looked", and the record still rejected.
pub fn retry_refused_after_a_change(path: &Path, id: u64, seen: &str) {
    let p = path.to_str().unwrap();
    let (code, err) = fails(&["retry", p, &id.to_string(), "--seen", seen]);
    assert_eq!(code, 1, "{err}");
    let (log, error) = err
        .trim_end()
        .rsplit_once('\n')
        .expect("a log line and an error");
    assert!(
        error.starts_with(&format!(
            "error: left #{id} as it is: it changed since you looked (revision {seen}): it is rejected now"
        )),
        "{err}"
    );
    // The refused attempt is logged too.
    assert!(
        log.contains(&format!(
            " via=command verb=retry record=#{id} unchanged: it changed since you looked"
        )),
        "{log}"
    );
    let now = show(path, id);
    assert_eq!(now["state"], "rejected");
    assert_ne!(now["revision"], seen);
    // With the revision as it is now, a retry of a rejected record is refused for what it is.
    let fresh = now["revision"].as_str().unwrap();
    let (code, err) = fails(&["retry", p, &id.to_string(), "--seen", fresh]);
    assert_eq!(code, 1);
    assert!(err.contains("it was rejected by the server"), "{err}");
}

/// `resume` on the seeded target (`args`: the target and its options), which holds a halt:
/// asked and refused, nothing changes; with `--yes` the halt is gone and an audit line says
/// who lifted it; a second resume has nothing to do.
pub fn resume_lifts_the_halt(args: &[&str]) {
    let halt = |args: &[&str]| -> serde_json::Value {
        let stats = ok(&[&["stats"], args, &["--json"]].concat());
        serde_json::from_str::<serde_json::Value>(&stats).expect("stats --json is JSON")["halt"]
            .clone()
    };
    assert_eq!(halt(args)["reason"], "HTTP 401 Unauthorized: token expired");

    let refused = answering(&[&["resume"], args].concat(), "n\n");
    assert!(!refused.status.success());
    let asked = String::from_utf8_lossy(&refused.stderr);
    assert!(
        asked.contains("lift the halt since") && asked.contains("token expired"),
        "{asked}"
    );
    assert!(asked.contains("nothing was changed"), "{asked}");
    assert!(halt(args).is_object(), "still halted");

    let done = run(&[&["resume"], args, &["--yes"]].concat());
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let said = String::from_utf8(done.stdout).unwrap();
    assert!(said.starts_with("lifted the halt since"), "{said}");
    assert!(
        said.contains("every runner resumes when it reads that"),
        "{said}"
    );
    let audit = String::from_utf8(done.stderr).unwrap();
    assert!(
        audit.contains("via=command verb=resume") && audit.contains("done: lifted"),
        "{audit}"
    );
    assert!(halt(args).is_null(), "lifted");

    assert_eq!(
        ok(&[&["resume"], args].concat()),
        "not halted: nothing to resume\n"
    );
}
