//! The drain: `drain-rate`, the enqueue rate of grouped batches, then the end-to-end drain by
//! as many runners as the store's queue takes ([`StoreKind::runners`](crate::subject::StoreKind::runners)).

use std::sync::Arc;
use std::time::Instant;

use outbox_core::clock::system_now;
use outbox_core::{NewRecord, Result, Store};

use super::Bench;
use crate::measure::report::{figure, rate};
use crate::measure::{Report, Row};
use crate::{pg, PAYLOAD};

/// Records per enqueue call in the enqueue phase of the drain rate.
const DRAIN_BATCH: usize = 100;

/// Groups the drain rate's records are spread over (a third of the records are in one).
const DRAIN_GROUPS: usize = 50;

impl Bench<'_> {
    /// `drain-rate`: [`Workload::DrainRate`](crate::measure::Workload::DrainRate).
    pub(super) async fn drain_rate(&self, n: usize) -> Result<Report> {
        let enqueue = self
            .with_store(async |opened| {
                let started = Instant::now();
                enqueue_grouped(&opened.store, n).await?;
                Ok(started.elapsed())
            })
            .await?;
        let mut rows = vec![Row {
            label: format!(
                "enqueue of {n} records in batches of {DRAIN_BATCH}, a third of them in \
                 {DRAIN_GROUPS} groups"
            ),
            figures: vec![
                figure("time", enqueue.as_secs_f64() * 1e3, "ms", 1),
                figure("enqueue rate", rate(enqueue, n), "records/s", 0),
            ],
        }];
        let mut notes = Vec::new();
        if let Some(why) = self.kind().one_runner_only() {
            notes.push(format!("one runner: {why}"));
        }
        let mut drains = Vec::new();
        for &runners in self.kind().runners() {
            let drained = self
                .with_store(async |opened| {
                    let mut stores = vec![Arc::clone(&opened.store)];
                    for _ in 1..runners {
                        stores.push(opened.another().await?);
                    }
                    pg::drain_runners(&stores, n).await
                })
                .await?;
            drains.push((runners, drained));
        }
        for (runners, drained) in drains {
            let plural = if runners == 1 { "" } else { "s" };
            rows.push(Row {
                label: format!(
                    "drain of {} due records by {runners} runner{plural}",
                    drained.records
                ),
                figures: vec![
                    figure("time", drained.elapsed.as_secs_f64() * 1e3, "ms", 1),
                    figure("drain rate", drained.rate(), "records/s", 0),
                ],
            });
        }
        Ok(Report::new(rows, notes))
    }
}

/// Enqueues `count` records due now in batches of [`DRAIN_BATCH`], every third one in one of
/// [`DRAIN_GROUPS`] groups.
async fn enqueue_grouped(store: &Arc<dyn Store>, count: usize) -> Result<()> {
    let mut next = 0;
    while next < count {
        let end = (next + DRAIN_BATCH).min(count);
        let batch = (next..end)
            .map(|i| {
                let record = NewRecord::new(PAYLOAD.to_vec());
                if i % 3 == 0 {
                    record.in_group(format!("entity-{}", i % DRAIN_GROUPS))
                } else {
                    record
                }
            })
            .collect();
        store.enqueue(batch, system_now()).await?;
        next = end;
    }
    Ok(())
}
