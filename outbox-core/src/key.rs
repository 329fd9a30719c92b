//! Idempotency keys: how a fresh one is drawn, and which keys an application may give.
//!
//! A server that drops a request whose key it has seen before can only be trusted with keys
//! that no two devices ever draw alike. A seeded, fast generator (seeded from a clock and a
//! thread id) does not promise that: devices that start alike may draw alike. So a fresh key
//! comes from the operating system's secure random source, written as a version-4 UUID, the
//! form servers that check a key's shape expect.
//!
//! A key given by the application travels in a header on every delivery, so it is checked
//! once, here, at enqueue: a key that no header can carry would otherwise halt the runner at
//! delivery, every time it is resumed. Every backend calls [`validate`] through
//! [`NewRecord::validate`](crate::NewRecord::validate), so all of them refuse the same keys.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// The longest idempotency key, in bytes: 255, what servers and proxies commonly accept in a
/// single header value used as a key, and what every backend can index.
pub const MAX_LEN: usize = 255;

/// A fresh idempotency key: a version-4 UUID in its hyphenated lowercase form
/// (`8-4-4-4-12` hex digits), its 122 random bits from the operating system's secure random
/// source (`getrandom`).
///
/// Should that source fail (an operating system without one), the key falls back to
/// `fastrand` mixed with a counter of this process, and one `warn` line says so: the write is
/// still enqueued, with a key that is unique within the process.
///
/// ```
/// let key = outbox_core::key::fresh();
/// assert_eq!(key.len(), 36);
/// assert_eq!(key.as_bytes()[14], b'4'); // version 4
/// assert!(outbox_core::key::validate(&key).is_ok());
/// assert_ne!(key, outbox_core::key::fresh());
/// ```
pub fn fresh() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = fallback().to_be_bytes();
    }
    uuid_v4(bytes)
}

/// Bits for a key when the operating system's source failed: a random half drawn once per
/// process, and a counter, so no two keys of the process are alike.
fn fallback() -> u128 {
    static WARNED: AtomicBool = AtomicBool::new(false);
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "the operating system's random source failed: idempotency keys fall back to a \
             seeded generator, unique within this process only"
        );
    }
    let process = *PROCESS.get_or_init(|| fastrand::u64(..));
    // The counter stays below 2^62, clear of the two variant bits the UUID form sets.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) & (u64::MAX >> 2);
    (u128::from(process) << 64) | u128::from(n)
}

/// `bytes` as a version-4 (random), RFC 9562 variant UUID, hyphenated and lowercase.
fn uuid_v4(mut bytes: [u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut key = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            key.push('-');
        }
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    key
}

/// Checks an idempotency key: 1 to [`MAX_LEN`] bytes of visible ASCII (`!` to `~`: no space,
/// no control character, nothing outside ASCII), so that it travels unchanged in a header.
/// Refused with [`Error::InvalidIdempotencyKey`](crate::Error::InvalidIdempotencyKey), whose
/// reason says what is wrong without repeating a long key.
///
/// ```
/// use outbox_core::{key, Error};
/// assert!(key::validate("order-42-placed").is_ok());
/// assert!(key::validate(&"k".repeat(255)).is_ok());
/// for bad in ["", "two words", "tab\there", "café", &"k".repeat(256)] {
///     assert!(matches!(key::validate(bad), Err(Error::InvalidIdempotencyKey { .. })), "{bad:?}");
/// }
/// ```
pub fn validate(key: &str) -> crate::Result<()> {
    let reason = if key.is_empty() {
        "an idempotency key must not be empty".to_owned()
    } else if key.len() > MAX_LEN {
        format!(
            "an idempotency key may be at most {MAX_LEN} bytes, this one has {}",
            key.len()
        )
    } else if let Some(at) = key.bytes().position(|b| !b.is_ascii_graphic()) {
        let what = match key.as_bytes()[at] {
            b' ' => "a space".to_owned(),
            b if b.is_ascii_control() => format!("the control character {b:#04x}"),
            _ => "a character outside ASCII".to_owned(),
        };
        format!(
            "an idempotency key must be visible ASCII (it travels in a header); {key:?} has \
             {what} at byte {at}"
        )
    } else {
        return Ok(());
    };
    Err(crate::Error::InvalidIdempotencyKey { reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_key_is_a_version_4_uuid() {
        for _ in 0..1_000 {
            let key = fresh();
            let parts: Vec<&str> = key.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12],
                "{key}"
            );
            assert!(key
                .bytes()
                .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            assert_eq!(&parts[2][..1], "4", "{key}");
            assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{key}");
        }
    }

    #[test]
    fn the_uuid_form_keeps_every_other_bit() {
        assert_eq!(uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
        assert_eq!(uuid_v4([0xff; 16]), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let counting: [u8; 16] = std::array::from_fn(|i| i as u8);
        assert_eq!(uuid_v4(counting), "00010203-0405-4607-8809-0a0b0c0d0e0f");
    }

    #[test]
    fn the_fallback_never_repeats_within_the_process() {
        let drawn: std::collections::HashSet<String> = (0..10_000)
            .map(|_| uuid_v4(fallback().to_be_bytes()))
            .collect();
        assert_eq!(drawn.len(), 10_000);
    }

    #[test]
    fn a_refusal_says_what_is_wrong_without_the_whole_key() {
        let reason = |key: &str| match validate(key) {
            Err(crate::Error::InvalidIdempotencyKey { reason }) => reason,
            other => panic!("{key:?}: {other:?}"),
        };
        assert!(reason("").contains("empty"));
        let long = reason(&"k".repeat(10_000));
        assert!(long.contains("10000") && long.len() < 100, "{long}");
        assert!(reason("a b").contains("a space at byte 1"));
        assert!(reason("a\nb").contains("0x0a at byte 1"));
        assert!(reason("\u{7f}").contains("0x7f at byte 0"));
        assert!(reason("née").contains("outside ASCII at byte 1"));
        // The bounds: every visible ASCII byte, and exactly 255 of them.
        let visible: String = (b'!'..=b'~').map(char::from).collect();
        assert!(validate(&visible).is_ok());
        assert!(validate(&"~".repeat(MAX_LEN)).is_ok());
    }
}
