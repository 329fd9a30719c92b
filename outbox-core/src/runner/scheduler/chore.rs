//! Chores: the store work around deliveries, each a short run of single store calls.
//!
//! A chore reads ([`Chore::io`]), decides on what it found ([`Chore::found`]) and writes
//! ([`Io::Apply`]), then reads again or ends ([`Chore::written`]). The loops over pages, the
//! filters and the transitions are here, on plain values; the shell only makes the calls.

use std::collections::VecDeque;

use super::io::{Answer, Io};
use super::round::Write;
use crate::machine;
use crate::policy::RetryPolicy;
use crate::record::{Lease, Millis, Record, RecordId};
use crate::store::Halt;
use crate::unreadable::Unreadable;

/// Records read per page by the recovering chores.
pub(super) const PAGE: usize = 256;
/// In-flight records read at once when looking for far leases: the batches of live runners.
pub(super) const IN_FLIGHT: usize = 4_096;

/// A piece of store work the scheduler wants done before it claims again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Chore {
    /// Renew the leases of the round's records.
    Renew { ids: Vec<RecordId>, lease: Lease },
    /// Persist the halt.
    SetHalt(Halt),
    /// Clear the persisted halt (a resume, by this process). A runner that was halted clears
    /// only the halt it `held` (`Store::clear_halt_if`), and `found` is what the store held:
    /// a newer halt is never lifted by a resume of an older one. A runner that was not halted
    /// clears whatever halt the store holds (another process's, whose runner reads that and
    /// resumes).
    ClearHalt {
        held: Option<Halt>,
        found: Option<Halt>,
    },
    /// Read the persisted halt while halted with `halt`: `cleared` once the store holds none
    /// (another process or a person resumed the outbox).
    ReadHalt { halt: Halt, cleared: bool },
    /// Records whose lease expired with no report (their process died): each counts one
    /// interruption, and the crash-loop guard parks repeat offenders. Page by page.
    RecoverExpired { recovered: usize },
    /// In-flight records whose lease lies further ahead than one lease (taken before the
    /// wall clock stepped back, by a process now gone), except `ours`: the records this
    /// runner holds, listed when the check is made.
    FarLeases { ours: Vec<RecordId> },
    /// Deadlines set before a step back: by `step` when measured, else from now (at start).
    Rebase {
        step: Option<Millis>,
        rebased: usize,
    },
    /// Records waiting out a no-answer backoff become due now (the link is back): read one
    /// by one, then written together.
    Relink {
        ids: VecDeque<RecordId>,
        found: Vec<Write>,
    },
    /// Rows the store cannot decode, read once: each is told as an event when done.
    Unreadable { found: Vec<Unreadable> },
}

/// What a chore does next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Write these, then call [`Chore::written`].
    Write(Vec<Write>),
    /// Make the chore's next read.
    Read,
    /// Finished, having changed this many records.
    Done(usize),
}

/// What a chore needs to decide.
#[derive(Clone, Copy, Debug)]
pub(super) struct Context<'a> {
    pub(super) now: Millis,
    pub(super) lease_ms: Millis,
    pub(super) policy: &'a RetryPolicy,
}

impl Chore {
    /// The store call the chore makes next (its read, or its one call).
    pub(super) fn io(&self, now: Millis) -> Io {
        match self {
            Chore::Renew { ids, lease } => Io::Renew {
                ids: ids.clone(),
                lease: *lease,
            },
            Chore::SetHalt(halt) => Io::SetHalt(Some(halt.clone())),
            Chore::ClearHalt { held: Some(h), .. } => Io::ClearHaltIf(h.clone()),
            Chore::ClearHalt { held: None, .. } => Io::SetHalt(None),
            Chore::ReadHalt { .. } => Io::Halt,
            Chore::RecoverExpired { .. } => Io::Expired { now, limit: PAGE },
            Chore::FarLeases { .. } => Io::Expired {
                now: Millis::MAX,
                limit: IN_FLIGHT,
            },
            Chore::Rebase { .. } => Io::SteppedBack { now, limit: PAGE },
            Chore::Relink { ids, found } => match ids.front() {
                Some(id) => Io::Get(*id),
                None => Io::Apply(found.iter().map(|w| w.transition.clone()).collect()),
            },
            Chore::Unreadable { .. } => Io::Unreadable { limit: PAGE },
        }
    }

