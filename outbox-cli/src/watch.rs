//! `watch`: the stats, redrawn in place until Ctrl-C.

use std::io::Write;
use std::time::Duration;

use outbox_core::Store;

use crate::error::CliError;
use crate::{human, view, Now};

/// Moves the cursor home and clears the screen, so each frame replaces the last.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Redraws the stats of `store` every `interval` on `out` until Ctrl-C (or SIGTERM); with
/// `json`, prints one line of the `stats --json` shape per refresh instead.
pub async fn run(
    store: &dyn Store,
    name: &str,
    interval: Duration,
    json: bool,
    now: Now,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let at = now.get();
        let stats = view::stats(store, at).await?;
        let frame = if json {
            let line = serde_json::to_string(&stats).map_err(std::io::Error::other)?;
            format!("{line}\n")
        } else {
            format!(
                "{CLEAR}outbox watch {name}: {} (every {}; Ctrl-C to stop)\n\n{}",
                human::local(at),
                human::span_precise(interval),
                human::stats(&stats)
            )
        };
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Resolves on Ctrl-C, or SIGTERM on Unix.
pub(crate) async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
