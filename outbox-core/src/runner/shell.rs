//! The async shell around the [`Scheduler`]: it performs the scheduler's actions on the store
//! and the sink, and tells it what happened, with both clocks read at every wake.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::scheduler::{Action, Input, Io, IoDone, Notice, Now, Report, Scheduler};
use super::{publish, Shared};
use crate::machine;
use crate::outcome::{duration_ms, Outcome};
use crate::record::{Millis, RecordId};
use crate::store::Halt;

/// Runs the outbox's runner until shutdown (or the handle is dropped).
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut stop: watch::Receiver<Option<Instant>>,
    mut online: Option<watch::Receiver<bool>>,
    halt: Option<Halt>,
) {
    let start = Instant::now();
    let now = || Now {
        wall: shared.now(),
        mono: duration_ms(start.elapsed()),
    };
    let seed = shared.config.seed.unwrap_or_else(|| fastrand::u64(..));
    // Lease tokens come from the process-wide RNG: two runners with the same seed must still
    // hold different leases.
    let mut scheduler = Scheduler::new(
        shared.config.clone(),
        shared.policy.clone(),
        seed,
        fastrand::u64(..),
        now(),
        halt,
    );
    if let Some(rx) = &online {
        let is_online = *rx.borrow();
        scheduler.handle(now(), Input::Online(is_online));
    }
    let mut deliveries: JoinSet<Outcome> = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, RecordId> = HashMap::new();
    let mut stopping = stop.borrow().is_some();
    if let Some(grace) = *stop.borrow() {
        scheduler.handle(
            now(),
            Input::Shutdown {
                grace: mono(start, grace),
            },
        );
    }
    loop {
        while let Some(action) = scheduler.poll_action() {
            match action {
                Action::Deliver(record) => {
                    let sink = Arc::clone(&shared.sink);
                    let resolver = Arc::clone(&shared.resolver);
                    let timeout = shared.config.delivery_timeout;
                    let id = record.id;
                    let handle = deliveries.spawn(async move {
                        let outcome =
                            match tokio::time::timeout(timeout, sink.deliver(&record)).await {
                                Ok(outcome) => outcome,
                                Err(_) => Outcome::no_answer(format!(
                                    "the sink did not report within {timeout:?}"
                                )),
                            };
                        outcome.resolve_conflict(&record, resolver.as_ref())
                    });
                    running.insert(handle.id(), id);
                }
                Action::AbortDeliveries => deliveries.abort_all(),
                Action::Emit(event) => {
                    // What the event says is visible on the handle before observers hear it.
                    publish(
                        &shared,
                        scheduler.holding(),
                        scheduler.halt().is_some(),
                        scheduler.link(),
                    );
                    shared.emit(event);
                }
                Action::Log(notice) => log(&notice),
                Action::Io(io) => {
                    let done = perform(&shared, io).await;
                    scheduler.handle(now(), Input::Done(done));
                }
            }
        }
        publish(
            &shared,
            scheduler.holding(),
            scheduler.halt().is_some(),
            scheduler.link(),
        );
        if scheduler.is_finished() {
            return;
        }
        let deadline = scheduler
            .poll_timeout()
            .map(|ms| start + Duration::from_millis(ms));
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let input = tokio::select! {
            Some(joined) = deliveries.join_next_with_id(), if !deliveries.is_empty() => {
                let (task, report) = match joined {
                    Ok((task, outcome)) => (task, Report::Outcome(outcome)),
                    Err(err) if err.is_panic() => (err.id(), Report::Panicked),
                    Err(err) => (err.id(), Report::Abandoned),
                };
                match running.remove(&task) {
                    Some(id) => Input::Reported { id, report },
                    None => Input::Timer,
                }
            }
            _ = shared.wake.notified() => {
                if shared.resume.swap(false, Ordering::SeqCst) {
                    Input::Resume
                } else {
                    Input::Wake
                }
            }
            is_online = online_changed(&mut online) => Input::Online(is_online),
            changed = stop.changed(), if !stopping => {
                stopping = true;
                let grace = match changed {
                    Ok(()) => (*stop.borrow()).unwrap_or_else(Instant::now),
                    Err(_) => Instant::now(),
                };
                Input::Shutdown { grace: mono(start, grace) }
            }
            _ = sleep => Input::Timer,
        };
        scheduler.handle(now(), input);
    }
}

