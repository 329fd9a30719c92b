//! Records held for later (`NewRecord::not_before`): pending from the enqueue on, due at an
//! absolute wall-clock time and not a millisecond before, in the one deadline index; a clock
//! step, a restart or a replacing write must not bring them forward.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{
    async_trait, Clock, Millis, NewRecord, Outbox, Outcome, Record, RecordId, RunnerConfig, Sink,
    SteppedClock, Store,
};

use super::clock::open;
use super::runner::pause_time;
use super::{claim, enqueue, get, ids, rec, rec_in, T0};
use crate::backend::Backend;
use crate::harness::{ensure, ensure_eq, Failure, ScenarioResult, Verdict};

const HOUR: Millis = 3_600_000;
const DAY: Duration = Duration::from_secs(86_400);

/// A delivery's payload and the wall-clock time it came at.
type Sent = (Vec<u8>, Millis);

/// Delivers everything and notes each delivery.
#[derive(Clone)]
struct Noting {
    clock: SteppedClock,
    sent: Arc<Mutex<Vec<Sent>>>,
}

impl Noting {
    fn new(clock: &SteppedClock) -> Self {
        Noting {
            clock: clock.clone(),
            sent: Arc::default(),
        }
    }

    fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn payloads(&self) -> Vec<Vec<u8>> {
        self.sent().into_iter().map(|(p, _)| p).collect()
    }
}

#[async_trait]
impl Sink for Noting {
    async fn deliver(&self, record: &Record) -> Outcome {
        self.sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((record.payload.clone(), self.clock.now()));
        Outcome::Delivered
    }
}

async fn start(
    store: Arc<dyn Store>,
    sink: Noting,
    clock: &SteppedClock,
) -> Result<Outbox, Failure> {
    Ok(Outbox::builder(store, sink)
        .config(RunnerConfig::default().with_seed(11))
        .clock(Arc::new(clock.clone()))
        .start()
        .await?)
}

/// A runner on tokio's paused clock over a fresh store, and the record it holds until an hour
/// past `T0`.
struct Held {
    location: String,
    store: Arc<dyn Store>,
    clock: SteppedClock,
    sink: Noting,
    outbox: Outbox,
    held: RecordId,
}

async fn hold_an_hour(backend: &dyn Backend) -> Result<Held, Failure> {
    pause_time()?;
    let location = backend.create().await?;
    let store = open(backend, &location).await?;
    let clock = SteppedClock::starting_at(T0);
    let sink = Noting::new(&clock);
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    let held = outbox
        .enqueue(NewRecord::new(b"reminder".to_vec()).not_before(T0 + HOUR))
        .await?;
    Ok(Held {
        location,
        store,
        clock,
        sink,
        outbox,
        held,
    })
}

/// A record held until an hour ahead is pending and scheduled from its enqueue: its deadline
/// is that time, so a claim an instant before passes it by while the records due before it go
/// in (deadline, id) order, and a claim at that time takes it. `next_due` and `stats` report
/// it; `stepped_back` leaves it out (its time is absolute) while it lists the plain records
/// scheduled after `now`.
pub async fn not_before_holds_first_delivery(backend: &dyn Backend) -> ScenarioResult {
    let (_location, store) = super::fresh(backend).await?;
    let store = &*store;
    let later = enqueue(
        store,
        T0,
        vec![
            rec("later").not_before(T0 + HOUR),
            rec("now"),
            rec("soon").not_before(T0 + 5),
            rec("past").not_before(T0 - 5),
        ],
    )
    .await?;
    let [later, now, soon, past] = later[..] else {
        return Err(Failure::new("four ids for four records"));
    };
    let plain = enqueue(store, T0 + 1_000, vec![rec("plain")]).await?[0];
    let held = get(store, later).await?;
    ensure_eq(
        (
            held.state,
            held.next_attempt_at,
            held.not_before,
            held.is_scheduled(),
        ),
        (
            outbox_core::State::Pending,
            Some(T0 + HOUR),
            Some(T0 + HOUR),
            true,
        ),
        "pending, due at its time, scheduled",
    )?;
    let gone = get(store, past).await?;
    ensure_eq(
        (gone.next_attempt_at, gone.not_before, gone.is_scheduled()),
        (Some(T0), Some(T0 - 5), false),
        "a time already past holds nothing: due at the enqueue",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.pending, stats.scheduled, stats.next_due),
        (5, 2, Some(T0)),
        "stats: five pending, two of them scheduled",
    )?;
    ensure_eq(
        ids(&store.stepped_back(T0 - 86_400_000, 10).await?),
        vec![now, past, plain],
        "a step back re-bases the records enqueued after it, not the ones held for a time",
    )?;
    let first = claim(store, T0 + HOUR - 1, 10, 1).await?;
    ensure_eq(
        ids(&first),
        vec![now, past, soon, plain],
        "an instant before its time: the others, in (deadline, id) order",
    )?;
    ensure_eq(
        (store.next_due().await?, store.stats().await?.scheduled),
        (Some(T0 + HOUR), 1),
        "next due at its time; the claimed one is no longer scheduled",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + HOUR, 10, 2).await?),
        vec![later],
        "claimed at its time",
    )?;
    ensure_eq(store.stats().await?.scheduled, 0, "none scheduled")?;
    Ok(Verdict::Passed)
}

