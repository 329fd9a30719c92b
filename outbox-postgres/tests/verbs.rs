//! A person's change acts at once: a retry, a requeue or a discard made through another store
//! (another process or host, as the `outbox` command is) wakes an idle runner that has no
//! safety poll, through the outbox's `NOTIFY`, and the record is delivered within a second.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{server_ready, Scratch};
use outbox_core::{
    machine, sink_fn, Change, Guard, NewRecord, Outbox, Outcome, Progress, Record, RecordId,
    RunnerConfig, Seen, Sink, State, Store, Transition,
};
use outbox_postgres::{PgStore, RunnerWakeups};

/// What the issue asks of a person's verb: the runner acts on it within a second.
const AT_ONCE: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(30);

/// Puts record `id` in `state` as a failed delivery would have left it.
async fn fail(store: &PgStore, id: RecordId, state: State) {
    let applied = store
        .apply(vec![Transition {
            id,
            guard: Guard::Idle,
            change: Change::Update(Progress {
                state,
                attempts: 1,
                unanswered: 0,
                interrupted: 0,
                last_attempt_at: Some(store_now(store)),
                next_attempt_at: None,
                last_error: Some("HTTP 500".into()),
                history: Default::default(),
            }),
        }])
        .await
        .unwrap();
    assert!(applied.skipped.is_empty());
}

fn store_now(store: &PgStore) -> u64 {
    store.clock().now()
}

/// A runner on `host` with a plain builder and no safety poll, woken only by the outbox's
/// notifications (kept alive by the second value).
async fn woken_only(host: &PgStore, sink: impl Sink + 'static) -> (Outbox, RunnerWakeups) {
    let outbox = Outbox::builder(Arc::new(host.clone()), sink)
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let wakeups = host.wake_on_enqueue(outbox.notifier()).await.unwrap();
    (outbox, wakeups)
}

