//! The commands run in-process on the memory reference store, against the same golden output
//! as the binary on every file backend: the output depends on the queue, not on the backend.

mod support;

use std::io::Cursor;

use clap::Parser;
use outbox_cli::cli::Cli;
use outbox_cli::commands::{execute, Io};
use outbox_cli::CliError;
use outbox_core::{machine, Claim, Lease, NewRecord, Outcome, RecordId, RetryPolicy, State, Store};
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
    let cli = Cli::try_parse_from(std::iter::once("outbox").chain(args.iter().copied()))
        .expect("arguments parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut input = Cursor::new(input.as_bytes().to_vec());
    let result = {
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            input: &mut input,
        };
        execute(store, &cli.command, NOW, &mut io).await
    };
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
        result,
    )
}

async fn ok(store: &dyn Store, args: &[&str]) -> String {
    let (out, err, result) = run(store, args, "").await;
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
    assert_eq!(
        out,
        "left #4 as it is: a record of its group is in flight; requeue it once that delivery has reported\n"
    );
    assert_eq!(
        result.unwrap_err().line(),
        "1 of 1 record left unchanged: #4"
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
    assert_eq!(err, "");
    assert_eq!(
        out,
        "discarded #1; its tombstone stays until pruned\ndiscarded #2; its tombstone stays until pruned\ndiscard: 2 of 2 records changed\n"
    );
    let tombstones = store.tombstones(None, 10).await.unwrap();
    let ids: Vec<u64> = tombstones.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, [1, 2, 8]);
    assert_eq!(tombstones[0].reason, "document deleted");
}

#[tokio::test]
async fn prune_counts_what_it_will_remove_and_asks() {
    let store = seeded().await;
    // The rejection (T1) and the discard (T2) are 1h 5m and 5m old.
    let (out, _, result) = run(&store, &["prune", "mem", "--older-than", "1h"], "").await;
    assert!(result.unwrap_err().line().contains("pass --yes"), "{out}");
    let (out, err, result) = run(&store, &["prune", "mem", "--older-than", "1h"], "yes\n").await;
    result.unwrap();
    assert_eq!(
        err,
        "prune 1 rejected record and 0 tombstones from before 2026-12-01 08:15:00? [y/N] "
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
    assert_eq!(cli.get_subcommands().count(), 9);
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
