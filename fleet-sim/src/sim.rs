//! The event loop: one heap of `(virtual time, device)` for the whole fleet.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use outbox_core::Millis;

use crate::device::{Device, Tally};
use crate::params::{Params, Scenario};
use crate::server::{Series, Server};

/// What one scenario did.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The scenario.
    pub scenario: Scenario,
    /// What reached the server, second by second.
    pub series: Series,
    /// Records written by the fleet.
    pub records: u64,
    /// Records delivered.
    pub delivered: u64,
    /// Records parked (needs-attention).
    pub parked: u64,
    /// When every record was delivered or parked (virtual milliseconds), if it was within the
    /// horizon.
    pub settled_at: Option<Millis>,
    /// Device wake-ups processed (a measure of the simulation's own work).
    pub wakes: u64,
}

/// Runs one scenario to the end: every record delivered or parked, or the horizon.
///
/// ```
/// use fleet_sim::{simulate, Params, Scenario};
/// use std::time::Duration;
///
/// let params = Params::default().with_devices(50).with_outage(Duration::from_secs(600));
/// let run = simulate(&params, Scenario::Defaults);
/// assert_eq!(run.delivered + run.parked, run.records);
/// ```
pub fn simulate(params: &Params, scenario: Scenario) -> Run {
    let mut server = Server::new(params);
    let mut devices: Vec<Device> = (0..params.devices)
        .map(|i| Device::new(i, params, scenario))
        .collect();
    let mut heap: BinaryHeap<Reverse<(Millis, u32)>> = (0..devices.len())
        .filter_map(|i| u32::try_from(i).ok())
        .map(|i| Reverse((0, i)))
        .collect();
    let mut tally = Tally::default();
    let records = params.records();
    let end = params.end();
    let mut settled_at = None;
    let mut wakes = 0;
    while let Some(Reverse((t, index))) = heap.pop() {
        if t > end {
            break;
        }
        let Some(device) = devices.get_mut(index as usize) else {
            continue;
        };
        wakes += 1;
        device.step(t, params, &mut server, &mut tally);
        if tally.delivered + tally.parked >= records {
            settled_at = Some(t);
            break;
        }
        // A device with nothing left to send can change nothing at the server any more: it
        // leaves the simulation (its safety polls would only read its empty store).
        if device.active() {
            heap.push(Reverse((device.next_wake(t), index)));
        }
    }
    Run {
        scenario,
        series: server.series,
        records,
        delivered: tally.delivered,
        parked: tally.parked,
        settled_at,
        wakes,
    }
}