    /// Takes the answer to [`Chore::io`].
    pub(super) fn found(&mut self, answer: Answer, cx: Context<'_>) -> Next {
        match (self, answer) {
            (Chore::ClearHalt { found, .. }, Answer::Halt(held)) => {
                *found = held;
                Next::Done(0)
            }
            (Chore::Renew { .. } | Chore::SetHalt(_) | Chore::ClearHalt { .. }, _) => Next::Done(0),
            (Chore::ReadHalt { cleared, .. }, Answer::Halt(halt)) => {
                *cleared = halt.is_none();
                Next::Done(0)
            }
            (Chore::RecoverExpired { recovered }, Answer::Records(expired)) => {
                if expired.is_empty() {
                    return Next::Done(*recovered);
                }
                Next::Write(interrupted(&expired, cx))
            }
            (Chore::FarLeases { ours }, Answer::Records(in_flight)) => {
                let limit = cx.now.saturating_add(cx.lease_ms);
                let far: Vec<Record> = in_flight
                    .into_iter()
                    .filter(|r| !ours.contains(&r.id) && r.lease.is_some_and(|l| l.until > limit))
                    .collect();
                if far.is_empty() {
                    return Next::Done(0);
                }
                Next::Write(interrupted(&far, cx))
            }
            (Chore::Rebase { step, rebased }, Answer::Records(stepped)) => {
                let writes: Vec<Write> = stepped
                    .iter()
                    .filter_map(|r| match step {
                        Some(step) => machine::rebase_by(r, cx.now, *step),
                        None => machine::rebase(r, cx.now),
                    })
                    .map(Write::silent)
                    .collect();
                if writes.is_empty() {
                    return Next::Done(*rebased);
                }
                Next::Write(writes)
            }
            (Chore::Relink { ids, found }, Answer::Record(record)) => {
                ids.pop_front();
                found.extend(
                    record
                        .and_then(|r| machine::relink(&r, cx.now))
                        .map(Write::silent),
                );
                match (ids.is_empty(), found.is_empty()) {
                    (false, _) => Next::Read,
                    (true, true) => Next::Done(0),
                    (true, false) => Next::Write(std::mem::take(found)),
                }
            }
            (Chore::Unreadable { found }, Answer::Unreadable(rows)) => {
                *found = rows;
                Next::Done(0)
            }
            // An answer of another kind: the shell answered the wrong call. Nothing is
            // written on a misread.
            _ => Next::Done(0),
        }
    }

    /// The chore's writes were applied, `written` of them with their guard holding.
    pub(super) fn written(&mut self, written: usize) -> Next {
        match self {
            Chore::RecoverExpired { recovered } => {
                *recovered += written;
                // None written: every lease was taken over meanwhile, nothing more to do now.
                if written == 0 {
                    Next::Done(*recovered)
                } else {
                    Next::Read
                }
            }
            Chore::Rebase { rebased, .. } => {
                *rebased += written;
                if written == 0 {
                    Next::Done(*rebased)
                } else {
                    Next::Read
                }
            }
            _ => Next::Done(written),
        }
    }
}

