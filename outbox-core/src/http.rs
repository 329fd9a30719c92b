//! The HTTP classifier: a status code and a `Retry-After` header to an [`Outcome`].

use std::time::{Duration, UNIX_EPOCH};

use crate::outcome::{duration_ms, Outcome, RetryAfter};

/// Maps an HTTP response to an outcome, following the outcome table of the design:
///
/// | status | outcome |
/// |---|---|
/// | 2xx | [`Outcome::Delivered`] |
/// | 401, 407 | [`Outcome::Halt`]: the credential, not the record |
/// | 409 | [`Outcome::Conflict`] |
/// | 408, 425, 429, 5xx | [`Outcome::Transient`] with the parsed `Retry-After` |
/// | any other status | [`Outcome::Rejected`]: resending the same bytes cannot change it |
///
/// `retry_after` is the raw header value; a malformed one is ignored, so the local schedule
/// applies. A client that reached no
/// server reports [`Outcome::NoAnswer`] itself: there is no status to classify.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::{http, Outcome, RetryAfter};
///
/// assert_eq!(http::classify(204, None), Outcome::Delivered);
/// assert_eq!(
///     http::classify(429, Some("120")),
///     Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(120)))),
/// );
/// assert!(matches!(http::classify(422, None), Outcome::Rejected { .. }));
/// ```
pub fn classify(status: u16, retry_after: Option<&str>) -> Outcome {
    let text = format!("HTTP {status}");
    match status {
        200..=299 => Outcome::Delivered,
        401 | 407 => Outcome::halt(text),
        409 => Outcome::conflict(text),
        408 | 425 | 429 | 500..=599 => {
            Outcome::transient(text, retry_after.and_then(parse_retry_after))
        }
        _ => Outcome::rejected(text),
    }
}

/// Parses a `Retry-After` value per RFC 9110 §10.2.3: delta-seconds or an HTTP-date (the
/// IMF-fixdate form and the two obsolete forms recipients must accept). Returns `None` for
/// anything else.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::{http::parse_retry_after, RetryAfter};
///
/// assert_eq!(parse_retry_after("120"), Some(RetryAfter::Delay(Duration::from_secs(120))));
/// assert_eq!(
///     parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
///     Some(RetryAfter::At(784_111_777_000)),
/// );
/// assert_eq!(parse_retry_after("soon"), None);
/// ```
pub fn parse_retry_after(value: &str) -> Option<RetryAfter> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Enormous delays saturate instead of failing: the policy's clamp bounds them later.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(RetryAfter::Delay(Duration::from_secs(secs)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at = duration_ms(at.duration_since(UNIX_EPOCH).ok()?);
    // A date in the past is kept as it is: `RetryAfter::deadline` turns it into "now".
    Some(RetryAfter::At(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Millis;

    const NOW: Millis = 1_700_000_000_000; // 2023-11-14T22:13:20Z

    #[test]
    fn retry_after_delta_seconds() {
        assert_eq!(
            parse_retry_after("120"),
            Some(RetryAfter::Delay(Duration::from_secs(120)))
        );
        assert_eq!(
            parse_retry_after(" 0 "),
            Some(RetryAfter::Delay(Duration::ZERO))
        );
        // Larger than u64 seconds: saturates, never panics.
        let huge = "99999999999999999999999999";
        assert_eq!(
            parse_retry_after(huge),
            Some(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
    }

    #[test]
    fn retry_after_http_date_in_the_future() {
        let value = "Tue, 14 Nov 2023 22:15:20 GMT"; // NOW + 120 s
        let parsed = parse_retry_after(value).unwrap();
        assert_eq!(parsed, RetryAfter::At(NOW + 120_000));
        // The obsolete forms RFC 9110 asks recipients to accept.
        assert_eq!(
            parse_retry_after("Tuesday, 14-Nov-23 22:15:20 GMT"),
            Some(RetryAfter::At(NOW + 120_000))
        );
        assert_eq!(
            parse_retry_after("Tue Nov 14 22:15:20 2023"),
            Some(RetryAfter::At(NOW + 120_000))
        );
    }

    #[test]
    fn retry_after_http_date_in_the_past_means_now() {
        let parsed = parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(parsed.delay(NOW, &mut rng), Duration::ZERO);
    }

    #[test]
    fn retry_after_garbage_falls_back_to_the_schedule() {
        for garbage in [
            "",
            "soon",
            "-5",
            "1.5",
            "12 s",
            "Tue, 99 Nov 2023 25:00:00 GMT",
        ] {
            assert_eq!(parse_retry_after(garbage), None, "{garbage:?}");
            assert_eq!(
                classify(503, Some(garbage)),
                Outcome::transient("HTTP 503", None),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn every_status_class_follows_the_table() {
        for status in [200, 201, 204, 299] {
            assert_eq!(classify(status, None), Outcome::Delivered);
        }
        for status in [408, 425, 429, 500, 502, 503, 504, 599] {
            assert!(
                matches!(classify(status, None), Outcome::Transient { .. }),
                "{status}"
            );
        }
        for status in [400, 403, 404, 410, 422, 301, 100] {
            assert!(
                matches!(classify(status, None), Outcome::Rejected { .. }),
                "{status}"
            );
        }
        assert!(matches!(classify(401, None), Outcome::Halt { .. }));
        assert!(matches!(classify(409, None), Outcome::Conflict { .. }));
        // Retry-After only matters where the server said "later".
        assert_eq!(
            classify(429, Some("7")),
            Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(7))))
        );
    }
}
