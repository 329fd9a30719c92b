//! The verbs for rows the store cannot decode: list them, discard one.

use super::Outbox;
use crate::error::Result;
use crate::event::Event;
use crate::record::RecordId;
use crate::unreadable::Unreadable;

impl Outbox {
    /// Rows the store holds but cannot decode, lowest id first, at most `limit`, each with
    /// the reason. Claim and stats pass them by; each is reported once per process as an
    /// [`Event::Unreadable`] and a warning line. May read every row of the store.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, Outbox, Outcome, Record};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?;
    /// // The memory store holds decoded values only: nothing is ever unreadable there.
    /// assert!(outbox.unreadable(100).await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unreadable(&self, limit: usize) -> Result<Vec<Unreadable>> {
        let rows = self.shared.store.unreadable(limit).await?;
        self.shared.report_unreadable(&rows);
        Ok(rows)
    }

    /// Removes the unreadable row `id`, keeping a tombstone with what could be read; a
    /// `Discarded` event says so. Returns whether a row went: `false` when no row `id` is
    /// unreadable (a readable record is discarded with [`Outbox::discard`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use std::sync::Arc;
    /// use outbox_core::{sink_fn, Outbox, Outcome, Record, RecordId};
    ///
    /// let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    /// let outbox = Outbox::builder(Arc::new(outbox_memory::MemoryStore::new()), sink).start().await?;
    /// assert!(!outbox.discard_unreadable(RecordId(42)).await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn discard_unreadable(&self, id: RecordId) -> Result<bool> {
        let gone = self
            .shared
            .store
            .discard_unreadable(id, self.shared.now())
            .await?;
        if gone {
            self.shared.emit(Event::Discarded {
                id,
                reason: "unreadable row discarded".into(),
            });
            self.notify();
        }
        Ok(gone)
    }
}
