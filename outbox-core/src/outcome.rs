//! What the user's sink reports for one delivery, and how a conflict is resolved.

use std::time::Duration;

use crate::record::{Millis, Record};

/// The server's own word on when to try again (`Retry-After`).
///
/// An HTTP-date is a time on the *server's* clock, so it is best read against the response's
/// own `Date` header ([`RetryAfter::Date`]): a server whose clock is off by an hour then still
/// gets the delay it meant. Only without a `Date` header is the date read on the local clock
/// ([`RetryAfter::At`]).
///
/// The wait is never shorter than asked, and spread above it by up to half of it: a server that
/// answers a crowd "429, `Retry-After: 30`" within one second would otherwise get the whole
/// crowd back within one second, thirty seconds later, and again after that. The policy's
/// `max_retry_after` bounds it; a server that asks for that much or more gets a wait spread over
/// the last third below the bound, so a crowd told "come back in a day" is not cut back to one
/// instant either.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::RetryAfter;
///
/// let hour = Duration::from_secs(3600);
/// let mut rng = fastrand::Rng::with_seed(1);
/// assert_eq!(RetryAfter::Delay(Duration::from_secs(2)).asked(1_000), Duration::from_secs(2));
/// let d = RetryAfter::Delay(Duration::from_secs(2)).wait(1_000, hour, &mut rng);
/// assert!(d >= Duration::from_secs(2) && d <= Duration::from_secs(3));
/// assert_eq!(RetryAfter::At(500).wait(1_000, hour, &mut rng), Duration::ZERO); // a past date: now
/// let d = RetryAfter::Date(Duration::from_secs(100)).wait(0, hour, &mut rng);
/// assert!(d >= Duration::from_secs(100) && d <= Duration::from_secs(150));
/// // A day asked, an hour allowed: between 40 and 60 minutes.
/// let d = RetryAfter::Delay(24 * hour).wait(0, hour, &mut rng);
/// assert!(d >= Duration::from_secs(2400) && d <= hour);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Retry after this long (delta-seconds).
    Delay(Duration),
    /// An HTTP-date, already turned into a delay against the response's `Date` header.
    Date(Duration),
    /// An HTTP-date from a response without a `Date` header: a local wall-clock time.
    At(Millis),
}

impl RetryAfter {
    /// The delay the server asked for, counted from `now` (never negative).
    pub fn asked(self, now: Millis) -> Duration {
        match self {
            RetryAfter::Delay(delay) | RetryAfter::Date(delay) => delay,
            RetryAfter::At(at) => Duration::from_millis(at.saturating_sub(now)),
        }
    }

    /// How long to wait, counted from `now`: one draw with `rng` from the asked delay to half
    /// as much again, within `max` (a draw from two thirds of `max` to `max` when the server
    /// asked for `max` or more).
    pub fn wait(self, now: Millis, max: Duration, rng: &mut fastrand::Rng) -> Duration {
        let asked = duration_ms(self.asked(now));
        let max = duration_ms(max);
        let high = asked.saturating_add(asked / 2).min(max);
        let low = if asked >= max { max - max / 3 } else { asked };
        Duration::from_millis(rng.u64(low..=high))
    }
}

/// Milliseconds in a duration, saturating at `u64::MAX`.
pub(crate) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The result of one delivery, as the sink reports it.
///
/// Use [`crate::http::classify`] (or a [`crate::http::Classifier`]) to derive it from an HTTP
/// status and its `Retry-After` and `Date` headers.
///
/// ```
/// use outbox_core::Outcome;
///
/// assert!(Outcome::no_answer("connection refused").is_unanswered());
/// assert!(Outcome::transient("503", None).spends_attempt());
/// assert!(!Outcome::halt("401").spends_attempt());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The server accepted the write (2xx): the record is removed.
    Delivered,
    /// No server answered (no route, refused, reset, timeout before a response), or something
    /// other than our server answered in its place: a redirect to another origin, a 511, a TLS
    /// certificate the client does not trust (a captive portal, a proxy, an interceptor). No
    /// budget is spent; the record is rescheduled on its `unanswered` count and the runner
    /// treats the link as down.
    NoAnswer {
        /// What the transport said.
        error: String,
    },
    /// The server answered without a verdict on the record: "later" (408, 425, 429, 5xx) or
    /// a status that cannot be read as final (1xx, a 3xx to the same origin, 403, 421, 423,
    /// 451, an unknown code).
    /// One attempt is spent; `retry_after` wins over the local schedule, never below it.
    Transient {
        /// What the server said.
        error: String,
        /// The server's `Retry-After`, when it sent a valid one.
        retry_after: Option<RetryAfter>,
    },
    /// The server refused this record for good: by default 400, 404, 405, 410, 411, 413, 414,
    /// 415 or 422 ([`crate::http::TERMINAL`]).
    Rejected {
        /// The server's reason, kept on the record.
        reason: String,
    },
    /// The credential was refused (401, 407), or the request could not be built from the
    /// sink's configuration: not this record's fault. Nothing is spent and the
    /// runner pauses until the application resumes it.
    Halt {
        /// What the server said.
        reason: String,
    },
    /// The server reported a conflict (409). A [`ConflictResolver`] decides what it means;
    /// unresolved, the record needs attention.
    Conflict {
        /// What the server said.
        detail: String,
    },
}

