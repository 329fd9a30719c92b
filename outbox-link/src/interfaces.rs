//! The source everywhere but Linux: `netwatcher`, which wraps each platform's own change
//! notifications (a routing socket on macOS, iOS and the BSDs, `NotifyIpInterfaceChange` on
//! Windows, `ConnectivityManager` on Android) and lists the interfaces that are up with
//! their addresses.
//!
//! Those platforms give no portable view of the routing table, so there online means an
//! interface that is up and holds a routable address: not loopback, not link-local, not
//! unspecified. A network that hands out addresses is one a default route comes with.

#[cfg(any(not(target_os = "linux"), test))]
use std::net::IpAddr;

/// Whether `address` can reach beyond this machine and its link.
#[cfg(any(not(target_os = "linux"), test))]
pub(crate) fn routable(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        IpAddr::V6(v6) => {
            // fe80::/10 is link-local.
            let link_local = v6.segments()[0] & 0xffc0 == 0xfe80;
            !(v6.is_loopback() || link_local || v6.is_unspecified())
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) use watcher::Watcher;

#[cfg(not(target_os = "linux"))]
mod watcher {
    use tokio::sync::watch;

    use super::routable;
    use crate::error::Error;
    use crate::signal::{End, Source};

    /// The platform's notifications through `netwatcher`; its callback runs on a thread of
    /// its own and leaves the latest answer here.
    pub(crate) struct Watcher {
        latest: watch::Receiver<bool>,
        _handle: netwatcher::WatchHandle,
    }

    impl Watcher {
        /// Starts watching; `netwatcher` calls back once with the current interfaces before
        /// this returns, which gives the initial answer.
        pub(crate) fn open() -> Result<(Watcher, bool), Error> {
            let (tx, latest) = watch::channel(false);
            let handle = netwatcher::watch_interfaces_with_callback(move |update| {
                let online = update
                    .interfaces
                    .values()
                    .any(|interface| interface.ips.iter().any(|ip| routable(ip.ip)));
                tx.send_replace(online);
            })
            .map_err(|e| Error::os("netwatcher", e))?;
            let online = *latest.borrow();
            Ok((
                Watcher {
                    latest,
                    _handle: handle,
                },
                online,
            ))
        }
    }

    impl Source for Watcher {
        async fn changed(&mut self) -> Result<(), End> {
            self.latest.changed().await.map_err(|_| End::Dropped)
        }

        fn read(&mut self) -> Result<bool, End> {
            Ok(*self.latest.borrow_and_update())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_link_local_and_unspecified_addresses_are_not_a_way_out() {
        for address in [
            "127.0.0.1",
            "169.254.3.4",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "::",
        ] {
            assert!(!routable(address.parse().unwrap()), "{address}");
        }
        for address in ["192.168.1.20", "10.0.0.2", "2001:db8::7", "fd00::2"] {
            assert!(routable(address.parse().unwrap()), "{address}");
        }
    }
}
