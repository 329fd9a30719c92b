//! The retry policy: backoff, jitter, the ceiling and the crash-loop guard, as plain data.
//!
//! The policy holds no closures and no state, so the same policy, record and RNG seed give the
//! same schedule before and after a restart.

use std::time::Duration;

use fastrand::Rng;

use crate::error::{Error, Result};
use crate::outcome::duration_ms;

/// How the un-jittered delay grows with the number of failures.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::Backoff;
///
/// let b = Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(60));
/// assert_eq!(b.delay(1), Duration::from_secs(1));
/// assert_eq!(b.delay(4), Duration::from_secs(8));
/// assert_eq!(b.delay(10_000), Duration::from_secs(60)); // capped, never overflows
///
/// let t = Backoff::Table(vec![Duration::from_secs(5), Duration::from_secs(30)]);
/// assert_eq!(t.delay(9), Duration::from_secs(30)); // the last entry repeats
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Backoff {
    /// `initial * factor^(n-1)`, never above `cap`.
    Exponential {
        /// Delay after the first failure.
        initial: Duration,
        /// Growth per failure; at least 1.
        factor: f64,
        /// Largest delay.
        cap: Duration,
    },
    /// An explicit delay per failure; the last entry repeats. Must not be empty.
    Table(Vec<Duration>),
}

impl Backoff {
    /// Shorthand for [`Backoff::Exponential`].
    pub const fn exponential(initial: Duration, factor: f64, cap: Duration) -> Self {
        Backoff::Exponential {
            initial,
            factor,
            cap,
        }
    }

    /// The un-jittered delay after the `n`-th failure (1-based; 0 is read as 1). Saturates at
    /// the cap for any `n`, however large.
    pub fn delay(&self, n: u32) -> Duration {
        let n = n.max(1);
        match self {
            Backoff::Exponential {
                initial,
                factor,
                cap,
            } => {
                let exponent = i32::try_from(n - 1).unwrap_or(i32::MAX);
                let ms = duration_ms(*initial) as f64 * factor.powi(exponent);
                let cap_ms = duration_ms(*cap);
                if !ms.is_finite() || ms >= cap_ms as f64 {
                    *cap
                } else {
                    // `ms` is finite, non-negative and below `cap_ms`, so the cast is exact
                    // enough and cannot wrap.
                    Duration::from_millis(ms as u64)
                }
            }
            Backoff::Table(table) => {
                let index = usize::try_from(n - 1).unwrap_or(usize::MAX);
                table
                    .get(index)
                    .or(table.last())
                    .copied()
                    .unwrap_or(Duration::ZERO)
            }
        }
    }

    /// The delay after the first failure.
    pub fn initial(&self) -> Duration {
        self.delay(1)
    }

    /// The largest delay this backoff ever yields.
    pub fn cap(&self) -> Duration {
        match self {
            Backoff::Exponential { cap, .. } => *cap,
            Backoff::Table(table) => table.iter().copied().max().unwrap_or(Duration::ZERO),
        }
    }

    fn validate(&self) -> Result<()> {
        match self {
            Backoff::Exponential {
                initial,
                factor,
                cap,
            } => {
                if !(factor.is_finite() && *factor >= 1.0) {
                    return Err(Error::InvalidConfig(format!(
                        "backoff factor must be a finite number >= 1, got {factor}"
                    )));
                }
                if initial.is_zero() {
                    return Err(Error::InvalidConfig(
                        "backoff initial delay must be above zero".into(),
                    ));
                }
                if initial > cap {
                    return Err(Error::InvalidConfig(format!(
                        "backoff initial delay {initial:?} exceeds its cap {cap:?}"
                    )));
                }
                Ok(())
            }
            Backoff::Table(table) if table.is_empty() => Err(Error::InvalidConfig(
                "a backoff table needs at least one delay".into(),
            )),
            Backoff::Table(table) if table.last().is_some_and(|d| d.is_zero()) => {
                Err(Error::InvalidConfig(
                    "the last delay of a backoff table repeats, so it must be above zero".into(),
                ))
            }
            Backoff::Table(_) => Ok(()),
        }
    }
}

