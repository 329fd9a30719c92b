//! Nothing to link: this package only holds the tests of outbox-core's optional features
//! (`metrics`, `tower`, `serde`), so that `cargo test --workspace` builds outbox-core with
//! them on and runs the tests. See `tests/`.
