//! What an app passes to open an outbox: the retry policy, the runner's settings, the store's
//! limits and the classification table, as plain records with the core's defaults.

use std::time::Duration;

use outbox_core::http::{Classifier, Forbidden};
use outbox_core::{Backoff, Cap, Ceiling, ConflictResolution, Jitter, RetryPolicy, RunnerConfig};
use outbox_sqlite::SqliteConfig;

use crate::error::{millis, OutboxError};

/// How the delay between tries grows, in milliseconds.
#[derive(Clone, Debug, PartialEq, uniffi::Enum)]
pub enum BackoffOptions {
    /// `initial_ms * factor^(n-1)`, never above `cap_ms`.
    Exponential {
        /// Delay after the first failure.
        initial_ms: u64,
        /// Growth per failure; at least 1.
        factor: f64,
        /// Largest delay.
        cap_ms: u64,
    },
    /// An explicit delay per failure; the last entry repeats. Must not be empty.
    Table {
        /// The delays.
        delays_ms: Vec<u64>,
    },
}

/// How a delay is spread (see [`outbox_core::Jitter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum JitterKind {
    /// The delay as the backoff gives it.
    None,
    /// Uniform over `[0, delay]` (the default).
    Full,
    /// `[delay/2, delay]`.
    Equal,
    /// Uniform over `[initial, 3 × previous delay]`, capped.
    Decorrelated,
}

/// What happens to a record that spent its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum CeilingKind {
    /// It waits for a person (the default).
    NeedsAttention,
    /// It is discarded, leaving a tombstone and an event.
    Discard,
}

/// The retry policy, as [`outbox_core::RetryPolicy`] with durations in milliseconds. Start
/// from [`default_options`] and change what you need.
///
/// ```
/// use outbox_ffi::{default_options, PolicyOptions};
///
/// let policy: PolicyOptions = default_options().policy;
/// assert_eq!(policy.max_attempts, 12);
/// ```
#[derive(Clone, Debug, PartialEq, uniffi::Record)]
pub struct PolicyOptions {
    /// Growth of the delay.
    pub backoff: BackoffOptions,
    /// Spread of the delay.
    pub jitter: JitterKind,
    /// Answered failures a record may spend before the ceiling applies.
    pub max_attempts: u32,
    /// What the ceiling does.
    pub at_ceiling: CeilingKind,
    /// Deliveries in a row that killed the process before a record is parked.
    pub max_interruptions: u32,
    /// The longest `Retry-After` honoured.
    pub max_retry_after_ms: u64,
    /// A record undelivered this long after its enqueue is parked instead of sent; `None`
    /// for no limit.
    pub max_age_ms: Option<u64>,
}

/// How the runner works through the queue, as [`outbox_core::RunnerConfig`] with durations in
/// milliseconds.
///
/// ```
/// let runner = outbox_ffi::default_options().runner;
/// assert_eq!(runner.batch, 32);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct RunnerOptions {
    /// Records claimed per round.
    pub batch: u32,
    /// Deliveries in flight at once.
    pub concurrency: u32,
    /// How long a claim holds a record before another process may recover it.
    pub lease_ms: u64,
    /// A slow poll for leases left by other processes; `None` for none.
    pub safety_poll_ms: Option<u64>,
    /// Longest wait for the sink to report one delivery (past it: a no-answer).
    pub delivery_timeout_ms: u64,
    /// The longest random wait before the backlog goes after the server answers again.
    pub relink_spread_ms: u64,
    /// Rejections in a row (different groups, same status) that halt the runner; 0 for never.
    pub rejection_storm: u32,
    /// Longest wait for one store call.
    pub store_timeout_ms: u64,
    /// Seed of the jitter; `None` for a random one.
    pub seed: Option<u64>,
}

/// What a 403 means to the classifier (see [`outbox_core::http::Forbidden`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum ForbiddenMeaning {
    /// Tried again on the schedule (the default).
    Retry,
    /// The credential was refused: the runner halts.
    Halt,
    /// A verdict on the record: it is rejected.
    Reject,
}

/// Changes to the HTTP classification table, applied to the default one (the same for a
/// foreign sink and the built-in HTTP sink).
///
/// ```
/// let table = outbox_ffi::default_options().classifier;
/// assert!(table.reject.is_empty() && table.retry.is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, uniffi::Record)]
pub struct ClassifierOptions {
    /// Statuses that also reject a record.
    pub reject: Vec<u16>,
    /// Statuses removed from the rejecting set: they are retried.
    pub retry: Vec<u16>,
    /// What a 403 means.
    pub forbidden: ForbiddenMeaning,
}

