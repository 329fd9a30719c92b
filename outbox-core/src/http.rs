//! The HTTP classifier: a response's status and its `Retry-After` and `Date` headers to an
//! [`Outcome`].
//!
//! The table is explicit about what is final. Only a status that is a verdict on *this record*
//! rejects it ([`TERMINAL`]); a status that says something about the credential halts the
//! runner; a status the classifier cannot read as either (a redirect to the same origin, a
//! WAF's 403, a proxy's 421, a status nobody registered) is an answered failure that is tried
//! again on the schedule. A misconfigured route or gateway then costs retries, not the backlog.
//!
//! And some answers do not come from our server at all. A redirect to another origin and a
//! `511 Network Authentication Required` are what a captive portal (hotel or airport Wi-Fi
//! with a login page) or a proxy answers in its place: they are [`Outcome::NoAnswer`], so no
//! budget is spent, the runner takes the link for down and probes it on backoff, and the
//! reason says what answered instead. Redirects are never followed: a followed 302 turns the
//! write into a GET of a login page that answers 200, and a followed 307 hands the payload
//! and its key to whichever host the portal names.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::outcome::{duration_ms, Outcome, RetryAfter};

/// The statuses that reject a record by default: the server read the request and refused
/// what it says, so sending the same bytes again cannot change the answer.
///
/// 400 Bad Request, 404 Not Found, 405 Method Not Allowed, 410 Gone, 411 Length Required,
/// 413 Content Too Large, 414 URI Too Long, 415 Unsupported Media Type, 422 Unprocessable
/// Content.
pub const TERMINAL: [u16; 9] = [400, 404, 405, 410, 411, 413, 414, 415, 422];

/// The parts of one HTTP response the classifier reads.
///
/// ```
/// use outbox_core::http::Response;
///
/// let response = Response::new(503)
///     .retry_after("Tue, 14 Nov 2023 22:15:20 GMT")
///     .date("Tue, 14 Nov 2023 22:13:20 GMT");
/// assert_eq!(response.status, 503);
/// // A portal's redirect: the sink compared the `Location` with the request's origin.
/// let portal = Response::new(302).location_elsewhere("portal.example");
/// assert_eq!(portal.location_elsewhere, Some("portal.example"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response<'a> {
    /// The status code.
    pub status: u16,
    /// The raw `Retry-After` header value, if any.
    pub retry_after: Option<&'a str>,
    /// The raw `Date` header value, if any: the server's clock when it answered.
    pub date: Option<&'a str>,
    /// For a response whose `Location` names another origin (scheme, host and port) than
    /// the request's: that origin as the person reading the reason should see it, without
    /// path, query or user info (`portal.example`). `None` without a `Location`, or with one
    /// on the request's own origin. The sink compares; the classifier decides.
    pub location_elsewhere: Option<&'a str>,
}

impl<'a> Response<'a> {
    /// A response with `status` and no headers.
    pub const fn new(status: u16) -> Self {
        Response {
            status,
            retry_after: None,
            date: None,
            location_elsewhere: None,
        }
    }

    /// Sets the `Retry-After` header value.
    pub const fn retry_after(mut self, value: &'a str) -> Self {
        self.retry_after = Some(value);
        self
    }

    /// Sets the `Date` header value.
    pub const fn date(mut self, value: &'a str) -> Self {
        self.date = Some(value);
        self
    }

    /// Says the `Location` header names another origin, `origin` (see
    /// [`Response::location_elsewhere`](Response#structfield.location_elsewhere)).
    pub const fn location_elsewhere(mut self, origin: &'a str) -> Self {
        self.location_elsewhere = Some(origin);
        self
    }
}

/// What a 403 Forbidden means. Servers send it for a refused credential, for a WAF or gateway
/// rule, and for a verdict on the record, so the default reads nothing final into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Forbidden {
    /// An answered transient failure, tried again on the schedule (the default).
    #[default]
    Retry,
    /// The credential was refused: the runner halts, like on 401.
    Halt,
    /// A verdict on this record: it is rejected.
    Reject,
}

/// First status of the terminal bit set; statuses outside `FIRST..FIRST + 512` are never in it.
const FIRST: u16 = 100;