/// How randomness spreads the delays, so that many devices failing together do not retry
/// together.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::{Backoff, Jitter};
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(60));
/// let mut rng = fastrand::Rng::with_seed(7);
/// let d = Jitter::Full.apply(Duration::from_secs(8), None, &backoff, &mut rng);
/// assert!(d <= Duration::from_secs(8));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Jitter {
    /// The delay as the backoff gives it.
    None,
    /// Uniform over `[0, delay]`: the best spread, and the default.
    #[default]
    Full,
    /// Half the delay plus uniform over the other half: `[delay/2, delay]`.
    Equal,
    /// Uniform over `[initial, 3 × previous delay]`, capped: each delay depends on the last.
    Decorrelated,
}

impl Jitter {
    /// Spreads `base`, the un-jittered delay. `previous` is the delay that was last used for
    /// this record (only decorrelated jitter reads it).
    pub fn apply(
        self,
        base: Duration,
        previous: Option<Duration>,
        backoff: &Backoff,
        rng: &mut Rng,
    ) -> Duration {
        let base_ms = duration_ms(base);
        let ms = match self {
            Jitter::None => base_ms,
            Jitter::Full => rng.u64(0..=base_ms),
            Jitter::Equal => base_ms / 2 + rng.u64(0..=base_ms - base_ms / 2),
            Jitter::Decorrelated => {
                let initial = duration_ms(backoff.initial());
                let previous = previous.map_or(initial, duration_ms);
                let upper = previous.saturating_mul(3).max(initial);
                rng.u64(initial..=upper).min(duration_ms(backoff.cap()))
            }
        };
        Duration::from_millis(ms)
    }
}

/// What happens when a record has spent `max_attempts` answered failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ceiling {
    /// Park it in needs-attention until a person retries or discards it (the default: the
    /// write is kept).
    #[default]
    NeedsAttention,
    /// Discard it, leaving a tombstone and a `discarded` event.
    Discard,
}

/// The retry policy of one outbox.
///
/// ## Defaults
/// - backoff: exponential from **1 s**, factor **2**, cap **15 min**: the first retry covers a
///   blip, doubling is what AWS's SDKs, gRPC and most job queues use, and a 15-minute cap keeps
///   a device that comes back from waiting long.
/// - jitter: **full**, the variant that spreads a crowd of clients best.
/// - `max_attempts`: **12** answered failures (about 40 minutes of a failing server before a
///   person hears of it, at full jitter's mean); unanswered failures never count.
/// - at the ceiling: **needs-attention**, so no write is lost by default.
/// - `max_interruptions`: **3** deliveries in a row that killed the process park the record;
///   one unrelated crash never does.
/// - `max_retry_after`: **1 hour**: a server's `Retry-After` wins over the local schedule up to
///   this, which covers a maintenance window without trusting a server that asks for days.
/// - `max_age`: **none**: a write is sent however long it waited. Set it
///   ([`RetryPolicy::with_max_age`]) when a write that waited too long should be looked at
///   before it goes out.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::{Backoff, Ceiling, RetryPolicy};
///
/// let policy = RetryPolicy::default()
///     .with_backoff(Backoff::exponential(Duration::from_millis(500), 3.0, Duration::from_secs(300)))
///     .with_max_attempts(5)
///     .with_ceiling(Ceiling::Discard);
/// policy.validate().unwrap();
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Growth of the delay.
    pub backoff: Backoff,
    /// Spread of the delay.
    pub jitter: Jitter,
    /// Answered failures a record may spend before the ceiling applies; at least 1.
    pub max_attempts: u32,
    /// What the ceiling does.
    pub at_ceiling: Ceiling,
    /// Interrupted deliveries in a row after which a record is parked; at least 1.
    pub max_interruptions: u32,
    /// The longest `Retry-After` honoured; a server asking for more is retried after this.
    pub max_retry_after: Duration,
    /// The age policy: a record still undelivered this long after it was enqueued is not sent
    /// but parked in needs-attention ("stale: created 4 days ago") when it is next claimed, so
    /// a person or the app decides; a retry then sends it. `None` (the default) for no limit.
    pub max_age: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            backoff: Backoff::exponential(
                Duration::from_secs(1),
                2.0,
                Duration::from_secs(15 * 60),
            ),
            jitter: Jitter::Full,
            max_attempts: 12,
            at_ceiling: Ceiling::NeedsAttention,
            max_interruptions: 3,
            max_retry_after: Duration::from_secs(3600),
            max_age: None,
        }
    }
}

