//! One device: the project's own [`Scheduler`] and policy over a [`MemoryStore`], with the
//! store calls made by the runner's own `perform`, waited for synchronously.

use std::future::Future;

use fastrand::Rng;
use futures::FutureExt;
use outbox_core::runner::perform;
use outbox_core::runner::scheduler::{
    Action, FailureKind, Input, Now, Report, Scheduler, StoreFailure,
};
use outbox_core::{machine, Event, ListQuery, Millis, NewRecord, RecordId, State, Store};
use outbox_memory::MemoryStore;

use crate::params::{ms, Params, Scenario};
use crate::server::{Answer, Server};

/// Wall-clock milliseconds at virtual time 0 (any fixed date will do).
pub(crate) const WALL: Millis = 1_767_225_600_000;

/// Counts every device adds to while it runs.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Records delivered (the write of the outcome committed).
    pub(crate) delivered: u64,
    /// Records parked (needs-attention) or discarded.
    pub(crate) parked: u64,
}

/// A delivery under way: the server already answered; the device hears it at `at`.
#[derive(Debug)]
struct InFlight {
    at: Millis,
    id: RecordId,
    answer: Answer,
}

/// One device of the fleet.
#[derive(Debug)]
pub(crate) struct Device {
    scheduler: Scheduler,
    store: MemoryStore,
    scenario: Scenario,
    rng: Rng,
    /// When the device writes its records, latest first (popped from the back).
    writes: Vec<Millis>,
    written: u32,
    online: bool,
    next_toggle: Millis,
    in_flight: Vec<InFlight>,
    /// Records written and not yet delivered or parked.
    unsettled: u32,
    name: u32,
}