/// What a 409 Conflict means for a record (see [`outbox_core::ConflictResolution`]). A 412 (a
/// failed `If-Match` precondition: the server did not take the write) always waits for a
/// person, whatever this says, so a stale edit is never counted as delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, uniffi::Enum)]
pub enum ConflictChoice {
    /// The record waits for a person (the default).
    NeedsAttention,
    /// The server already has this write (a duplicate create): count it delivered.
    AlreadyDelivered,
    /// Final: the record is rejected.
    Reject,
    /// Try again later, spending one attempt.
    Retry,
}

impl ConflictChoice {
    /// What a conflict with the server's `detail` means under this choice.
    ///
    /// ```
    /// use outbox_core::ConflictResolution;
    /// use outbox_ffi::ConflictChoice;
    ///
    /// let choice = ConflictChoice::AlreadyDelivered;
    /// assert_eq!(choice.resolve("HTTP 409"), ConflictResolution::AlreadyDelivered);
    /// assert_eq!(choice.resolve("HTTP 412 precondition failed"), ConflictResolution::NeedsAttention);
    /// ```
    pub fn resolve(self, detail: &str) -> ConflictResolution {
        if detail.starts_with("HTTP 412") {
            return ConflictResolution::NeedsAttention;
        }
        match self {
            ConflictChoice::NeedsAttention => ConflictResolution::NeedsAttention,
            ConflictChoice::AlreadyDelivered => ConflictResolution::AlreadyDelivered,
            ConflictChoice::Reject => ConflictResolution::Reject,
            ConflictChoice::Retry => ConflictResolution::Retry,
        }
    }
}

/// Everything [`open_outbox`](crate::open_outbox) takes besides the path and the sink.
///
/// ```
/// let mut options = outbox_ffi::default_options();
/// options.online = false; // nothing is attempted until `set_online(true)`
/// assert!(options.max_payload_bytes > 0);
/// ```
#[derive(Clone, Debug, PartialEq, uniffi::Record)]
pub struct OpenOptions {
    /// The retry policy.
    pub policy: PolicyOptions,
    /// The runner's settings.
    pub runner: RunnerOptions,
    /// The classification table.
    pub classifier: ClassifierOptions,
    /// What a 409 Conflict means.
    pub on_conflict: ConflictChoice,
    /// Whether the device is online when the outbox opens; the platform's connectivity
    /// callback then calls `set_online`.
    pub online: bool,
    /// The largest payload an enqueue accepts.
    pub max_payload_bytes: u64,
    /// A cap on the file's size; an enqueue past it raises `StorageFull`. `None` for none.
    pub size_limit_bytes: Option<u64>,
    /// The most records the outbox holds (rejected ones included); an enqueue past it raises
    /// `QueueFull` and queues nothing. `None` for no limit.
    pub max_records: Option<u64>,
    /// The most payload bytes the outbox holds; an enqueue past it raises `QueueFull`.
    /// `None` for no limit.
    pub max_bytes: Option<u64>,
}

/// The options with the core's documented defaults: the default [`RetryPolicy`] and
/// [`RunnerConfig`], the default classification table, online, and the SQLite store's default
/// limits.
///
/// ```
/// let options = outbox_ffi::default_options();
/// assert!(options.online);
/// assert_eq!(options.runner.concurrency, 4);
/// ```
#[uniffi::export]
pub fn default_options() -> OpenOptions {
    let policy = RetryPolicy::default();
    let runner = RunnerConfig::default();
    let sqlite = SqliteConfig::default();
    OpenOptions {
        policy: PolicyOptions {
            backoff: match &policy.backoff {
                Backoff::Exponential {
                    initial,
                    factor,
                    cap,
                } => BackoffOptions::Exponential {
                    initial_ms: millis(*initial),
                    factor: *factor,
                    cap_ms: millis(*cap),
                },
                Backoff::Table(delays) => BackoffOptions::Table {
                    delays_ms: delays.iter().copied().map(millis).collect(),
                },
            },
            jitter: match policy.jitter {
                Jitter::None => JitterKind::None,
                Jitter::Full => JitterKind::Full,
                Jitter::Equal => JitterKind::Equal,
                Jitter::Decorrelated => JitterKind::Decorrelated,
            },
            max_attempts: policy.max_attempts,
            at_ceiling: match policy.at_ceiling {
                Ceiling::NeedsAttention => CeilingKind::NeedsAttention,
                Ceiling::Discard => CeilingKind::Discard,
            },
            max_interruptions: policy.max_interruptions,
            max_retry_after_ms: millis(policy.max_retry_after),
            max_age_ms: policy.max_age.map(millis),
        },
        runner: RunnerOptions {
            batch: u32::try_from(runner.batch).unwrap_or(u32::MAX),
            concurrency: u32::try_from(runner.concurrency).unwrap_or(u32::MAX),
            lease_ms: millis(runner.lease),
            safety_poll_ms: runner.safety_poll.map(millis),
            delivery_timeout_ms: millis(runner.delivery_timeout),
            relink_spread_ms: millis(runner.relink_spread),
            rejection_storm: runner.rejection_storm,
            store_timeout_ms: millis(runner.store_timeout),
            seed: runner.seed,
        },
        classifier: ClassifierOptions {
            reject: Vec::new(),
            retry: Vec::new(),
            forbidden: ForbiddenMeaning::Retry,
        },
        on_conflict: ConflictChoice::NeedsAttention,
        online: true,
        max_payload_bytes: sqlite.max_payload as u64,
        size_limit_bytes: sqlite.size_limit,
        max_records: sqlite.cap.max_records,
        max_bytes: sqlite.cap.max_bytes,
    }
}

