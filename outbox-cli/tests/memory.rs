//! The commands run in-process on the memory reference store, against the same golden output
//! as the binary on every file backend: the output depends on the queue, not on the backend.

mod support;

use std::future::Future;
use std::io::Cursor;

use clap::Parser;
use outbox_cli::audit::User;
use outbox_cli::cli::Cli;
use outbox_cli::commands::{execute, Io};
use outbox_cli::CliError;
use outbox_core::{
    machine, Claim, Halt, Lease, NewRecord, Outcome, RecordId, RetryPolicy, State, Store,
};
use outbox_memory::MemoryStore;
use support::{seed, NOW};

async fn seeded() -> MemoryStore {
    // Local times in the output are read in the process's time zone.
    std::env::set_var("TZ", "UTC");
    let store = MemoryStore::new();
    seed(&store).await;
    store
}

/// Runs `outbox ARGS` (target ignored) on `store`; returns stdout, stderr and the result.
async fn run(
    store: &dyn Store,
    args: &[&str],
    input: &str,
) -> (String, String, Result<(), CliError>) {
    run_reading(store, args, &mut Cursor::new(input.as_bytes().to_vec())).await
}

/// [`run`], its answers read from `input`.
async fn run_reading(
    store: &dyn Store,
    args: &[&str],
    input: &mut dyn std::io::BufRead,
) -> (String, String, Result<(), CliError>) {
    run_at(store, args, input, NOW).await
}

/// [`run_reading`] at the time `now`.
async fn run_at(
    store: &dyn Store,
    args: &[&str],
    input: &mut dyn std::io::BufRead,
    now: u64,
) -> (String, String, Result<(), CliError>) {
    let cli = Cli::try_parse_from(std::iter::once("outbox").chain(args.iter().copied()))
        .expect("arguments parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let result = {
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            input,
        };
        execute(store, &cli.command, now, &mut io).await
    };
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
        result,
    )
}

async fn ok(store: &dyn Store, args: &[&str]) -> String {
    ok_at(store, args, NOW).await
}

/// [`ok`] at the time `now`.
async fn ok_at(store: &dyn Store, args: &[&str], now: u64) -> String {
    let (out, err, result) = run_at(store, args, &mut Cursor::new(Vec::new()), now).await;
    assert!(result.is_ok(), "{args:?}: {result:?} {err}");
    out
}

#[tokio::test]
async fn read_commands_match_the_golden_output() {
    let store = seeded().await;
    golden!("stats", ok(&store, &["stats", "mem"]).await);
    golden!("stats_json", ok(&store, &["stats", "mem", "--json"]).await);
    golden!("list", ok(&store, &["list", "mem"]).await);
    golden!("list_json", ok(&store, &["list", "mem", "--json"]).await);
    golden!(
        "list_page",
        ok(&store, &["list", "mem", "--limit", "2", "--after", "#2"]).await
    );
    golden!(
        "list_needs_attention",
        ok(&store, &["list", "mem", "--state", "needs-attention"]).await
    );
    golden!(
        "list_group",
        ok(&store, &["list", "mem", "--group", "doc-1", "--json"]).await
    );
    golden!(
        "list_discarded",
        ok(&store, &["list", "mem", "--state", "discarded"]).await
    );
    golden!(
        "list_discarded_json",
        ok(&store, &["list", "mem", "--state", "discarded", "--json"]).await
    );
    golden!("show_json_payload", ok(&store, &["show", "mem", "1"]).await);
    golden!(
        "show_binary_payload",
        ok(&store, &["show", "mem", "3"]).await
    );
    golden!("show_text_payload", ok(&store, &["show", "mem", "4"]).await);
    golden!("show_in_flight", ok(&store, &["show", "mem", "5"]).await);
    golden!("show_tombstone", ok(&store, &["show", "mem", "8"]).await);
    golden!(
        "show_json",
        ok(&store, &["show", "mem", "3", "--json"]).await
    );
    golden!(
        "show_tombstone_json",
        ok(&store, &["show", "mem", "8", "--json"]).await
    );
}