/// The transition as the `outbox` command makes it: a compare-and-set against the record as
/// it was read.
fn as_seen(mut transition: Transition, seen: &Record) -> Transition {
    transition.guard = Guard::Seen(Seen::of(seen));
    transition
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_processs_retry_requeue_and_discard_reach_an_idle_runner_within_a_second() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    // The person's side: its own store, as the `outbox` command opens one.
    let person = scratch.store().await;
    let ids = person
        .enqueue(
            vec![
                NewRecord::new(b"to retry".to_vec()),
                NewRecord::new(b"to requeue".to_vec()),
                NewRecord::new(b"stuck head".to_vec()).in_group("g"),
                NewRecord::new(b"held behind it".to_vec()).in_group("g"),
            ],
            store_now(&person),
        )
        .await
        .unwrap();
    let (retry, requeue, head, held) = (ids[0], ids[1], ids[2], ids[3]);
    fail(&person, retry, State::NeedsAttention).await;
    fail(&person, requeue, State::Rejected).await;
    fail(&person, head, State::NeedsAttention).await;

    // The runner's side: a plain builder, no safety poll, woken only by notifications.
    let host = scratch.store().await;
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let sink = sink_fn(move |record: Record| {
        let sent = sent.clone();
        async move {
            let _ = sent.send(record.id);
            Outcome::Delivered
        }
    });
    let (outbox, _wakeups) = woken_only(&host, sink).await;
    outbox.flush(PATIENCE).await.unwrap();
    assert!(received.try_recv().is_err(), "nothing was due");

    let retried = person.get(retry).await.unwrap().unwrap();
    let requeued = person.get(requeue).await.unwrap().unwrap();
    let discarded = person.get(head).await.unwrap().unwrap();
    let verbs = [
        (
            "retry",
            as_seen(
                machine::retry_now(&retried, store_now(&person))
                    .unwrap()
                    .transition,
                &retried,
            ),
            retry,
        ),
        (
            "requeue",
            as_seen(
                machine::requeue(&requeued, store_now(&person)).unwrap(),
                &requeued,
            ),
            requeue,
        ),
        (
            "discard of a group's stuck head",
            as_seen(
                machine::discard(&discarded, "by hand", store_now(&person))
                    .unwrap()
                    .transition,
                &discarded,
            ),
            held,
        ),
    ];
    for (verb, transition, delivered) in verbs {
        let started = Instant::now();
        let applied = person.apply(vec![transition]).await.unwrap();
        assert!(applied.skipped.is_empty(), "{verb} applied");
        let got = tokio::time::timeout(AT_ONCE, received.recv())
            .await
            .unwrap_or_else(|_| panic!("{verb}: nothing delivered within {AT_ONCE:?}"));
        assert_eq!(got, Some(delivered), "{verb}");
        eprintln!("{verb}: delivered {:?} after the change", started.elapsed());
        outbox.flush(PATIENCE).await.unwrap();
    }
    let stats = person.stats().await.unwrap();
    assert_eq!(
        (stats.delivered, stats.undelivered(), stats.discarded),
        (3, 0, 1)
    );
    outbox.shutdown(PATIENCE).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_processs_resume_reaches_a_halted_runner_within_a_second() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let person = scratch.store().await;
    // The runner's side: a plain builder, no safety poll; the server refuses the credential
    // once, then takes every write.
    let host = scratch.store().await;
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let sink = sink_fn({
        let refused = Arc::clone(&refused);
        move |record: Record| {
            let sent = sent.clone();
            let first = !refused.swap(true, std::sync::atomic::Ordering::SeqCst);
            async move {
                if first {
                    Outcome::halt("HTTP 401")
                } else {
                    let _ = sent.send(record.id);
                    Outcome::Delivered
                }
            }
        }
    });
    let (outbox, _wakeups) = woken_only(&host, sink).await;
    let mut events = outbox.events();
    let id = outbox
        .enqueue(NewRecord::new(b"refused once".to_vec()))
        .await
        .unwrap();
    // Halted, and the halt persisted (the event follows the write).
    let halted = tokio::time::timeout(PATIENCE, async {
        loop {
            match events.recv().await {
                Ok(outbox_core::Event::Halted { .. }) => return,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    panic!("the runner stopped before it halted")
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(halted.is_ok(), "the runner halted");
    assert!(outbox.is_halted());
    assert!(
        person.halt().await.unwrap().is_some(),
        "the halt is persisted"
    );

    // Another process (another host's `Outbox::resume`, a person) clears the halt.
    let started = Instant::now();
    person.set_halt(None).await.unwrap();
    let got = tokio::time::timeout(AT_ONCE, received.recv())
        .await
        .unwrap_or_else(|_| panic!("nothing delivered within {AT_ONCE:?} of the resume"));
    assert_eq!(got, Some(id));
    eprintln!("resume: delivered {:?} after the change", started.elapsed());
    assert!(!outbox.is_halted());
    assert!(person.halt().await.unwrap().is_none());
    outbox.flush(PATIENCE).await.unwrap();
    assert_eq!(person.stats().await.unwrap().delivered, 1);
    outbox.shutdown(PATIENCE).await.unwrap();
}

/// A clearing (`set_halt(None)`, or `clear_halt_if` with the halt as shown) is one transaction
/// with its notification: one that fails, even at its commit, leaves the halt in place and
/// tells no runner to read it; one that commits is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clearing_that_fails_at_its_commit_leaves_the_halt_and_wakes_no_one() {
    if !server_ready() {
        return;
    }
    let scratch = Scratch::new();
    let s = &scratch.schema;
    let person = scratch.store().await;
    let halt = outbox_core::Halt {
        reason: "HTTP 401".into(),
        since: 1_000,
    };
    person.set_halt(Some(halt.clone())).await.unwrap();
    let marker = format!("{s}_marker");
    let (_listener, mut heard) = common::listen(&[s.clone(), marker.clone()]).await;
    // A check the server makes only at the commit, after the clearing and its NOTIFY ran.
    let admin = common::admin().await;
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION \"{s}\".refuse() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$; \
             CREATE CONSTRAINT TRIGGER refuse_clearing AFTER UPDATE ON \"{s}\".meta \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.halt_reason IS NULL) \
             EXECUTE FUNCTION \"{s}\".refuse();"
        ))
        .await
        .unwrap();

    let failed = person.set_halt(None).await;
    assert!(failed.is_err(), "the commit refused: {failed:?}");
    assert_eq!(
        person.halt().await.unwrap(),
        Some(halt.clone()),
        "the halt stands"
    );
    // So does a person's clearing of the halt as shown (`outbox resume`, the page).
    let failed = person.clear_halt_if(&halt).await;
    assert!(failed.is_err(), "the commit refused: {failed:?}");
    assert_eq!(
        person.halt().await.unwrap(),
        Some(halt.clone()),
        "the halt stands"
    );
    // Notifications reach a listener in commit order: the first one heard is the marker
    // committed after the failed clearing, so the clearing's notification was never sent.
    admin
        .execute("SELECT pg_notify($1, '')", &[&marker])
        .await
        .unwrap();
    let first = tokio::time::timeout(PATIENCE, heard.recv()).await.unwrap();
    assert_eq!(first, Some(marker), "no notification before the marker");

    // Without the check, the clearing goes through and is heard.
    admin
        .batch_execute(&format!("DROP TRIGGER refuse_clearing ON \"{s}\".meta"))
        .await
        .unwrap();
    assert_eq!(person.clear_halt_if(&halt).await.unwrap(), Some(halt));
    assert_eq!(person.halt().await.unwrap(), None);
    let next = tokio::time::timeout(PATIENCE, heard.recv()).await.unwrap();
    assert_eq!(next.as_ref(), Some(s), "the clearing's notification");
}
