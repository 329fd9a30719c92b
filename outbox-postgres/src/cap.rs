//! The size cap ([`Cap`](outbox_core::Cap), [`PgConfig::with_cap`](crate::PgConfig::with_cap))
//! on PostgreSQL: how every enqueue path (the store's own, and the caller's transaction on
//! tokio-postgres, sqlx or diesel, all through `enqueue::enqueue`) holds a batch to it.
//!
//! **Checked before writing.** The net addition of a batch is known before any of it is
//! written: a plain batch adds every record and every payload byte; a coalescing batch is
//! decided in memory first (`coalesce::decide`, under its locks, on the candidates as locked),
//! and then adds its fresh records and their payloads plus, for each waiting record it
//! rewrites, the new payload's size less the old one's (no record). So the enqueue reads the
//! usage, computes the addition, asks [`Cap::admit`](outbox_core::Cap::admit), and only then
//! writes. A refusal has sent no write of the batch and no statement has failed: the caller's
//! transaction needs no savepoint to stay usable, and its own writes can still commit. (What
//! the refused enqueue locked, its turn, group and key locks and the candidates it read, stays
//! locked until that transaction ends, as after an enqueue that went in.) The alternative,
//! writing, measuring again and rolling back to a savepoint, would cost a subtransaction and
//! two more round trips on every capped enqueue, for the same answer.
//!
//! **Exact under concurrency.** Every capped enqueue first updates the one row of `cap_turn`
//! (its *turn*), then, as a statement of its own, reads the usage: the counts and payload
//! bytes of `tallies`, which the triggers keep in the transaction of every change, added up
//! over the shards. The turn is held until the enqueue's transaction ends, so capped enqueues
//! run one at a time, and at READ COMMITTED (PostgreSQL's default, and the store's own
//! transactions) the usage statement, begun after the turn was granted, sees everything the
//! previous holder committed. Nothing else adds records concurrently (other writers only
//! deliver, discard, prune or change states, which never grows the usage), so no two enqueues
//! can both take the last place. In a REPEATABLE READ or SERIALIZABLE transaction the usage
//! would be read from the transaction's older snapshot; the update of the turn row is what
//! guards it: PostgreSQL refuses it with a serialization failure when another capped enqueue
//! updated the row and committed after that snapshot was taken, so such an enqueue fails (the
//! caller retries) instead of deciding on counts it cannot see. A row, not an advisory lock,
//! for this reason: an advisory lock serializes but leaves no version a snapshot can be
//! checked against.
//!
//! **Cost.** Nothing without a cap: no statement, no lock, the triggers as they are. With a
//! cap, two more statements in the enqueue's first pipelined batch (no extra round trip), and
//! capped enqueues of one outbox serialize on the turn for as long as each transaction lasts.
//! Deliveries, claims and reports never take it.

use std::collections::HashMap;

use outbox_core::{NewRecord, Record, RecordId, Result, Usage};

use crate::coalesce::Decided;
use crate::enqueue::{Answers, Shape, Stmt, Target};
use crate::error::corrupt;

/// The statements to prepare for a capped enqueue's turn; none without a cap.
pub(crate) fn texts<'a>(core: &Target<'a>) -> Vec<&'a str> {
    if core.cap.is_none() {
        return Vec::new();
    }
    vec![core.sql.cap_turn.as_str(), core.sql.usage.as_str()]
}

/// The first statements of a capped enqueue, ahead of its locks: the turn, then the usage
/// (two statements, so the usage is read after the turn is granted). None without a cap.
pub(crate) fn turn<'a>(core: &Target<'a>) -> Vec<Stmt<'a>> {
    if core.cap.is_none() {
        return Vec::new();
    }
    vec![
        Stmt::new(&core.sql.cap_turn, Vec::new(), Shape::Ids),
        Stmt::new(&core.sql.usage, Vec::new(), Shape::Usage),
    ]
}

/// The usage read by [`turn`]'s statements, taken from the front of `answers`; `None` without
/// a cap (and nothing taken).
pub(crate) fn used(core: &Target<'_>, answers: &mut Answers) -> Result<Option<Usage>> {
    if core.cap.is_none() {
        return Ok(None);
    }
    if answers.ids()?.len() != 1 {
        return Err(corrupt(
            "the outbox's cap_turn row is missing: a capped enqueue has no turn to take",
        ));
    }
    match answers.usage()?.as_slice() {
        [(records, bytes)] => Ok(Some(Usage {
            records: count(*records)?,
            bytes: count(*bytes)?,
        })),
        other => Err(corrupt(format!(
            "the usage query returned {} rows, not one",
            other.len()
        ))),
    }
}

fn count(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(format!("a negative usage count {value}")))
}

fn size(payload: &[u8]) -> u64 {
    payload.len() as u64
}

/// What a plain batch adds: every record, and every payload byte.
pub(crate) fn added(records: &[NewRecord]) -> (u64, u64) {
    let bytes = records.iter().map(|r| size(&r.payload)).sum();
    (records.len() as u64, bytes)
}

/// The payload sizes of the records a coalescing batch may rewrite, by id.
pub(crate) fn sizes(candidates: &[Record]) -> HashMap<RecordId, u64> {
    candidates
        .iter()
        .map(|record| (record.id, size(&record.payload)))
        .collect()
}

