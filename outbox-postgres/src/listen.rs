//! Wake-ups without polling: `LISTEN` on the outbox's channel, which every enqueue signals with
//! `NOTIFY` when its transaction commits.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use outbox_core::{Error, Result};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::config::PgConfig;
use crate::error::pg;

/// The first and the longest wait before the listener reconnects after losing its connection.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_CAP: Duration = Duration::from_secs(5);

/// Enqueues on one outbox, from any process or host, as they commit.
///
/// A background task holds one dedicated connection (not from the pool: a listening session
/// must stay open) and reconnects with backoff when it drops. Notifications that arrive while
/// nobody waits are coalesced into one. After every reconnect it wakes the waiter once, since
/// enqueues made while it was away sent their signal to no one. Dropping it stops the task.
///
/// Hand the wake-ups to the runner with [`Outbox::notify`](outbox_core::Outbox::notify):
///
/// ```no_run
/// # async fn demo(store: outbox_postgres::PgStore, outbox: outbox_core::Outbox) -> outbox_core::Result<()> {
/// let wakeups = store.listen().await?;
/// loop {
///     wakeups.notified().await;
///     outbox.notify();
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Wakeups {
    signal: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Wakeups {
    pub(crate) async fn start(config: &PgConfig) -> Result<Self> {
        let pg_config = config.pg_config()?;
        let channel = config.schema.clone();
        let signal = Arc::new(Notify::new());
        // The first session is opened here so a wrong URL fails the call instead of retrying
        // forever in the background.
        let first = Session::open(&pg_config, &channel).await?;
        let task = tokio::spawn(keep_listening(
            pg_config,
            channel,
            Arc::clone(&signal),
            first,
        ));
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

type Messages = BoxStream<'static, std::result::Result<AsyncMessage, tokio_postgres::Error>>;

/// One listening connection: the client (dropping it would end the session) and the stream
/// of what the server sends on its own.
struct Session {
    _client: Client,
    messages: Messages,
}

impl Session {
    /// Connects and sends `LISTEN`, driving the connection while the command runs.
    async fn open(pg_config: &tokio_postgres::Config, channel: &str) -> Result<Self> {
        let (client, mut connection) = pg_config.connect(NoTls).await.map_err(pg)?;
        let mut messages: Messages =
            futures::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
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
    async fn serve(mut self, signal: &Notify) {
        while let Some(message) = self.messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => signal.notify_one(),
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
    channel: String,
    signal: Arc<Notify>,
    first: Session,
) {
    first.serve(&signal).await;
    let mut delay = RECONNECT_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        match Session::open(&pg_config, &channel).await {
            Ok(session) => {
                delay = RECONNECT_FIRST;
                // Enqueues made while the connection was down signalled no one.
                signal.notify_one();
                session.serve(&signal).await;
            }
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?delay, "outbox listener could not reconnect");
                delay = (delay * 2).min(RECONNECT_CAP);
            }
        }
    }
}
