//! A scenario that needs two capabilities names one in the scenario list and skips itself
//! for the other: on a backend that declares the first and lacks the second, the test is an
//! honest skip, not a panic.

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{Result, Store};
use outbox_testkit::harness::run_listed;
use outbox_testkit::scenarios::{unreadable_row_leaves_the_cap, SCENARIOS};
use outbox_testkit::{Backend, Capabilities, MemoryBackend};

/// The memory backend, declaring that it plants unreadable rows and opens no capped store.
struct UnreadableNoCap(MemoryBackend);

#[async_trait]
impl Backend for UnreadableNoCap {
    fn name(&self) -> &'static str {
        "unreadable rows, no cap"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            unreadable_rows: true,
            size_cap: false,
            ..self.0.capabilities()
        }
    }

    async fn create(&self) -> Result<String> {
        self.0.create().await
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        self.0.open(location).await
    }
}

#[test]
fn a_scenario_skips_itself_for_a_second_need_the_backend_lacks() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "unreadable_row_leaves_the_cap")
        .expect("listed");
    assert_eq!(
        scenario.needs,
        Some(outbox_testkit::Capability::UnreadableRows)
    );
    // Panics if the harness takes the scenario's own skip for one that ran nothing.
    run_listed(
        scenario,
        None,
        || UnreadableNoCap(MemoryBackend::new()),
        |backend| async move { unreadable_row_leaves_the_cap(&*backend).await },
    );
}
