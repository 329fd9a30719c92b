//! The device's connectivity as the demo's runner sees it: the operating system's own signal
//! (`outbox_link::watch`, as an app wires it) and the demo's simulated switch, which takes the
//! device offline on cue. Online when both say so.

use tokio::sync::watch;

/// What the demo learnt about the operating system's signal, to say on screen.
#[derive(Debug, PartialEq, Eq)]
pub enum OsSignal {
    /// The signal is wired and says the device is online.
    Online,
    /// The system reports no network (no default route): the demo's server is on
    /// 127.0.0.1, so the runner follows the simulated switch alone rather than wait forever.
    OfflineAtStart,
    /// The system's notifications could not be opened (a sandbox, for instance).
    Unavailable(String),
}

impl OsSignal {
    /// The line the demo prints about it.
    ///
    /// ```
    /// use outbox_demo::device::OsSignal;
    /// assert!(OsSignal::Online.describe().contains("outbox-link"));
    /// ```
    pub fn describe(&self) -> String {
        match self {
            OsSignal::Online => "device link · online, from the operating system (outbox-link); \
                                 the offline phases below are simulated on top of it"
                .to_owned(),
            OsSignal::OfflineAtStart => "device link · the operating system reports no network; \
                                         the server is local, so only the simulated phases count"
                .to_owned(),
            OsSignal::Unavailable(why) => {
                format!("device link · no signal from the operating system ({why}); simulated phases only")
            }
        }
    }
}

/// The runner's connectivity channel: `os` and `simulated` combined, online when both are.
/// An `os` that is `None` (not wired, or offline at the start) leaves the simulated switch
/// alone in charge.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tokio::sync::watch;
/// let (os_tx, os) = watch::channel(true);
/// let (switch, simulated) = watch::channel(true);
/// let mut online = outbox_demo::device::both(Some(os), simulated);
/// switch.send_replace(false);
/// online.wait_for(|online| !*online).await.unwrap();
/// switch.send_replace(true);
/// online.wait_for(|online| *online).await.unwrap();
/// os_tx.send_replace(false);
/// online.wait_for(|online| !*online).await.unwrap();
/// # }
/// ```
pub fn both(
    os: Option<watch::Receiver<bool>>,
    mut simulated: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let mut os = os;
    let now = |os: &Option<watch::Receiver<bool>>, simulated: &watch::Receiver<bool>| {
        os.as_ref().is_none_or(|os| *os.borrow()) && *simulated.borrow()
    };
    let (tx, online) = watch::channel(now(&os, &simulated));
    tokio::spawn(async move {
        loop {
            let os_changed = async {
                match os.as_mut() {
                    Some(os) => os.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                alive = os_changed => {
                    // A signal that ended says nothing more; the switch carries on alone.
                    if !alive {
                        os = None;
                    }
                }
                changed = simulated.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
            let online = now(&os, &simulated);
            tx.send_if_modified(|current| std::mem::replace(current, online) != online);
        }
    });
    online
}

/// Sets the simulated switch and waits (a second at most) until the runner's channel shows
/// it, so that a write made next is seen under the new state. With the system's signal
/// offline, going online shows only when the system comes back; the wait then ends at the
/// second.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tokio::sync::watch;
/// let (switch, simulated) = watch::channel(true);
/// let runner = outbox_demo::device::both(None, simulated);
/// outbox_demo::device::simulate(&switch, &runner, false).await;
/// assert!(!*runner.borrow());
/// # }
/// ```
pub async fn simulate(switch: &watch::Sender<bool>, runner: &watch::Receiver<bool>, online: bool) {
    switch.send_replace(online);
    let mut runner = runner.clone();
    let shown = runner.wait_for(|now| *now == online);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), shown).await;
}

/// Opens the operating system's signal as an app does (`outbox_link::watch()`), and says what
/// it found. Offline at the start, it is set aside: see [`OsSignal::OfflineAtStart`].
pub fn os_signal() -> (Option<watch::Receiver<bool>>, OsSignal) {
    match outbox_link::watch() {
        Ok(online) if *online.borrow() => (Some(online), OsSignal::Online),
        Ok(_) => (None, OsSignal::OfflineAtStart),
        Err(err) => (None, OsSignal::Unavailable(err.to_string())),
    }
}