fn interrupted(records: &[Record], cx: Context<'_>) -> Vec<Write> {
    records
        .iter()
        .map(|r| Write::from(machine::on_interrupted(r, cx.policy, cx.now)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    const NOW: Millis = 1_000_000;

    fn cx(policy: &RetryPolicy) -> Context<'_> {
        Context {
            now: NOW,
            lease_ms: 30_000,
            policy,
        }
    }

    fn in_flight(id: u64, until: Millis) -> Record {
        let mut r = Record::fresh(RecordId(id), None, vec![], format!("k{id}"), 0);
        r.state = State::InFlight;
        r.lease = Some(Lease { token: id, until });
        r
    }

    #[test]
    fn expired_leases_are_recovered_page_by_page_until_a_page_is_empty() {
        let policy = RetryPolicy::default();
        let mut chore = Chore::RecoverExpired { recovered: 0 };
        assert_eq!(
            chore.io(NOW),
            Io::Expired {
                now: NOW,
                limit: PAGE
            }
        );
        let page = vec![in_flight(1, NOW - 1), in_flight(2, NOW - 1)];
        let Next::Write(writes) = chore.found(Answer::Records(page), cx(&policy)) else {
            panic!("expected writes");
        };
        assert_eq!(writes.len(), 2);
        assert!(
            writes.iter().all(|w| w.event.is_some()),
            "each recovery is told"
        );
        assert_eq!(chore.written(2), Next::Read);
        assert_eq!(
            chore.found(Answer::Records(vec![]), cx(&policy)),
            Next::Done(2)
        );
    }

    #[test]
    fn recovery_stops_when_every_lease_was_taken_over() {
        let mut chore = Chore::RecoverExpired { recovered: 3 };
        assert_eq!(chore.written(0), Next::Done(3));
    }

    #[test]
    fn far_leases_spare_our_own_records_and_near_leases() {
        let policy = RetryPolicy::default();
        let mut chore = Chore::FarLeases {
            ours: vec![RecordId(1)],
        };
        assert_eq!(
            chore.io(NOW),
            Io::Expired {
                now: Millis::MAX,
                limit: IN_FLIGHT
            }
        );
        let far = NOW + 10 * 30_000;
        let found = vec![
            in_flight(1, far),
            in_flight(2, far),
            in_flight(3, NOW + 1_000),
        ];
        let Next::Write(writes) = chore.found(Answer::Records(found), cx(&policy)) else {
            panic!("expected writes");
        };
        let ids: Vec<u64> = writes.iter().map(|w| w.transition.id.0).collect();
        assert_eq!(ids, [2]);
        assert_eq!(chore.written(1), Next::Done(1));
    }

    #[test]
    fn relinking_reads_each_record_then_writes_the_ones_still_waiting() {
        let policy = RetryPolicy::default();
        let mut chore = Chore::Relink {
            ids: VecDeque::from([RecordId(1), RecordId(2)]),
            found: vec![],
        };
        assert_eq!(chore.io(NOW), Io::Get(RecordId(1)));
        let mut waiting = Record::fresh(RecordId(1), None, vec![], "k1".into(), 0);
        waiting.state = State::Retrying;
        waiting.unanswered = 2;
        waiting.next_attempt_at = Some(NOW + 60_000);
        assert_eq!(
            chore.found(Answer::Record(Some(waiting)), cx(&policy)),
            Next::Read
        );
        assert_eq!(chore.io(NOW), Io::Get(RecordId(2)));
        let Next::Write(writes) = chore.found(Answer::Record(None), cx(&policy)) else {
            panic!("expected a write");
        };
        assert_eq!(writes.len(), 1);
        assert_eq!(chore.written(1), Next::Done(1));
    }

    #[test]
    fn unreadable_rows_are_read_once_and_kept_for_their_events() {
        let policy = RetryPolicy::default();
        let mut chore = Chore::Unreadable { found: vec![] };
        assert_eq!(chore.io(NOW), Io::Unreadable { limit: PAGE });
        let rows = vec![Unreadable::new(RecordId(42), "last_error is not UTF-8")];
        assert_eq!(
            chore.found(Answer::Unreadable(rows.clone()), cx(&policy)),
            Next::Done(0)
        );
        assert_eq!(chore, Chore::Unreadable { found: rows });
    }

    #[test]
    fn a_rebase_with_nothing_to_move_is_done() {
        let policy = RetryPolicy::default();
        let mut chore = Chore::Rebase {
            step: Some(5_000),
            rebased: 0,
        };
        assert_eq!(
            chore.io(NOW),
            Io::SteppedBack {
                now: NOW,
                limit: PAGE
            }
        );
        assert_eq!(
            chore.found(Answer::Records(vec![]), cx(&policy)),
            Next::Done(0)
        );
    }
}
