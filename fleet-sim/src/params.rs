//! What is simulated: the fleet, the server, the outage, and the retry schedules compared.

use std::time::Duration;

use outbox_core::{Backoff, Jitter, Millis, RetryPolicy, RunnerConfig};

/// The fleet and the server of one simulation; every scenario runs with the same.
///
/// ## Defaults
/// - `devices`: **100,000**, each with its own store and scheduler.
/// - `backlog`: **5** records per device: the first written in the outage's first minute
///   (`noticed_within`: every device meets the outage together, as devices that sync
///   regularly do), the others at seeded times spread over the warm-up and the outage.
/// - `capacity`: **1,000** requests per second (1 % of the fleet per second): draining the
///   whole backlog takes about 8 minutes at full capacity.
/// - `warmup`: **5 min** of a healthy server before the outage, `outage`: **1 hour** of no
///   answer at all (connections refused), then `flap`: **none** (the server flaps 20 s down,
///   40 s up for this long after the outage when set).
/// - `retry_after`: **30 s**, what the server asks for in every 429 it answers when the
///   current second is over capacity.
/// - `latency`: **50–150 ms** per request, uniform.
/// - online spells of **2 hours** on average (exponential), offline spells of **30 s–5 min**
///   (uniform): about one device in sixty is offline at any moment.
/// - `horizon`: **3 hours** after the outage: a scenario still delivering then is reported as
///   not drained.
/// - `safety_poll`: **off**. Every other runner setting is `RunnerConfig::default()`. The
///   60 s safety poll recovers leases that another process let expire and notices clock
///   steps; a fleet of one runner per store on a steady clock has neither, so the poll only
///   re-reads the store, yet it is most of the simulation's wake-ups. A test checks that a
///   small fleet sends the very same requests with and without it.
///
/// ```
/// use fleet_sim::Params;
/// let small = Params::default().with_devices(200).with_seed(7);
/// assert_eq!(small.records(), 1_000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Devices in the fleet.
    pub devices: usize,
    /// Records each device writes.
    pub backlog: u32,
    /// Each device writes its first record within this long after the outage starts (zero:
    /// all its records at random times).
    pub noticed_within: Duration,
    /// Requests per second the server serves; past it, it answers 429.
    pub capacity: u32,
    /// Healthy time before the outage.
    pub warmup: Duration,
    /// How long the server answers nothing.
    pub outage: Duration,
    /// How long the server flaps (20 s down, 40 s up) after the outage.
    pub flap: Duration,
    /// The server's `Retry-After` on a 429.
    pub retry_after: Duration,
    /// Shortest and longest request latency, milliseconds.
    pub latency: (Millis, Millis),
    /// Mean online spell.
    pub online_mean: Duration,
    /// Shortest and longest offline spell, milliseconds.
    pub offline: (Millis, Millis),
    /// How long after the server is back the simulation runs at most.
    pub horizon: Duration,
    /// The runner's safety poll (`RunnerConfig::safety_poll`).
    pub safety_poll: Option<Duration>,
    /// The seed of everything random.
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            devices: 100_000,
            backlog: 5,
            noticed_within: Duration::from_secs(60),
            capacity: 1_000,
            warmup: Duration::from_secs(5 * 60),
            outage: Duration::from_secs(3600),
            flap: Duration::ZERO,
            retry_after: Duration::from_secs(30),
            latency: (50, 150),
            online_mean: Duration::from_secs(2 * 3600),
            offline: (30_000, 300_000),
            horizon: Duration::from_secs(3 * 3600),
            safety_poll: None,
            seed: 20,
        }
    }
}

impl Params {
    /// Replaces `devices`.
    pub fn with_devices(mut self, devices: usize) -> Self {
        self.devices = devices;
        self
    }

    /// Replaces `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Replaces `outage`.
    pub fn with_outage(mut self, outage: Duration) -> Self {
        self.outage = outage;
        self
    }

    /// Replaces `capacity`.
    pub fn with_capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// Replaces `safety_poll`.
    pub fn with_safety_poll(mut self, safety_poll: Option<Duration>) -> Self {
        self.safety_poll = safety_poll;
        self
    }

