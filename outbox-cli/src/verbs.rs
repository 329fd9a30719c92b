//! The repair verbs, shared by the command line and the web page: each record's transition
//! comes from `outbox_core::machine` (so the rules live in one place) and is applied with
//! [`Store::apply`] under [`Guard::Seen`]: a compare-and-set that changes the record only if
//! it is still as it was read, and otherwise leaves it and says it changed since the person
//! looked.

use outbox_core::{
    machine, Guard, Halt, Millis, Record, RecordId, Seen, State, Store, Transition, Unreadable,
};

use crate::error::CliError;
use crate::revision;
use crate::view::{self, Found};

/// What a person's resume did ([`lift_halt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resumed {
    /// The halt the person saw was lifted.
    Lifted,
    /// No halt was left: another process or person lifted it meanwhile.
    AlreadyLifted,
}

impl Resumed {
    /// What the person is told, of `what` (the halt as [`crate::human::halt`] says it).
    ///
    /// ```
    /// use outbox_cli::verbs::Resumed;
    /// assert!(Resumed::Lifted.line("the halt").starts_with("lifted the halt: every runner"));
    /// assert_eq!(
    ///     Resumed::AlreadyLifted.line("the halt"),
    ///     "not halted: the halt was lifted already"
    /// );
    /// ```
    pub fn line(self, what: &str) -> String {
        match self {
            Resumed::Lifted => format!(
                "lifted {what}: every runner resumes when it reads that (PostgreSQL: at once; a \
                 file: at its next wake-up or safety poll)"
            ),
            Resumed::AlreadyLifted => format!("not halted: {what} was lifted already"),
        }
    }
}

/// Lifts the persisted halt if it is still the one the person saw: a runner may have resumed
/// and halted again for another reason while the person looked, and that halt is left as it
/// is ([`CliError::Changed`]). The comparison and the clearing are one step of the store
/// ([`Store::clear_halt_if`]), so a halt written at any moment after the person looked is
/// never lifted. Every runner of the outbox resumes when it reads the cleared halt.
///
/// ```
/// use outbox_cli::verbs::{lift_halt, Resumed};
/// use outbox_cli::CliError;
/// use outbox_core::{Halt, Store};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = outbox_memory::MemoryStore::new();
/// let seen = Halt { reason: "HTTP 401".into(), since: 1_000 };
/// store.set_halt(Some(seen.clone())).await.unwrap();
/// assert_eq!(lift_halt(&store, &seen).await.unwrap(), Resumed::Lifted);
/// assert_eq!(lift_halt(&store, &seen).await.unwrap(), Resumed::AlreadyLifted);
///
/// let newer = Halt { reason: "HTTP 403".into(), since: 2_000 };
/// store.set_halt(Some(newer.clone())).await.unwrap();
/// assert!(matches!(lift_halt(&store, &seen).await, Err(CliError::Changed(_))));
/// assert_eq!(store.halt().await.unwrap(), Some(newer));
/// # }
/// ```
pub async fn lift_halt(store: &dyn Store, seen: &Halt) -> Result<Resumed, CliError> {
    match store.clear_halt_if(seen).await? {
        Some(found) if found == *seen => Ok(Resumed::Lifted),
        None => Ok(Resumed::AlreadyLifted),
        Some(_) => Err(CliError::Changed(
            "left the halt as it is: it changed since you looked (look again)".into(),
        )),
    }
}

/// The audit line's result of a resume of `what` (the halt as [`crate::human::halt`] says
/// it), or `None` when the store failed and nothing was decided.
///
/// ```
/// use outbox_cli::verbs::{resume_result, Resumed};
/// use outbox_cli::CliError;
/// let done = resume_result(&Ok(Resumed::Lifted), "the halt");
/// assert_eq!(done.as_deref(), Some("done: lifted the halt"));
/// let changed = resume_result(&Err(CliError::Changed(String::new())), "the halt");
/// assert_eq!(changed.as_deref(), Some("unchanged: the halt changed since you looked"));
/// ```
pub fn resume_result(resumed: &Result<Resumed, CliError>, what: &str) -> Option<String> {
    match resumed {
        Ok(Resumed::Lifted) => Some(format!("done: lifted {what}")),
        Ok(Resumed::AlreadyLifted) => Some(format!("unchanged: {what} was lifted already")),
        Err(CliError::Changed(_)) => Some(format!("unchanged: {what} changed since you looked")),
        Err(_) => None,
    }
}

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

    /// The transition for `record` as it was read, guarded by [`Guard::Seen`] of it, or why
    /// the verb does not apply to it as it is.
    ///
    /// ```
    /// use outbox_cli::verbs::Verb;
    /// use outbox_core::{Guard, Record, RecordId, Seen};
    /// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
    /// let retry = Verb::Retry.transition(&record, 5).unwrap();
    /// assert_eq!(retry.guard, Guard::Seen(Seen::of(&record)));
    /// assert!(Verb::Requeue.transition(&record, 5).unwrap_err().contains("only a rejected record"));
    /// ```
    pub fn transition(&self, record: &Record, now: Millis) -> Result<Transition, String> {
        let mut transition = self.unguarded(record, now)?;
        transition.guard = Guard::Seen(Seen::of(record));
        Ok(transition)
    }

    fn unguarded(&self, record: &Record, now: Millis) -> Result<Transition, String> {
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
    /// Left unchanged: the record changed between the read and the write (or, for a
    /// requeue, its group has a record in flight).
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

    /// The record.
    pub fn id(&self) -> RecordId {
        match self {
            Done::Retried(id) | Done::Requeued(id) | Done::Discarded(id) => *id,
            Done::Skipped { id, .. } => *id,
        }
    }

    /// True unless the record was left unchanged.
    pub fn changed(&self) -> bool {
        !matches!(self, Done::Skipped { .. })
    }

    /// `done`, or `unchanged: why`, for the audit line.
    pub fn result(&self) -> String {
        match self {
            Done::Skipped { why, .. } => format!("unchanged: {why}"),
            _ => "done".to_owned(),
        }
    }
}

