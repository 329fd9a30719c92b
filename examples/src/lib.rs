//! Runnable examples of `outbox` in an application, one `cargo run --example NAME` each from
//! the workspace root:
//!
//! - [`transactional_outbox`]: an axum service that writes an order and its outbox record in
//!   one SQLite transaction, then delivers the records to a downstream HTTP service;
//! - [`offline_first`]: a client whose connectivity comes from an `outbox_link::Link`, showing the
//!   states a write goes through (pending, retrying, needs-attention, rejected);
//! - [`postgres_fleet`]: three runners sharing one PostgreSQL schema, each record delivered
//!   once (skipped with a message when no server answers);
//! - [`sqlx_orders`]: an axum service on sqlx and PostgreSQL that writes an order and its
//!   outbox record in one sqlx transaction, the commit waking the runner (skipped with a
//!   message when no server answers).
//!
//! Each example is a `run` function here that returns its final line; the example binaries
//! print it, and the tests in `tests/examples.rs` call the same functions and check it.
#![deny(missing_docs)]

pub mod downstream;
pub mod offline_first;
pub mod postgres_fleet;
pub mod sqlx_orders;
pub mod transactional_outbox;

use std::future::Future;
use std::sync::{Arc, Mutex};

/// Boxed errors: an example reports them and exits non-zero.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// What an example returns: its final line, or why it failed.
pub type Result<T> = std::result::Result<T, Error>;

/// Where an example writes its progress: standard output, or only kept for a test to read.
/// Cheap to clone; clones share the kept lines.
#[derive(Clone, Debug, Default)]
pub struct Log {
    lines: Arc<Mutex<Vec<String>>>,
    echo: bool,
}

impl Log {
    /// A log that prints every line to standard output as well as keeping it.
    pub fn stdout() -> Self {
        Log {
            lines: Arc::default(),
            echo: true,
        }
    }

    /// A log that only keeps its lines (for tests).
    pub fn quiet() -> Self {
        Log::default()
    }

    /// Writes one line.
    #[allow(clippy::print_stdout)]
    pub fn line(&self, line: impl Into<String>) {
        let line = line.into();
        if self.echo {
            println!("{line}");
        }
        self.lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(line);
    }

    /// Every line written so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Runs an example's `run` future on a fresh multi-threaded runtime and prints its final
/// line; the `main` of every example binary. Returns a failure exit code on an error.
#[allow(clippy::print_stdout)]
pub fn main_with<F, Fut>(run: F) -> std::process::ExitCode
where
    F: FnOnce(Log) -> Fut,
    Fut: Future<Output = Result<String>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("cannot start tokio: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(Log::stdout())) {
        Ok(last) => {
            println!("{last}");
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