impl PolicyOptions {
    /// The core's policy, validated.
    pub(crate) fn to_core(&self) -> Result<RetryPolicy, OutboxError> {
        let backoff = match &self.backoff {
            BackoffOptions::Exponential {
                initial_ms,
                factor,
                cap_ms,
            } => Backoff::exponential(ms(*initial_ms), *factor, ms(*cap_ms)),
            BackoffOptions::Table { delays_ms } => {
                Backoff::Table(delays_ms.iter().copied().map(ms).collect())
            }
        };
        let mut policy = RetryPolicy::default()
            .with_backoff(backoff)
            .with_jitter(match self.jitter {
                JitterKind::None => Jitter::None,
                JitterKind::Full => Jitter::Full,
                JitterKind::Equal => Jitter::Equal,
                JitterKind::Decorrelated => Jitter::Decorrelated,
            })
            .with_max_attempts(self.max_attempts)
            .with_ceiling(match self.at_ceiling {
                CeilingKind::NeedsAttention => Ceiling::NeedsAttention,
                CeilingKind::Discard => Ceiling::Discard,
            })
            .with_max_interruptions(self.max_interruptions)
            .with_max_retry_after(ms(self.max_retry_after_ms));
        policy.max_age = self.max_age_ms.map(ms);
        policy.validate()?;
        Ok(policy)
    }
}

impl RunnerOptions {
    /// The core's runner configuration, validated.
    pub(crate) fn to_core(&self) -> Result<RunnerConfig, OutboxError> {
        let mut config = RunnerConfig::default()
            .with_batch(self.batch as usize)
            .with_concurrency(self.concurrency as usize)
            .with_lease(ms(self.lease_ms))
            .with_safety_poll(self.safety_poll_ms.map(ms))
            .with_delivery_timeout(ms(self.delivery_timeout_ms))
            .with_relink_spread(ms(self.relink_spread_ms))
            .with_rejection_storm(self.rejection_storm)
            .with_store_timeout(ms(self.store_timeout_ms));
        config.seed = self.seed;
        config.validate()?;
        Ok(config)
    }
}

impl ClassifierOptions {
    /// The core's classifier: the default table ([`Classifier::new`]) with these changes. Both
    /// sinks classify with it.
    ///
    /// ```
    /// use outbox_core::http::Response;
    /// use outbox_core::Outcome;
    ///
    /// let mut table = outbox_ffi::default_options().classifier;
    /// table.reject.push(451);
    /// assert!(matches!(table.table().classify(&Response::new(451)), Outcome::Rejected { .. }));
    /// ```
    pub fn table(&self) -> Classifier {
        let table = self
            .reject
            .iter()
            .fold(Classifier::new(), |table, &status| table.reject(status));
        let table = self
            .retry
            .iter()
            .fold(table, |table, &status| table.retry(status));
        table.on_forbidden(match self.forbidden {
            ForbiddenMeaning::Retry => Forbidden::Retry,
            ForbiddenMeaning::Halt => Forbidden::Halt,
            ForbiddenMeaning::Reject => Forbidden::Reject,
        })
    }
}

impl OpenOptions {
    /// The SQLite store's configuration.
    pub(crate) fn sqlite(&self) -> Result<SqliteConfig, OutboxError> {
        let max_payload =
            usize::try_from(self.max_payload_bytes).map_err(|_| OutboxError::InvalidConfig {
                detail: format!("max_payload_bytes {} is too large", self.max_payload_bytes),
            })?;
        let cap = Cap {
            max_records: self.max_records,
            max_bytes: self.max_bytes,
        };
        Ok(SqliteConfig::default()
            .max_payload(max_payload)
            .size_limit(self.size_limit_bytes)
            .with_cap(cap))
    }
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}