/// The words every refused compare-and-set starts with.
pub const CHANGED: &str = "it changed since you looked";

/// Why a transition of `verb`, guarded by what was seen, was skipped: read the record again.
async fn why_skipped(
    store: &dyn Store,
    verb: &Verb,
    guard: Guard,
    id: RecordId,
) -> Result<String, CliError> {
    Ok(match store.get(id).await? {
        None => format!("{CHANGED}: it is gone (delivered or discarded meanwhile)"),
        Some(r) if r.state == State::InFlight => {
            format!("{CHANGED}: a runner claimed it (in flight now)")
        }
        // Unchanged, yet skipped: the store refuses a requeue while the group has a record
        // in flight, as two of a group must never be delivered at once.
        Some(r) if guard == Guard::Seen(Seen::of(&r)) && *verb == Verb::Requeue => {
            "a record of its group is in flight; requeue it once that delivery has reported"
                .to_owned()
        }
        Some(r) => format!(
            "{CHANGED}: it is {} now, with {} answered failure{} (`outbox show` it again)",
            r.state,
            r.attempts,
            if r.attempts == 1 { "" } else { "s" }
        ),
    })
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
        let guards: Vec<(RecordId, Guard)> = batch.iter().map(|t| (t.id, t.guard)).collect();
        let applied = store.apply(batch).await?;
        for (id, guard) in guards {
            if applied.skipped.contains(&id) {
                let why = why_skipped(store, verb, guard, id).await?;
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

/// One record's repair, as a person asked for it: `seen` is the revision they saw (`outbox
/// show`, the page); without it, the record as read here. A record that changed since is
/// left alone with [`CliError::Changed`].
pub async fn one(
    store: &dyn Store,
    verb: &Verb,
    id: RecordId,
    seen: Option<&str>,
    now: Millis,
) -> Result<Done, CliError> {
    let name = verb.name();
    let record = match view::find(store, id).await? {
        Found::Record(record) => record,
        Found::Tombstone(_) => {
            return Err(CliError::NotApplicable(format!(
                "cannot {name} #{}: it was discarded (only its tombstone is left)",
                id.0
            )))
        }
        Found::Unreadable(row) => return unreadable(store, verb, &row, seen, now).await,
    };
    if let Some(seen) = seen {
        let now_seen = revision::of(&record);
        if now_seen != seen {
            return Err(CliError::Changed(format!(
                "left #{} as it is: {CHANGED} (revision {seen}): it is {} now, revision \
                 {now_seen}; `outbox show` it again and decide",
                id.0, record.state
            )));
        }
    }
    let transition = verb
        .transition(&record, now)
        .map_err(|why| CliError::NotApplicable(format!("cannot {name} #{}: {why}", id.0)))?;
    let done = apply(store, verb, vec![transition])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Partial("the store reported nothing".into()))?;
    match done {
        Done::Skipped { why, .. } if why.starts_with(CHANGED) => {
            Err(CliError::Changed(format!("left #{} as it is: {why}", id.0)))
        }
        Done::Skipped { why, .. } => Err(CliError::NotApplicable(format!(
            "left #{} as it is: {why}",
            id.0
        ))),
        done => Ok(done),
    }
}

/// A person's repair of a row the store cannot decode: only a discard applies (the store's
/// [`Store::discard_unreadable`], which keeps a tombstone). Such a row has no revision to
/// compare: what was seen is its id and why it cannot be read.
async fn unreadable(
    store: &dyn Store,
    verb: &Verb,
    row: &Unreadable,
    seen: Option<&str>,
    now: Millis,
) -> Result<Done, CliError> {
    let id = row.id;
    let name = verb.name();
    let cannot = |why: &str| {
        CliError::NotApplicable(format!(
            "cannot {name} #{}: it cannot be read ({}); {why}",
            id.0, row.reason
        ))
    };
    if !matches!(verb, Verb::Discard { .. }) {
        return Err(cannot("discard it, keeping a tombstone"));
    }
    if seen.is_some() {
        return Err(cannot(
            "it has no revision to compare; discard it without one",
        ));
    }
    if store.discard_unreadable(id, now).await? {
        Ok(Done::Discarded(id))
    } else {
        Err(CliError::Changed(format!(
            "left #{} as it is: {CHANGED}: it can be read now, or it is gone (`outbox show` \
             it again)",
            id.0
        )))
    }
}