fn mono(start: Instant, at: Instant) -> Millis {
    duration_ms(at.saturating_duration_since(start))
}

/// Makes one store call the scheduler asked for.
async fn perform(shared: &Shared, io: Io) -> Result<IoDone, String> {
    let store = &shared.store;
    let text = |err: crate::Error| err.to_string();
    match io {
        Io::Write { transitions, claim } => {
            let round = store.round(transitions, claim).await.map_err(text)?;
            Ok(IoDone {
                skipped: round.applied.skipped,
                claimed: round.claimed,
                ..IoDone::default()
            })
        }
        Io::Renew { ids, lease } => {
            if let Err(err) = store.renew(&ids, lease).await {
                // Deliveries go on; the next tick tries again.
                tracing::warn!(error = %err, "could not renew leases");
            }
            Ok(IoDone::default())
        }
        Io::NextDue => Ok(IoDone {
            next_due: store.next_due().await.map_err(text)?,
            ..IoDone::default()
        }),
        Io::RecoverExpired => Ok(changed(shared.recover_expired().await.map_err(text)?)),
        Io::RecoverFarLeases { ours } => {
            let now = shared.now();
            let limit = now.saturating_add(duration_ms(shared.config.lease));
            // In-flight records are few (batches of live runners): read them all.
            let in_flight = store.expired(Millis::MAX, 4_096).await.map_err(text)?;
            let steps = in_flight
                .iter()
                .filter(|r| !ours.contains(&r.id) && r.lease.is_some_and(|l| l.until > limit))
                .map(|r| machine::on_interrupted(r, &shared.policy, now))
                .collect();
            Ok(changed(shared.commit(steps).await.map_err(text)?.len()))
        }
        Io::Rebase { step } => {
            let rebased = shared.rebase(step).await.map_err(text)?;
            tracing::warn!(
                rebased,
                step_ms = step,
                "the wall clock stepped back: deadlines set before the step keep their waits"
            );
            Ok(changed(rebased))
        }
        Io::Relink { ids } => {
            let now = shared.now();
            let mut transitions = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(record) = store.get(id).await.map_err(text)? {
                    transitions.extend(machine::relink(&record, now));
                }
            }
            let count = transitions.len();
            if count == 0 {
                return Ok(IoDone::default());
            }
            let skipped = store.apply(transitions).await.map_err(text)?.skipped.len();
            Ok(changed(count - skipped))
        }
        Io::SetHalt(halt) => {
            store.set_halt(halt).await.map_err(text)?;
            Ok(IoDone::default())
        }
    }
}

fn changed(changed: usize) -> IoDone {
    IoDone {
        changed,
        ..IoDone::default()
    }
}

fn log(notice: &Notice) {
    match notice {
        Notice::LinkStillDown { since, last_error } => {
            tracing::warn!(since, %last_error, "the link is still down");
        }
        Notice::RetryAfterCut { id, asked } => {
            tracing::warn!(
                record = id.0,
                ?asked,
                "the server asked to wait longer than max_retry_after; waiting that long instead"
            );
        }
        Notice::SinkPanicked { id } => {
            tracing::error!(
                record = id.0,
                "sink panicked; the delivery counts as interrupted"
            );
        }
        Notice::StoreFailed { error, retry_in } => {
            tracing::error!(%error, ?retry_in, "outbox store error; runner backing off");
        }
    }
}

/// Resolves with the new state when the connectivity signal changes; never when there is
/// none. A dropped sender turns the signal off for good (always online).
async fn online_changed(online: &mut Option<watch::Receiver<bool>>) -> bool {
    match online {
        Some(rx) => {
            if rx.changed().await.is_err() {
                *online = None;
                true
            } else {
                *rx.borrow_and_update()
            }
        }
        None => std::future::pending().await,
    }
}
