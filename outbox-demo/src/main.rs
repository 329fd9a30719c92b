//! `cargo run -p outbox-demo [-- --crash] [--fast] [--records N] [--file PATH]`

use std::path::PathBuf;
use std::process::ExitCode;

use outbox_demo::{deliver, run, show_warnings, Options};

const USAGE: &str = "usage: outbox-demo [--crash] [--fast] [--quiet] [--records N] [--file PATH]";

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options::full();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--crash" => options.crash = true,
            "--fast" => {
                let file = options.file.take();
                options = Options {
                    crash: options.crash,
                    quiet: options.quiet,
                    ..Options::fast()
                };
                options.file = file;
            }
            "--quiet" => options.quiet = true,
            "--records" => {
                let n = args.next().ok_or("--records needs a number")?;
                options.records = n
                    .parse()
                    .map_err(|_| format!("--records: {n:?} is not a number"))?;
                if options.records < 10 {
                    return Err("--records: at least 10".into());
                }
            }
            "--file" => {
                options.file = Some(PathBuf::from(args.next().ok_or("--file needs a path")?))
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(options)
}

#[allow(clippy::print_stdout)]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("outbox-demo: cannot start tokio: {err}");
            return ExitCode::FAILURE;
        }
    };
    // The child role of `--crash`: deliver from the given file until nothing is owed.
    if args.first().map(String::as_str) == Some("--deliver") {
        let (Some(path), Some(base)) = (args.get(1), args.get(2)) else {
            eprintln!("usage: outbox-demo --deliver PATH URL [--fast]");
            return ExitCode::from(2);
        };
        let fast = args.iter().any(|a| a == "--fast");
        return match runtime.block_on(deliver(path.as_ref(), base, fast)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("outbox-demo child: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let options = match parse(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if !options.quiet {
        show_warnings();
    }
    match runtime.block_on(run(options)) {
        Ok(verdict) if verdict.lost == 0 => ExitCode::SUCCESS,
        Ok(verdict) => {
            eprintln!("outbox-demo: {} writes lost", verdict.lost);
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("outbox-demo: {err}");
            ExitCode::FAILURE
        }
    }
}
