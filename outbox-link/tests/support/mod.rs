//! Network namespaces the tests make for themselves, and the `ip` commands run inside them.
//!
//! A network namespace belongs to a thread on Linux: each scenario runs on a thread of its
//! own that calls `unshare(CLONE_NEWNET)`, on a current-thread tokio runtime built there, so
//! every socket it opens (the signal's, the server's, the sink's) and every `ip` it spawns is
//! in that namespace and nothing touches the machine's own network.

use std::future::Future;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::watch;
use tokio::time::Instant;

/// Runs `scenario` in a fresh network namespace whose loopback is up, on a current-thread
/// runtime (with tokio's clock paused when `paused`). Without namespace support it says so on
/// stderr and returns, unless `CI` is set: then the test fails.
pub(crate) fn in_namespace<F, Fut>(test: &str, paused: bool, scenario: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let thread = std::thread::Builder::new()
        .name(test.to_owned())
        .spawn(move || {
            if let Err(reason) = enter() {
                return Some(reason);
            }
            let mut runtime = tokio::runtime::Builder::new_current_thread();
            runtime.enable_all();
            if paused {
                runtime.start_paused(true);
            }
            let runtime = runtime.build().expect("a tokio runtime");
            runtime.block_on(async {
                if let Err(reason) = try_ip("link set lo up").await {
                    return Some(reason);
                }
                scenario().await;
                None
            })
        })
        .expect("a thread for the namespace");
    let unsupported = match thread.join() {
        Ok(unsupported) => unsupported,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    if let Some(reason) = unsupported {
        // Straight to the process's stderr: the harness captures `eprintln!`, and a skip must
        // be seen.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED {test}: no network namespace here ({reason}). These tests need \
             root and iproute2's `ip`; under CI this is a failure. ***\n"
        );
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: network namespaces are required under CI: {reason}"
        );
    }
}

/// Moves the calling thread into a network namespace of its own.
fn enter() -> Result<(), String> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|errno| format!("unshare(CLONE_NEWNET): {errno}"))
}

/// Runs `ip ARGS` in the namespace; an error says what `ip` printed.
async fn try_ip(args: &str) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .await
        .map_err(|e| format!("ip {args}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Runs `ip ARGS` in the namespace, which must succeed.
pub(crate) async fn ip(args: &str) {
    if let Err(e) = try_ip(args).await {
        panic!("{e}");
    }
}

/// Runs the `ip` commands of `batch` (one per line) in one `ip -batch` process, and returns
/// how long that process took from its start to its end.
pub(crate) async fn ip_batch(batch: &str) -> Duration {
    let started = Instant::now();
    let mut child = Command::new("ip")
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip -batch");
    let mut stdin = child.stdin.take().expect("ip's stdin");
    stdin.write_all(batch.as_bytes()).await.expect("ip's stdin");
    drop(stdin);
    let output = child.wait_with_output().await.expect("ip -batch");
    assert!(
        output.status.success(),
        "ip -batch: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    started.elapsed()
}

/// The default route through the namespace's uplink.
pub(crate) const DEFAULT_ROUTE: &str = "route add default via 10.0.0.254 dev d0";

/// Makes the uplink, `d0` at 10.0.0.1/24 (one end of a veth pair whose other end, `p0`, stays
/// in the namespace and gives it its carrier), and its default route.
pub(crate) async fn online_namespace() {
    ip("link add d0 type veth peer name p0").await;
    ip("link set p0 up").await;
    ip("addr add 10.0.0.1/24 dev d0").await;
    ip("link set d0 up").await;
    ip(DEFAULT_ROUTE).await;
}

/// Waits at most `within` for the signal's next transition; its value and how long it took.
pub(crate) async fn next(
    online: &mut watch::Receiver<bool>,
    within: Duration,
) -> Option<(bool, Duration)> {
    let started = Instant::now();
    match tokio::time::timeout(within, online.changed()).await {
        Ok(Ok(())) => Some((*online.borrow_and_update(), started.elapsed())),
        Ok(Err(_)) => panic!("the signal ended"),
        Err(_) => None,
    }
}
