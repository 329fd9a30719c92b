//! The conformance suite on the reference store itself: every scenario by name, the ones that
//! need persistence reported as skipped.

outbox_testkit::conformance!(outbox_testkit::MemoryBackend::new());
