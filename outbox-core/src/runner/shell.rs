//! The async shell around the [`Scheduler`]: it performs the scheduler's actions on the store
//! and the sink, and tells it what happened, with both clocks read at every wake.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::task::unconstrained;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::scheduler::{Action, Input, Io, IoDone, Notice, Now, Report, Scheduler};
use super::{outcome_class, publish, Shared};
use crate::machine;
use crate::outcome::{duration_ms, Outcome};
use crate::record::{Millis, Record, RecordId};
use crate::store::Halt;

/// Marks the runner stopped however its task ends (returned or panicked), and wakes `flush`.
struct Stopped<'a>(&'a Shared);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        self.0.progress.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Runs the outbox's runner until shutdown (or the handle is dropped).
///
/// Tracing: each store write that claims opens an `outbox.round` span (records written,
/// records claimed), and each delivery runs in an `outbox.deliver` span inside it (record id,
/// group, the record's counters before this try, then the outcome and how long the sink took),
/// both at debug level.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut stop: watch::Receiver<Option<Instant>>,
    mut online: Option<watch::Receiver<bool>>,
    halt: Option<Halt>,
) {
    let _stopped = Stopped(&shared);
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
    // Deliveries run inside the runner's own task, not as tasks of their own: a spawned
    // delivery wakes another worker thread for a few microseconds of work, and those wake-ups
    // were most of a drain's context switches. They are polled while a store call is under
    // way too, and a panicking sink is caught here as it was by a task.
    let mut deliveries: FuturesUnordered<BoxFuture<'static, (RecordId, Report)>> =
        FuturesUnordered::new();
    let mut running: HashSet<RecordId> = HashSet::new();
    // Reports that came in while a store call was under way, for the scheduler after it.
    let mut finished: VecDeque<(RecordId, Report)> = VecDeque::new();
    let mut stopping = stop.borrow().is_some();
    // The span of the current round: deliveries open theirs inside it.
    let mut round = Span::none();
    #[cfg(feature = "metrics")]
    let mut gauges = crate::metrics::Gauges::default();
    if let Some(grace) = *stop.borrow() {
        scheduler.handle(
            now(),
            Input::Shutdown {
                grace: mono(start, grace),
            },
        );
    }
    loop {
        // With a store and a sink that answer at once, nothing below ever waits: the runner
        // takes its share of tokio's budget each turn, so it yields to the other tasks of its
        // thread as any I/O-bound task does, instead of holding the thread for a whole drain.
        tokio::task::consume_budget().await;
        while let Some(action) = scheduler.poll_action() {
            match action {
                Action::Deliver(record) => {
                    let span = tracing::debug_span!(
                        parent: &round,
                        "outbox.deliver",
                        record = record.id.0,
                        group = record.group.as_deref(),
                        attempts = record.attempts,
                        unanswered = record.unanswered,
                        interrupted = record.interrupted,
                        outcome = Empty,
                        detail = Empty,
                        took_ms = Empty,
                    );
                    let id = record.id;
                    let delivery = std::panic::AssertUnwindSafe(
                        deliver(Arc::clone(&shared), record).instrument(span),
                    )
                    .catch_unwind()
                    .map(move |result| {
                        let report = match result {
                            Ok(outcome) => Report::Outcome(outcome),
                            Err(_) => {
                                #[cfg(feature = "metrics")]
                                crate::metrics::attempt_ended("panicked");
                                Report::Panicked
                            }
                        };
                        (id, report)
                    });
                    deliveries.push(delivery.boxed());
                    running.insert(id);
                }
                Action::AbortDeliveries => {
                    // Dropped, they are cancelled; each is reported abandoned, so the
                    // scheduler releases its record.
                    deliveries.clear();
                    for id in running.drain() {
                        #[cfg(feature = "metrics")]
                        crate::metrics::attempt_ended("abandoned");
                        finished.push_back((id, Report::Abandoned));
                    }
                }
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
                    // A claim under way counts as held before the store commits it: `flush`
                    // must never see the claimed records neither due nor held.
                    publish(
                        &shared,
                        scheduler.holding(),
                        scheduler.halt().is_some(),
                        scheduler.link(),
                    );
                    let claims = matches!(&io, Io::Write { claim: Some(_), .. });
                    if let (true, Io::Write { transitions, .. }) = (claims, &io) {
                        round = tracing::debug_span!(
                            "outbox.round",
                            written = transitions.len(),
                            claimed = Empty,
                        );
                    }
                    let span = if claims { round.clone() } else { Span::none() };
                    let store_call = perform(&shared, io).instrument(span);
                    tokio::pin!(store_call);
                    // Deliveries go on while the store works; their reports wait for it.
                    let done = loop {
                        tokio::select! {
                            biased;
                            done = &mut store_call => break done,
                            Some(report) = deliveries.next(), if !deliveries.is_empty() => {
                                running.remove(&report.0);
                                finished.push_back(report);
                            }
                        }
                    };
                    if let (true, Ok(done)) = (claims, &done) {
                        round.record("claimed", done.claimed.len());
                    }
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
        if scheduler.holding() == 0 {
            // The round is over: its span closes with its last delivery's, not at the next.
            round = Span::none();
        }
        #[cfg(feature = "metrics")]
        gauges
            .refresh(&shared, scheduler.holding() == 0, scheduler.is_finished())
            .await;
        if scheduler.is_finished() {
            return;
        }
        let deadline = scheduler
            .poll_timeout()
            .map(|ms| start + Duration::from_millis(ms));
        let sleep = sleep_until(deadline);
        // An idle runner wakes once more to read stale gauges; nothing else does.
        #[cfg(feature = "metrics")]
        let gauges_at = gauges.due_at().filter(|_| scheduler.holding() == 0);
        #[cfg(not(feature = "metrics"))]
        let gauges_at = None;
        let gauges_due = sleep_until(gauges_at);
        // In this order: a connectivity change is seen before a wake-up that came with it (an
        // app that goes offline and then writes must not have the write sent), and a report
        // before a new claim.
        if let Some((id, report)) = finished.pop_front() {
            #[cfg(feature = "metrics")]
            gauges.touched();
            scheduler.handle(now(), Input::Reported { id, report });
            continue;
        }
        // The two watch channels are read out of tokio's budget: with the budget spent (see
        // the top of the loop), a watch channel answers "not yet" while a `Notify` does not,
        // so a wake-up could overtake the offline signal or the shutdown that came before it.
        // Everything else, the sink's futures included, keeps the budget.
        let input = tokio::select! {
            biased;
            is_online = unconstrained(online_changed(&mut online)) => Some(Input::Online(is_online)),
            Some((id, report)) = deliveries.next(), if !deliveries.is_empty() => {
                running.remove(&id);
                Some(Input::Reported { id, report })
            }
            _ = shared.wake.notified() => {
                Some(if shared.resume.swap(false, Ordering::SeqCst) {
                    Input::Resume
                } else {
                    Input::Wake
                })
            }
            changed = unconstrained(stop.changed()), if !stopping => {
                stopping = true;
                let grace = match changed {
                    Ok(()) => (*stop.borrow()).unwrap_or_else(Instant::now),
                    Err(_) => Instant::now(),
                };
                Some(Input::Shutdown { grace: mono(start, grace) })
            }
            _ = sleep => Some(Input::Timer),
            _ = gauges_due => None,
        };
        if let Some(input) = input {
            #[cfg(feature = "metrics")]
            gauges.touched();
            scheduler.handle(now(), input);
        }
    }
}

/// One delivery, in its own span and polled by the runner's task: the sink within the
/// delivery timeout, then the conflict resolver.
async fn deliver(shared: Arc<Shared>, record: Record) -> Outcome {
    let timeout = shared.config.delivery_timeout;
    let started = Instant::now();
    let outcome = match tokio::time::timeout(timeout, shared.sink.deliver(&record)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::no_answer(format!("the sink did not report within {timeout:?}")),
    };
    let took = started.elapsed();
    let span = Span::current();
    span.record("outcome", outcome_class(&outcome));
    span.record("took_ms", duration_ms(took));
    match &outcome {
        Outcome::Delivered => {}
        Outcome::NoAnswer { error } | Outcome::Transient { error, .. } => {
            span.record("detail", error.as_str());
        }
        Outcome::Rejected { reason } | Outcome::Halt { reason } => {
            span.record("detail", reason.as_str());
        }
        Outcome::Conflict { detail } => {
            span.record("detail", detail.as_str());
        }
    }
    #[cfg(feature = "metrics")]
    crate::metrics::attempt(&outcome, took);
    let outcome = outcome.resolve_conflict(&record, shared.resolver.as_ref());
    #[cfg(feature = "metrics")]
    if outcome == Outcome::Delivered {
        crate::metrics::delivered_after(shared.now().saturating_sub(record.created_at));
    }
    outcome
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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
