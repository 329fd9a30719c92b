//! What the CLI tests share: the scenario every output is checked on, the binary under test,
//! and a small DevTools client for the browser test.
#![allow(dead_code, unreachable_pub)] // each test file uses a part

pub mod cdp;
mod scenario;

use std::path::Path;
use std::process::{Command, Output};

pub use scenario::*;

/// The `outbox` binary with a fixed time zone, so local times are the same on every machine.
pub fn outbox() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.env("TZ", "UTC").env_remove("RUST_LOG");
    command
}

/// Runs `outbox ARGS` at [`NOW`] with no standard input.
pub fn run(args: &[&str]) -> Output {
    let now = NOW.to_string();
    outbox()
        .args(args)
        .args(["--now", &now])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the outbox binary")
}

/// Standard output of a run that must succeed.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "outbox {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Standard error of a run that must fail, with its exit code.
pub fn fails(args: &[&str]) -> (i32, String) {
    let out = run(args);
    assert!(!out.status.success(), "outbox {args:?} succeeded");
    let err = String::from_utf8(out.stderr).expect("UTF-8 errors");
    (out.status.code().unwrap_or(-1), err)
}

/// A hash of every byte of the file, to prove a read left it unchanged.
pub fn digest(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).expect("read file");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Checks output against the snapshot every backend shares (`tests/snapshots/NAME.snap`).
#[macro_export]
macro_rules! golden {
    ($name:expr, $value:expr) => {{
        let value = $value;
        insta::with_settings!({ prepend_module_to_snapshot => false, snapshot_path => "snapshots" }, {
            insta::assert_snapshot!($name, value);
        })
    }};
}
