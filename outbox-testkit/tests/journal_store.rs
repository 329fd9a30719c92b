//! The whole suite, crash scenarios included, on a small persistent store: the reference model
//! with a journal file replayed at open. It shows the persistent scenarios and the SIGKILL
//! machinery work on their own, without a production backend.

mod support;

use support::journal;

outbox_testkit::conformance!(journal::JournalBackend::new());
