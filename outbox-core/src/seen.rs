//! What a person saw of a record when they chose a repair: the value a compare-and-set
//! repair ([`Guard::Seen`](crate::Guard::Seen)) must find unchanged.

use crate::record::{Millis, Record};
use crate::state::State;

/// A record as a person saw it: everything a transition or a coalescing write can change
/// while the record is not in flight. [`Guard::Seen`](crate::Guard::Seen) carries it; a
/// repair applies only if the record still gives the same `Seen`.
///
/// The payload is not read: a coalescing write that replaces it also moves `created_at` to
/// its own time and brings its own key, both of which are here.
///
/// ```
/// use outbox_core::{Guard, Record, RecordId, Seen};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// let seen = Seen::of(&record);
/// assert!(Guard::Seen(seen).admits(&record));
/// record.last_error = Some("HTTP 422".into());
/// assert!(!Guard::Seen(seen).admits(&record), "an error recorded meanwhile");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The state.
    pub state: State,
    /// Answered failures.
    pub attempts: u32,
    /// Unanswered failures.
    pub unanswered: u32,
    /// Interrupted claims.
    pub interrupted: u32,
    /// When the record was enqueued, or last replaced by a coalescing write.
    pub created_at: Millis,
    /// When the last delivery reported.
    pub last_attempt_at: Option<Millis>,
    /// The next deadline.
    pub next_attempt_at: Option<Millis>,
    /// A digest of the texts: the last error, the idempotency key and the expected version
    /// (64-bit FNV-1a, the same in every process and build).
    pub texts: u64,
}

impl Seen {
    /// What a person sees of `record` now.
    pub fn of(record: &Record) -> Seen {
        let mut texts = Fnv::new();
        for text in [
            record.last_error.as_deref(),
            Some(record.key.as_str()),
            record.expected_version.as_deref(),
        ] {
            match text {
                // Absent and empty differ: a tag byte before each.
                None => texts.write(&[0]),
                Some(text) => {
                    texts.write(&[1]);
                    texts.write(&(text.len() as u64).to_le_bytes());
                    texts.write(text.as_bytes());
                }
            }
        }
        Seen {
            state: record.state,
            attempts: record.attempts,
            unanswered: record.unanswered,
            interrupted: record.interrupted,
            created_at: record.created_at,
            last_attempt_at: record.last_attempt_at,
            next_attempt_at: record.next_attempt_at,
            texts: texts.0,
        }
    }
}

/// 64-bit FNV-1a: a fixed, dependency-free digest, so a `Seen` computed in one process
/// compares with one computed in another.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordId;

    #[test]
    fn every_field_a_change_can_touch_is_seen() {
        let base = Record::fresh(RecordId(1), None, b"p".to_vec(), "k".into(), 10);
        let seen = Seen::of(&base);
        let changes: [fn(&mut Record); 10] = [
            |r| r.state = State::Retrying,
            |r| r.attempts += 1,
            |r| r.unanswered += 1,
            |r| r.interrupted += 1,
            |r| r.created_at += 1,
            |r| r.last_attempt_at = Some(11),
            |r| r.next_attempt_at = None,
            |r| r.last_error = Some(String::new()),
            |r| r.key = "k2".into(),
            |r| r.expected_version = Some("7".into()),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut record = base.clone();
            change(&mut record);
            assert_ne!(Seen::of(&record), seen, "change {i} went unseen");
        }
        let mut same = base.clone();
        same.payload = b"other".to_vec();
        assert_eq!(Seen::of(&same), seen, "the payload is not read");
    }

    #[test]
    fn texts_are_told_apart_by_their_boundaries() {
        let mut a = Record::fresh(RecordId(1), None, vec![], "ab".into(), 0);
        a.last_error = Some("x".into());
        let mut b = a.clone();
        b.key = "b".into();
        b.last_error = Some("xa".into());
        assert_ne!(Seen::of(&a).texts, Seen::of(&b).texts);
    }
}
