//! Wake-ups without polling: `LISTEN` on the outbox's channel, which every enqueue signals with
//! `NOTIFY` when its transaction commits.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use outbox_core::{Error, Notifier, Result};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client};

use crate::config::{PgConfig, Tls};
use crate::error::pg;
use crate::tls::{self, Messages};

/// The first and the longest wait before the listener reconnects after losing its connection.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_CAP: Duration = Duration::from_secs(5);

/// Who a listener wakes.
#[derive(Debug)]
enum Target {
    /// A waiter of [`Wakeups::notified`].
    Signal(Arc<Notify>),
    /// A runner, directly.
    Runner(Notifier),
}

impl Target {
    fn wake(&self) {
        match self {
            Target::Signal(signal) => signal.notify_one(),
            Target::Runner(notifier) => notifier.notify(),
        }
    }
}

/// Starts the listening task: the first session is opened here, so a wrong URL fails the
/// call instead of retrying forever in the background.
async fn spawn(config: &PgConfig, target: Target) -> Result<JoinHandle<()>> {
    let pg_config = config.pg_config()?;
    let tls = config.tls.clone();
    let channel = config.schema.clone();
    let first = Session::open(&pg_config, &tls, &channel).await?;
    Ok(tokio::spawn(keep_listening(
        pg_config, tls, channel, target, first,
    )))
}

/// Enqueues on one outbox, from any process or host, as they commit.
///
/// A background task holds one dedicated connection (not from the pool: a listening session
/// must stay open) and reconnects with backoff when it drops. Notifications that arrive while
/// nobody waits are coalesced into one. After every reconnect it wakes the waiter once, since
/// enqueues made while it was away sent their signal to no one. Dropping it stops the task.
///
/// To wake a runner, [`PgStore::wake_on_enqueue`](crate::PgStore::wake_on_enqueue) does the
/// forwarding for you; `Wakeups` is for other waiters:
///
/// ```no_run
/// # async fn demo(store: outbox_postgres::PgStore) -> outbox_core::Result<()> {
/// let wakeups = store.listen().await?;
/// wakeups.notified().await;
/// println!("something was enqueued");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Wakeups {
    signal: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Wakeups {
    pub(crate) async fn start(config: &PgConfig) -> Result<Self> {
        let signal = Arc::new(Notify::new());
        let task = spawn(config, Target::Signal(Arc::clone(&signal))).await?;
        Ok(Wakeups { signal, task })
    }

    /// Waits for the next enqueue signal (or returns at once if one came since the last call).
    pub async fn notified(&self) {
        self.signal.notified().await;
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        // The task owns the session, so aborting it closes the connection too.
        self.task.abort();
    }
}

/// Wakes a runner on every enqueue to its outbox, from any process or host; see
/// [`PgStore::wake_on_enqueue`](crate::PgStore::wake_on_enqueue). Dropping it stops the
/// listening task and closes its connection.
#[derive(Debug)]
pub struct RunnerWakeups {
    task: JoinHandle<()>,
}

impl RunnerWakeups {
    pub(crate) async fn start(config: &PgConfig, notifier: Notifier) -> Result<Self> {
        let task = spawn(config, Target::Runner(notifier)).await?;
        Ok(RunnerWakeups { task })
    }
}

impl Drop for RunnerWakeups {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One listening connection: the client (dropping it would end the session) and the stream
/// of what the server sends on its own.
struct Session {
    _client: Client,
    messages: Messages,
}

impl Session {
    /// Connects and sends `LISTEN`, driving the connection while the command runs.
    async fn open(pg_config: &tokio_postgres::Config, tls: &Tls, channel: &str) -> Result<Self> {
        let (client, mut messages) = tls::connect(pg_config, tls).await?;
        {
            let sql = format!("LISTEN \"{channel}\"");
            let listen = client.batch_execute(&sql);
            tokio::pin!(listen);
            loop {
                tokio::select! {
                    done = &mut listen => {
                        done.map_err(pg)?;
                        break;
                    }
                    message = messages.next() => match message {
                        Some(Ok(_)) => {}
                        Some(Err(err)) => return Err(pg(err)),
                        None => return Err(Error::Unavailable {
                            detail: "the listener connection closed during LISTEN".into(),
                            source: None,
                        }),
                    },
                }
            }
        }
        Ok(Session {
            _client: client,
            messages,
        })
    }

    /// Forwards notifications until the connection ends.
    async fn serve(mut self, target: &Target) {
        while let Some(message) = self.messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => target.wake(),
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "outbox listener connection lost; reconnecting");
                    return;
                }
            }
        }
    }
}

async fn keep_listening(
    pg_config: tokio_postgres::Config,
    tls: Tls,
    channel: String,
    target: Target,
    first: Session,
) {
    first.serve(&target).await;
    let mut delay = RECONNECT_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        match Session::open(&pg_config, &tls, &channel).await {
            Ok(session) => {
                delay = RECONNECT_FIRST;
                // Enqueues made while the connection was down signalled no one.
                target.wake();
                session.serve(&target).await;
            }
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?delay, "outbox listener could not reconnect");
                delay = (delay * 2).min(RECONNECT_CAP);
            }
        }
    }
}
