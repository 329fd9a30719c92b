//! Coalescing a batch: which record of the batch replaces which waiting record, decided in
//! memory from what the enqueue read under its locks (the latest record of each coalescing key
//! and the last record of each group), with the one rule the core gives
//! ([`Record::replaceable_by`]).
//!
//! The batch is taken in order, so its records coalesce with each other as well: a record
//! written fresh by this batch is the latest of its key and the last of its group for the
//! records after it, exactly as if each had been enqueued on its own.

use std::collections::{BTreeMap, HashMap};

use outbox_core::{Millis, NewRecord, Record, RecordId};

/// Where a record of the batch lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Rewrites a record already stored.
    Stored(RecordId),
    /// The `n`th fresh record of the batch (its id is allocated once the batch is decided).
    Fresh(usize),
}

/// The decided batch.
#[derive(Debug, Default)]
pub(crate) struct Decided {
    /// One slot per record of the batch, in order.
    pub(crate) slots: Vec<Slot>,
    /// Positions of the records that replaced an earlier write, ascending.
    pub(crate) superseded: Vec<usize>,
    /// The fresh records, in id order.
    pub(crate) fresh: Vec<Fresh>,
    /// Stored records rewritten, as they are to be written (each once, however many writes of
    /// the batch replaced it), with how many writes of the batch each absorbed.
    pub(crate) rewritten: BTreeMap<RecordId, (Record, u64)>,
}

/// A record the batch inserts.
#[derive(Debug)]
pub(crate) struct Fresh {
    /// The record (its id is a placeholder), with the payload of the last write it absorbed.
    pub(crate) record: Record,
    /// Whether it is its group's head (claimable): ungrouped, or the first of a group with no
    /// member.
    pub(crate) head: bool,
    /// How many later writes of the batch it absorbed.
    pub(crate) absorbed: u64,
}

