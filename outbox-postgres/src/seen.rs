//! Repairs guarded by what a person saw ([`Guard::Seen`]): such a batch locks its rows with
//! every column, so [`Guard::admits`](outbox_core::Guard::admits) compares the whole record as
//! it is now. The runner's own batches (lease and idle guards) keep the narrow lock, which
//! reads only what those guards look at.

use outbox_core::{Guard, Record, Result, Transition};
use tokio_postgres::Row;

use crate::codec::{self, RECORD_COLUMNS};

/// True when some transition of the batch compares against a person's look.
pub(crate) fn any(transitions: &[Transition]) -> bool {
    transitions
        .iter()
        .any(|t| matches!(t.guard, Guard::Seen(_)))
}

/// The rows of `$1`, every column, locked in id order (the narrow lock's order).
pub(crate) fn lock_statement(schema: &str) -> String {
    format!(
        "SELECT {RECORD_COLUMNS} FROM \"{schema}\".records \
         WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
    )
}

/// A row locked by [`lock_statement`], whole.
pub(crate) fn locked(row: &Row) -> Result<(i64, Record)> {
    let record = codec::record(row)?;
    Ok((codec::id(record.id), record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Change, RecordId, Seen};

    #[test]
    fn only_a_batch_with_a_seen_guard_takes_the_wide_lock() {
        let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
        let t = |guard| Transition {
            id: RecordId(1),
            guard,
            change: Change::Delivered,
        };
        assert!(!any(&[t(Guard::Idle), t(Guard::Lease(3))]));
        assert!(any(&[t(Guard::Idle), t(Guard::Seen(Seen::of(&record)))]));
        assert!(lock_statement("s").contains("\"s\".records"));
    }
}
