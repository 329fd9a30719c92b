//! The testkit's conformance suite on PostgreSQL: every scenario as its own test, each in a
//! schema of its own (so they run in parallel), crash scenarios in re-executed child processes.
//!
//! Where no PostgreSQL server answers, every test prints a loud `SKIPPED` line and the suite
//! runs on the in-memory reference store instead, so nothing pretends to have checked
//! PostgreSQL; with `OUTBOX_PG_REQUIRED=1` (CI) a missing server fails every test instead.

mod common;

outbox_testkit::conformance!(common::suite_backend());
