//! The last attempts of a record: when each delivery ended, what kind of end it was, the
//! server's status when it gave one, the error text and how long the sink took.
//!
//! A record keeps at most [`History::LIMIT`] attempts, oldest first; an attempt beyond that
//! drops the oldest. Each error text is cut to [`History::ERROR_BYTES`] bytes (on a character
//! boundary), so a record's history is bounded in bytes whatever its sink reports. The machine
//! appends (see [`machine`](crate::machine)); every store persists the bytes of
//! [`History::encode`] and reads them back with [`History::decode`], the one format of every
//! backend. A damaged history never makes its record unreadable: it reads as empty and says
//! so ([`History::is_unreadable`]).

use std::fmt;

use crate::outcome::Outcome;
use crate::record::Millis;

/// What kind of end one attempt had.
///
/// ```
/// use outbox_core::{AttemptClass, Outcome};
/// assert_eq!(AttemptClass::of(&Outcome::transient("HTTP 503", None)), Some(AttemptClass::Later));
/// assert_eq!(AttemptClass::of(&Outcome::Delivered), None); // a delivered record is gone
/// assert_eq!(AttemptClass::Later.to_string(), "later");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptClass {
    /// No server answered (or something answered in its place): nothing was spent.
    NoAnswer,
    /// The server answered "later": one attempt spent.
    Later,
    /// The server refused the record for good.
    Rejected,
    /// The server reported a conflict the resolver did not settle.
    Conflict,
    /// The credential was refused: the runner halted, nothing was spent.
    Refused,
    /// The delivery never reported: the process died, or the sink panicked.
    Interrupted,
}

impl AttemptClass {
    /// The class of a sink's report; `None` for [`Outcome::Delivered`] (the record is removed,
    /// nothing is left to keep a history on).
    pub fn of(outcome: &Outcome) -> Option<AttemptClass> {
        Some(match outcome {
            Outcome::Delivered => return None,
            Outcome::NoAnswer { .. } => AttemptClass::NoAnswer,
            Outcome::Transient { .. } => AttemptClass::Later,
            Outcome::Rejected { .. } => AttemptClass::Rejected,
            Outcome::Halt { .. } => AttemptClass::Refused,
            Outcome::Conflict { .. } => AttemptClass::Conflict,
        })
    }

    /// Its name, as `outbox show` and the page print it.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptClass::NoAnswer => "no answer",
            AttemptClass::Later => "later",
            AttemptClass::Rejected => "rejected",
            AttemptClass::Conflict => "conflict",
            AttemptClass::Refused => "refused",
            AttemptClass::Interrupted => "interrupted",
        }
    }

    fn code(self) -> u8 {
        match self {
            AttemptClass::NoAnswer => 0,
            AttemptClass::Later => 1,
            AttemptClass::Rejected => 2,
            AttemptClass::Conflict => 3,
            AttemptClass::Refused => 4,
            AttemptClass::Interrupted => 5,
        }
    }

    fn from_code(code: u8) -> Option<AttemptClass> {
        Some(match code {
            0 => AttemptClass::NoAnswer,
            1 => AttemptClass::Later,
            2 => AttemptClass::Rejected,
            3 => AttemptClass::Conflict,
            4 => AttemptClass::Refused,
            5 => AttemptClass::Interrupted,
            _ => return None,
        })
    }
}

impl fmt::Display for AttemptClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One delivery of a record that did not deliver it.
///
/// ```
/// use outbox_core::{Attempt, AttemptClass};
/// let a = Attempt::new(1_000, AttemptClass::Later, "HTTP 503: busy");
/// assert_eq!((a.status, a.error.as_str()), (Some(503), "HTTP 503: busy"));
/// assert_eq!(Attempt::new(1_000, AttemptClass::NoAnswer, "connection refused").status, None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// When the delivery ended (wall-clock milliseconds).
    pub at: Millis,
    /// What kind of end it was.
    pub class: AttemptClass,
    /// The server's status, when the error text starts with one (`HTTP 503…`, as
    /// [`http::classify`](crate::http::classify) writes it).
    pub status: Option<u16>,
    /// The error text, at most [`History::ERROR_BYTES`] bytes.
    pub error: String,
    /// How long the sink took, in milliseconds, when the runner measured it.
    pub took_ms: Option<u64>,
}

