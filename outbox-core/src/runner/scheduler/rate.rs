//! The rate limit: at most `requests` deliveries start in any window of `per`.
//!
//! Concurrency bounds the requests in flight; a server's published quota bounds requests per
//! interval, however quickly they are answered. The limiter keeps the start times of the last
//! `requests` deliveries (monotonic), and a delivery may start once the oldest of them is
//! `per` old. Unlike a token bucket whose burst and refill each allow `requests` (which lets
//! twice the quota through a window that straddles a refill), no window of length `per`, wherever
//! it is placed, ever holds more than `requests` starts.
//!
//! It gates only the start of deliveries: a claim still goes when work is due, and a round
//! whose records wait for the limiter keeps their leases renewed. A server's `Retry-After`
//! hold gates the claims: when both apply, the later one decides.

use std::collections::VecDeque;

use crate::config::RateLimit;
use crate::outcome::duration_ms;
use crate::record::Millis;

/// The sliding window of delivery starts (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Limiter {
    requests: usize,
    per: Millis,
    /// Start times (monotonic) of the last `requests` deliveries, oldest first.
    starts: VecDeque<Millis>,
}

impl Limiter {
    pub(super) fn new(limit: RateLimit) -> Self {
        let requests = usize::try_from(limit.requests).unwrap_or(usize::MAX).max(1);
        Limiter {
            requests,
            per: duration_ms(limit.per).max(1),
            starts: VecDeque::with_capacity(requests.min(1_024)),
        }
    }

    /// Deliveries that may start at `mono`.
    pub(super) fn available(&mut self, mono: Millis) -> usize {
        while self
            .starts
            .front()
            .is_some_and(|&start| start.saturating_add(self.per) <= mono)
        {
            self.starts.pop_front();
        }
        self.requests - self.starts.len()
    }

    /// `count` deliveries started at `mono`.
    pub(super) fn started(&mut self, count: usize, mono: Millis) {
        for _ in 0..count {
            if self.starts.len() == self.requests {
                self.starts.pop_front();
            }
            self.starts.push_back(mono);
        }
    }

    /// When the next delivery may start (monotonic), if none may start at `mono`.
    pub(super) fn next_free(&self, mono: Millis) -> Option<Millis> {
        if self.starts.len() < self.requests {
            return None;
        }
        let free = self.starts.front()?.saturating_add(self.per);
        (free > mono).then_some(free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limiter(requests: u32, per_ms: u64) -> Limiter {
        Limiter::new(RateLimit {
            requests,
            per: Duration::from_millis(per_ms),
        })
    }

    #[test]
    fn a_full_window_waits_until_its_oldest_start_is_one_period_old() {
        let mut rate = limiter(3, 1_000);
        assert_eq!(rate.available(0), 3);
        rate.started(2, 0);
        rate.started(1, 400);
        assert_eq!(rate.available(400), 0);
        assert_eq!(rate.next_free(400), Some(1_000));
        assert_eq!(rate.available(999), 0);
        assert_eq!(rate.available(1_000), 2, "both starts at 0 left the window");
        assert_eq!(rate.next_free(1_000), None);
        rate.started(2, 1_000);
        assert_eq!(rate.next_free(1_000), Some(1_400));
    }

    #[test]
    fn starting_whenever_allowed_never_puts_more_than_the_limit_in_any_window() {
        let mut rate = limiter(10, 1_000);
        let mut starts = Vec::new();
        let mut mono = 0;
        while starts.len() < 100 {
            let n = rate.available(mono);
            rate.started(n, mono);
            starts.extend(std::iter::repeat_n(mono, n));
            mono = rate.next_free(mono).unwrap_or(mono + 1);
        }
        for (i, &start) in starts.iter().enumerate() {
            let within = starts[i..]
                .iter()
                .take_while(|&&s| s < start + 1_000)
                .count();
            assert!(within <= 10, "{within} starts in the window from {start}");
        }
        assert_eq!(*starts.last().unwrap(), 9_000, "ten a second, no slower");
    }
}