/// The classification table as a value: which statuses reject a record, and what a 403 means.
///
/// The order is fixed: 2xx is [`Outcome::Delivered`]; a 3xx whose `Location` names another
/// origin ([`Response::location_elsewhere`](Response#structfield.location_elsewhere)) and 511
/// are [`Outcome::NoAnswer`] (a captive portal or a proxy answered, not our server); 401 and
/// 407 are [`Outcome::Halt`] (the credential, not the record); 409 and 412 (a failed
/// precondition, see [`NewRecord::expecting`](crate::NewRecord::expecting)) are
/// [`Outcome::Conflict`]; 403 follows [`Forbidden`]; a status in the terminal set (by default
/// [`TERMINAL`]) is [`Outcome::Rejected`]; **every other status** (1xx, a 3xx to the same
/// origin, 408, 421, 423, 425, 429, 451, 5xx, unregistered codes, 600 and above) is
/// [`Outcome::Transient`] with the parsed `Retry-After`.
///
/// ```
/// use outbox_core::http::{Classifier, Forbidden, Response};
/// use outbox_core::Outcome;
///
/// let strict = Classifier::new().on_forbidden(Forbidden::Halt).reject(409).reject(451);
/// assert!(matches!(strict.classify(&Response::new(403)), Outcome::Halt { .. }));
/// assert!(matches!(strict.classify(&Response::new(451)), Outcome::Rejected { .. }));
/// // 409 keeps its own meaning: a conflict for the resolver; so does a failed precondition.
/// assert!(matches!(strict.classify(&Response::new(409)), Outcome::Conflict { .. }));
/// assert!(matches!(strict.classify(&Response::new(412)), Outcome::Conflict { .. }));
///
/// let lenient = Classifier::new().retry(404);
/// assert!(matches!(lenient.classify(&Response::new(404)), Outcome::Transient { .. }));
///
/// // A login page on the hotel's Wi-Fi: nothing spent, the link is down.
/// let portal = Response::new(302).location_elsewhere("portal.example");
/// assert_eq!(
///     strict.classify(&portal),
///     Outcome::no_answer("HTTP 302: redirected to portal.example: a captive portal or proxy?"),
/// );
/// assert!(strict.classify(&Response::new(511)).is_unanswered());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classifier {
    /// Bit `status - FIRST` is set for a terminal status.
    terminal: [u64; 8],
    forbidden: Forbidden,
}

impl Default for Classifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Classifier {
    /// The default table: [`TERMINAL`] rejects, 403 is retried.
    pub const fn new() -> Self {
        let mut classifier = Classifier {
            terminal: [0; 8],
            forbidden: Forbidden::Retry,
        };
        let mut i = 0;
        while i < TERMINAL.len() {
            classifier = classifier.reject(TERMINAL[i]);
            i += 1;
        }
        classifier
    }

    /// Replaces the terminal set with `statuses` (403 included: it sets [`Forbidden::Reject`]).
    pub fn with_terminal(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.terminal = [0; 8];
        if self.forbidden == Forbidden::Reject {
            self.forbidden = Forbidden::Retry;
        }
        statuses.into_iter().fold(self, Classifier::reject)
    }

    /// Adds `status` to the terminal set. 2xx, 401, 407, 409, 412 and 511 keep their own
    /// meaning (and so does a 3xx to another origin), and a status outside 100–599 is never
    /// terminal; `reject(403)` is `on_forbidden(Forbidden::Reject)`.
    pub const fn reject(mut self, status: u16) -> Self {
        if status == 403 {
            self.forbidden = Forbidden::Reject;
        } else if let Some((word, bit)) = slot(status) {
            self.terminal[word] |= bit;
        }
        self
    }

    /// Removes `status` from the terminal set: it becomes an answered transient failure.
    /// `retry(403)` is `on_forbidden(Forbidden::Retry)`.
    pub const fn retry(mut self, status: u16) -> Self {
        if status == 403 {
            self.forbidden = Forbidden::Retry;
        } else if let Some((word, bit)) = slot(status) {
            self.terminal[word] &= !bit;
        }
        self
    }

    /// Sets what a 403 means.
    pub const fn on_forbidden(mut self, forbidden: Forbidden) -> Self {
        self.forbidden = forbidden;
        self
    }

    /// What a 403 means under this table.
    pub const fn forbidden(&self) -> Forbidden {
        self.forbidden
    }

