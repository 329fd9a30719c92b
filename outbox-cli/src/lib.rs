#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod audit;
pub mod cli;
pub mod commands;
pub mod error;
pub mod escape;
pub mod human;
pub mod open;
pub mod revision;
pub mod serve;
pub mod session;
pub mod tls;
pub mod verbs;
pub mod view;
pub mod watch;

use std::io;
use std::process::ExitCode;

use clap::Parser;
use outbox_core::{clock::system_now, Millis};

pub use error::CliError;

use crate::cli::{Cli, Command, Target};
use crate::commands::Io;
use crate::open::{open, Access};

/// Where "now" comes from: the system clock, or the fixed time of the hidden `--now` flag
/// (for scripts and tests that need reproducible output).
#[derive(Clone, Copy, Debug, Default)]
pub struct Now(pub Option<Millis>);

impl Now {
    /// The current time in Unix milliseconds.
    pub fn get(self) -> Millis {
        self.0.unwrap_or_else(system_now)
    }
}

impl Command {
    /// The target the command opens.
    pub fn target(&self) -> &Target {
        match self {
            Command::Stats(a) => &a.target,
            Command::List(a) => &a.target,
            Command::Show(a) => &a.target,
            Command::Retry(a) | Command::Requeue(a) => &a.target,
            Command::Discard(a) => &a.target,
            Command::Prune(a) => &a.target,
            Command::Resume(a) => &a.target,
            Command::Watch(a) => &a.target,
            Command::Serve(a) => &a.target,
        }
    }

    /// How the command opens its target: read commands (and `serve` without `--write`) never
    /// write.
    pub fn access(&self) -> Access {
        match self {
            Command::Stats(_) | Command::List(_) | Command::Show(_) => Access::Look,
            Command::Watch(_) => Access::Read,
            // The page writes only when asked to.
            Command::Serve(args) if !args.write => Access::Read,
            Command::Retry(_)
            | Command::Requeue(_)
            | Command::Discard(_)
            | Command::Prune(_)
            | Command::Resume(_)
            | Command::Serve(_) => Access::Write,
        }
    }
}

/// Runs a parsed command line on the process's standard streams.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let now = Now(cli.now);
    let target = cli.command.target();
    let opened = open(target, cli.command.access()).await?;
    if let Some(note) = &opened.note {
        eprintln!("note: {}", escape::visible(note));
    }
    let store = opened.store;
    let name = open::shown(&target.target);
    let done = execute(&cli, store, &name, now).await;
    if let Some(closing) = opened.closing {
        closing.await;
    }
    done
}

/// Runs the command on the opened store (dropped when done).
async fn execute(
    cli: &Cli,
    store: std::sync::Arc<dyn outbox_core::Store>,
    name: &str,
    now: Now,
) -> Result<(), CliError> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match &cli.command {
        Command::Watch(args) => {
            watch::run(&*store, name, args.interval, args.json, now, &mut out).await
        }
        Command::Serve(args) => serve::run(store, name, args.port, args.write, now, &mut out).await,
        command => {
            let stderr = io::stderr();
            let stdin = io::stdin();
            let mut io = Io {
                out: &mut out,
                err: &mut stderr.lock(),
                input: &mut stdin.lock(),
            };
            let done = commands::execute(&*store, command, now.get(), &mut io).await;
            io.out.flush()?;
            done
        }
    }
}

/// The binary's entry point: parses the arguments, runs the command, and turns an error into
/// one line on stderr and a non-zero exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // The line may quote a server's words: escaped, like all output for a person.
            eprintln!("error: {}", escape::visible(&err.line()));
            ExitCode::from(err.exit_code())
        }
    }
}