/// Decides `batch` at `now` against `latest`, the latest stored record of each coalescing key
/// of the batch (as locked, for those it could replace), and `tails`, the last stored record
/// holding its place (not rejected) of each group of the batch; a group with no member is
/// absent.
pub(crate) fn decide(
    batch: Vec<NewRecord>,
    now: Millis,
    latest: Vec<Record>,
    tails: HashMap<String, RecordId>,
) -> Decided {
    let mut stored: HashMap<RecordId, Record> = HashMap::new();
    let mut by_key: HashMap<String, Slot> = HashMap::new();
    for record in latest {
        if let Some(key) = record.replaces.clone() {
            by_key.insert(key, Slot::Stored(record.id));
            stored.insert(record.id, record);
        }
    }
    let mut tails: HashMap<String, Slot> = tails
        .into_iter()
        .map(|(group, id)| (group, Slot::Stored(id)))
        .collect();
    let mut touched: BTreeMap<RecordId, u64> = BTreeMap::new();
    let mut decided = Decided {
        slots: Vec::with_capacity(batch.len()),
        ..Decided::default()
    };
    for (index, new) in batch.into_iter().enumerate() {
        let target = new
            .replaces
            .as_ref()
            .and_then(|key| by_key.get(key).copied())
            .filter(|slot| {
                let candidate = match slot {
                    Slot::Stored(id) => stored.get(id),
                    Slot::Fresh(n) => decided.fresh.get(*n).map(|fresh| &fresh.record),
                };
                candidate.is_some_and(|candidate| {
                    let last_of_group = candidate
                        .group
                        .as_ref()
                        .is_none_or(|group| tails.get(group) == Some(slot));
                    candidate.replaceable_by(&new, last_of_group)
                })
            });
        match target {
            Some(slot) => {
                let record = match slot {
                    Slot::Stored(id) => {
                        *touched.entry(id).or_default() += 1;
                        stored.get_mut(&id)
                    }
                    Slot::Fresh(n) => decided.fresh.get_mut(n).map(|fresh| {
                        fresh.absorbed += 1;
                        &mut fresh.record
                    }),
                };
                if let Some(record) = record {
                    record.supersede(new, now);
                }
                decided.slots.push(slot);
                decided.superseded.push(index);
            }
            None => {
                let slot = Slot::Fresh(decided.fresh.len());
                let head = match &new.group {
                    None => true,
                    Some(group) => tails.insert(group.clone(), slot).is_none(),
                };
                if let Some(key) = &new.replaces {
                    by_key.insert(key.clone(), slot);
                }
                decided.fresh.push(Fresh {
                    record: Record::enqueued(RecordId(0), new, now),
                    head,
                    absorbed: 0,
                });
                decided.slots.push(slot);
            }
        }
    }
    for (id, absorbed) in touched {
        if let Some(record) = stored.remove(&id) {
            decided.rewritten.insert(id, (record, absorbed));
        }
    }
    decided
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::State;

    fn edit(payload: &str, group: Option<&str>, key: &str) -> NewRecord {
        let record = NewRecord::new(payload.as_bytes().to_vec())
            .with_key(format!("key-{payload}"))
            .replacing(key);
        match group {
            Some(group) => record.in_group(group),
            None => record,
        }
    }

    fn stored(id: u64, new: NewRecord, state: State) -> Record {
        let mut record = Record::enqueued(RecordId(id), new, 5);
        record.state = state;
        record
    }

    #[test]
    fn a_batch_coalesces_with_itself_and_keeps_the_first_slot() {
        let batch = vec![
            edit("a1", Some("g"), "k"),
            edit("a2", Some("g"), "k"),
            edit("b1", None, "other"),
            edit("a3", Some("g"), "k"),
        ];
        let decided = decide(batch, 10, Vec::new(), HashMap::new());
        assert_eq!(
            decided.slots,
            vec![
                Slot::Fresh(0),
                Slot::Fresh(0),
                Slot::Fresh(1),
                Slot::Fresh(0)
            ]
        );
        assert_eq!(decided.superseded, vec![1, 3]);
        assert!(decided.rewritten.is_empty());
        let first = &decided.fresh[0];
        assert_eq!(
            (
                first.record.payload.as_slice(),
                first.record.key.as_str(),
                first.head,
                first.absorbed
            ),
            (b"a3".as_slice(), "key-a3", true, 2)
        );
        assert_eq!(first.record.created_at, 10);
        assert_eq!(
            (decided.fresh[1].head, decided.fresh[1].absorbed),
            (true, 0)
        );
    }

    #[test]
    fn a_stored_waiting_record_is_rewritten_once_and_a_later_group_member_blocks_it() {
        let waiting = stored(3, edit("old", Some("g"), "k"), State::Retrying);
        let tails = HashMap::from([("g".to_owned(), RecordId(3))]);
        let decided = decide(
            vec![edit("new1", Some("g"), "k"), edit("new2", Some("g"), "k")],
            10,
            vec![waiting.clone()],
            tails.clone(),
        );
        assert_eq!(
            decided.slots,
            vec![Slot::Stored(RecordId(3)), Slot::Stored(RecordId(3))]
        );
        let (rewritten, absorbed) = &decided.rewritten[&RecordId(3)];
        assert_eq!(
            (
                rewritten.payload.as_slice(),
                rewritten.state,
                rewritten.created_at,
                *absorbed
            ),
            (b"new2".as_slice(), State::Retrying, 10, 2)
        );
        assert!(decided.fresh.is_empty());

        // A plain write of the group after it: the edit queues behind, and the next edit
        // coalesces with that one.
        let plain = NewRecord::new(b"delete".to_vec()).in_group("g");
        let decided = decide(
            vec![
                plain,
                edit("late1", Some("g"), "k"),
                edit("late2", Some("g"), "k"),
            ],
            10,
            vec![waiting.clone()],
            tails.clone(),
        );
        assert_eq!(
            decided.slots,
            vec![Slot::Fresh(0), Slot::Fresh(1), Slot::Fresh(1)]
        );
        assert_eq!(decided.superseded, vec![2]);
        assert_eq!(
            decided
                .fresh
                .iter()
                .map(|fresh| fresh.head)
                .collect::<Vec<_>>(),
            vec![false, false],
            "the group has a member already"
        );

        // A stored member after the candidate blocks it too.
        let blocked = HashMap::from([("g".to_owned(), RecordId(4))]);
        let decided = decide(vec![edit("x", Some("g"), "k")], 10, vec![waiting], blocked);
        assert_eq!(decided.slots, vec![Slot::Fresh(0)]);
    }

    #[test]
    fn in_flight_other_group_and_parked_records_are_not_replaced() {
        for (state, group) in [
            (State::InFlight, Some("g")),
            (State::NeedsAttention, Some("g")),
            (State::Rejected, Some("g")),
            (State::Pending, Some("h")),
            (State::Pending, None),
        ] {
            let candidate = stored(3, edit("old", Some("g"), "k"), state);
            let tails = HashMap::from([("g".to_owned(), RecordId(3))]);
            let decided = decide(vec![edit("new", group, "k")], 10, vec![candidate], tails);
            assert_eq!(decided.slots, vec![Slot::Fresh(0)], "{state:?} {group:?}");
            assert!(decided.superseded.is_empty());
        }
        // Ungrouped: no group to be last of.
        let candidate = stored(3, edit("old", None, "k"), State::Pending);
        let decided = decide(
            vec![edit("new", None, "k")],
            10,
            vec![candidate],
            HashMap::new(),
        );
        assert_eq!(decided.slots, vec![Slot::Stored(RecordId(3))]);
    }
}