impl Outcome {
    /// [`Outcome::NoAnswer`] with the transport's error text.
    pub fn no_answer(error: impl Into<String>) -> Self {
        Outcome::NoAnswer {
            error: error.into(),
        }
    }

    /// [`Outcome::Transient`] with an optional `Retry-After`.
    pub fn transient(error: impl Into<String>, retry_after: Option<RetryAfter>) -> Self {
        Outcome::Transient {
            error: error.into(),
            retry_after,
        }
    }

    /// [`Outcome::Rejected`] with the server's reason.
    pub fn rejected(reason: impl Into<String>) -> Self {
        Outcome::Rejected {
            reason: reason.into(),
        }
    }

    /// [`Outcome::Halt`] with the server's reason.
    pub fn halt(reason: impl Into<String>) -> Self {
        Outcome::Halt {
            reason: reason.into(),
        }
    }

    /// [`Outcome::Conflict`] with the server's detail.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Outcome::Conflict {
            detail: detail.into(),
        }
    }

    /// True for a failure where no server answered.
    pub fn is_unanswered(&self) -> bool {
        matches!(self, Outcome::NoAnswer { .. })
    }

    /// True when the outcome spends one attempt of the record's budget: a server answered and
    /// the answer was a failure of this record.
    pub fn spends_attempt(&self) -> bool {
        matches!(
            self,
            Outcome::Transient { .. } | Outcome::Rejected { .. } | Outcome::Conflict { .. }
        )
    }

    /// The class of the outcome, as spans, metrics and reports name it: `delivered`,
    /// `no_answer`, `transient`, `rejected`, `halt` or `conflict`.
    ///
    /// ```
    /// use outbox_core::Outcome;
    /// assert_eq!(Outcome::transient("HTTP 503", None).class(), "transient");
    /// ```
    pub fn class(&self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::NoAnswer { .. } => "no_answer",
            Outcome::Transient { .. } => "transient",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Halt { .. } => "halt",
            Outcome::Conflict { .. } => "conflict",
        }
    }

    /// The outcome with the server's own words after its reason (`HTTP 422: title is
    /// empty`), so a person sees both the verdict and the detail while
    /// [`verdict`](Self::verdict) still reads the head. A delivery and a no-answer keep none
    /// (what answered in our server's place is not read), and an empty or blank detail
    /// changes nothing. Sinks call it after classifying a response.
    ///
    /// ```
    /// use outbox_core::Outcome;
    ///
    /// let rejected = Outcome::rejected("HTTP 422").with_detail(" title is empty\n");
    /// assert_eq!(rejected, Outcome::rejected("HTTP 422: title is empty"));
    /// assert_eq!(rejected.verdict(), Some("HTTP 422"));
    /// assert_eq!(Outcome::rejected("HTTP 422").with_detail("  "), Outcome::rejected("HTTP 422"));
    /// assert_eq!(Outcome::Delivered.with_detail("ok"), Outcome::Delivered);
    /// ```
    #[must_use]
    pub fn with_detail(self, detail: &str) -> Outcome {
        let detail = detail.trim();
        if detail.is_empty() {
            return self;
        }
        match self {
            Outcome::Transient { error, retry_after } => Outcome::Transient {
                error: format!("{error}: {detail}"),
                retry_after,
            },
            Outcome::Rejected { reason } => Outcome::rejected(format!("{reason}: {detail}")),
            Outcome::Halt { reason } => Outcome::halt(format!("{reason}: {detail}")),
            Outcome::Conflict { detail: head } => Outcome::conflict(format!("{head}: {detail}")),
            other => other,
        }
    }

    /// What kind of refusal a rejection is, without the server's words: the reason up to its
    /// first `": "` (`HTTP 404` for `HttpSink`'s `HTTP 404: Cannot PUT /v1/notes/7`). A sink
    /// that writes its own reasons puts its kind of error first the same way. The runner's
    /// rejection-storm breaker compares verdicts, so bodies that name the record do not hide
    /// a misconfiguration. `None` for every other outcome.
    ///
    /// ```
    /// use outbox_core::Outcome;
    /// assert_eq!(Outcome::rejected("HTTP 404: Cannot PUT /v1/notes/7").verdict(), Some("HTTP 404"));
    /// assert_eq!(Outcome::rejected("HTTP 422").verdict(), Some("HTTP 422"));
    /// assert_eq!(Outcome::Delivered.verdict(), None);
    /// ```
    pub fn verdict(&self) -> Option<&str> {
        match self {
            Outcome::Rejected { reason } => Some(
                reason
                    .split_once(": ")
                    .map_or(reason.as_str(), |(head, _)| head)
                    .trim(),
            ),
            _ => None,
        }
    }

    /// Applies a resolver to a conflict; every other outcome is returned unchanged.
    ///
    /// ```
    /// use outbox_core::{ConflictResolution, Outcome, Record, RecordId};
    ///
    /// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
    /// let resolver = |_: &Record, _: &str| ConflictResolution::AlreadyDelivered;
    /// let resolved = Outcome::conflict("duplicate").resolve_conflict(&record, &resolver);
    /// assert_eq!(resolved, Outcome::Delivered);
    /// ```
    pub fn resolve_conflict(self, record: &Record, resolver: &dyn ConflictResolver) -> Outcome {
        let Outcome::Conflict { detail } = self else {
            return self;
        };
        match resolver.resolve(record, &detail) {
            ConflictResolution::AlreadyDelivered => Outcome::Delivered,
            ConflictResolution::Reject => Outcome::Rejected {
                reason: format!("conflict: {detail}"),
            },
            ConflictResolution::Retry => Outcome::Transient {
                error: format!("conflict: {detail}"),
                retry_after: None,
            },
            ConflictResolution::NeedsAttention => Outcome::Conflict { detail },
        }
    }
}

