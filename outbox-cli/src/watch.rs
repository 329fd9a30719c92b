//! `watch`: the stats, redrawn in place until Ctrl-C.

use std::io::Write;
use std::time::Duration;

use outbox_core::Store;

use crate::error::CliError;
use crate::{escape, human, view, Now};

/// Moves the cursor home and clears the screen, so each frame replaces the last.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Redraws the stats of `store` every `interval` on `out` until Ctrl-C (or SIGTERM); with
/// `json`, prints one line of the `stats --json` shape per refresh instead.
///
/// On a queue where one refresh takes longer than `interval` (the counts of a large SQL
/// store scan its table), the wait after a refresh is as long as the refresh took, so
/// `watch` keeps the database busy at most half the time, and the header says so.
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
        let started = tokio::time::Instant::now();
        let stats = view::stats(store, at).await?;
        let took = started.elapsed();
        let every = if took > interval {
            format!(
                "every {:.1}s, as long as a refresh takes here",
                took.as_secs_f64()
            )
        } else {
            format!("every {}", human::span_precise(interval))
        };
        let wait = interval.max(took);
        let frame = if json {
            let line = serde_json::to_string(&stats).map_err(std::io::Error::other)?;
            format!("{}\n", escape::json(line))
        } else {
            // The frame's own control sequence goes first; everything after it is escaped.
            format!(
                "{CLEAR}outbox watch {}: {} ({every}; Ctrl-C to stop)\n\n{}",
                escape::visible(name),
                human::local(at),
                human::stats(&stats)
            )
        };
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Resolves on Ctrl-C, or SIGTERM on Unix. The handlers are in place when this returns, not
/// when the future is first polled, so a Ctrl-C that comes right after the first frame (or
/// the first line of `serve`) still ends the command cleanly instead of killing it.
pub(crate) fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::interrupt())
            .and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
            .ok()
    };
    async move {
        #[cfg(unix)]
        if let Some((mut int, mut term)) = signals {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
