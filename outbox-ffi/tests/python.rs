//! The Python suite (`tests/python/`): an app written in Python, through the Python bindings
//! generated from the library this build made, against a local HTTP server. Needs `python3`
//! (the standard library only); under `CI=true` a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The shared library cargo built for this test run: in the test's own `deps/` folder (cargo
/// copies it up to the profile's folder only for a plain build, so the copy there may be older).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in <target>/<profile>/deps");
    let name = format!(
        "{}outbox_ffi{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    [profile.join("deps").join(&name), profile.join(&name)]
        .into_iter()
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("no {name} under {}", profile.display()))
}

fn python() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    found.then_some("python3")
}

#[test]
fn python_suite_through_the_generated_bindings() {
    let Some(python) = python() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 is missing: CI runs the Python suite of outbox-ffi and needs it"
        );
        eprintln!("python3 is missing: the Python suite of outbox-ffi did not run");
        return;
    };
    let library = built_library();
    let bindings = tempfile::tempdir().expect("a temporary folder");
    outbox_ffi::bindgen::generate(
        &library,
        &[outbox_ffi::bindgen::Language::Python],
        bindings.path(),
    )
    .expect("the Python bindings generate");
    // The generated module loads the library from its own folder.
    let file_name = library.file_name().expect("a file name");
    std::fs::copy(&library, bindings.path().join(file_name)).expect("the library copies");

    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let python_path = std::env::join_paths([bindings.path(), suite.as_path()]).expect("paths");
    let out = Command::new(python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(&suite)
        .args(["-p", "test_*.py"])
        .env("PYTHONPATH", python_path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&out.stderr);
    eprintln!("{}{report}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "the Python suite failed:\n{report}");
    assert!(
        report
            .lines()
            .any(|line| line.starts_with("Ran ") && !line.starts_with("Ran 0 ")),
        "the Python suite ran no test"
    );
}
