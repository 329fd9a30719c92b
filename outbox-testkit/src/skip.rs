//! Skipping a whole backend with a reason, for `conformance!(..., skip_when = ...)`.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// `None` when a server accepts a TCP connection at `address` within two seconds; otherwise
/// `Some(reason)`, so the suite is skipped with that reason, unless the environment variable
/// `required` is set (as CI sets it), in which case it panics: a required server that does not
/// answer fails every test instead of skipping it.
///
/// ```
/// use outbox_testkit::skip::unless_reachable;
/// // Port 9 (discard) on localhost: nothing listens there in a test environment.
/// let skip = unless_reachable("127.0.0.1:9", "OUTBOX_TESTKIT_EXAMPLE_NEVER_SET");
/// assert!(skip.unwrap().contains("127.0.0.1:9"));
/// ```
pub fn unless_reachable(address: &str, required: &str) -> Option<String> {
    let reached = address.to_socket_addrs().ok().is_some_and(|mut addrs| {
        addrs.any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok())
    });
    if reached {
        return None;
    }
    let reason = format!("no server answers at {address}");
    if std::env::var_os(required).is_some() {
        panic!("{required} is set, but {reason}");
    }
    Some(format!("{reason} (set {required} to make this a failure)"))
}