    /// True when `status` rejects a record under this table.
    pub const fn is_terminal(&self, status: u16) -> bool {
        match status {
            200..=299 | 401 | 407 | 409 | 412 | 511 => false,
            403 => matches!(self.forbidden, Forbidden::Reject),
            _ => match slot(status) {
                Some((word, bit)) => self.terminal[word] & bit != 0,
                None => false,
            },
        }
    }

    /// The terminal set, lowest status first (403 included when it rejects).
    pub fn terminal(&self) -> impl Iterator<Item = u16> + '_ {
        (FIRST..FIRST + 500).filter(|&status| self.is_terminal(status))
    }

    /// Maps one response to an outcome; see the type's docs for the table.
    ///
    /// A malformed `Retry-After` is ignored (the local schedule applies). An HTTP-date
    /// `Retry-After` is read against the response's own `Date` when it has a valid one, so a
    /// server whose clock is off still gets the delay it meant; without one it is read on the
    /// local clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_core::http::{Classifier, Response};
    /// use outbox_core::{Outcome, RetryAfter};
    ///
    /// // The server's clock is an hour ahead of ours: it still asked for 2 s.
    /// let response = Response::new(503)
    ///     .retry_after("Tue, 14 Nov 2023 23:13:22 GMT")
    ///     .date("Tue, 14 Nov 2023 23:13:20 GMT");
    /// assert_eq!(
    ///     Classifier::new().classify(&response),
    ///     Outcome::transient("HTTP 503", Some(RetryAfter::Date(Duration::from_secs(2)))),
    /// );
    /// ```
    pub fn classify(&self, response: &Response<'_>) -> Outcome {
        let status = response.status;
        let text = format!("HTTP {status}");
        if let (300..=399, Some(origin)) = (status, response.location_elsewhere) {
            return Outcome::no_answer(format!(
                "{text}: redirected to {origin}: a captive portal or proxy?"
            ));
        }
        match status {
            200..=299 => Outcome::Delivered,
            // Network Authentication Required: only something between us and the server
            // sends it (RFC 6585 §6), a portal asking for a login.
            511 => Outcome::no_answer(format!(
                "{text}: network authentication required: a captive portal?"
            )),
            401 | 407 => Outcome::halt(text),
            409 => Outcome::conflict(text),
            // The record's precondition (`If-Match`) no longer holds: the entity changed
            // elsewhere since the write was made. Never an overwrite, never a retry loop.
            412 => Outcome::conflict(format!("{text} precondition failed")),
            403 if self.forbidden == Forbidden::Halt => Outcome::halt(text),
            _ if self.is_terminal(status) => Outcome::rejected(text),
            _ => Outcome::transient(
                text,
                response
                    .retry_after
                    .and_then(|value| parse_retry_after(value, response.date)),
            ),
        }
    }
}

/// The word and bit of `status` in the terminal set, if it can be in it.
const fn slot(status: u16) -> Option<(usize, u64)> {
    if status < FIRST || status >= FIRST + 500 {
        return None;
    }
    let index = (status - FIRST) as usize;
    Some((index / 64, 1 << (index % 64)))
}

/// Maps a status and a `Retry-After` value to an outcome with the default [`Classifier`]: the
/// common case of a response without a `Date` header. Use [`Classifier::classify`] with a
/// [`Response`] to pass the `Date` too, or to change the table.
///
/// | status | outcome |
/// |---|---|
/// | 2xx | [`Outcome::Delivered`] |
/// | 511 | [`Outcome::NoAnswer`]: a captive portal answered, not the server |
/// | 401, 407 | [`Outcome::Halt`]: the credential, not the record |
/// | 409, 412 | [`Outcome::Conflict`] |
/// | 400, 404, 405, 410, 411, 413, 414, 415, 422 ([`TERMINAL`]) | [`Outcome::Rejected`] |
/// | every other status (1xx, 3xx, 403, 408, 421, 429, 451, 5xx, unknown) | [`Outcome::Transient`] with the parsed `Retry-After` |
///
/// A client that reached no server reports [`Outcome::NoAnswer`] itself: there is no status to
/// classify. Without the `Location` this function cannot tell a redirect to another origin
/// (no answer from our server) from one to the same origin (transient): a sink that sees
/// redirects uses [`Classifier::classify`] with
/// [`Response::location_elsewhere`](Response#structfield.location_elsewhere).
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
/// // A gateway's 403 or an unfollowed redirect is not a verdict on the record.
/// assert!(matches!(http::classify(403, None), Outcome::Transient { .. }));
/// assert!(matches!(http::classify(302, None), Outcome::Transient { .. }));
/// assert!(http::classify(511, None).is_unanswered());
/// ```
pub fn classify(status: u16, retry_after: Option<&str>) -> Outcome {
    Classifier::new().classify(&Response {
        retry_after,
        ..Response::new(status)
    })
}