#[tokio::test]
async fn an_unknown_id_is_one_clear_error() {
    let store = seeded().await;
    let (_, _, result) = run(&store, &["show", "mem", "7"], "").await;
    let err = result.unwrap_err();
    assert_eq!(
        err.line(),
        "no record #7 in the outbox (delivered and pruned records are not kept)"
    );
    assert_eq!(err.exit_code(), 1);
}

#[tokio::test]
async fn retry_gives_a_parked_record_a_fresh_budget_due_now() {
    let store = seeded().await;
    let out = ok(&store, &["retry", "mem", "1"]).await;
    assert_eq!(out, "retried #1: due now with a fresh budget\n");
    let one = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(
        (one.state, one.attempts, one.next_attempt_at),
        (State::Retrying, 0, Some(NOW))
    );
    // A crash-looped record was never attempted: it is pending again.
    ok(&store, &["retry", "mem", "9"]).await;
    assert_eq!(
        store.get(RecordId(9)).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn verbs_refuse_records_they_do_not_apply_to_in_one_line() {
    let store = seeded().await;
    let cases: [(&[&str], &str); 5] = [
        (&["retry", "mem", "4"], "cannot retry #4: it was rejected by the server, whose verdict is final; `outbox requeue` sends it again"),
        (&["retry", "mem", "5"], "cannot retry #5: it is in flight (being delivered right now); try again once its delivery has reported"),
        (&["requeue", "mem", "1"], "cannot requeue #1: it is needs-attention, and only a rejected record can be requeued (`outbox retry` gives it a fresh budget)"),
        (&["discard", "mem", "8", "--reason", "x"], "cannot discard #8: it was discarded (only its tombstone is left)"),
        (&["retry", "mem"], "say which records to retry: a record id, or --state and/or --group"),
    ];
    for (args, line) in cases {
        let (out, _, result) = run(&store, args, "").await;
        assert_eq!(result.unwrap_err().line(), line, "{args:?}");
        assert_eq!(out, "");
    }
    // Nothing changed.
    assert_eq!(store.stats().await.unwrap().needs_attention, 2);
}

#[tokio::test]
async fn requeue_readmits_a_rejected_record_in_its_place_unless_its_group_is_in_flight() {
    let store = seeded().await;
    // A later write of doc-2 is being delivered: requeueing #4 now would put two of the group
    // in flight, so the store skips it and the command says why.
    let later = NewRecord::new(b"{}".to_vec()).in_group("doc-2");
    assert_eq!(
        store.enqueue(vec![later], NOW).await.unwrap().ids,
        [RecordId(10)]
    );
    let lease = Lease {
        token: 3,
        until: NOW + 30_000,
    };
    let claimed = store
        .claim(Claim {
            now: NOW,
            limit: 10,
            lease,
        })
        .await
        .unwrap();
    assert!(claimed.iter().any(|r| r.id == RecordId(10)));
    let (out, _, result) = run(&store, &["requeue", "mem", "4"], "").await;
    assert_eq!(out, "");
    assert_eq!(
        result.unwrap_err().line(),
        "left #4 as it is: a record of its group is in flight; requeue it once that delivery has reported"
    );
    assert_eq!(
        store.get(RecordId(4)).await.unwrap().unwrap().state,
        State::Rejected
    );

    let delivered = machine::on_outcome(
        &store.get(RecordId(10)).await.unwrap().unwrap(),
        &Outcome::Delivered,
        &RetryPolicy::default(),
        NOW,
        &mut outbox_core::fastrand::Rng::with_seed(1),
    );
    store.apply(vec![delivered.transition]).await.unwrap();
    let out = ok(&store, &["requeue", "mem", "4"]).await;
    assert_eq!(
        out,
        "requeued #4: pending in its place, due now with a fresh budget\n"
    );
    let four = store.get(RecordId(4)).await.unwrap().unwrap();
    assert_eq!(
        (
            four.state,
            four.attempts,
            four.last_error,
            four.next_attempt_at
        ),
        (State::Pending, 0, None, Some(NOW))
    );
}

#[tokio::test]
async fn a_filter_asks_for_a_confirmation_with_the_count() {
    let store = seeded().await;
    let args = ["retry", "mem", "--state", "needs-attention"];
    let (out, err, result) = run(&store, &args, "n\n").await;
    assert_eq!(err, "retry 2 records (state needs-attention)? [y/N] ");
    assert_eq!(
        result.unwrap_err().line(),
        "not confirmed; nothing was changed"
    );
    assert_eq!(out, "");
    let (_, _, result) = run(&store, &args, "").await;
    assert!(result.unwrap_err().line().contains("pass --yes"));
    assert_eq!(store.stats().await.unwrap().needs_attention, 2);

    let (out, _, result) = run(&store, &args, "y\n").await;
    result.unwrap();
    assert_eq!(
        out,
        "retried #1: due now with a fresh budget\nretried #9: due now with a fresh budget\nretry: 2 of 2 records changed\n"
    );
    assert_eq!(store.stats().await.unwrap().needs_attention, 0);
}

#[tokio::test]
async fn discard_by_group_with_yes_leaves_tombstones() {
    let store = seeded().await;
    let (out, err, result) = run(
        &store,
        &[
            "discard",
            "mem",
            "--group",
            "doc-1",
            "--reason",
            "document deleted",
            "--yes",
        ],
        "",
    )
    .await;
    result.unwrap();
    // Each change is logged: time, user, tool, verb, record, result and the reason given.
    let user = User::current();
    let name = user.name.clone().expect("a user name");
    assert_eq!(
        err,
        format!(
            "audit: 2026-12-01T09:15:00.000Z user={user} via=command verb=discard record=#1 done reason=\"document deleted\"\n\
             audit: 2026-12-01T09:15:00.000Z user={user} via=command verb=discard record=#2 done reason=\"document deleted\"\n"
        )
    );
    assert_eq!(
        out,
        "discarded #1; its tombstone stays until pruned\ndiscarded #2; its tombstone stays until pruned\ndiscard: 2 of 2 records changed\n"
    );
    let tombstones = store.tombstones(None, 10).await.unwrap();
    let ids: Vec<u64> = tombstones.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, [1, 2, 8]);
    // The tombstone says a person did it, who, and through which tool.
    assert_eq!(
        tombstones[0].reason,
        format!("document deleted (discarded by a person, {name}, with the outbox command)")
    );
}

#[tokio::test]
async fn prune_counts_what_it_will_remove_and_asks() {
    let store = seeded().await;
    // The rejection (T1) and the discard (T2) are 1h 5m and 5m old.
    let (out, _, result) = run(&store, &["prune", "mem", "--older-than", "1h"], "").await;
    assert!(result.unwrap_err().line().contains("pass --yes"), "{out}");
    let (out, err, result) = run(&store, &["prune", "mem", "--older-than", "1h"], "yes\n").await;
    result.unwrap();
    let (question, log) = err.split_once("? [y/N] ").expect("the question");
    assert_eq!(
        question,
        "prune 1 rejected record and 0 tombstones from before 2026-12-01 08:15:00"
    );
    assert!(
        log.starts_with("audit: 2026-12-01T09:15:00.000Z user=")
            && log.ends_with(" via=command verb=prune done: pruned 1 (asked about 1 rejected record and 0 tombstones from before 2026-12-01 08:15:00)\n"),
        "{log}"
    );
    assert_eq!(out, "pruned 1 (asked about 1 rejected record and 0 tombstones from before 2026-12-01 08:15:00)\n");
    assert_eq!(store.stats().await.unwrap().rejected, 0);
    assert_eq!(store.stats().await.unwrap().discarded, 1);
    let out = ok(&store, &["prune", "mem", "--older-than", "7d"]).await;
    assert_eq!(
        out,
        "nothing to prune: no rejected record or tombstone from before 2026-11-24 09:15:00\n"
    );
}

#[tokio::test]
async fn bad_filters_are_refused_by_the_parser() {
    for args in [
        &["list", "x", "--state", "done"][..],
        &["list", "x", "--limit", "0"],
        &["show", "x", "abc"],
        &["prune", "x", "--older-than", "7"],
        &["retry", "x", "3", "--state", "pending"],
        &["discard", "x", "3"],
    ] {
        let err =
            Cli::try_parse_from(std::iter::once("outbox").chain(args.iter().copied())).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{args:?}");
    }
    let store = seeded().await;
    let (_, _, result) = run(&store, &["list", "mem", "--group", ""], "").await;
    let err = result.unwrap_err();
    assert_eq!(
        err.line(),
        "--group: invalid key: a group key must not be empty (use no group instead)"
    );
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    use clap::CommandFactory;
    let cli = Cli::command();
    for sub in cli.get_subcommands() {
        let help = sub
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        assert!(
            help.starts_with("Example:\n  outbox "),
            "{}: {help:?}",
            sub.get_name()
        );
        assert!(sub.get_about().is_some(), "{}", sub.get_name());
    }
    assert_eq!(cli.get_subcommands().count(), 10);
    let top = Cli::command().render_long_help().to_string();
    assert!(
        top.starts_with("Inspect and repair an outbox queue"),
        "{top}"
    );
    assert!(top.contains("Examples:\n  outbox stats app.db"), "{top}");
}

#[tokio::test]
async fn show_and_stats_tell_of_preconditions_and_merged_writes() {
    std::env::set_var("TZ", "UTC");
    let store = MemoryStore::new();
    for body in ["v1", "v2", "v3"] {
        let edit = NewRecord::new(body.as_bytes().to_vec())
            .in_group("note-7")
            .replacing("note-7/body")
            .expecting("3");
        store.enqueue(vec![edit], NOW).await.unwrap();
    }
    let shown = ok(&store, &["show", "mem", "1"]).await;
    assert!(
        shown.contains("expects        version 3 (sent as If-Match)"),
        "{shown}"
    );
    assert!(shown.contains("replaces       note-7/body"), "{shown}");
    let stats = ok(&store, &["stats", "mem"]).await;
    assert!(
        stats
            .contains("superseded               2   writes merged into a waiting one of their key"),
        "{stats}"
    );
    let json = ok(&store, &["show", "mem", "1", "--json"]).await;
    assert!(json.contains(r#""expected_version": "3""#), "{json}");
    assert!(json.contains(r#""replaces": "note-7/body""#), "{json}");
    let stats_json = ok(&store, &["stats", "mem", "--json"]).await;
    assert!(stats_json.contains(r#""superseded": 2"#), "{stats_json}");
}

/// The memory store, with a runner's verdict on one record landing between the command's
/// read and its write (the window no `--seen` can close; the store's guard does).
#[derive(Debug)]
struct Meanwhile {
    inner: MemoryStore,
    verdict: std::sync::Mutex<Option<u64>>,
}

#[outbox_core::async_trait]
impl outbox_core::StoreLayer for Meanwhile {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn apply(
        &self,
        transitions: Vec<outbox_core::Transition>,
    ) -> outbox_core::Result<outbox_core::Applied> {
        let verdict = self.verdict.lock().unwrap().take();
        if let Some(id) = verdict {
            support::reject_now(&self.inner, id).await;
        }
        self.inner.apply(transitions).await
    }
}

#[tokio::test]
async fn a_verdict_recorded_between_the_read_and_the_write_is_never_overwritten() {
    let store = Meanwhile {
        inner: seeded().await,
        verdict: std::sync::Mutex::new(Some(1)),
    };
    let (out, err, result) = run(&store, &["retry", "mem", "1"], "").await;
    let error = result.unwrap_err();
    assert_eq!(error.exit_code(), 1);
    assert!(
        error
            .line()
            .starts_with("left #1 as it is: it changed since you looked: it is rejected now"),
        "{}",
        error.line()
    );
    assert_eq!(out, "");
    assert!(
        err.contains("verb=retry record=#1 unchanged: it changed since you looked"),
        "{err}"
    );
    let one = store.get(RecordId(1)).await.unwrap().unwrap();
    assert_eq!(one.state, State::Rejected, "the verdict stands");
    assert!(one.last_error.unwrap().contains("changed its mind"));

    // On a filter: the others are repaired, the changed one is named.
    *store.verdict.lock().unwrap() = Some(9);
    let args = ["retry", "mem", "--state", "needs-attention", "--yes"];
    let (out, _, result) = run(&store, &args, "").await;
    assert_eq!(
        out,
        "left #9 as it is: it changed since you looked: it is rejected now, with 1 answered failure (`outbox show` it again)\nretry: 0 of 1 record changed\n"
    );
    assert_eq!(
        result.unwrap_err().line(),
        "1 of 1 record left unchanged (changed since you looked, or busy): #9"
    );
    assert_eq!(
        store.get(RecordId(9)).await.unwrap().unwrap().state,
        State::Rejected
    );
}

#[tokio::test]
async fn human_output_escapes_a_servers_control_characters_and_json_stays_exact() {
    let store = seeded().await;
    let hostile = "\u{1b}]0;x\u{7}\u{1b}[31mred\u{1b}[0m\u{9b}2J\u{7f} HTTP 500\nsecond line";
    support::report(&store, 3, State::Retrying, hostile).await;
    let shown = "\\x1b]0;x\\x07\\x1b[31mred\\x1b[0m\\u{9b}2J\\x7f HTTP 500\\nsecond line";
    let control = |text: &str| {
        text.chars()
            .any(|c| outbox_cli::escape::is_control(c) && c != '\n')
    };
    for args in [
        &["list", "mem"][..],
        &["show", "mem", "3"],
        &["stats", "mem"],
    ] {
        let out = ok(&store, args).await;
        // A table cell is cut after 60 characters; `show` prints the whole text.
        let want = if args[0] == "show" {
            shown
        } else {
            &shown[..56]
        };
        assert!(out.contains(want), "{args:?}:\n{out}");
        assert!(
            !control(&out),
            "{args:?} printed a control character:\n{out}"
        );
    }
    for args in [
        &["list", "mem", "--json"][..],
        &["show", "mem", "3", "--json"],
        &["stats", "mem", "--json"],
    ] {
        let out = ok(&store, args).await;
        assert!(!control(&out), "{args:?}:\n{out}");
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        let error = match args[0] {
            "list" => value["records"][2]["last_error"].clone(),
            "show" => value["last_error"].clone(),
            _ => value["common_errors"][0]["error"].clone(),
        };
        assert_eq!(error, hostile, "{args:?}: the JSON holds the exact text");
    }
}

#[tokio::test]
async fn stats_list_and_show_tell_of_records_held_for_later() {
    std::env::set_var("TZ", "UTC");
    let store = MemoryStore::new();
    let hour = 3_600_000;
    store
        .enqueue(
            vec![
                NewRecord::new(b"reminder".to_vec()).not_before(NOW + hour),
                NewRecord::new(b"now".to_vec()),
            ],
            NOW,
        )
        .await
        .unwrap();
    let stats = ok(&store, &["stats", "mem"]).await;
    assert!(stats.contains("pending                  2"), "{stats}");
    assert!(
        stats.contains(
            "scheduled                1   pending, enqueued for a later time, not attempted yet"
        ),
        "{stats}"
    );
    let stats_json = ok(&store, &["stats", "mem", "--json"]).await;
    assert!(stats_json.contains(r#""scheduled": 1"#), "{stats_json}");
    let list = ok(&store, &["list", "mem"]).await;
    let rows: Vec<&str> = list.lines().collect();
    assert!(rows[1].starts_with("1   -      scheduled"), "{list}");
    assert!(rows[2].starts_with("2   -      pending"), "{list}");
    let json = ok(&store, &["list", "mem", "--json"]).await;
    assert!(json.contains(r#""scheduled": true"#), "{json}");
    assert_eq!(json.matches(r#""scheduled""#).count(), 1, "{json}");
    assert!(
        json.contains(&format!(r#""not_before": {}"#, NOW + hour)),
        "{json}"
    );
    let shown = ok(&store, &["show", "mem", "1"]).await;
    assert!(
        shown.contains("state          pending (scheduled)"),
        "{shown}"
    );
    assert!(shown.contains("not before     "), "{shown}");
    // Once its time has come it is an ordinary pending record, due now.
    let list = ok_at(&store, &["list", "mem"], NOW + hour).await;
    assert!(list.contains("1   -      pending"), "{list}");
    assert!(!list.contains("scheduled"), "{list}");
    // The count says what it counts: enqueued for a later time and not attempted yet, whether
    // or not that time has come.
    let stats = ok_at(&store, &["stats", "mem"], NOW + hour).await;
    assert!(
        stats.contains(
            "scheduled                1   pending, enqueued for a later time, not attempted yet"
        ),
        "{stats}"
    );
}

/// Answers `y` to the question, after moving the store's halt to `then`: what a runner or
/// another person may do while the question is open.
struct AnswerAfter<'a> {
    store: &'a MemoryStore,
    then: Option<Option<Halt>>,
    answer: Cursor<Vec<u8>>,
}

impl AnswerAfter<'_> {
    fn change(&mut self) {
        if let Some(halt) = self.then.take() {
            let set = std::pin::pin!(self.store.set_halt(halt));
            let waker = std::task::Waker::noop();
            match set.poll(&mut std::task::Context::from_waker(waker)) {
                std::task::Poll::Ready(done) => done.expect("set_halt"),
                std::task::Poll::Pending => panic!("the memory store answers at once"),
            }
        }
    }
}

impl std::io::Read for AnswerAfter<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.change();
        self.answer.read(buf)
    }
}

impl std::io::BufRead for AnswerAfter<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.change();
        self.answer.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.answer.consume(amount);
    }
}

/// The halt a person was shown, and one a runner wrote since, for another reason.
fn seen_and_newer() -> (Halt, Halt) {
    let seen = Halt {
        reason: "HTTP 401".into(),
        since: NOW - 60_000,
    };
    let newer = Halt {
        reason: "HTTP 403".into(),
        since: NOW - 1_000,
    };
    (seen, newer)
}

#[tokio::test]
async fn resume_leaves_a_halt_that_changed_while_it_asked() {
    let store = seeded().await;
    let (seen, newer) = seen_and_newer();
    let resume = |then: Option<Halt>| {
        let store = &store;
        async move {
            let mut input = AnswerAfter {
                store,
                then: Some(then),
                answer: Cursor::new(b"y\n".to_vec()),
            };
            run_reading(store, &["resume", "mem"], &mut input).await
        }
    };

    // Resumed and halted again for another reason while the person read the question: the
    // newer halt stays, the command says so and fails, and the audit line says unchanged.
    store.set_halt(Some(seen.clone())).await.unwrap();
    let (out, err, result) = resume(Some(newer.clone())).await;
    assert!(matches!(result, Err(CliError::Changed(_))), "{result:?}");
    assert_eq!(store.halt().await.unwrap(), Some(newer));
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("lift the halt since"), "the question: {err}");
    assert!(
        err.contains("verb=resume") && err.contains("unchanged:") && !err.contains("done:"),
        "{err}"
    );

    // Lifted by someone else meanwhile: nothing to do, said so, and no error.
    store.set_halt(Some(seen)).await.unwrap();
    let (out, err, result) = resume(None).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(store.halt().await.unwrap(), None);
    assert!(out.contains("was lifted already"), "{out}");
    assert!(err.contains("unchanged:"), "{err}");
}

/// The memory store, with a runner halting again for another reason just before the
/// command's clearing reaches the store (after every read of the command).
#[derive(Debug)]
struct HaltsMeanwhile {
    inner: MemoryStore,
    newer: std::sync::Mutex<Option<Halt>>,
}

impl HaltsMeanwhile {
    async fn halt_now(&self) {
        let newer = self.newer.lock().unwrap().take();
        if let Some(newer) = newer {
            self.inner.set_halt(Some(newer)).await.unwrap();
        }
    }
}

#[outbox_core::async_trait]
impl outbox_core::StoreLayer for HaltsMeanwhile {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn set_halt(&self, halt: Option<Halt>) -> outbox_core::Result<()> {
        self.halt_now().await;
        self.inner.set_halt(halt).await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> outbox_core::Result<Option<Halt>> {
        self.halt_now().await;
        self.inner.clear_halt_if(seen).await
    }
}

#[tokio::test]
async fn resume_never_lifts_a_halt_written_just_before_its_clearing() {
    let (seen, newer) = seen_and_newer();
    let store = HaltsMeanwhile {
        inner: seeded().await,
        newer: std::sync::Mutex::new(Some(newer.clone())),
    };
    store.inner.set_halt(Some(seen)).await.unwrap();
    let (out, err, result) = run(&store, &["resume", "mem", "--yes"], "").await;
    assert!(matches!(result, Err(CliError::Changed(_))), "{result:?}");
    assert_eq!(
        store.halt().await.unwrap(),
        Some(newer),
        "the newer halt stands"
    );
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("verb=resume") && err.contains("unchanged:") && !err.contains("done:"),
        "{err}"
    );
}