/// What a decided coalescing batch adds: its fresh records with their payloads, and for each
/// record it rewrites the new payload's size less the old one's (`before`, by id). A batch
/// whose rewrites shrink more than its fresh records grow adds no bytes.
pub(crate) fn added_by(decided: &Decided, before: &HashMap<RecordId, u64>) -> (u64, u64) {
    let fresh: i128 = decided
        .fresh
        .iter()
        .map(|f| i128::from(size(&f.record.payload)))
        .sum();
    let rewritten: i128 = decided
        .rewritten
        .iter()
        .map(|(id, (record, _))| {
            let old = before.get(id).copied().unwrap_or(0);
            i128::from(size(&record.payload)) - i128::from(old)
        })
        .sum();
    let bytes = u64::try_from((fresh + rewritten).max(0)).unwrap_or(u64::MAX);
    (decided.fresh.len() as u64, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coalesce;
    use crate::enqueue::{self, Answer, Execute};
    use outbox_core::{Cap, CapLimit, Error};

    fn edit(payload: &str, key: &str) -> NewRecord {
        NewRecord::new(payload.as_bytes().to_vec()).replacing(key)
    }

    #[test]
    fn a_rewrite_adds_the_change_of_its_payload_and_no_record() {
        let stored = Record::enqueued(RecordId(7), edit("0123456789", "k"), 1);
        let before = sizes(std::slice::from_ref(&stored));
        assert_eq!(before.get(&RecordId(7)), Some(&10));
        // Shrinks by 7, and a fresh record of 4 bytes with another key: nothing added.
        let decided = coalesce::decide(
            vec![edit("abc", "k"), edit("wxyz", "other")],
            2,
            vec![stored.clone()],
            HashMap::new(),
        );
        assert_eq!(decided.rewritten.len(), 1);
        assert_eq!(added_by(&decided, &before), (1, 0));
        // Grows by 5.
        let decided = coalesce::decide(
            vec![edit("012345678901234", "k")],
            2,
            vec![stored],
            HashMap::new(),
        );
        assert_eq!(added_by(&decided, &before), (0, 5));
        // Two writes of a fresh key: one record, the last payload.
        let decided = coalesce::decide(
            vec![edit("aa", "new"), edit("bbbbb", "new")],
            2,
            Vec::new(),
            HashMap::new(),
        );
        assert_eq!(added_by(&decided, &HashMap::new()), (1, 5));
    }

    /// A driver that answers from a script and records which statements it was sent.
    struct Scripted {
        sent: Vec<String>,
        answers: Vec<Vec<Answer>>,
    }

    impl Execute for Scripted {
        async fn run(&mut self, batch: Vec<Stmt<'_>>) -> Result<Vec<Answer>> {
            self.sent
                .extend(batch.iter().map(|stmt| stmt.sql.to_owned()));
            Ok(self.answers.remove(0))
        }
    }

    #[test]
    fn a_capped_enqueue_takes_its_turn_first_and_a_refusal_writes_nothing() {
        let sql = crate::sql::Sql::new("s");
        let target = |cap| Target {
            sql: &sql,
            channel: "s",
            group_seed: 1,
            coalesce_seed: 2,
            max_payload: 1024,
            cap,
        };
        let mut driver = Scripted {
            sent: Vec::new(),
            answers: vec![vec![
                Answer::Ids(vec![41]),
                Answer::Usage(vec![(1_000, 8_000)]),
                Answer::Done,
                Answer::Groups(Vec::new()),
                Answer::Ids(vec![7]),
            ]],
        };
        let capped = target(Cap::none().with_max_records(1_000));
        let batch = vec![NewRecord::new(b"one".to_vec())];
        let refused = enqueue::now(enqueue::enqueue(&capped, &mut driver, batch, 5));
        assert!(matches!(
            refused,
            Err(Error::QueueFull {
                limit: CapLimit::Records,
                max: 1_000,
                used: 1_000,
                adding: 1
            })
        ));
        assert_eq!(
            driver.sent,
            vec![
                sql.cap_turn.clone(),
                sql.usage.clone(),
                sql.lock_named_groups.clone(),
                sql.members.clone(),
                sql.allocate_ids.clone()
            ],
            "the turn first; no insert"
        );
        // A missing turn row is corruption, not a way around the cap.
        let mut driver = Scripted {
            sent: Vec::new(),
            answers: vec![vec![Answer::Ids(Vec::new()), Answer::Usage(vec![(0, 0)])]],
        };
        let batch = vec![NewRecord::new(b"one".to_vec())];
        assert!(matches!(
            enqueue::now(enqueue::enqueue(&capped, &mut driver, batch, 5)),
            Err(Error::Corrupted { .. })
        ));
        // Without a cap, neither statement is sent.
        let mut driver = Scripted {
            sent: Vec::new(),
            answers: vec![
                vec![
                    Answer::Done,
                    Answer::Groups(Vec::new()),
                    Answer::Ids(vec![7]),
                ],
                vec![Answer::Done, Answer::Done],
            ],
        };
        let batch = vec![NewRecord::new(b"one".to_vec())];
        enqueue::now(enqueue::enqueue(
            &target(Cap::none()),
            &mut driver,
            batch,
            5,
        ))
        .expect("no cap");
        assert!(!driver.sent.contains(&sql.cap_turn) && !driver.sent.contains(&sql.usage));
    }

    #[test]
    fn a_plain_batch_adds_everything() {
        let batch = vec![
            NewRecord::new(vec![0; 3]),
            NewRecord::new(Vec::new()),
            NewRecord::new(vec![1; 8]),
        ];
        assert_eq!(added(&batch), (3, 11));
        assert_eq!(added(&[]), (0, 0));
    }
}