/// Parses a `Retry-After` value per RFC 9110 §10.2.3: delta-seconds, or an HTTP-date (the
/// IMF-fixdate form and the two obsolete forms recipients must accept). Returns `None` for
/// anything else.
///
/// An HTTP-date is a time on the server's clock. With the response's `Date` (`date`, also an
/// HTTP-date) it becomes [`RetryAfter::Date`], the delay between the two, which no clock skew
/// changes; without a valid `Date` it becomes [`RetryAfter::At`], read on the local clock.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::{http::parse_retry_after, RetryAfter};
///
/// assert_eq!(parse_retry_after("120", None), Some(RetryAfter::Delay(Duration::from_secs(120))));
/// let at = "Sun, 06 Nov 1994 08:49:37 GMT";
/// assert_eq!(parse_retry_after(at, None), Some(RetryAfter::At(784_111_777_000)));
/// assert_eq!(
///     parse_retry_after(at, Some("Sun, 06 Nov 1994 08:49:07 GMT")),
///     Some(RetryAfter::Date(Duration::from_secs(30))),
/// );
/// assert_eq!(parse_retry_after("soon", None), None);
/// ```
pub fn parse_retry_after(value: &str, date: Option<&str>) -> Option<RetryAfter> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Enormous delays saturate instead of failing: the policy's clamp bounds them later.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(RetryAfter::Delay(Duration::from_secs(secs)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    if let Some(sent) = date.and_then(|d| httpdate::parse_http_date(d.trim()).ok()) {
        // A date at or before the server's `Date` asks for no wait at all.
        return Some(RetryAfter::Date(
            at.duration_since(sent).unwrap_or(Duration::ZERO),
        ));
    }
    // A date in the past is kept as it is: `RetryAfter::wait` turns it into "now".
    Some(RetryAfter::At(unix_ms(at)?))
}

