//! How the runner works through the queue: batch, concurrency, lease, polls and the breakers.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest lease, delivery timeout or poll the runner accepts.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// How the runner works through the queue.
///
/// ## Defaults
/// - `batch`: **32** records claimed per round: big enough to amortise a store transaction,
///   small enough that memory stays bounded whatever the backlog.
/// - `max_batch`: **1,024**: the most records a round may grow to while claims come back full
///   and every delivery of a round succeeds within half a second (see
///   [`runner::scheduler::KEEPING_UP`](crate::runner::scheduler::KEEPING_UP)); rounds halve
///   on failures or a slow sink and start again at `batch` on an idle queue, a `Retry-After`
///   hold or a link down. A backlog of a million then costs a few thousand commits instead of
///   thirty thousand. While rounds that grew keep up, the next round is claimed while one
///   delivers (the store's work and the runner's overlap: see
///   [`runner::scheduler`](crate::runner::scheduler)'s `ahead`), so a runner holds at most
///   two rounds: `2 × max(batch, max_batch)` records with their payloads, about
///   2 × 1,024 × (payload + 200 bytes), so 920 KiB for 256-byte payloads. Set it to `batch`
///   for rounds of a fixed size, which are never claimed ahead: one round, `batch` records,
///   at a time.
/// - `concurrency`: **4** deliveries in flight: a few requests in parallel without flooding a
///   server that has just come back. After a server answers with `Retry-After`, the runner
///   waits it out and then sends one request; each answer that does not ask it to wait again
///   doubles that, up to `concurrency`.
/// - `lease`: **30 s**, renewed every third of it while a delivery runs, so only a dead
///   process lets a lease expire.
/// - `safety_poll`: **60 s**: the runner needs no polling to be correct; this slow poll
///   recovers leases that other processes left to expire on a shared store, notices a
///   wall clock that stepped while the runner slept, and (halted) reads the persisted halt,
///   so a halt another process cleared lifts here too even on a store that wakes no other
///   process (SQLite, redb).
/// - `delivery_timeout`: **60 s**: a sink that never reports must not hold its record (and
///   the queue behind it) forever; set the sink's own request timeout below it.
/// - `link_down_warn_every`: **15 min**: a link that stays down is logged again at this pace,
///   never once per attempt.
/// - `relink_spread`: **5 min**: when the server answers again after a time without any
///   answer, the runner sends the rest of its backlog after a random wait of up to a twelfth
///   of that time, at most this long (zero turns it off). A fleet that lost its server
///   together then comes back spread out instead of at once, each device a little later the
///   longer the outage was: up to 5 s after a minute, 50 s after ten, 5 min after an hour. The
///   answered record itself is not held, and a connectivity signal coming online (the device's
///   own link was at fault) sends at once.
/// - `rejection_storm`: **5**: that many records of different groups rejected in a row with
///   the same verdict (the status, not the server's words: see `Outcome::verdict`) halt the
///   runner as a suspected misconfiguration (0 turns it off).
/// - `store_timeout`: **30 s**: the longest the runner waits for one store call. A call that
///   takes longer (a half-open connection, a business transaction holding a group's lock)
///   counts as a store failure: the outcomes are kept and the runner backs off and says so.
///   One call is not tried again at once: the start's look for undecodable rows (made when
///   the runner is first idle; it reads every row) is put off until the runner is idle
///   again, ten deadlines later at the earliest, twice as long after each further time out
///   (`Notice::UnreadableLookPutOff`; claims go on, `flush` and a shutdown do not wait for
///   the look).
///   Keep it below `lease`, so a call that hangs is given up before the leases of the
///   records it holds can lapse. A call given up that committed after all is harmless: its
///   transitions are guarded, and records it claimed are recovered when their lease expires.
/// - `rate_limit`: **none**: concurrency already bounds what is in flight; set one where the
///   server publishes a quota ("10 requests per second per client"). At most `requests`
///   deliveries then start in any window of `per`, wherever it is placed. A server's
///   `Retry-After` hold and the limit compose: the later of the two decides.
/// - `seed`: **random**; set it to make jitter reproducible.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::RunnerConfig;
///
/// let config = RunnerConfig::default().with_batch(100).with_concurrency(8);
/// config.validate().unwrap();
/// assert_eq!(config.lease, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerConfig {
    /// Records claimed per round; at least 1.
    pub batch: usize,
    /// The most records a round may grow to (never fewer than `batch`).
    pub max_batch: usize,
    /// Deliveries in flight at once; at least 1.
    pub concurrency: usize,
    /// How long a claim holds a record before it may be recovered; at least 3 ms.
    pub lease: Duration,
    /// A slow poll for expired leases of other processes; `None` for none.
    pub safety_poll: Option<Duration>,
    /// Longest wait for the sink to report one delivery; past it the delivery counts as
    /// unanswered (nothing spent) and the record is scheduled again.
    pub delivery_timeout: Duration,
    /// How often a link that stays down is logged again.
    pub link_down_warn_every: Duration,
    /// The longest random wait before the backlog goes after the server answers again (a
    /// twelfth of the time without an answer, at most this); zero for none.
    pub relink_spread: Duration,
    /// Rejections in a row (different groups, same reason) that halt the runner; 0 for never.
    pub rejection_storm: u32,
    /// At most this many deliveries start per interval; `None` for no limit.
    pub rate_limit: Option<RateLimit>,
    /// Seed of the jitter RNG; `None` for a random seed.
    pub seed: Option<u64>,
    /// Longest wait for one store call the runner makes; past it the call counts as failed.
    pub store_timeout: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            batch: 32,
            max_batch: 1_024,
            concurrency: 4,
            lease: Duration::from_secs(30),
            safety_poll: Some(Duration::from_secs(60)),
            delivery_timeout: Duration::from_secs(60),
            link_down_warn_every: Duration::from_secs(15 * 60),
            relink_spread: Duration::from_secs(5 * 60),
            rejection_storm: 5,
            rate_limit: None,
            seed: None,
            store_timeout: Duration::from_secs(30),
        }
    }
}

