//! One time for the fleet: the database server's wall clock, as a [`Clock`] a runner can use.
//!
//! Runners on several hosts compare each other's times: a lease one runner wrote is judged
//! expired by another, a deadline one set is found due by another. If each used its own host's
//! clock, a host an hour ahead would see every live lease of the others as expired and take
//! their records over, and one an hour behind would leave records stranded for an hour. So the
//! store follows the server's clock: it keeps the offset between its host's clock and the
//! server's, measured when it connects and again on every claim and round, and
//! [`PgStore::clock`](crate::PgStore::clock) hands out a clock that reads the host's time plus
//! that offset. The store names that clock as the one its records are judged by
//! ([`Store::shared_clock`](outbox_core::Store::shared_clock)), so every runner on it uses it
//! without wiring.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use outbox_core::{Clock, Millis};

/// No measurement yet.
const UNSET: i64 = i64::MIN;

/// The database server's wall clock, read as the host's clock plus the measured offset.
///
/// Each measurement brackets the server's reading between the host times the statement was
/// sent and answered, so the true offset lies in an interval as wide as the round trip. The
/// clock keeps its offset while it stays inside every new interval and moves it only as far
/// as the interval demands: round-trip noise does not make it jitter, and a host clock that
/// is stepped is followed at the next claim.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// # use std::sync::Arc;
/// # use outbox_core::{sink_fn, Clock, Outbox, Outcome, Record};
/// use outbox_postgres::{PgConfig, PgStore};
/// let store = PgStore::connect(PgConfig::new("postgres://postgres@127.0.0.1/test", "docs_outbox")).await?;
/// let clock = store.clock();
/// # let sink = sink_fn(|_: Record| async { Outcome::Delivered });
/// // Leases, expiry and deadlines in the server's time, whatever this host's clock says:
/// // the store names this clock, and the runner uses it with no `.clock(..)`.
/// let outbox = Outbox::builder(Arc::new(store), sink).start().await?;
/// let server_now = clock.now();
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ServerClock {
    host: Arc<dyn Clock>,
    /// Server time minus host time, in milliseconds.
    offset: AtomicI64,
}

impl ServerClock {
    /// A clock that reads `host` until the first measurement.
    pub(crate) fn new(host: Arc<dyn Clock>) -> Self {
        ServerClock {
            host,
            offset: AtomicI64::new(UNSET),
        }
    }

    /// The host's own reading, for bracketing a measurement.
    pub(crate) fn host_now(&self) -> Millis {
        self.host.now()
    }

    /// Milliseconds the server's clock is ahead of this host's (negative when behind).
    pub fn offset(&self) -> i64 {
        match self.offset.load(Ordering::Relaxed) {
            UNSET => 0,
            offset => offset,
        }
    }

    /// Takes in one reading `server` of the server's clock (whole milliseconds, rounded
    /// down), made between the host times `sent` and `received`.
    pub(crate) fn observe(&self, sent: Millis, received: Millis, server: i64) {
        let sent = i64::try_from(sent).unwrap_or(i64::MAX);
        let received = i64::try_from(received).unwrap_or(i64::MAX).max(sent);
        // The server read its clock at some host time in [sent, received]; its reading was
        // rounded down by less than 1 ms.
        let low = server.saturating_sub(received);
        let high = server.saturating_sub(sent).saturating_add(1);
        let _ = self
            .offset
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
                Some(if current == UNSET {
                    low + (high - low) / 2
                } else {
                    current.clamp(low, high)
                })
            });
    }
}

impl Clock for ServerClock {
    fn now(&self) -> Millis {
        let host = i64::try_from(self.host.now()).unwrap_or(i64::MAX);
        u64::try_from(host.saturating_add(self.offset())).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::ManualClock;

    #[test]
    fn follows_the_server_and_ignores_round_trip_noise() {
        let host = ManualClock::new(10_000);
        let clock = ServerClock::new(Arc::new(host.clone()));
        assert_eq!(clock.now(), 10_000, "the host's time until measured");
        // The server is an hour ahead; the reading came back after 20 ms.
        clock.observe(10_000, 10_020, 3_610_010);
        assert_eq!(clock.offset(), 3_600_000);
        // A reading inside the new bracket leaves the offset alone.
        clock.observe(20_000, 20_030, 3_620_005);
        assert_eq!(clock.offset(), 3_600_000);
        host.set(30_000);
        assert_eq!(clock.now(), 3_630_000);
        // The host's clock is stepped back an hour, the server's is not: the next reading
        // follows.
        host.set(40_000);
        clock.observe(40_000, 40_010, 7_240_005);
        assert!(
            (7_199_990..=7_200_001).contains(&clock.offset()),
            "{}",
            clock.offset()
        );
    }

    #[test]
    fn a_server_behind_gives_a_negative_offset_and_never_a_time_before_the_epoch() {
        let clock = ServerClock::new(Arc::new(ManualClock::new(5_000)));
        clock.observe(5_000, 5_000, 1_000);
        assert_eq!(clock.offset(), -4_000);
        assert_eq!(clock.now(), 1_000);
        clock.observe(5_000, 5_000, -10_000);
        assert_eq!(clock.now(), 0);
    }
}
