//! A backend skipped as a whole: every scenario is still a test, by name, prints the reason
//! and passes, and the backend is never built.

use outbox_testkit::MemoryBackend;

/// Stands for a backend whose server is missing: building it would fail.
fn unreachable_backend() -> MemoryBackend {
    panic!("a skipped backend must not be built")
}

outbox_testkit::conformance!(
    unreachable_backend(),
    skip_when = Some("no server answers in this test".to_owned()),
);
