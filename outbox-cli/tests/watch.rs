//! `outbox watch` in a real terminal (a tmux pane): the counts on screen change while the test
//! enqueues, the frame is redrawn in place, and Ctrl-C ends it cleanly.
#![cfg(feature = "sqlite")]

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use outbox_core::{NewRecord, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use support::cdp::missing;

/// A private tmux server, killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "watch"])
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // The server usually ended with its last session already.
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

/// The count on the screen's `pending` line.
fn pending(screen: &str) -> Option<u64> {
    screen
        .lines()
        .find_map(|l| l.strip_prefix("pending"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counts_change_on_screen_while_records_are_enqueued() {
    if missing("tmux", "apt-get install tmux").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    let fifo = dir.path().join("pane");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());

    let tmux = Tmux {
        socket: format!("outbox-cli-test-{}", std::process::id()),
    };
    let status = dir.path().join("status");
    // The shell notes watch's exit status and signals the test through tmux's wait-for.
    let command = format!(
        "TZ=UTC {} watch {} --interval 100ms; echo $? > {}; tmux -L {} wait-for -S watch-done",
        env!("CARGO_BIN_EXE_outbox"),
        path.display(),
        status.display(),
        tmux.socket
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "watch",
        "-x",
        "100",
        "-y",
        "30",
        &command,
    ]);
    // Everything the pane prints also goes to the FIFO: each redraw wakes the test, which then
    // reads the rendered screen. No polling on the clock; frames drawn before the pipe was
    // attached are simply not seen, and the next one comes a tenth of a second later.
    tmux.run(&[
        "pipe-pane",
        "-t",
        "watch",
        "-O",
        &format!("cat > {}", fifo.display()),
    ]);
    let (frames, redraws) = mpsc::channel();
    let reader_fifo = fifo.clone();
    std::thread::spawn(move || {
        let mut pane = std::fs::File::open(reader_fifo).expect("open the FIFO");
        let mut buf = [0u8; 4096];
        while let Ok(n) = pane.read(&mut buf) {
            if n == 0 || frames.send(()).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(20);
    let wait_for = |want: u64| loop {
        let screen = tmux.screen();
        if pending(&screen) == Some(want) {
            return screen;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        redraws
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the screen never showed {want} pending:\n{screen}"));
    };
    let before = wait_for(0);
    assert!(before.contains("outbox watch"), "{before}");

    let records = (0..3)
        .map(|i| NewRecord::new(format!("{{\"n\":{i}}}").into_bytes()))
        .collect();
    store.enqueue(records, 1_000).await.unwrap();
    let after = wait_for(3);
    // Redrawn in place: one frame on the screen, not a scroll of them.
    assert_eq!(after.matches("pending").count(), 1, "{after}");

    let (ended, end) = mpsc::channel();
    let mut waiter = Command::new("tmux")
        .args(["-L", &tmux.socket, "wait-for", "watch-done"])
        .spawn()
        .expect("tmux wait-for");
    tmux.run(&["send-keys", "-t", "watch", "C-c"]);
    std::thread::spawn(move || {
        let _ = ended.send(waiter.wait());
    });
    end.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("watch stopped on Ctrl-C")
        .expect("tmux wait-for");
    let code = std::fs::read_to_string(&status).expect("exit status");
    assert_eq!(code.trim(), "0", "watch ends with status 0 on Ctrl-C");
    store.close().await;
}
