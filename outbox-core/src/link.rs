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
