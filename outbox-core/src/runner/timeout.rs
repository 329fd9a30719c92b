//! The delivery timeout: a sink's answer within its limit, with a timer set only once the
//! sink waits.

use std::future::{poll_fn, Future};
use std::task::Poll;
use std::time::Duration;

use tokio::task::{coop, unconstrained};
use tokio::time::{Instant, Sleep};

/// The output of `future`, or `None` if it is not ready `limit` after `started`: a timeout
/// whose timer is set only when the future first waits, so a future ready at its first poll
/// (a sink that answers in process) costs no timer. As `tokio::time::timeout` does, a poll in
/// which the future itself spent the task's budget reads the timer outside the budget, so a
/// future that spends the whole budget at every poll still ends at its limit.
pub(super) async fn within<F: Future>(
    started: Instant,
    limit: Duration,
    future: F,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    // A limit past the clock's range never ends.
    let deadline = started.checked_add(limit);
    let mut timer = std::pin::pin!(None::<Sleep>);
    poll_fn(|cx| {
        let had_budget = coop::has_budget_remaining();
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let Some(deadline) = deadline else {
            return Poll::Pending;
        };
        if timer.is_none() {
            timer.set(Some(tokio::time::sleep_until(deadline)));
        }
        let Some(mut sleep) = timer.as_mut().as_pin_mut() else {
            return Poll::Pending;
        };
        let elapsed = if had_budget && !coop::has_budget_remaining() {
            std::pin::pin!(unconstrained(sleep.as_mut())).poll(cx)
        } else {
            sleep.as_mut().poll(cx)
        };
        elapsed.map(|()| None)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_gives_a_ready_answer_without_a_timer() {
        // A runtime without timers: making one there panics.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let answer = runtime.block_on(within(Instant::now(), Duration::from_secs(1), async { 7 }));
        assert_eq!(answer, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn within_ends_a_future_that_waits_past_its_limit_at_the_limit() {
        let started = Instant::now();
        let slow = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(within(started, Duration::from_secs(2), slow).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // The limit counts from `started`, not from the first poll.
        let started = Instant::now();
        tokio::time::advance(Duration::from_millis(1_500)).await;
        let slow = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(within(started, Duration::from_secs(2), slow).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn within_waits_for_a_future_that_answers_in_time() {
        let started = Instant::now();
        let answer = within(started, Duration::from_secs(2), async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            "late"
        })
        .await;
        assert_eq!(answer, Some("late"));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn within_lets_a_waiting_future_yield_before_it_is_polled_again() {
        // A future that waits once must not be polled again in the same turn of the task:
        // others run between its two polls, as under any other timeout.
        let turn = std::cell::Cell::new(0);
        let (answer, ()) = tokio::join!(
            biased;
            within(Instant::now(), Duration::from_secs(1), async {
                tokio::task::yield_now().await;
                turn.get()
            }),
            async { turn.set(1) }
        );
        assert_eq!(
            answer,
            Some(1),
            "the other branch ran before the second poll"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn within_ends_a_future_that_spends_the_whole_budget_at_every_poll() {
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(3)).await;
        // Spends tokio's budget at every poll, and gives up after a few polls: an answer
        // here means the limit, long past, was never read.
        let busy = async {
            for _ in 0..1_000 {
                tokio::task::consume_budget().await;
            }
            "the limit was never read"
        };
        assert_eq!(within(started, Duration::from_secs(2), busy).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn within_a_limit_past_the_clock_waits_for_the_answer() {
        let started = Instant::now();
        let answer = within(started, Duration::MAX, async {
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            1
        })
        .await;
        assert_eq!(answer, Some(1));
    }
}
