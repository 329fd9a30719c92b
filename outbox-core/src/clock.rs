//! Where time comes from: the system clock, a manual clock, and tokio's clock on a wall base.

#![allow(clippy::disallowed_methods)] // the one module allowed to read the wall clock

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::outcome::duration_ms;
use crate::record::Millis;

/// A source of wall-clock milliseconds.
///
/// Deadlines are persisted as wall-clock time so they survive a restart. The runner reads `now`
/// only through this trait, so tests can drive it.
///
/// ```
/// use outbox_core::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(std::time::Duration::from_millis(500));
/// assert_eq!(clock.now(), 1_500);
/// ```
pub trait Clock: Debug + Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> Millis;
}

/// Reads the first `now` of a system clock; before 1970 counts as 0.
pub fn system_now() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, duration_ms)
}

/// The operating system's wall clock.
///
/// ```
/// use outbox_core::{Clock, SystemClock};
/// assert!(SystemClock.now() > 1_600_000_000_000);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        system_now()
    }
}

/// A clock that moves only when told; clones share the same time.
///
/// ```
/// use outbox_core::{Clock, ManualClock};
/// let clock = ManualClock::new(0);
/// let shared = clock.clone();
/// clock.set(42);
/// assert_eq!(shared.now(), 42);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: Millis) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(now)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let by = duration_ms(by);
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the clock to `now` (forward or back: a clock jump).
    pub fn set(&self, now: Millis) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// Wall-clock time as a base plus the time tokio's clock has moved since.
///
/// Under `tokio::time::pause` the runner's timers and its deadlines then move together with
/// `tokio::time::advance`, while persisted deadlines stay wall-clock milliseconds.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use outbox_core::{Clock, TokioClock};
///
/// let clock = TokioClock::starting_at(1_000);
/// tokio::time::advance(Duration::from_secs(2)).await;
/// assert_eq!(clock.now(), 3_000);
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    base: Millis,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// Starts at the system's wall-clock time. Needs a tokio runtime (its clock).
    pub fn new() -> Self {
        Self::starting_at(system_now())
    }

    /// Starts at `base` (handy for exact tests). Needs a tokio runtime (its clock).
    pub fn starting_at(base: Millis) -> Self {
        TokioClock {
            base,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Millis {
        self.base.saturating_add(duration_ms(self.start.elapsed()))
    }
}

/// Tokio's clock on a wall base that can also be stepped, forwards or back, as a real wall
/// clock is when NTP or a person corrects it. Clones share the same steps.
///
/// Under `tokio::time::pause` it advances with `tokio::time::advance`, like [`TokioClock`], so a
/// test can drive the runner's timers and then step the wall clock under it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use outbox_core::{Clock, SteppedClock};
///
/// let clock = SteppedClock::starting_at(100_000_000);
/// tokio::time::advance(Duration::from_secs(1)).await;
/// clock.step_back(Duration::from_secs(86_400));
/// assert_eq!(clock.now(), 100_001_000 - 86_400_000);
/// clock.step_forward(Duration::from_secs(86_400));
/// assert_eq!(clock.now(), 100_001_000);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SteppedClock {
    tokio: TokioClock,
    /// Milliseconds added to the tokio-based time; negative after a net step back.
    offset: Arc<std::sync::atomic::AtomicI64>,
}

impl SteppedClock {
    /// Starts at `base` on tokio's clock. Needs a tokio runtime (its clock).
    pub fn starting_at(base: Millis) -> Self {
        SteppedClock {
            tokio: TokioClock::starting_at(base),
            offset: Arc::new(std::sync::atomic::AtomicI64::new(0)),
        }
    }

    /// Steps the wall clock back by `by`.
    pub fn step_back(&self, by: std::time::Duration) {
        let by = i64::try_from(duration_ms(by)).unwrap_or(i64::MAX);
        self.offset.fetch_sub(by, Ordering::SeqCst);
    }

    /// Steps the wall clock forward by `by`.
    pub fn step_forward(&self, by: std::time::Duration) {
        let by = i64::try_from(duration_ms(by)).unwrap_or(i64::MAX);
        self.offset.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for SteppedClock {
    fn now(&self) -> Millis {
        let base = self.tokio.now();
        let offset = self.offset.load(Ordering::SeqCst);
        if offset >= 0 {
            base.saturating_add(offset.unsigned_abs())
        } else {
            base.saturating_sub(offset.unsigned_abs())
        }
    }
}