fn unix_ms(time: SystemTime) -> Option<u64> {
    Some(duration_ms(time.duration_since(UNIX_EPOCH).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Millis;

    const NOW: Millis = 1_700_000_000_000; // 2023-11-14T22:13:20Z
    const NOW_DATE: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

    #[test]
    fn retry_after_delta_seconds() {
        assert_eq!(
            parse_retry_after("120", None),
            Some(RetryAfter::Delay(Duration::from_secs(120)))
        );
        assert_eq!(
            parse_retry_after(" 0 ", Some(NOW_DATE)),
            Some(RetryAfter::Delay(Duration::ZERO))
        );
        // Larger than u64 seconds: saturates, never panics.
        let huge = "99999999999999999999999999";
        assert_eq!(
            parse_retry_after(huge, None),
            Some(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
    }

    #[test]
    fn an_http_date_without_a_date_header_is_read_on_the_local_clock() {
        let value = "Tue, 14 Nov 2023 22:15:20 GMT"; // NOW + 120 s
        assert_eq!(
            parse_retry_after(value, None),
            Some(RetryAfter::At(NOW + 120_000))
        );
        // The obsolete forms RFC 9110 asks recipients to accept.
        assert_eq!(
            parse_retry_after("Tuesday, 14-Nov-23 22:15:20 GMT", None),
            Some(RetryAfter::At(NOW + 120_000))
        );
        assert_eq!(
            parse_retry_after("Tue Nov 14 22:15:20 2023", None),
            Some(RetryAfter::At(NOW + 120_000))
        );
        // A malformed `Date` is as good as none.
        assert_eq!(
            parse_retry_after(value, Some("yesterday")),
            Some(RetryAfter::At(NOW + 120_000))
        );
    }

    #[test]
    fn an_http_date_is_read_against_the_servers_date() {
        let value = "Tue, 14 Nov 2023 22:15:20 GMT";
        assert_eq!(
            parse_retry_after(value, Some(NOW_DATE)),
            Some(RetryAfter::Date(Duration::from_secs(120)))
        );
        // The server's own clock says the date has passed: no wait from the server's side.
        assert_eq!(
            parse_retry_after(NOW_DATE, Some(value)),
            Some(RetryAfter::Date(Duration::ZERO))
        );
        let response = Response::new(503).retry_after(value).date(NOW_DATE);
        assert_eq!(
            Classifier::new().classify(&response),
            Outcome::transient("HTTP 503", Some(RetryAfter::Date(Duration::from_secs(120))))
        );
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
            assert_eq!(
                parse_retry_after(garbage, Some(NOW_DATE)),
                None,
                "{garbage:?}"
            );
            assert_eq!(
                classify(503, Some(garbage)),
                Outcome::transient("HTTP 503", None),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn the_terminal_set_is_configurable() {
        let default = Classifier::new();
        assert_eq!(default.terminal().collect::<Vec<_>>(), TERMINAL);
        assert_eq!(default, Classifier::default());

        let custom = Classifier::new().with_terminal([400, 422, 451, 200, 401, 409, 99, 600]);
        // Only statuses without a meaning of their own can be terminal.
        assert_eq!(custom.terminal().collect::<Vec<_>>(), [400, 422, 451]);
        assert_eq!(custom.classify(&Response::new(200)), Outcome::Delivered);
        assert!(matches!(
            custom.classify(&Response::new(401)),
            Outcome::Halt { .. }
        ));
        assert!(matches!(
            custom.classify(&Response::new(404)),
            Outcome::Transient { .. }
        ));
        assert!(matches!(
            custom.classify(&Response::new(451)),
            Outcome::Rejected { .. }
        ));
        assert_eq!(custom.retry(451).terminal().collect::<Vec<_>>(), [400, 422]);
    }

    #[test]
    fn what_answers_in_our_servers_place_is_no_answer() {
        let strict = Classifier::new()
            .with_terminal((300..=399).chain([511]))
            .on_forbidden(Forbidden::Halt);
        for classifier in [Classifier::new(), strict] {
            for status in [300, 301, 302, 303, 307, 308] {
                let elsewhere = Response::new(status)
                    .retry_after("5")
                    .location_elsewhere("portal.example");
                assert_eq!(
                    classifier.classify(&elsewhere),
                    Outcome::no_answer(format!(
                        "HTTP {status}: redirected to portal.example: a captive portal or proxy?"
                    )),
                    "{classifier:?}"
                );
            }
            let portal = classifier.classify(&Response::new(511).retry_after("5"));
            assert!(portal.is_unanswered(), "{portal:?}");
            assert!(!classifier.is_terminal(511));
            // A status that is not a redirect keeps its meaning whatever its `Location`.
            let created = Response::new(201).location_elsewhere("elsewhere.example");
            assert_eq!(classifier.classify(&created), Outcome::Delivered);
            let busy = Response::new(503).location_elsewhere("elsewhere.example");
            assert!(matches!(
                classifier.classify(&busy),
                Outcome::Transient { .. }
            ));
        }
        // A redirect to our own origin is an answer without a verdict, unless made terminal.
        assert_eq!(
            Classifier::new().classify(&Response::new(307).retry_after("5")),
            Outcome::transient("HTTP 307", Some(RetryAfter::Delay(Duration::from_secs(5))))
        );
        assert_eq!(
            Classifier::new().reject(307).classify(&Response::new(307)),
            Outcome::rejected("HTTP 307")
        );
    }

    #[test]
    fn forbidden_can_halt_or_reject() {
        let response = Response::new(403).retry_after("5");
        assert_eq!(
            Classifier::new().classify(&response),
            Outcome::transient("HTTP 403", Some(RetryAfter::Delay(Duration::from_secs(5))))
        );
        let halt = Classifier::new().on_forbidden(Forbidden::Halt);
        assert_eq!(halt.classify(&response), Outcome::halt("HTTP 403"));
        assert!(!halt.is_terminal(403));
        let reject = Classifier::new().on_forbidden(Forbidden::Reject);
        assert_eq!(reject.classify(&response), Outcome::rejected("HTTP 403"));
        assert!(reject.terminal().any(|s| s == 403));
        assert_eq!(Classifier::new().reject(403), reject);
        assert_eq!(reject.retry(403), Classifier::new());
        // Replacing the set without 403 takes the verdict back.
        assert_eq!(reject.with_terminal(TERMINAL).forbidden(), Forbidden::Retry);
    }
}