/// A seed for stream `stream` of device `device`, well mixed (splitmix64).
fn mix(seed: u64, device: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(device.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Waits for a store future that is ready at once (the memory store never waits).
fn ready<T>(future: impl Future<Output = outbox_core::Result<T>>) -> Result<T, String> {
    match future.now_or_never() {
        Some(result) => result.map_err(|e| e.to_string()),
        None => Err("the memory store did not answer at once".into()),
    }
}

impl Device {
    pub(crate) fn new(index: usize, params: &Params, scenario: Scenario) -> Self {
        let device = index as u64;
        let mut rng = Rng::with_seed(mix(params.seed, device, 0));
        let policy = scenario.policy();
        let until = params.writes_until();
        let notice = ms(params.noticed_within);
        let mut writes: Vec<Millis> = (0..params.backlog)
            .map(|i| match i {
                0 if notice > 0 => params.outage_start() + rng.u64(0..notice),
                _ => rng.u64(0..until),
            })
            .collect();
        writes.sort_unstable_by(|a, b| b.cmp(a));
        // Offline at the start with the share of time the pattern spends offline.
        let offline_mean = (params.offline.0 + params.offline.1) as f64 / 2.0;
        let online_mean = ms(params.online_mean) as f64;
        let online = rng.f64() >= offline_mean / (offline_mean + online_mean).max(1.0);
        let mut device_state = Device {
            scheduler: Scheduler::new(
                params.runner(),
                policy,
                mix(params.seed, device, 1),
                mix(params.seed, device, 2),
                Now {
                    wall: WALL,
                    mono: 0,
                },
                None,
            ),
            store: MemoryStore::new(),
            scenario,
            rng,
            writes,
            written: 0,
            online: true,
            next_toggle: 0,
            in_flight: Vec::new(),
            unsettled: 0,
            name: u32::try_from(index).unwrap_or(u32::MAX),
        };
        device_state.online = online;
        device_state.next_toggle = device_state.spell(params, online);
        if !online {
            device_state.scheduler.handle(
                Now {
                    wall: WALL,
                    mono: 0,
                },
                Input::Online(false),
            );
        }
        device_state
    }

    /// How long the spell that starts now lasts.
    fn spell(&mut self, params: &Params, online: bool) -> Millis {
        if online {
            let mean = ms(params.online_mean) as f64;
            // Exponential: -mean × ln(u), u in (0, 1].
            let u = 1.0 - self.rng.f64();
            (-mean * u.ln()) as Millis
        } else {
            self.rng.u64(params.offline.0..=params.offline.1)
        }
    }

    /// Whether the device can still send anything: records or writes left, or something held.
    pub(crate) fn active(&self) -> bool {
        self.unsettled > 0
            || !self.writes.is_empty()
            || !self.in_flight.is_empty()
            || self.scheduler.holding() > 0
    }

    /// Everything that is due at `t`, in order: connectivity, writes, reports, timers.
    pub(crate) fn step(
        &mut self,
        t: Millis,
        params: &Params,
        server: &mut Server,
        tally: &mut Tally,
    ) {
        let now = Now {
            wall: WALL + t,
            mono: t,
        };
        if self.next_toggle <= t {
            self.online = !self.online;
            self.next_toggle = t.saturating_add(self.spell(params, self.online).max(1));
            if self.online && self.scenario.resets_on_reconnect() {
                self.reset_counters(now.wall);
            }
            self.scheduler.handle(now, Input::Online(self.online));
            self.pump(now, params, server, tally);
        }
        let mut wrote = false;
        while self.writes.last().is_some_and(|&w| w <= t) {
            self.writes.pop();
            self.written += 1;
            let record = NewRecord {
                group: None,
                payload: Vec::new(),
                key: format!("{}-{}", self.name, self.written),
                expected_version: None,
                replaces: None,
                not_before: None,
                trace: None,
            };
            // A write the store refuses is not a record of the backlog.
            if ready(self.store.enqueue(vec![record], now.wall)).is_ok() {
                self.unsettled += 1;
                wrote = true;
            }
        }
        if wrote {
            self.scheduler.handle(now, Input::Wake);
            self.pump(now, params, server, tally);
        }
        while let Some(at) = self.in_flight.iter().position(|f| f.at <= t) {
            let done = self.in_flight.swap_remove(at);
            let retry_after = self
                .scenario
                .honours_retry_after()
                .then_some(params.retry_after);
            self.scheduler.handle(
                now,
                Input::Reported {
                    id: done.id,
                    report: Report::Outcome(done.answer.outcome(retry_after)),
                },
            );
            self.pump(now, params, server, tally);
        }
        if self.scheduler.poll_timeout().is_some_and(|at| at <= t) {
            self.scheduler.handle(now, Input::Timer);
            self.pump(now, params, server, tally);
        }
    }

    /// When the device next has something to do (after `t`).
    pub(crate) fn next_wake(&self, t: Millis) -> Millis {
        let mut next = self.next_toggle;
        if let Some(&w) = self.writes.last() {
            next = next.min(w);
        }
        if let Some(f) = self.in_flight.iter().map(|f| f.at).min() {
            next = next.min(f);
        }
        if let Some(timer) = self.scheduler.poll_timeout() {
            next = next.min(timer);
        }
        next.max(t + 1)
    }

    /// The budget-reset trap: the application gives every retrying record a fresh budget and
    /// makes it due now, as `retry_now` does for a person's retry.
    fn reset_counters(&mut self, now: Millis) {
        let Ok(retrying) = ready(
            self.store
                .list(&ListQuery::new(usize::MAX).state(State::Retrying)),
        ) else {
            return;
        };
        let transitions: Vec<_> = retrying
            .iter()
            .filter_map(|r| machine::retry_now(r, now))
            .map(|step| step.transition)
            .collect();
        if !transitions.is_empty() {
            // A refused reset leaves the records as they were: nothing to undo.
            let _ = ready(self.store.apply(transitions));
        }
    }

    /// Performs what the scheduler asks until it waits.
    fn pump(&mut self, now: Now, params: &Params, server: &mut Server, tally: &mut Tally) {
        while let Some(action) = self.scheduler.poll_action() {
            match action {
                Action::Deliver(record) => {
                    let answer = server.request(now.mono);
                    let latency = self.rng.u64(params.latency.0..=params.latency.1);
                    self.in_flight.push(InFlight {
                        at: now.mono + latency.max(1),
                        id: record.id,
                        answer,
                    });
                }
                Action::Emit(Event::Delivered { .. }) => {
                    tally.delivered += 1;
                    self.unsettled = self.unsettled.saturating_sub(1);
                }
                Action::Emit(Event::Parked { .. } | Event::Discarded { .. }) => {
                    tally.parked += 1;
                    self.unsettled = self.unsettled.saturating_sub(1);
                }
                Action::Io(io) => {
                    // The runner's own `perform`: the store calls are the shell's, to the
                    // letter; only the waiting is synchronous here.
                    let answer = match perform(&self.store, io).now_or_never() {
                        Some(result) => result.map_err(|e| StoreFailure::from(&e)),
                        None => Err(StoreFailure {
                            kind: FailureKind::Transient,
                            error: "the memory store did not answer at once".into(),
                        }),
                    };
                    self.scheduler.handle(now, Input::Answer(answer));
                }
                // Other events and log lines change nothing here; nothing is ever aborted.
                _ => {}
            }
        }
    }
}
