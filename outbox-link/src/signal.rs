//! The signal's task: waits on its source, gathers changes in the debounce window, and
//! publishes transitions on the watch channel the runner reads.
//!
//! It has no timer of its own beyond the window: between changes it waits on the source alone,
//! so an idle device costs it no wake-up at all.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use crate::debounce::Debounce;

/// Why a source stopped.
#[derive(Debug)]
pub(crate) enum End {
    /// Nobody feeds it any more (every [`Link`](crate::Link) handle was dropped).
    Dropped,
    /// The operating system's notifications failed.
    Failed(std::io::Error),
}

/// Where a signal's changes come from.
pub(crate) trait Source: Send + 'static {
    /// Resolves when something that may change the answer happened. Cancel-safe: nothing is
    /// lost when the future is dropped before it resolves.
    fn changed(&mut self) -> impl Future<Output = Result<(), End>> + Send;

    /// Whether the device is online now.
    fn read(&mut self) -> Result<bool, End>;
}

/// Starts the task on `runtime` and returns the channel's receiver, holding `initial`.
pub(crate) fn spawn<S: Source>(
    runtime: &Handle,
    source: S,
    initial: bool,
    window: Duration,
) -> watch::Receiver<bool> {
    let (out, online) = watch::channel(initial);
    runtime.spawn(run(source, Debounce::new(initial, window), out));
    online
}

/// The task. Ends when every receiver is gone or the source ends; the channel's sender goes
/// with it, which the runner reads as "no signal": always online, outages learnt from
/// deliveries.
async fn run<S: Source>(mut source: S, mut debounce: Debounce, out: watch::Sender<bool>) {
    loop {
        let deadline = debounce.deadline();
        let end = tokio::select! {
            biased;
            () = out.closed() => return,
            () = until(deadline) => match source.read() {
                Ok(online) => {
                    if let Some(online) = debounce.settle(online) {
                        tracing::debug!(online, "device connectivity changed");
                        out.send_replace(online);
                    }
                    continue;
                }
                Err(end) => end,
            },
            changed = source.changed() => match changed {
                Ok(()) => {
                    debounce.changed(Instant::now());
                    continue;
                }
                Err(end) => end,
            },
        };
        if let End::Failed(error) = end {
            tracing::warn!(
                %error,
                "the operating system's connectivity notifications failed; the outbox now \
                 treats the device as online and learns of outages from its deliveries"
            );
        }
        return;
    }
}

/// Resolves at `deadline`; never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}
