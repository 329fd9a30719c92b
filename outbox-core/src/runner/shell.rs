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

use super::perform::perform;
use super::scheduler::{Action, Answer, Input, Io, Notice, Now, Report, Scheduler, StoreFailure};
use super::timeout::within;
use super::{publish, publish_held, Shared};
use crate::error::Result;
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

/// The scheduler of a new runner, with what a previous process left recovered (expired
/// leases, deadlines set before a step back): the start-up's store calls are the scheduler's
/// own, performed here before anything is delivered, and the first failure is returned.
pub(crate) async fn prepare(shared: &Shared, halt: Option<Halt>) -> Result<(Scheduler, Instant)> {
    let start = Instant::now();
    let now = || Now {
        wall: shared.now(),
        mono: duration_ms(start.elapsed()),
    };
    let seed = shared.config.seed.unwrap_or_else(|| fastrand::u64(..));
    // Lease tokens come from the process-wide RNG: two runners with the same seed must still
    // hold different leases.
    let scheduler = Scheduler::new(
        shared.config.clone(),
        shared.policy.clone(),
        seed,
        fastrand::u64(..),
        now(),
        halt,
    );
    #[cfg(feature = "metrics")]
    let scheduler = scheduler.with_gauges();
    let mut scheduler = scheduler;
    scheduler.recover_left_over();
    while scheduler.is_recovering() {
        let Some(action) = scheduler.poll_action() else {
            break;
        };
        match action {
            Action::Io(io) => {
                let answer = call(shared, io).await?;
                scheduler.handle(now(), Input::Answer(Ok(answer)));
            }
            other => act(shared, &scheduler, other),
        }
    }
    // Rows left undecodable by an older version or a damaged disk are said once, when the
    // runner is first idle after its start (and whenever the application lists them): claims
    // pass them by without a word. A look that outgrows the store's deadline is put off until
    // the runner is idle again (`look`).
    scheduler.look_for_unreadable();
    // Visible before `start` returns: a `flush` made at once waits for the look.
    publish(shared, &scheduler);
    Ok((scheduler, start))
}

