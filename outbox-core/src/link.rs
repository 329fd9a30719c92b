//! The link between this device and the server, as the runner sees it.

use crate::record::Millis;

/// Whether a server has answered lately.
///
/// The link goes down when a delivery gets no answer at all (no route, refused, timed out),
/// and comes back when any server answers or the connectivity signal turns online. While it is
/// down the runner probes with one record at a time; records are never parked for lack of an
/// answer.
///
/// ```
/// use outbox_core::LinkState;
/// let link = LinkState::Down { since: 1_000, last_error: "connection refused".into() };
/// assert!(!link.is_up());
/// assert!(LinkState::Up.is_up());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LinkState {
    /// The last delivery got an answer (or none was tried yet).
    #[default]
    Up,
    /// No server has answered since `since`.
    Down {
        /// When the first unanswered delivery reported.
        since: Millis,
        /// The last transport error.
        last_error: String,
    },
}

impl LinkState {
    /// True unless the link is down.
    pub fn is_up(&self) -> bool {
        matches!(self, LinkState::Up)
    }
}

/// The largest number of records the link remembers as waiting out a no-answer backoff, to
/// release them when a server answers again. Past it the oldest are forgotten: they keep their
/// deadline, which is still bounded by the backoff's cap.
const MAX_WAITING: usize = 4_096;

/// The link's state machine: pure, driven by the scheduler with wall-clock readings.
#[derive(Debug, Default)]
pub(crate) struct Link {
    state: LinkState,
    /// No-answers counted against the link since it went down, at most one per round.
    failures: u32,
    /// When the link may be probed again: the deadline drawn for the record whose no-answer
    /// was counted last (the same draw, never a second one).
    probe_at: Option<crate::record::Millis>,
    /// Whether this round already counted a no-answer.
    counted_this_round: bool,
    /// Records whose current deadline comes from a no-answer, oldest first.
    waiting: std::collections::VecDeque<crate::record::RecordId>,
    /// When the link went down on the monotonic clock: how long it was down is measured
    /// there, so a wall clock that steps during an outage neither stretches nor cuts it.
    down_since: Millis,
}

/// What changed when the link heard from a server again.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Restored {
    /// How long it was down (monotonic milliseconds).
    pub(crate) down_for: Millis,
    /// Records to make due at once: the link was at fault, not them.
    pub(crate) release: Vec<crate::record::RecordId>,
}

impl Link {
    pub(crate) fn state(&self) -> &LinkState {
        &self.state
    }

    pub(crate) fn is_down(&self) -> bool {
        !self.state.is_up()
    }

    /// The no-answer streak a failed record's wait is drawn on: its own next count, or the
    /// link's while the link has been failing longer than the record.
    pub(crate) fn streak(&self, record_unanswered: u32) -> u32 {
        record_unanswered
            .saturating_add(1)
            .max(self.failures.saturating_add(1))
    }

    /// A new round starts: its no-answers count once against the link.
    pub(crate) fn new_round(&mut self) {
        self.counted_this_round = false;
    }

    /// When a down link may be probed (`None` while up).
    pub(crate) fn probe_at(&self) -> Option<Millis> {
        self.probe_at.filter(|_| self.is_down())
    }

    /// Shifts the probe time after the wall clock stepped back by `by`.
    pub(crate) fn step_back(&mut self, by: Millis) {
        if let Some(at) = &mut self.probe_at {
            *at = at.saturating_sub(by);
        }
    }

    /// A delivery got no answer at `now` (wall) and `mono`; `deadline` is the wait drawn for
    /// its record. Returns true when the link just went down.
    pub(crate) fn unanswered(
        &mut self,
        now: Millis,
        mono: Millis,
        id: crate::record::RecordId,
        error: &str,
        deadline: Millis,
    ) -> bool {
        self.remember(id);
        let went_down = self.state.is_up();
        if went_down {
            self.down_since = mono;
            self.state = LinkState::Down {
                since: now,
                last_error: error.to_owned(),
            };
        } else if let LinkState::Down { last_error, .. } = &mut self.state {
            error.clone_into(last_error);
        }
        if !self.counted_this_round {
            self.counted_this_round = true;
            self.failures = self.failures.saturating_add(1);
            self.probe_at = Some(deadline);
        }
        went_down
    }

    /// A server answered about `id` (or the connectivity signal turned online, `id` `None`):
    /// the link is up at `mono`. Returns what to release when it was down.
    pub(crate) fn answered(
        &mut self,
        id: Option<crate::record::RecordId>,
        mono: Millis,
    ) -> Option<Restored> {
        if let Some(id) = id {
            self.waiting.retain(|w| *w != id);
        }
        if self.state.is_up() {
            return None;
        }
        self.state = LinkState::Up;
        self.failures = 0;
        self.probe_at = None;
        Some(Restored {
            down_for: mono.saturating_sub(self.down_since),
            release: self.waiting.drain(..).collect(),
        })
    }

    fn remember(&mut self, id: crate::record::RecordId) {
        if !self.waiting.contains(&id) {
            if self.waiting.len() == MAX_WAITING {
                self.waiting.pop_front();
            }
            self.waiting.push_back(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordId;

    #[test]
    fn a_round_counts_once_and_the_probe_is_the_records_own_deadline() {
        let mut link = Link::default();
        link.new_round();
        assert!(link.unanswered(10, 10, RecordId(1), "refused", 1_010));
        assert!(!link.unanswered(11, 11, RecordId(2), "reset", 5_000));
        assert_eq!(link.probe_at(), Some(1_010));
        assert_eq!(link.streak(0), 2);
        link.new_round();
        link.unanswered(1_010, 1_010, RecordId(1), "refused", 3_000);
        assert_eq!((link.streak(0), link.probe_at()), (3, Some(3_000)));
        assert_eq!(
            link.state(),
            &LinkState::Down {
                since: 10,
                last_error: "refused".into()
            }
        );
    }

    #[test]
    fn an_answer_brings_the_link_up_and_releases_the_waiting_records_once() {
        let mut link = Link::default();
        link.new_round();
        link.unanswered(10, 10, RecordId(1), "refused", 1_000);
        link.unanswered(10, 10, RecordId(2), "refused", 2_000);
        let restored = link.answered(Some(RecordId(2)), 500).unwrap();
        assert_eq!(
            restored,
            Restored {
                down_for: 490,
                release: vec![RecordId(1)]
            }
        );
        assert!(!link.is_down());
        assert_eq!(link.probe_at(), None);
        assert_eq!(link.streak(0), 1);
        assert_eq!(link.answered(None, 600), None);
    }

    #[test]
    fn the_waiting_list_is_bounded() {
        let mut link = Link::default();
        for id in 0..(MAX_WAITING as u64 + 10) {
            link.new_round();
            link.unanswered(0, 0, RecordId(id), "x", 1);
        }
        let restored = link.answered(None, 1).unwrap();
        assert_eq!(restored.release.len(), MAX_WAITING);
        assert_eq!(restored.release[0], RecordId(10));
    }
}
