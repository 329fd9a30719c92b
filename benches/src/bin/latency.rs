//! `latency`: one write at a time on an idle queue, against the bare engine's one-row commit.
//!
//! ```text
//! latency [--store sqlite|redb] [--samples N] [--pause-ms MS]
//! ```
//!
//! For each store (both when `--store` is not given) it starts a runner with the default
//! configuration and a sink that notes when it is handed a record, then, `N` times (default
//! 400): waits 1/2 to 1 × `MS` (default 15), enqueues one record and waits for the sink to
//! have it; waits again and commits one row in the bare engine. It prints one line per store
//! of tab-separated `key=value` fields: p50, p90 and p99 of the time `enqueue` took to return
//! (`enqueue_*_ms`), of the time until the sink had the record (`sink_*_ms`) and of the bare
//! commit (`bare_*_ms`), and the p50 ratios `enqueue_vs_bare` and `sink_vs_bare`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use outbox_benches::latency;
use outbox_benches::subject::StoreKind;
use outbox_core::Error;

fn usage() -> String {
    format!(
        "usage: latency [--store {}] [--samples N] [--pause-ms MS]",
        StoreKind::names(latency::stores(), "|")
    )
}

fn main() -> ExitCode {
    let mut stores: Vec<StoreKind> = latency::stores().collect();
    let mut samples = 400usize;
    let mut pause = Duration::from_millis(15);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        let parsed = match arg.as_str() {
            "--store" => match latency::stores().find(|k| k.name() == value) {
                Some(store) => {
                    stores = vec![store];
                    Ok(())
                }
                None => Err(format!(
                    "--store takes {}, not {value:?}",
                    StoreKind::one_of(latency::stores())
                )),
            },
            "--samples" => value
                .parse()
                .map(|n| samples = n)
                .map_err(|_| format!("--samples takes a count, not {value:?}")),
            "--pause-ms" => value
                .parse()
                .map(|ms| pause = Duration::from_millis(ms))
                .map_err(|_| format!("--pause-ms takes milliseconds, not {value:?}")),
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(message) = parsed {
            eprintln!("latency: {message}\n{}", usage());
            return ExitCode::from(2);
        }
    }
    let Some(runtime) = outbox_benches::tool_runtime("latency") else {
        return ExitCode::FAILURE;
    };
    for store in stores {
        let result = runtime
            .block_on(latency::measure(store, samples, pause))
            .and_then(|run| {
                writeln!(std::io::stdout().lock(), "{}", run.line(store)).map_err(Error::backend)
            });
        if let Err(err) = result {
            eprintln!("latency: {}: {err}", store.name());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
