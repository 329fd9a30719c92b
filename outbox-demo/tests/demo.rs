//! The demo end to end, in its fast mode: a real local server, a real SQLite file.

use outbox_demo::{run, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_demo_loses_nothing() {
    let options = Options::fast();
    let verdict = run(options.clone()).await.unwrap();
    assert_eq!(verdict.lost, 0, "{}", verdict.line());
    assert_eq!(verdict.rejected, 1, "{}", verdict.line());
    assert_eq!(verdict.delivered, options.records as u64 - 1);
    // The server's script drops two answers after storing the writes: both come back.
    assert!(verdict.duplicates >= 2, "{}", verdict.line());
}

#[test]
fn the_crash_demo_kills_its_child_and_still_loses_nothing() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-demo"))
        .args(["--crash", "--fast"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("SIGKILL"), "{stdout}");
    let verdict = stdout.lines().last().unwrap();
    assert!(
        verdict.starts_with("119 delivered · 1 rejected · 0 lost · "),
        "{verdict}"
    );
}

#[test]
fn rust_log_shows_a_span_per_delivery_and_per_round() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-demo"))
        .arg("--fast")
        .env("RUST_LOG", "outbox=debug")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let delivery = stderr
        .lines()
        .find(|l| l.contains("outbox.deliver") && l.contains("outcome=\"delivered\""))
        .unwrap_or_else(|| panic!("no delivery span in:\n{stderr}"));
    for field in ["record=", "attempts=", "took_ms="] {
        assert!(delivery.contains(field), "{field} missing: {delivery}");
    }
    assert!(
        stderr.contains("outbox.round"),
        "no round span in:\n{stderr}"
    );
}