/// What a conflict (409, or a failed precondition, 412) means for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictResolution {
    /// The server already has this write: count it delivered.
    AlreadyDelivered,
    /// Final: the record is rejected.
    Reject,
    /// Try again later, spending one attempt.
    Retry,
    /// Park it for a person (the default).
    NeedsAttention,
}

/// Decides what a conflict means. Any `Fn(&Record, &str) -> ConflictResolution` is one.
///
/// Two kinds of conflict reach it: a 409 (`detail` starts with `HTTP 409` from `HttpSink`),
/// and a failed precondition, a 412 (`HTTP 412 precondition failed`), for a record made
/// against a version ([`Record::expected_version`] is set) that the server's entity has moved
/// past. A 412 means the server did **not** take the write: never answer it with
/// [`ConflictResolution::AlreadyDelivered`], or the local edit is gone without a trace.
///
/// ```
/// use outbox_core::{ConflictResolution, ConflictResolver, NewRecord, ParkOnConflict, Record, RecordId};
/// let record = Record::fresh(RecordId(1), None, vec![], "k".into(), 0);
/// assert_eq!(ParkOnConflict.resolve(&record, "409"), ConflictResolution::NeedsAttention);
///
/// // "Already there" for a duplicate create, a person for a stale edit.
/// let resolver = |record: &Record, detail: &str| {
///     if record.expected_version.is_some() || detail.starts_with("HTTP 412") {
///         ConflictResolution::NeedsAttention
///     } else {
///         ConflictResolution::AlreadyDelivered
///     }
/// };
/// let stale = Record::enqueued(RecordId(2), NewRecord::new(vec![]).expecting("3"), 0);
/// assert_eq!(resolver.resolve(&stale, "HTTP 412 precondition failed"), ConflictResolution::NeedsAttention);
/// assert_eq!(resolver.resolve(&record, "HTTP 409"), ConflictResolution::AlreadyDelivered);
/// ```
pub trait ConflictResolver: Send + Sync {
    /// The resolution for `record`, given the server's `detail`.
    fn resolve(&self, record: &Record, detail: &str) -> ConflictResolution;
}

impl<F> ConflictResolver for F
where
    F: Fn(&Record, &str) -> ConflictResolution + Send + Sync,
{
    fn resolve(&self, record: &Record, detail: &str) -> ConflictResolution {
        self(record, detail)
    }
}

/// The default resolver: every conflict needs a person's attention.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParkOnConflict;

impl ConflictResolver for ParkOnConflict {
    fn resolve(&self, _record: &Record, _detail: &str) -> ConflictResolution {
        ConflictResolution::NeedsAttention
    }
}
