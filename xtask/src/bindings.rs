//! `cargo xtask bindings [--out DIR]`: builds `outbox-ffi` and generates its Kotlin and Swift
//! sources from the built library (uniffi's library mode), into `DIR` (by default
//! `target/bindings/`): `kotlin/uniffi/outbox_ffi/outbox_ffi.kt` for Android, and
//! `swift/outbox_ffi.swift` with the C header and module map an XCFramework needs.
//!
//! Generation only: no Kotlin or Swift compiler runs here. It fails when the build or the
//! generation fails, or when a generated file lacks the entry point an app calls, so CI
//! (`.ci/run`) catches an interface that no longer generates.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::package::parse_metadata;
use crate::run;

/// What each language must have produced, and a name each file must contain: the function an
/// app calls first.
const EXPECTED: [(&str, &str, &str); 4] = [
    (
        "kotlin",
        "uniffi/outbox_ffi/outbox_ffi.kt",
        "suspend fun `openOutbox`",
    ),
    ("swift", "outbox_ffi.swift", "func openOutbox("),
    (
        "swift",
        "outbox_ffiFFI.h",
        "uniffi_outbox_ffi_fn_func_open_outbox",
    ),
    ("swift", "outbox_ffiFFI.modulemap", "outbox_ffiFFI"),
];

pub(crate) fn bindings(args: &[String]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let metadata = Command::new(&cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .output()
        .map_err(|e| format!("could not start cargo metadata: {e}"))?;
    if !metadata.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&metadata.stderr).trim()
        ));
    }
    let workspace = parse_metadata(&String::from_utf8_lossy(&metadata.stdout))?;
    let out = match args {
        [] => workspace.target.join("bindings"),
        [flag, dir] if flag == "--out" => PathBuf::from(dir),
        _ => return Err("usage: cargo xtask bindings [--out DIR]".into()),
    };

    // The library and the generator in one build: they share the interface's metadata.
    run(
        &cargo,
        &[
            "build",
            "--package",
            "outbox-ffi",
            "--features",
            "bindgen",
            "--lib",
            "--bin",
            "outbox-ffi-bindgen",
        ],
        &[],
    )?;
    let profile = workspace.target.join("debug");
    let library = profile.join(format!(
        "{}outbox_ffi{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    let generator = profile.join(format!(
        "outbox-ffi-bindgen{}",
        std::env::consts::EXE_SUFFIX
    ));
    for language in ["kotlin", "swift"] {
        let dir = out.join(language);
        // A file an older interface generated must not linger next to the new ones.
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        run(
            &path_text(&generator)?,
            &[&path_text(&library)?, &path_text(&dir)?, language],
            &[],
        )?;
    }
    check(&out)?;
    for (language, file, _) in EXPECTED {
        eprintln!("wrote {}", out.join(language).join(file).display());
    }
    Ok(())
}

/// Every expected file exists and names its entry point.
fn check(out: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    for (language, file, needle) in EXPECTED {
        let path = out.join(language).join(file);
        match fs::read_to_string(&path) {
            Ok(text) if text.contains(needle) => {}
            Ok(_) => problems.push(format!("{} lacks {needle:?}", path.display())),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the bindings did not generate as expected:\n{}",
            problems.join("\n")
        ))
    }
}

fn path_text(path: &Path) -> Result<String, String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("not a UTF-8 path: {}", path.display()))
}