/// A write that replaces a waiting one brings its own not-before time: a held replacement holds
/// the record until then, a replacement that may go at once releases it (due at the time of
/// that write).
pub async fn not_before_of_the_latest_write_wins(backend: &dyn Backend) -> ScenarioResult {
    let (_location, store) = super::fresh(backend).await?;
    let store = &*store;
    let edit = |body: &str| rec_in(body, "note").replacing("note/body");
    let id = enqueue(store, T0, vec![edit("v1")]).await?[0];
    let held = enqueue(store, T0 + 10, vec![edit("v2").not_before(T0 + HOUR)]).await?;
    ensure_eq(held, vec![id], "replaced in place")?;
    let record = get(store, id).await?;
    ensure_eq(
        (
            record.payload.as_slice(),
            record.next_attempt_at,
            record.not_before,
        ),
        (&b"v2"[..], Some(T0 + HOUR), Some(T0 + HOUR)),
        "the held replacement holds the record until its time",
    )?;
    ensure_eq(
        ids(&claim(store, T0 + HOUR - 1, 10, 1).await?),
        vec![],
        "not due before that time",
    )?;
    enqueue(store, T0 + 20, vec![edit("v3")]).await?;
    let record = get(store, id).await?;
    ensure_eq(
        (
            record.payload.as_slice(),
            record.next_attempt_at,
            record.not_before,
        ),
        (&b"v3"[..], Some(T0 + 20), None),
        "a replacement that may go at once releases it",
    )?;
    ensure_eq(store.stats().await?.scheduled, 0, "no longer scheduled")?;
    ensure_eq(
        ids(&claim(store, T0 + 20, 10, 2).await?),
        vec![id],
        "due at the time of the last write",
    )?;
    Ok(Verdict::Passed)
}

/// Through the runner, on tokio's paused clock: a record held an hour goes out at its time
/// and not before, while a record enqueued beside it goes at once; stats and the list show
/// it as scheduled until then.
pub async fn runner_not_before_honoured(backend: &dyn Backend) -> ScenarioResult {
    let Held {
        store,
        sink,
        outbox,
        held,
        ..
    } = hold_an_hour(backend).await?;
    outbox.enqueue(NewRecord::new(b"now".to_vec())).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure_eq(sink.payloads(), vec![b"now".to_vec()], "only the plain one")?;
    let stats = outbox.stats().await?;
    ensure_eq(
        (stats.pending, stats.scheduled),
        (1, 1),
        "the held one is pending and scheduled",
    )?;
    ensure(get(&*store, held).await?.is_scheduled(), || {
        "listed as scheduled".into()
    })?;
    // A second short of the hour: still waiting.
    tokio::time::sleep(Duration::from_millis(HOUR - 2_000)).await;
    ensure_eq(sink.sent().len(), 1, "not a second early")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = sink.sent();
    ensure_eq(sent.len(), 2, "sent at its time")?;
    let at = sent[1].1;
    ensure((T0 + HOUR..=T0 + HOUR + 1_000).contains(&at), || {
        format!("sent at {} ms past its time", at.saturating_sub(T0 + HOUR))
    })?;
    let stats = outbox.stats().await?;
    ensure_eq(
        (stats.delivered, stats.scheduled, stats.pending),
        (2, 0, 0),
        "both delivered, nothing scheduled",
    )?;
    outbox.shutdown(Duration::from_secs(5)).await?;
    Ok(Verdict::Passed)
}

/// The wall clock is set back a day while the device is off and then again while the runner
/// waits: a record held until an absolute time keeps that time (a wait would be re-based, a
/// time is not). It goes out when the wall clock reaches it, a day and an hour later, not at
/// the restart.
pub async fn runner_not_before_across_step_back(backend: &dyn Backend) -> ScenarioResult {
    let Held {
        location,
        store,
        clock,
        sink,
        outbox,
        held,
    } = hold_an_hour(backend).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    outbox.shutdown(Duration::from_secs(5)).await?;
    // The handle holds the store too: a store one process may open must be let go of.
    drop(outbox);
    drop(store);
    clock.step_back(DAY);
    let store = open(backend, &location).await?;
    let outbox = start(store.clone(), sink.clone(), &clock).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure_eq(sink.sent().len(), 0, "not sent at the restart")?;
    ensure_eq(
        get(&*store, held).await?.next_attempt_at,
        Some(T0 + HOUR),
        "its time is kept, not re-based",
    )?;
    // Back another day while it waits: the runner sees the step, and the time still holds.
    clock.step_back(DAY);
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure_eq(sink.sent().len(), 0, "not sent after the second step")?;
    tokio::time::sleep(DAY * 2 + Duration::from_millis(HOUR)).await;
    let sent = sink.sent();
    ensure_eq(sent.len(), 1, "sent once the wall clock reached its time")?;
    ensure(sent[0].1 >= T0 + HOUR, || {
        format!("sent {} ms early", (T0 + HOUR).saturating_sub(sent[0].1))
    })?;
    outbox.shutdown(Duration::from_secs(5)).await?;
    Ok(Verdict::Passed)
}