/// Runs the outbox's runner until shutdown (or the handle is dropped).
///
/// Tracing: each store write that claims opens an `outbox.round` span (records written,
/// records claimed), and each delivery runs in an `outbox.deliver` span (record id, group,
/// the record's counters before this try, then the outcome and how long the sink took)
/// inside the span of the claim that took its record (a claim made ahead runs while the
/// round before it delivers), both at debug level.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut scheduler: Scheduler,
    start: Instant,
    mut stop: watch::Receiver<Option<Instant>>,
    mut online: Option<watch::Receiver<bool>>,
) {
    let _stopped = Stopped(&shared);
    let now = || Now {
        wall: shared.now(),
        mono: duration_ms(start.elapsed()),
    };
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
    // Deliveries aborted at the end of a shutdown's grace, each to be reported abandoned.
    let mut finished: VecDeque<(RecordId, Report)> = VecDeque::new();
    let mut stopping = stop.borrow().is_some();
    // The span of the current round: deliveries open theirs inside it. A claim's span waits
    // in `next_round` until the round it claimed starts (`rounds_started` moves): a claim
    // made ahead of a round runs while the round before it still delivers.
    let mut round = Span::none();
    let mut next_round: Option<Span> = None;
    let mut rounds = scheduler.rounds_started();
    // The store call under way, if any: the runner goes on taking reports and starting
    // deliveries while it runs (see the scheduler's `ahead`).
    let mut store: Option<StoreCall<'_>> = None;
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
                    if scheduler.rounds_started() != rounds {
                        rounds = scheduler.rounds_started();
                        if let Some(next) = next_round.take() {
                            round = next;
                        }
                    }
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
                    // The write's own span, perhaps days ago in another process: linked,
                    // not a parent, as the delivery is a trace of its own.
                    #[cfg(feature = "opentelemetry")]
                    if let Some(cx) = &record.trace {
                        use tracing_opentelemetry::OpenTelemetrySpanExt;
                        span.add_link(cx.span_context());
                    }
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
                Action::Emit(_) | Action::Log(_) | Action::Gauges(_) => {
                    act(&shared, &scheduler, action);
                }
                Action::Io(io) => {
                    // A claim under way counts as held before the store commits it: `flush`
                    // must never see the claimed records neither due nor held.
                    publish(&shared, &scheduler);
                    let claims = matches!(&io, Io::Round { claim: Some(_), .. });
                    let span = match &io {
                        Io::Round { transitions, .. } if claims => tracing::debug_span!(
                            "outbox.round",
                            written = transitions.len(),
                            claimed = Empty,
                        ),
                        _ => Span::none(),
                    };
                    if claims {
                        next_round = Some(span.clone());
                    }
                    let look = matches!(io, Io::Unreadable { .. });
                    // One store call at a time: the scheduler asks for the next only once
                    // this one is answered. Deliveries go on while it runs.
                    debug_assert!(store.is_none(), "a store call while one is under way");
                    store = Some(StoreCall {
                        call: Box::pin(call(&shared, io).instrument(span.clone())),
                        span,
                        claims,
                        look,
                    });
                }
            }
        }
        publish(&shared, &scheduler);
        if scheduler.holding() == 0 {
            // The round is over: its span closes with its last delivery's, not at the next.
            round = Span::none();
            next_round = None;
        }
        if scheduler.is_finished() {
            return;
        }
        // While a store call is under way only the shutdown's grace acts before its answer.
        let deadline = if store.is_some() {
            scheduler.poll_timeout_during_io()
        } else {
            scheduler.poll_timeout()
        };
        let deadline = deadline.map(|ms| start + Duration::from_millis(ms));
        let sleep = sleep_until(deadline);
        // In this order: a connectivity change is seen before a wake-up that came with it (an
        // app that goes offline and then writes must not have the write sent), and a report
        // before a new claim.
        if let Some((id, report)) = finished.pop_front() {
            scheduler.handle(now(), Input::Reported { id, report });
            continue;
        }
        // The two watch channels are read out of tokio's budget: with the budget spent (see
        // the top of the loop), a watch channel answers "not yet" while a `Notify` does not,
        // so a wake-up could overtake the offline signal or the shutdown that came before it.
        // Everything else, the sink's futures included, keeps the budget (a delivery's timer
        // too, but for a poll in which its sink spent it: see `timeout`).
        let input = tokio::select! {
            biased;
            is_online = unconstrained(online_changed(&mut online)) => Input::Online(is_online),
            done = answered(&mut store), if store.is_some() => {
                if let (Some(call), Ok(Answer::Round { claimed, .. })) = (store.take(), &done) {
                    if call.claims {
                        call.span.record("claimed", claimed.len());
                    }
                }
                Input::Answer(done.map_err(|err| StoreFailure::from(&err)))
            }
            Some((id, report)) = deliveries.next(), if !deliveries.is_empty() => {
                running.remove(&id);
                Input::Reported { id, report }
            }
            _ = shared.wake.notified() => {
                if shared.resume.swap(false, Ordering::SeqCst) {
                    Input::Resume
                } else {
                    Input::Wake
                }
            }
            changed = unconstrained(stop.changed()), if !stopping => {
                stopping = true;
                let grace = grace(changed.is_ok(), &stop, start);
                if store.as_ref().is_some_and(|call| call.look) {
                    // A look for undecodable rows may take the whole store deadline: a
                    // shutdown does not wait for it. The scheduler hears of the shutdown,
                    // then of the look's end as a time out (not said, not put off: the next
                    // start looks again).
                    store = None;
                    scheduler.handle(now(), Input::Shutdown { grace });
                    let timeout = crate::Error::Timeout(shared.config.store_timeout);
                    Input::Answer(Err(StoreFailure::from(&timeout)))
                } else {
                    Input::Shutdown { grace }
                }
            }
            _ = sleep => Input::Timer,
        };
        scheduler.handle(now(), input);
    }
}

