#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod debounce;
mod error;
mod interfaces;
mod link;
#[cfg(target_os = "linux")]
mod netlink;
#[cfg(target_os = "linux")]
mod routes;
mod signal;

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

pub use debounce::{DEFAULT_WINDOW, MAX_WINDOW};
pub use error::Error;
pub use link::Link;

/// The device's connectivity from the operating system's own notifications, as the
/// `watch::Receiver<bool>` that `OutboxBuilder::connectivity` takes: `true` while a
/// non-loopback interface is up with a way out (on Linux: a default route through it),
/// `false` once the last one goes. Debounced over [`DEFAULT_WINDOW`].
///
/// The signal runs as a task on the current tokio runtime (which needs its I/O and time
/// drivers, as `#[tokio::main]` gives) and wakes only when the system reports a change. It
/// ends when every receiver is dropped. On Linux it watches the network namespace of the
/// calling thread.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), outbox_link::Error> {
/// let online = outbox_link::watch()?;
/// // Outbox::builder(store, sink).connectivity(online).start().await?;
/// let _is_online_now: bool = *online.borrow();
/// # Ok(())
/// # }
/// ```
pub fn watch() -> Result<watch::Receiver<bool>, Error> {
    watch_debounced(DEFAULT_WINDOW)
}

/// [`watch()`] with a debounce window of your choice (at most [`MAX_WINDOW`]; zero reports
/// every change as soon as the tables are read).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), outbox_link::Error> {
/// use std::time::Duration;
/// let online = outbox_link::watch_debounced(Duration::from_millis(250))?;
/// # drop(online);
/// # Ok(())
/// # }
/// ```
pub fn watch_debounced(window: Duration) -> Result<watch::Receiver<bool>, Error> {
    let window = debounce::check(window)?;
    let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
    #[cfg(target_os = "linux")]
    let (source, online) = netlink::Netlink::open()?;
    #[cfg(not(target_os = "linux"))]
    let (source, online) = interfaces::Watcher::open()?;
    Ok(signal::spawn(&runtime, source, online, window))
}