impl RunnerConfig {
    /// Replaces `batch`.
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Replaces `max_batch` (the size rounds may grow to; `batch` or less for fixed rounds).
    pub fn with_max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// Replaces `concurrency`.
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Replaces `lease`.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Replaces `safety_poll` (`None` for no poll).
    pub fn with_safety_poll(mut self, safety_poll: Option<Duration>) -> Self {
        self.safety_poll = safety_poll;
        self
    }

    /// Replaces `delivery_timeout`.
    pub fn with_delivery_timeout(mut self, delivery_timeout: Duration) -> Self {
        self.delivery_timeout = delivery_timeout;
        self
    }

    /// Replaces `link_down_warn_every`.
    pub fn with_link_down_warn_every(mut self, every: Duration) -> Self {
        self.link_down_warn_every = every;
        self
    }

    /// Replaces `relink_spread` (zero sends a backlog as soon as the server answers again).
    pub fn with_relink_spread(mut self, spread: Duration) -> Self {
        self.relink_spread = spread;
        self
    }

    /// Replaces `rejection_storm` (0 turns the breaker off).
    pub fn with_rejection_storm(mut self, rejections: u32) -> Self {
        self.rejection_storm = rejections;
        self
    }

    /// At most `requests` deliveries start in any window of `per` (see [`RateLimit`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_core::RunnerConfig;
    ///
    /// // The server's quota: 10 requests per second per client.
    /// let config = RunnerConfig::default().with_rate_limit(10, Duration::from_secs(1));
    /// config.validate().unwrap();
    /// assert!(RunnerConfig::default()
    ///     .with_rate_limit(0, Duration::from_secs(1))
    ///     .validate()
    ///     .is_err());
    /// ```
    pub fn with_rate_limit(mut self, requests: u32, per: Duration) -> Self {
        self.rate_limit = Some(RateLimit { requests, per });
        self
    }

    /// Makes the jitter reproducible.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Replaces `store_timeout`.
    pub fn with_store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Checks every value is in range.
    pub fn validate(&self) -> Result<()> {
        if self.store_timeout.is_zero() || self.store_timeout > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "store_timeout must be between 1 ms and 7 days".into(),
            ));
        }
        if self.batch == 0 || self.concurrency == 0 {
            return Err(Error::InvalidConfig(
                "batch and concurrency must be at least 1".into(),
            ));
        }
        if self.lease < Duration::from_millis(3) || self.lease > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "lease must be between 3 ms and 7 days".into(),
            ));
        }
        if self.delivery_timeout.is_zero() || self.delivery_timeout > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "delivery_timeout must be between 1 ms and 7 days".into(),
            ));
        }
        if self.link_down_warn_every.is_zero() || self.link_down_warn_every > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "link_down_warn_every must be between 1 ms and 7 days".into(),
            ));
        }
        if self.relink_spread > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "relink_spread must be at most 7 days".into(),
            ));
        }
        if let Some(limit) = &self.rate_limit {
            limit.validate()?;
        }
        if self
            .safety_poll
            .is_some_and(|d| d.is_zero() || d > MAX_WAIT)
        {
            return Err(Error::InvalidConfig(
                "safety_poll must be between 1 ms and 7 days".into(),
            ));
        }
        Ok(())
    }
}

/// A limit on how many deliveries start per interval, towards a server that publishes a quota.
///
/// At most `requests` deliveries start in any window of length `per`, wherever the window is
/// placed: the runner keeps the start times of the last `requests` deliveries (8 bytes each),
/// which is why `requests` is bounded.
///
/// ```
/// use std::time::Duration;
/// use outbox_core::RateLimit;
///
/// let limit = RateLimit { requests: 10, per: Duration::from_secs(1) };
/// limit.validate().unwrap();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Deliveries that may start within one `per`; 1 to [`RateLimit::MAX_REQUESTS`].
    pub requests: u32,
    /// The window; 1 ms to 7 days.
    pub per: Duration,
}

impl RateLimit {
    /// The most requests per window (the runner keeps one start time per request).
    pub const MAX_REQUESTS: u32 = 100_000;

    /// Checks both values are in range.
    pub fn validate(&self) -> Result<()> {
        if self.requests == 0 || self.requests > Self::MAX_REQUESTS {
            return Err(Error::InvalidConfig(format!(
                "rate_limit requests must be between 1 and {}",
                Self::MAX_REQUESTS
            )));
        }
        if self.per < Duration::from_millis(1) || self.per > MAX_WAIT {
            return Err(Error::InvalidConfig(
                "rate_limit per must be between 1 ms and 7 days".into(),
            ));
        }
        Ok(())
    }
}