impl RetryPolicy {
    /// Replaces the backoff.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Replaces the jitter.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Replaces `max_attempts`.
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Replaces the outcome at the ceiling.
    pub fn with_ceiling(mut self, at_ceiling: Ceiling) -> Self {
        self.at_ceiling = at_ceiling;
        self
    }

    /// Replaces `max_interruptions`.
    pub fn with_max_interruptions(mut self, max_interruptions: u32) -> Self {
        self.max_interruptions = max_interruptions;
        self
    }

    /// The jittered delay after the `n`-th failure of one kind (answered or unanswered).
    pub fn delay(&self, n: u32, previous: Option<Duration>, rng: &mut Rng) -> Duration {
        self.jitter
            .apply(self.backoff.delay(n), previous, &self.backoff, rng)
    }

    /// The backoff's cap: the longest delay the local schedule gives.
    pub fn cap(&self) -> Duration {
        self.backoff.cap()
    }

    /// The furthest ahead any deadline may lie: the larger of the cap and `max_retry_after`.
    /// The clock-jump clamp brings deadlines beyond `now + horizon` back to it.
    pub fn horizon(&self) -> Duration {
        self.cap().max(self.max_retry_after)
    }

    /// Replaces `max_retry_after`.
    pub fn with_max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }

    /// Sets the age policy (see [`RetryPolicy::max_age`]). Zero is refused by
    /// [`RetryPolicy::validate`]: it would park every record.
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_core::{Error, RetryPolicy};
    /// let policy = RetryPolicy::default().with_max_age(Duration::from_secs(3 * 86_400));
    /// assert_eq!(policy.max_age, Some(Duration::from_secs(259_200)));
    /// assert!(policy.validate().is_ok());
    /// let zero = RetryPolicy::default().with_max_age(Duration::ZERO);
    /// assert!(matches!(zero.validate(), Err(Error::InvalidConfig(_))));
    /// ```
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = Some(max_age);
        self
    }

    /// Checks every value is in range.
    pub fn validate(&self) -> Result<()> {
        self.backoff.validate()?;
        if self.max_attempts == 0 {
            return Err(Error::InvalidConfig(
                "max_attempts must be at least 1".into(),
            ));
        }
        if self.max_age == Some(Duration::ZERO) {
            return Err(Error::InvalidConfig(
                "max_age must be above zero (it would park every record)".into(),
            ));
        }
        if self.max_interruptions == 0 {
            return Err(Error::InvalidConfig(
                "max_interruptions must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn default_schedule_snapshot() {
        let policy = RetryPolicy::default();
        let mut rng = Rng::with_seed(0x5eed);
        let mut previous = None;
        let mut out = String::from("attempt  base      jittered\n");
        for n in 1..=12 {
            let base = policy.backoff.delay(n);
            let delay = policy.delay(n, previous, &mut rng);
            previous = Some(delay);
            writeln!(
                out,
                "{n:>7}  {:>7}ms {:>9}ms",
                base.as_millis(),
                delay.as_millis()
            )
            .unwrap();
        }
        insta::assert_snapshot!(out);
    }

    #[test]
    fn full_jitter_stays_inside_its_window() {
        let policy = RetryPolicy::default();
        let initial = policy.backoff.initial();
        let cap = policy.cap();
        for seed in 0..200 {
            let mut rng = Rng::with_seed(seed);
            for n in 1..=40u32 {
                let delay = policy.delay(n, None, &mut rng);
                let window = initial
                    .checked_mul(2u32.saturating_pow(n - 1))
                    .map_or(cap, |d| d.min(cap));
                assert!(
                    delay <= window,
                    "seed {seed}, n {n}: {delay:?} > {window:?}"
                );
            }
        }
    }

    #[test]
    fn every_jitter_stays_within_the_cap_and_never_overflows() {
        let backoff = Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(900));
        let mut rng = Rng::with_seed(1);
        for jitter in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            let policy = RetryPolicy::default()
                .with_backoff(backoff.clone())
                .with_jitter(jitter);
            let mut previous = None;
            for n in [1, 2, 10, 31, 32, 64, 1_000, 10_000, u32::MAX] {
                let d = policy.delay(n, previous, &mut rng);
                assert!(d <= backoff.cap(), "{jitter:?} n={n}: {d:?}");
                previous = Some(d);
            }
        }
        assert_eq!(backoff.delay(10_000), Duration::from_secs(900));
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(900));
        let huge = Backoff::exponential(Duration::MAX, 10.0, Duration::MAX);
        assert_eq!(huge.delay(u32::MAX), Duration::MAX);
    }

    #[test]
    fn equal_jitter_keeps_the_lower_half() {
        let mut rng = Rng::with_seed(3);
        let backoff = Backoff::Table(vec![Duration::from_secs(10)]);
        for _ in 0..100 {
            let d = Jitter::Equal.apply(Duration::from_secs(10), None, &backoff, &mut rng);
            assert!(d >= Duration::from_secs(5) && d <= Duration::from_secs(10));
        }
    }

    #[test]
    fn decorrelated_jitter_grows_from_the_previous_delay() {
        let backoff = Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(60));
        let mut rng = Rng::with_seed(9);
        for _ in 0..100 {
            let d = Jitter::Decorrelated.apply(
                Duration::ZERO,
                Some(Duration::from_secs(4)),
                &backoff,
                &mut rng,
            );
            assert!(
                d >= Duration::from_secs(1) && d <= Duration::from_secs(12),
                "{d:?}"
            );
        }
    }

    #[test]
    fn same_seed_same_schedule() {
        let policy = RetryPolicy::default();
        let run = |seed| {
            let mut rng = Rng::with_seed(seed);
            (1..=12)
                .map(|n| policy.delay(n, None, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
    }

    #[test]
    fn validation_refuses_nonsense() {
        let bad = [
            RetryPolicy::default().with_max_attempts(0),
            RetryPolicy::default().with_max_interruptions(0),
            RetryPolicy::default().with_backoff(Backoff::Table(vec![])),
            RetryPolicy::default().with_backoff(Backoff::Table(vec![Duration::ZERO])),
            RetryPolicy::default().with_backoff(Backoff::exponential(
                Duration::ZERO,
                2.0,
                Duration::ZERO,
            )),
            RetryPolicy::default().with_backoff(Backoff::exponential(
                Duration::from_secs(1),
                0.5,
                Duration::from_secs(2),
            )),
            RetryPolicy::default().with_backoff(Backoff::exponential(
                Duration::from_secs(1),
                f64::NAN,
                Duration::from_secs(2),
            )),
            RetryPolicy::default().with_backoff(Backoff::exponential(
                Duration::from_secs(10),
                2.0,
                Duration::from_secs(2),
            )),
        ];
        for policy in bad {
            assert!(
                matches!(policy.validate(), Err(Error::InvalidConfig(_))),
                "{policy:?}"
            );
        }
        RetryPolicy::default().validate().unwrap();
    }
}