/// A store call under way.
struct StoreCall<'a> {
    call: BoxFuture<'a, Result<Answer>>,
    /// Its span: the round's it claims, if it claims.
    span: Span,
    /// It claims: its answer is recorded on its span.
    claims: bool,
    /// It is the look for undecodable rows, which a shutdown cuts short.
    look: bool,
}

/// The answer of the store call under way; never, when there is none.
async fn answered(store: &mut Option<StoreCall<'_>>) -> Result<Answer> {
    match store {
        Some(call) => (&mut call.call).await,
        None => std::future::pending().await,
    }
}

/// The end of a shutdown's grace, on the runner's clock: the instant the handle sent, or now
/// when the handle is gone (`sent` false).
fn grace(sent: bool, stop: &watch::Receiver<Option<Instant>>, start: Instant) -> Millis {
    let at = if sent { *stop.borrow() } else { None };
    mono(start, at.unwrap_or_else(Instant::now))
}

/// One delivery, in its own span and polled by the runner's task: the sink within the
/// delivery timeout, then the conflict resolver.
async fn deliver(shared: Arc<Shared>, record: Arc<Record>) -> Outcome {
    let timeout = shared.config.delivery_timeout;
    let started = Instant::now();
    let outcome = match within(started, timeout, shared.sink.deliver(&record)).await {
        Some(outcome) => outcome,
        None => Outcome::no_answer(format!("the sink did not report within {timeout:?}")),
    };
    let took = started.elapsed();
    let span = Span::current();
    span.record("outcome", outcome.class());
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

/// One store call, bounded by `store_timeout`.
async fn call(shared: &Shared, io: Io) -> Result<Answer> {
    let limit = shared.config.store_timeout;
    match tokio::time::timeout(limit, perform(shared.store.as_ref(), io)).await {
        Ok(answer) => answer,
        Err(_) => Err(crate::Error::Timeout(limit)),
    }
}

/// Performs an action that is not a store call or a delivery.
fn act(shared: &Shared, scheduler: &Scheduler, action: Action) {
    match action {
        Action::Emit(event) => {
            // What the event says is visible on the handle before observers hear it.
            publish_held(shared, scheduler);
            shared.emit(event);
        }
        Action::Log(notice) => log(&notice),
        #[cfg(feature = "metrics")]
        Action::Gauges(gauges) => crate::metrics::set_gauges(&gauges),
        _ => {}
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
        Notice::ResumeNotRecorded => {
            tracing::warn!(
                "stopped before the store recorded the resume: the halt holds; resume again \
                 after the next start"
            );
        }
        Notice::StoreFailed { error, retry_in } => {
            tracing::error!(%error, ?retry_in, "outbox store error; runner backing off");
        }
        Notice::StorePaused { kind, error } => {
            tracing::error!(
                ?kind,
                %error,
                "the outbox store cannot be written or does not answer: deliveries paused, \
                 outcomes kept, trying again on backoff"
            );
        }
        Notice::StoreBack => {
            tracing::warn!("the outbox store answers again: deliveries go on")
        }
        Notice::RenewFailed { error } => {
            tracing::warn!(%error, "could not renew leases");
        }
        Notice::UnreadableLookPutOff {
            error,
            retry_in,
            timeouts,
        } => {
            if *timeouts <= 1 {
                tracing::warn!(
                    %error,
                    ?retry_in,
                    "the look for undecodable rows did not end within store_timeout; made \
                     again once the runner is idle (deliveries go on; Outbox::unreadable \
                     lists such rows)"
                );
            } else {
                tracing::debug!(%error, ?retry_in, timeouts, "the look for undecodable rows timed out again");
            }
        }
        Notice::Rebased { rebased, step } => {
            tracing::warn!(
                rebased,
                step_ms = step,
                "the wall clock stepped back: deadlines set before the step keep their waits"
            );
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
