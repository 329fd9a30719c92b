//! A signal fed by hand: the platform's own connectivity callback on a mobile core.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::debounce::{self, DEFAULT_WINDOW};
use crate::error::Error;
use crate::signal::{self, End, Source};

/// A connectivity signal the application feeds, for where the platform's own callback is the
/// better source: Android's `ConnectivityManager.NetworkCallback`, iOS's `NWPathMonitor`.
///
/// Its channel is the same kind [`watch()`](crate::watch()) gives, debounced the same way: the
/// callback calls [`Link::set_online`] from whatever thread it runs on, and the runner sees
/// one transition per burst. Clones share the one signal. When the last handle is dropped
/// the signal ends, and the runner then treats the device as online (it learns of outages
/// from its deliveries): keep a handle for as long as the outbox runs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), outbox_link::Error> {
/// use outbox_link::Link;
///
/// let link = Link::new(true)?;
/// let mut online = link.subscribe(); // for OutboxBuilder::connectivity
///
/// // In the platform callback (onLost / a path that is not satisfied):
/// link.set_online(false);
/// online.changed().await.unwrap();
/// assert!(!*online.borrow());
/// assert!(!link.is_online());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Link {
    reports: Arc<watch::Sender<bool>>,
    online: watch::Receiver<bool>,
}

impl Link {
    /// A signal that starts `online` (or not), debounced over [`DEFAULT_WINDOW`]. Runs its task
    /// on the current tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), outbox_link::Error> {
    /// let link = outbox_link::Link::new(false)?;
    /// assert!(!link.is_online());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(online: bool) -> Result<Link, Error> {
        Link::with_window(online, DEFAULT_WINDOW)
    }

    /// [`Link::new`] with a debounce window of your choice (at most
    /// [`MAX_WINDOW`](crate::MAX_WINDOW); zero reports every change as it is read).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), outbox_link::Error> {
    /// use std::time::Duration;
    /// let link = outbox_link::Link::with_window(true, Duration::from_millis(200))?;
    /// assert!(link.is_online());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_window(online: bool, window: Duration) -> Result<Link, Error> {
        let window = debounce::check(window)?;
        let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let (reports, reported) = watch::channel(online);
        let online = signal::spawn(&runtime, Reports(reported), online, window);
        Ok(Link {
            reports: Arc::new(reports),
            online,
        })
    }

    /// Reports what the platform says: `true` when it has a usable network, `false` when it
    /// lost the last one. Callable from any thread, with or without a runtime; never blocks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), outbox_link::Error> {
    /// let link = outbox_link::Link::new(false)?;
    /// let callback = link.clone();
    /// std::thread::spawn(move || callback.set_online(true)).join().unwrap();
    /// let mut online = link.subscribe();
    /// online.wait_for(|online| *online).await.unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_online(&self, online: bool) {
        self.reports.send_replace(online);
    }

    /// A receiver of the debounced signal, for
    /// [`OutboxBuilder::connectivity`](https://docs.rs/outbox-core).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), outbox_link::Error> {
    /// let link = outbox_link::Link::new(true)?;
    /// assert!(*link.subscribe().borrow());
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.online.clone()
    }

    /// The signal as the runner last saw it: the latest transition, after its window.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), outbox_link::Error> {
    /// assert!(outbox_link::Link::new(true)?.is_online());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_online(&self) -> bool {
        *self.online.borrow()
    }
}

/// The reports of [`Link::set_online`], latest first.
struct Reports(watch::Receiver<bool>);

impl Source for Reports {
    async fn changed(&mut self) -> Result<(), End> {
        self.0.changed().await.map_err(|_| End::Dropped)
    }

    fn read(&mut self) -> Result<bool, End> {
        Ok(*self.0.borrow_and_update())
    }
}
