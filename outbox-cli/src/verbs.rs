//! The repair verbs, shared by the command line and the web page: each record's transition
//! comes from `outbox_core::machine` (so the rules live in one place) and is applied with
//! [`Store::apply`] under the idle guard.

use outbox_core::{machine, Millis, Record, RecordId, State, Store, Transition};

use crate::error::CliError;

/// How many transitions one `apply` call carries.
const BATCH: usize = 256;

/// A person's repair of records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    /// A fresh budget, due now ([`machine::retry_now`]).
    Retry,
    /// A rejected record re-admitted in its own place, with a fresh budget
    /// ([`machine::requeue`]).
    Requeue,
    /// Out of delivery, with a tombstone keeping the reason ([`machine::discard`]).
    Discard {
        /// Kept on the tombstone.
        reason: String,
    },
}

impl Verb {
    /// The verb as typed: `retry`, `requeue`, `discard`.
    pub fn name(&self) -> &'static str {
        match self {
            Verb::Retry => "retry",
            Verb::Requeue => "requeue",
            Verb::Discard { .. } => "discard",
        }
    }

    /// The transition for `record`, or why the verb does not apply to it as it is.
    ///
    /// ```
    /// use outbox_cli::verbs::Verb;
    /// use outbox_core::{Record, RecordId};
    /// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
    /// assert!(Verb::Retry.transition(&record, 5).is_ok());
    /// assert!(Verb::Requeue.transition(&record, 5).unwrap_err().contains("only a rejected record"));
    /// ```
    pub fn transition(&self, record: &Record, now: Millis) -> Result<Transition, String> {
        let in_flight = || {
            "it is in flight (being delivered right now); try again once its delivery has \
             reported"
                .to_owned()
        };
        match self {
            Verb::Retry => machine::retry_now(record, now)
                .map(|step| step.transition)
                .ok_or_else(|| match record.state {
                    State::Rejected => "it was rejected by the server, whose verdict is final; \
                                        `outbox requeue` sends it again"
                        .to_owned(),
                    _ => in_flight(),
                }),
            Verb::Requeue => machine::requeue(record, now).ok_or_else(|| {
                if record.state == State::InFlight {
                    in_flight()
                } else {
                    format!(
                        "it is {}, and only a rejected record can be requeued (`outbox retry` \
                         gives it a fresh budget)",
                        record.state
                    )
                }
            }),
            Verb::Discard { reason } => machine::discard(record, reason, now)
                .map(|step| step.transition)
                .ok_or_else(in_flight),
        }
    }
}

/// What became of one record a verb was applied to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Retried: due now with a fresh budget.
    Retried(RecordId),
    /// Requeued: pending in its own place, due now with a fresh budget.
    Requeued(RecordId),
    /// Discarded; the tombstone stays until pruned.
    Discarded(RecordId),
    /// Left unchanged: the record changed between the read and the write.
    Skipped {
        /// The record.
        id: RecordId,
        /// What happened to it meanwhile.
        why: String,
    },
}

impl Done {
    /// One line saying what happened.
    pub fn line(&self) -> String {
        match self {
            Done::Retried(id) => format!("retried #{}: due now with a fresh budget", id.0),
            Done::Requeued(id) => format!(
                "requeued #{}: pending in its place, due now with a fresh budget",
                id.0
            ),
            Done::Discarded(id) => {
                format!("discarded #{}; its tombstone stays until pruned", id.0)
            }
            Done::Skipped { id, why } => format!("left #{} as it is: {why}", id.0),
        }
    }

    /// True unless the record was left unchanged.
    pub fn changed(&self) -> bool {
        !matches!(self, Done::Skipped { .. })
    }
}

/// Applies `verb`'s transitions (built with [`Verb::transition`]) and says what became of each.
pub async fn apply(
    store: &dyn Store,
    verb: &Verb,
    transitions: Vec<Transition>,
) -> Result<Vec<Done>, CliError> {
    let mut done = Vec::with_capacity(transitions.len());
    let mut transitions = transitions.into_iter().peekable();
    while transitions.peek().is_some() {
        let batch: Vec<Transition> = transitions.by_ref().take(BATCH).collect();
        let ids: Vec<RecordId> = batch.iter().map(|t| t.id).collect();
        let applied = store.apply(batch).await?;
        for id in ids {
            if applied.skipped.contains(&id) {
                let why = match store.get(id).await? {
                    Some(r) if r.state == State::InFlight => {
                        "it went in flight meanwhile (a runner claimed it)".to_owned()
                    }
                    // The store refuses a requeue while the group has a record in flight: two
                    // of a group must never be delivered at once.
                    Some(r) if *verb == Verb::Requeue && r.state == State::Rejected => {
                        "a record of its group is in flight; requeue it once that delivery has \
                         reported"
                            .to_owned()
                    }
                    Some(r) => format!("it changed meanwhile (it is {} now)", r.state),
                    None => "it is gone (delivered or discarded meanwhile)".to_owned(),
                };
                done.push(Done::Skipped { id, why });
                continue;
            }
            done.push(match verb {
                Verb::Retry => Done::Retried(id),
                Verb::Discard { .. } => Done::Discarded(id),
                Verb::Requeue => Done::Requeued(id),
            });
        }
    }
    Ok(done)
}