impl Attempt {
    /// An attempt that ended at `at` with `error`; the status is read from the text's head
    /// and the text is cut to [`History::ERROR_BYTES`].
    pub fn new(at: Millis, class: AttemptClass, error: &str) -> Attempt {
        Attempt {
            at,
            class,
            status: status_of(error),
            error: cut(error, History::ERROR_BYTES).to_owned(),
            took_ms: None,
        }
    }
}

/// `Some(503)` for a text that starts `HTTP 503` followed by the end, a space or a colon.
fn status_of(text: &str) -> Option<u16> {
    let rest = text.strip_prefix("HTTP ")?;
    let digits = rest.get(..3)?;
    let after = rest[3..].chars().next();
    let ends = matches!(after, None | Some(' ' | ':'));
    (ends && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A record's last attempts, oldest first.
///
/// ```
/// use outbox_core::{Attempt, AttemptClass, History};
/// let mut history = History::default();
/// for i in 0..12 {
///     history.push(Attempt::new(i, AttemptClass::Later, "HTTP 503"));
/// }
/// assert_eq!(history.len(), History::LIMIT);
/// assert_eq!(history.attempts()[0].at, 2); // the two oldest were dropped
/// assert_eq!(History::decode(&history.encode()), history);
/// assert!(History::decode(b"\x01\x09garbage").is_unreadable());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    attempts: Vec<Attempt>,
    unreadable: bool,
}

/// The first byte of an encoded history: its format.
const FORMAT: u8 = 1;

impl History {
    /// How many attempts a record keeps.
    pub const LIMIT: usize = 10;
    /// The longest error text kept per attempt, in bytes.
    pub const ERROR_BYTES: usize = 512;
    /// The most bytes [`History::encode`] writes: the bound of a record's history on disk.
    pub const MAX_BYTES: usize = 2 + History::LIMIT * (8 + 1 + 2 + 8 + 2 + History::ERROR_BYTES);

    /// The attempts, oldest first.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// How many attempts are kept.
    pub fn len(&self) -> usize {
        self.attempts.len()
    }

    /// True when no attempt is kept.
    pub fn is_empty(&self) -> bool {
        self.attempts.is_empty()
    }

    /// True when the stored history could not be decoded: it reads as empty, the record
    /// itself is whole, and the next attempt starts a new history.
    pub fn is_unreadable(&self) -> bool {
        self.unreadable
    }

    /// Appends an attempt (its error cut to [`History::ERROR_BYTES`]), dropping the oldest
    /// beyond [`History::LIMIT`].
    pub fn push(&mut self, mut attempt: Attempt) {
        if attempt.error.len() > History::ERROR_BYTES {
            let end = cut(&attempt.error, History::ERROR_BYTES).len();
            attempt.error.truncate(end);
        }
        if self.attempts.len() >= History::LIMIT {
            let over = self.attempts.len() + 1 - History::LIMIT;
            self.attempts.drain(..over);
        }
        self.attempts.push(attempt);
        self.unreadable = false;
    }

    /// Sets how long the sink took on the newest attempt.
    pub fn set_took(&mut self, took_ms: u64) {
        if let Some(last) = self.attempts.last_mut() {
            last.took_ms = Some(took_ms);
        }
    }

    /// The stored form: empty for no attempts, else a format byte, a count and each attempt
    /// (time, class, status, duration, error) in little-endian fields.
    pub fn encode(&self) -> Vec<u8> {
        if self.attempts.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(2 + self.attempts.len() * 32);
        out.push(FORMAT);
        out.push(u8::try_from(self.attempts.len()).unwrap_or(u8::MAX));
        for a in &self.attempts {
            out.extend_from_slice(&a.at.to_le_bytes());
            out.push(a.class.code());
            out.extend_from_slice(&a.status.unwrap_or(0).to_le_bytes());
            out.extend_from_slice(&a.took_ms.unwrap_or(u64::MAX).to_le_bytes());
            let error = cut(&a.error, History::ERROR_BYTES);
            let len = u16::try_from(error.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(error.as_bytes());
        }
        out
    }

    /// Reads a stored history; bytes that are not one read as an empty, unreadable history
    /// (never an error: the record is still whole).
    pub fn decode(bytes: &[u8]) -> History {
        if bytes.is_empty() {
            return History::default();
        }
        Reader(bytes).history().unwrap_or(History {
            attempts: Vec::new(),
            unreadable: true,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn history(mut self) -> Option<History> {
        let [format, count] = self.take::<2>()?;
        let count = usize::from(count);
        if format != FORMAT || count == 0 || count > History::LIMIT {
            return None;
        }
        let mut attempts = Vec::with_capacity(count);
        for _ in 0..count {
            let at = u64::from_le_bytes(self.take()?);
            let class = AttemptClass::from_code(self.take::<1>()?[0])?;
            let status = u16::from_le_bytes(self.take()?);
            let took = u64::from_le_bytes(self.take()?);
            let len = usize::from(u16::from_le_bytes(self.take()?));
            if len > History::ERROR_BYTES || len > self.0.len() {
                return None;
            }
            let (text, rest) = self.0.split_at(len);
            self.0 = rest;
            attempts.push(Attempt {
                at,
                class,
                status: (status != 0).then_some(status),
                error: std::str::from_utf8(text).ok()?.to_owned(),
                took_ms: (took != u64::MAX).then_some(took),
            });
        }
        self.0.is_empty().then_some(History {
            attempts,
            unreadable: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_read_only_from_an_http_head() {
        assert_eq!(status_of("HTTP 422: bad title"), Some(422));
        assert_eq!(status_of("HTTP 503"), Some(503));
        assert_eq!(status_of("HTTP 5031"), None);
        assert_eq!(status_of("timed out after HTTP 503"), None);
        assert_eq!(status_of("HTTP 50"), None);
        assert_eq!(status_of("HTTP é00"), None);
    }

    #[test]
    fn long_errors_are_cut_on_a_character_boundary() {
        let text = "é".repeat(400); // 800 bytes
        let a = Attempt::new(1, AttemptClass::Rejected, &text);
        assert!(a.error.len() <= History::ERROR_BYTES && a.error.len() >= History::ERROR_BYTES - 1);
        let mut h = History::default();
        h.push(Attempt {
            error: text,
            ..a.clone()
        });
        assert!(h.attempts()[0].error.len() <= History::ERROR_BYTES);
        assert!(h.encode().len() <= History::MAX_BYTES);
    }

    #[test]
    fn a_full_history_encodes_within_its_bound_and_round_trips() {
        let mut h = History::default();
        for i in 0..15u64 {
            let mut a = Attempt::new(i, AttemptClass::Later, &"x".repeat(600));
            a.took_ms = Some(i * 10);
            h.push(a);
        }
        let bytes = h.encode();
        assert_eq!(bytes.len(), History::MAX_BYTES);
        let back = History::decode(&bytes);
        assert_eq!(back, h);
        assert_eq!(back.attempts()[0].at, 5);
        assert_eq!(back.attempts()[9].took_ms, Some(140));
    }

    #[test]
    fn damaged_bytes_read_as_an_unreadable_empty_history() {
        let mut h = History::default();
        h.push(Attempt::new(7, AttemptClass::Conflict, "HTTP 409"));
        let bytes = h.encode();
        for end in 1..bytes.len() {
            let cut = History::decode(&bytes[..end]);
            assert!(cut.is_unreadable() && cut.is_empty(), "prefix of {end}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(History::decode(&longer).is_unreadable());
        let mut bad_class = bytes.clone();
        bad_class[10] = 99;
        assert!(History::decode(&bad_class).is_unreadable());
        assert!(!History::decode(&[]).is_unreadable());
        let mut again = History::decode(&longer);
        again.push(Attempt::new(8, AttemptClass::Later, "HTTP 503"));
        assert!(!again.is_unreadable() && again.len() == 1);
    }
}
