//! `crash_loop_parks_record`'s proof that it can fail: a store whose updates never write the
//! `interrupted` count lets a record that aborts the process crash it forever; the scenario
//! notices instead of passing (or hanging).

mod support;

use outbox_testkit::crash::{crash_loop_parks_record, worker_entry, Worker};

#[test]
fn __outbox_testkit_worker() {
    worker_entry(support::journal::JournalBackend::forgets_interrupted);
}

#[test]
fn forgetting_interruptions_is_caught_by_crash_loop_parks_record() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let worker = Worker::at(module_path!(), "__outbox_testkit_worker");
    let backend = support::journal::JournalBackend::forgets_interrupted();
    let failure = runtime
        .block_on(crash_loop_parks_record(&backend, &worker))
        .expect_err("a store that forgets interruptions passed crash_loop_parks_record");
    eprintln!("caught: {failure}");
    assert!(
        failure.message().contains("never stopped crashing"),
        "{failure}"
    );
}
