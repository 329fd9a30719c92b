//! Wake-ups counted on tokio's paused clock: how often the runtime parks.

use std::time::Duration;

use tokio::time::Instant;

/// A whole slot of the fourth level of tokio's timer wheel (64³ ms). On the paused clock a
/// long sleep is reached through the wheel's levels, one park each, so the number of parks it
/// takes depends on where in the wheel it starts: every measure starts at a multiple of this
/// from the runtime's start, and so at the same place.
const WHEEL: Duration = Duration::from_millis(262_144);

/// How often the runtime parked (went to sleep to wait for something) during 20 s of tokio's
/// paused clock, measured from the next multiple of [`WHEEL`] after `start`: the test's own
/// timer costs a fixed number, and any other wake-up adds to it.
pub(crate) async fn parks_in_twenty_seconds(start: Instant) -> u64 {
    let slots = (start.elapsed().as_millis() / WHEEL.as_millis()) as u32 + 1;
    tokio::time::sleep_until(start + WHEEL * slots).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.worker_park_count(0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    metrics.worker_park_count(0) - before
}
