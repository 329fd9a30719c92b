//! Halts: a refused credential, and a rejection storm (a misconfiguration, not bad records).
//!
//! One refusal halts once: one event (sent once the halt is persisted) and one line, however
//! many deliveries were refused together. A storm is `rejection_storm` records of different
//! groups rejected in a row with one verdict ([`Outcome::verdict`]: the status and the sink's
//! kind of refusal, never the server's words), so a wrong route answering every write with a
//! 404 that names its path halts as surely as one that answers with a fixed text.

use crate::event::Event;
use crate::outcome::Outcome;
use crate::record::{Millis, RecordId};
use crate::store::Halt;

/// The runner's halt, and what leads to one.
#[derive(Debug, Default)]
pub(super) struct Halting {
    halt: Option<Halt>,
    /// The halt this runner was resumed from, until the store has answered its clearing: the
    /// runner still counts as halted (it claims nothing, and says it is halted) until then.
    resuming: Option<Halt>,
    /// The `Halted` event, sent once the halt is persisted.
    event: Option<Event>,
    storm: Storm,
}

impl Halting {
    pub(super) fn new(halt: Option<Halt>) -> Self {
        Halting {
            halt,
            ..Halting::default()
        }
    }

    pub(super) fn halt(&self) -> Option<&Halt> {
        self.halt.as_ref()
    }

    /// Halted, or resumed from a halt the store has not cleared yet.
    pub(super) fn is_halted(&self) -> bool {
        self.halt.is_some() || self.resuming.is_some()
    }

    /// A resume's clearing is queued or under way.
    pub(super) fn is_resuming(&self) -> bool {
        self.resuming.is_some()
    }

    /// Halts because of record `id`; returns the halt to persist, or `None` when a halt holds
    /// already (only the first refusal halts).
    pub(super) fn halt_now(&mut self, id: RecordId, reason: String, now: Millis) -> Option<Halt> {
        if self.halt.is_some() {
            return None;
        }
        let halt = Halt {
            reason: reason.clone(),
            since: now,
        };
        self.halt = Some(halt.clone());
        self.event = Some(Event::Halted { id, reason });
        Some(halt)
    }

    /// The halt was persisted: its one event.
    pub(super) fn persisted(&mut self) -> Option<Event> {
        self.event.take()
    }

    /// Resumed: returns the halt lifted, if one held, to clear in the store if the store still
    /// holds it; the runner counts as halted until [`Halting::cleared`].
    pub(super) fn resume(&mut self) -> Option<Halt> {
        self.storm.reset();
        let held = self.halt.take();
        if held.is_some() {
            self.resuming.clone_from(&held);
        }
        held
    }

    /// The store holds no halt any more (cleared elsewhere): lifted, with nothing to clear.
    /// Returns true when a halt held.
    pub(super) fn lifted(&mut self) -> bool {
        self.storm.reset();
        self.halt.take().is_some()
    }

    /// The store answered the clearing of `held`. Returns false when the runner was resumed
    /// from a later halt since (halted again, and resumed again, while this clearing waited):
    /// that clearing is still to come, and answers for the runner.
    pub(super) fn cleared(&mut self, held: &Halt) -> bool {
        if self.resuming.as_ref() != Some(held) {
            return false;
        }
        self.resuming = None;
        true
    }

    /// Keeps to `halt`, persisted by someone else after the halt this runner held: no event
    /// (its refusal was not this runner's), and nothing to persist.
    pub(super) fn keep(&mut self, halt: Halt) {
        self.halt = Some(halt);
    }

    /// An answered outcome of a record of `group`: the reason to halt for, when it makes a
    /// storm of `limit` rejections in a row (0: never).
    pub(super) fn answered(
        &mut self,
        outcome: &Outcome,
        group: &Option<String>,
        limit: u32,
    ) -> Option<String> {
        let (Outcome::Rejected { reason }, Some(verdict)) = (outcome, outcome.verdict()) else {
            self.storm.reset();
            return None;
        };
        let storm = self.storm.rejected(group, verdict);
        (limit > 0 && storm >= limit as usize)
            .then(|| format!("suspected misconfiguration: {storm} rejections in a row ({reason})"))
    }
}

/// Records of different groups rejected in a row with one verdict.
#[derive(Debug, Default)]
struct Storm {
    verdict: Option<String>,
    groups: Vec<Option<String>>,
}

impl Storm {
    /// Counts a rejection; returns the count in a row.
    fn rejected(&mut self, group: &Option<String>, verdict: &str) -> usize {
        if self.verdict.as_deref() != Some(verdict) {
            self.verdict = Some(verdict.to_owned());
            self.groups.clear();
        }
        if group.is_none() || !self.groups.contains(group) {
            self.groups.push(group.clone());
        }
        self.groups.len()
    }

    fn reset(&mut self) {
        self.verdict = None;
        self.groups.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str) -> Option<String> {
        Some(name.to_owned())
    }

    #[test]
    fn rejections_with_one_status_and_different_bodies_make_a_storm() {
        let mut halting = Halting::default();
        let mut reasons = (1..=3).map(|i| {
            let outcome = Outcome::rejected(format!("HTTP 404: Cannot PUT /v1/notes/note-{i}"));
            halting.answered(&outcome, &group(&format!("note-{i}")), 3)
        });
        assert_eq!(reasons.next(), Some(None));
        assert_eq!(reasons.next(), Some(None));
        let reason = reasons.next().flatten().unwrap_or_default();
        assert!(reason.starts_with("suspected misconfiguration: 3 rejections in a row (HTTP 404"));
    }

    #[test]
    fn another_status_a_repeated_group_or_another_outcome_breaks_the_row() {
        let mut halting = Halting::default();
        let four = Outcome::rejected("HTTP 404: x");
        assert_eq!(halting.answered(&four, &group("a"), 3), None);
        assert_eq!(
            halting.answered(&Outcome::rejected("HTTP 422: x"), &group("b"), 3),
            None
        );
        assert_eq!(halting.answered(&four, &group("c"), 3), None);
        assert_eq!(
            halting.answered(&four, &group("c"), 3),
            None,
            "same group: no count"
        );
        assert_eq!(halting.answered(&Outcome::Delivered, &None, 3), None);
        assert_eq!(halting.answered(&four, &group("d"), 3), None);
        assert_eq!(
            halting.answered(&four, &group("e"), 0),
            None,
            "0 turns it off"
        );
    }

    #[test]
    fn one_halt_one_event_and_resume_lifts_it() {
        let mut halting = Halting::default();
        assert!(halting.halt_now(RecordId(1), "401".into(), 5).is_some());
        assert!(halting.halt_now(RecordId(2), "401".into(), 6).is_none());
        assert_eq!(
            halting.persisted(),
            Some(Event::Halted {
                id: RecordId(1),
                reason: "401".into()
            })
        );
        assert_eq!(halting.persisted(), None);
        assert!(halting.resume().is_some());
        assert!(halting.is_halted(), "until the store has cleared it");
        assert!(halting.resume().is_none());
        let held = Halt {
            reason: "401".into(),
            since: 5,
        };
        assert!(halting.cleared(&held));
        assert!(!halting.is_halted());
    }
}
