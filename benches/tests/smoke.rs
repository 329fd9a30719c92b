//! Every workload at tiny sizes, against every store and bare engine, with what each promises
//! checked: the benchmarks run this same code, so it cannot rot unnoticed.

mod support;

use std::process::Command;

use outbox_benches::bare::BareKind;
use outbox_benches::subject::StoreKind;
use outbox_benches::{workload, EARLY, FAR};
use outbox_core::clock::system_now;
use support::runtime;

#[test]
fn every_enqueue_workload_leaves_its_records_pending() -> outbox_core::Result<()> {
    runtime().block_on(async {
        for kind in StoreKind::local() {
            let subject = kind.open().await?;
            workload::enqueue_one_by_one(&subject.store, 3).await?;
            workload::enqueue_concurrently(&subject.store, 16).await?;
            workload::enqueue_batch(&subject.store, 10).await?;
            let stats = subject.store.stats().await?;
            assert_eq!(stats.pending, 3 + 16 + 10, "{kind}");
        }
        Ok(())
    })
}

#[test]
fn the_drain_delivers_every_record_and_empties_the_queue() -> outbox_core::Result<()> {
    runtime().block_on(async {
        for kind in StoreKind::local() {
            let subject = kind.open().await?;
            // Twice on one store, as criterion repeats it: the second drain counts only its own.
            for _ in 0..2 {
                let drained = workload::drain(&subject.store, 70).await?;
                assert_eq!(drained.records, 70, "{kind}");
                assert!(drained.rate() > 0.0, "{kind}");
            }
            let stats = subject.store.stats().await?;
            assert_eq!((stats.delivered, stats.undelivered()), (140, 0), "{kind}");
        }
        Ok(())
    })
}

#[test]
fn the_drain_fails_when_records_are_left_behind() -> outbox_core::Result<()> {
    runtime().block_on(async {
        let subject = StoreKind::Memory.open().await?;
        // Records due far in the future stay undelivered: the drain must say so.
        workload::fill_not_due(&subject.store, 5).await?;
        assert!(workload::drain(&subject.store, 10).await.is_err());
        Ok(())
    })
}

#[test]
fn nothing_is_due_in_a_backlog_of_later_records() -> outbox_core::Result<()> {
    runtime().block_on(async {
        for kind in StoreKind::local() {
            let subject = kind.open().await?;
            workload::fill_not_due(&subject.store, 2_500).await?;
            assert_eq!(workload::what_is_due(&subject.store).await?, 0, "{kind}");
            // The same query finds records that are due, at most a default batch of them.
            workload::fill(&subject.store, 40, EARLY).await?;
            assert_eq!(workload::what_is_due(&subject.store).await?, 32, "{kind}");
            assert_eq!(subject.store.stats().await?.in_flight, 32, "{kind}");
        }
        Ok(())
    })
}

#[test]
fn bare_engines_insert_claim_delete_and_answer_the_due_query() -> outbox_core::Result<()> {
    for kind in BareKind::all() {
        let mut bare = kind.open()?;
        let now = system_now();
        bare.insert_each(3, now)?;
        bare.insert_batch(250, now)?;
        bare.insert_batch(20, FAR)?;
        assert_eq!(bare.due(EARLY, 32)?, 0, "{kind:?}");
        assert_eq!(bare.due(now, 32)?, 32, "{kind:?}");
        assert_eq!(bare.drain(100, now)?, 253, "{kind:?}");
        assert_eq!(bare.due(now, 32)?, 0, "{kind:?}");
        // The records due later are still there.
        assert_eq!(bare.due(FAR, 32)?, 20, "{kind:?}");
    }
    Ok(())
}

#[test]
fn drain_rss_reports_a_bounded_peak_for_each_store() {
    for kind in StoreKind::local() {
        let output = Command::new(env!("CARGO_BIN_EXE_drain-rss"))
            .args(["--store", kind.name(), "--records", "300"])
            .output()
            .expect("drain-rss runs");
        assert!(
            output.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let line = String::from_utf8_lossy(&output.stdout);
        let field = |name: &str| -> String {
            line.trim()
                .split('\t')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{kind}: no {name} in {line:?}"))
                .to_owned()
        };
        assert_eq!(field("store"), kind.name());
        assert_eq!(field("records"), "300");
        let peak: f64 = field("peak_mib").parse().expect("a number");
        let baseline: f64 = field("baseline_mib").parse().expect("a number");
        assert!(peak >= baseline && baseline > 0.0, "{kind}: {line}");
        // Commits come from rounds (outcomes and the next claim travel in one store call), and
        // rounds of quick deliveries grow from the default batch (32) towards `max_batch`
        // (1,024): fewer than one commit per 32 records, never fewer than one per 1,024.
        let commits: f64 = field("commits_per_1000").parse().expect("a number");
        assert!(commits >= 1000.0 / 1024.0, "{kind}: {line}");
        assert!(
            commits < 1000.0 / 32.0,
            "{kind}: rounds did not grow: {line}"
        );
    }
}

#[test]
fn drain_rss_refuses_an_unknown_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_drain-rss"))
        .args(["--store", "floppy"])
        .output()
        .expect("drain-rss runs");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn paired_ratios_reports_every_target_for_each_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_paired-ratios"))
        .arg("--quick")
        .output()
        .expect("paired-ratios runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    // With a PostgreSQL server, three more drain lines (checked in tests/postgres.rs).
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("postgres")).collect();
    assert_eq!(lines.len(), 9, "{text}");
    let targets = ["enqueue-one", "enqueue-concurrent", "drain"];
    let persistent = ["sqlite", "redb"]
        .into_iter()
        .flat_map(|store| targets.map(|target| (store, target)));
    let due = ["memory", "sqlite", "redb"].map(|store| (store, "due"));
    for (store, target) in persistent.chain(due) {
        {
            let line = lines
                .iter()
                .find(|l| l.contains(&format!("target={target}\tstore={store}\t")))
                .unwrap_or_else(|| panic!("no {target} line for {store} in {text}"));
            let ratio: f64 = line
                .split('\t')
                .find_map(|f| f.strip_prefix("ratio="))
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("no ratio in {line}"));
            assert!(ratio > 0.0 && ratio.is_finite(), "{line}");
        }
    }
}
