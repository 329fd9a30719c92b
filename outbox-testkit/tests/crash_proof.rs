//! The crash scenario's proof that it can fail: a journal that acknowledges writes before it
//! records them loses acknowledged work when the worker is killed, and `crash_sigkill` notices.

mod support;

use support::journal;

use outbox_testkit::crash::{crash_sigkill_seeded, worker_entry, Worker};

#[test]
fn __outbox_testkit_worker() {
    worker_entry(journal::JournalBackend::lossy);
}

#[test]
fn acknowledging_before_writing_is_caught_by_crash_sigkill() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worker = Worker::at(module_path!(), "__outbox_testkit_worker");
    let backend = journal::JournalBackend::lossy();
    let failure = (0..5u64).find_map(|seed| {
        runtime
            .block_on(crash_sigkill_seeded(&backend, &worker, seed))
            .err()
    });
    let failure = failure.expect("a store that loses acknowledged writes passed five crash runs");
    eprintln!("caught: {failure}");
    let message = failure.message();
    assert!(
        message.contains("lost") || message.contains("acknowledged") || message.contains("key"),
        "{failure}"
    );
}

#[test]
fn acknowledging_before_writing_fails_the_soak_with_its_figures() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worker = Worker::at(module_path!(), "__outbox_testkit_worker");
    let backend = journal::JournalBackend::lossy();
    let failure = (0..5u64).find_map(|seed| {
        runtime
            .block_on(outbox_testkit::crash::soak(&backend, &worker, 10, seed))
            .err()
    });
    let failure = failure.expect("a store that loses acknowledged writes passed five soaks");
    eprintln!("caught: {failure}");
    assert!(failure.message().contains("kills "), "{failure}");
}
