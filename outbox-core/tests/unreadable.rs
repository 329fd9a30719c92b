//! Unreadable rows through the handle: listed, and reported once per process.

use std::sync::Arc;

use outbox_core::layer::StoreLayer;
use outbox_core::{sink_fn, Event, Outbox, Outcome, Record, RecordId, Result, Store, Unreadable};

/// A memory store that reports one unreadable row, as a persistent store would.
#[derive(Debug, Default)]
struct OneBadRow(outbox_memory::MemoryStore);

#[async_trait::async_trait]
impl StoreLayer for OneBadRow {
    fn inner(&self) -> &dyn Store {
        &self.0
    }

    async fn unreadable(&self, _: usize) -> Result<Vec<Unreadable>> {
        Ok(vec![Unreadable::new(
            RecordId(42),
            "last_error is not UTF-8",
        )])
    }
}

#[tokio::test]
async fn an_unreadable_row_is_reported_once_per_process() {
    let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    let outbox = Outbox::builder(Arc::new(OneBadRow::default()), sink)
        .start()
        .await
        .unwrap();
    let mut events = outbox.events();
    for _ in 0..3 {
        assert_eq!(outbox.unreadable(10).await.unwrap().len(), 1);
    }
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if matches!(event, Event::Unreadable { .. }) {
            seen.push(event);
        }
    }
    assert_eq!(
        seen,
        vec![Event::Unreadable {
            id: RecordId(42),
            reason: "last_error is not UTF-8".into()
        }]
    );
}
