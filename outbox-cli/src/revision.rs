//! A record's revision: what a person saw of it, as a short token that a repair must still
//! find, so a repair is a compare-and-set.
//!
//! The token is a 64-bit FNV-1a digest of [`Seen::of`] the record, in hex: the same in every
//! process and build, so `outbox show` prints it, the page keeps it from the list it drew,
//! and `outbox retry 42 --seen TOKEN` (or the page's button) hands it back. The repair then
//! checks it against the record as it is now and goes to the store under
//! [`Guard::Seen`](outbox_core::Guard::Seen), which closes the gap between that check and
//! the write on every backend.

use outbox_core::{Record, Seen};

fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn opt(value: Option<u64>) -> [u8; 9] {
    let mut out = [0u8; 9];
    if let Some(v) = value {
        out[0] = 1;
        out[1..].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// The revision of what `seen` describes: 16 lowercase hex digits.
///
/// ```
/// use outbox_cli::revision::revision;
/// use outbox_core::{Record, RecordId, Seen};
/// let mut record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// let before = revision(&Seen::of(&record));
/// assert_eq!(before.len(), 16);
/// record.attempts = 1;
/// assert_ne!(revision(&Seen::of(&record)), before);
/// ```
pub fn revision(seen: &Seen) -> String {
    let mut bytes = Vec::with_capacity(64);
    bytes.push(seen.state.code());
    for n in [seen.attempts, seen.unanswered, seen.interrupted] {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    bytes.extend_from_slice(&seen.created_at.to_le_bytes());
    bytes.extend_from_slice(&opt(seen.last_attempt_at));
    bytes.extend_from_slice(&opt(seen.next_attempt_at));
    bytes.extend_from_slice(&seen.texts.to_le_bytes());
    format!("{:016x}", fnv(bytes))
}

/// The revision of `record` as it is.
pub fn of(record: &Record) -> String {
    revision(&Seen::of(record))
}

/// Checks a typed revision's form (16 hex digits, either case), for a clear usage error.
///
/// ```
/// use outbox_cli::revision::parse;
/// assert_eq!(parse("00FF00ff00ff00ff").unwrap(), "00ff00ff00ff00ff");
/// assert!(parse("42").is_err());
/// ```
pub fn parse(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.len() == 16 && text.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!(
            "{text:?} is not a revision (16 hex digits, as `outbox show` prints it)"
        ))
    }
}