    /// The runner configuration of every device.
    pub fn runner(&self) -> RunnerConfig {
        RunnerConfig::default().with_safety_poll(self.safety_poll)
    }

    /// Records the whole fleet writes.
    pub fn records(&self) -> u64 {
        self.devices as u64 * u64::from(self.backlog)
    }

    /// When the outage starts (virtual milliseconds since the start).
    pub fn outage_start(&self) -> Millis {
        ms(self.warmup)
    }

    /// When the server answers for good: after the outage and any flapping.
    pub fn back_at(&self) -> Millis {
        ms(self.warmup) + ms(self.outage) + ms(self.flap)
    }

    /// The last moment simulated.
    pub fn end(&self) -> Millis {
        self.back_at() + ms(self.horizon)
    }

    /// Devices write their records until the outage ends, not after.
    pub(crate) fn writes_until(&self) -> Millis {
        ms(self.warmup) + ms(self.outage)
    }

    /// Whether the server answers nothing at `t`.
    pub(crate) fn server_down(&self, t: Millis) -> bool {
        let start = self.outage_start();
        let outage_end = start + ms(self.outage);
        if t < start {
            return false;
        }
        if t < outage_end {
            return true;
        }
        if t < self.back_at() {
            // Flapping: 20 s down, 40 s up, starting down.
            return (t - outage_end) % 60_000 < 20_000;
        }
        false
    }
}

pub(crate) fn ms(d: Duration) -> Millis {
    u64::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// One retry schedule the fleet runs, a row of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// `RetryPolicy::default()` and `RunnerConfig::default()`, as an application gets them.
    Defaults,
    /// A fixed 30 s retry: `Backoff::Table([30 s])`, no jitter.
    Fixed30s,
    /// The default exponential backoff (1 s, ×2, 15 min cap) without jitter.
    ExponentialNoJitter,
    /// The defaults, in an application that resets its records' attempt counters whenever the
    /// device reconnects (`machine::retry_now` on every retrying record): the budget-reset trap.
    ResetOnReconnect,
    /// The defaults behind a sink that drops the server's `Retry-After`.
    RetryAfterIgnored,
}

impl Scenario {
    /// Every scenario, in the report's order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Defaults,
        Scenario::Fixed30s,
        Scenario::ExponentialNoJitter,
        Scenario::ResetOnReconnect,
        Scenario::RetryAfterIgnored,
    ];

    /// The row's label.
    pub fn label(self) -> &'static str {
        match self {
            Scenario::Defaults => "our defaults",
            Scenario::Fixed30s => "fixed 30 s retry",
            Scenario::ExponentialNoJitter => "exponential, no jitter",
            Scenario::ResetOnReconnect => "defaults + counter reset on reconnect",
            Scenario::RetryAfterIgnored => "defaults, Retry-After ignored",
        }
    }

    /// A short name for the command line.
    pub fn key(self) -> &'static str {
        match self {
            Scenario::Defaults => "defaults",
            Scenario::Fixed30s => "fixed30",
            Scenario::ExponentialNoJitter => "exp-nojitter",
            Scenario::ResetOnReconnect => "reset",
            Scenario::RetryAfterIgnored => "ignore-retry-after",
        }
    }

    /// The scenario named `key`.
    pub fn from_key(key: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.key() == key)
    }

    /// The retry policy of each device.
    pub fn policy(self) -> RetryPolicy {
        match self {
            Scenario::Defaults | Scenario::ResetOnReconnect | Scenario::RetryAfterIgnored => {
                RetryPolicy::default()
            }
            Scenario::Fixed30s => RetryPolicy::default()
                .with_backoff(Backoff::Table(vec![Duration::from_secs(30)]))
                .with_jitter(Jitter::None),
            Scenario::ExponentialNoJitter => RetryPolicy::default().with_jitter(Jitter::None),
        }
    }

    /// Whether the application resets its records' counters when the device reconnects.
    pub(crate) fn resets_on_reconnect(self) -> bool {
        self == Scenario::ResetOnReconnect
    }

    /// Whether the sink passes the server's `Retry-After` on.
    pub(crate) fn honours_retry_after(self) -> bool {
        self != Scenario::RetryAfterIgnored
    }
}
