//! Writes the foreign bindings of a built `outbox-ffi` library:
//! `outbox-ffi-bindgen LIBRARY OUT_DIR LANGUAGE...` (`kotlin`, `swift`, `python`).
//! `cargo xtask bindings` runs it.

use std::path::Path;
use std::process::ExitCode;

use outbox_ffi::bindgen::{generate, Language};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [library, out_dir, languages @ ..] = args.as_slice() else {
        eprintln!("usage: outbox-ffi-bindgen LIBRARY OUT_DIR kotlin|swift|python...");
        return ExitCode::from(2);
    };
    let parsed: Option<Vec<Language>> = languages.iter().map(|l| Language::parse(l)).collect();
    let Some(parsed) = parsed.filter(|p| !p.is_empty()) else {
        eprintln!("outbox-ffi-bindgen: name one or more of kotlin, swift, python");
        return ExitCode::from(2);
    };
    match generate(Path::new(library), &parsed, Path::new(out_dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("outbox-ffi-bindgen: {err}");
            ExitCode::FAILURE
        }
    }
}
