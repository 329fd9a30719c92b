//! The testkit's conformance suite on PostgreSQL: every scenario as its own test, each in a
//! schema of its own (so they run in parallel), crash scenarios in re-executed child processes.
//!
//! Where no PostgreSQL server answers, every scenario is reported skipped with the reason
//! (nothing runs on a stand-in store under the PostgreSQL name); with `OUTBOX_PG_REQUIRED=1`
//! (CI) a missing server fails the tests instead.

mod common;

outbox_testkit::conformance!(common::PgBackend::new(), skip_when = common::skip_reason());
