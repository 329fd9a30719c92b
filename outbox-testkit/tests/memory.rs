//! The reference store runs the suite: its non-persistent scenarios pass, the others are
//! reported as skipped.

outbox_testkit::conformance!(outbox_testkit::MemoryBackend::new());
