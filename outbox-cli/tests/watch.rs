//! The command in a real terminal (a tmux pane): `watch`'s counts change on screen while the
//! test enqueues, the frame is redrawn in place, and Ctrl-C ends it cleanly; and a server's
//! control sequences in a record reach the screen of `list`, `show` and `watch` escaped,
//! neither setting the pane's title nor colouring a cell.
#![cfg(feature = "sqlite")]

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use outbox_core::{NewRecord, State, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use support::cdp::missing;

/// A private tmux server (its socket in the test's directory), killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-S", &self.socket])
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
            .args(["-S", &self.socket, "kill-server"])
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
        socket: dir.path().join("tmux").display().to_string(),
    };
    let status = dir.path().join("status");
    // The shell notes watch's exit status and signals the test through tmux's wait-for.
    let command = format!(
        "TZ=UTC {} watch {} --interval 100ms; echo $? > {}; tmux -S {} wait-for -S watch-done",
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
        .args(["-S", &tmux.socket, "wait-for", "watch-done"])
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

/// What a hostile server answered: a window title, then colours, then words.
const HOSTILE: &str = "\x1b]0;x\x07\x1b[31mred\x1b[0m HTTP 500";
/// How the command shows it.
const ESCAPED: &str = "\\x1b]0;x\\x07\\x1b[31mred\\x1b[0m HTTP 500";

impl Tmux {
    /// Starts `command` in a new window `name` of `session`, held until [`Tmux::go`], that
    /// signals `name-done` when it ends; the window stays after its command ends.
    fn window(&self, name: &str, command: &str) {
        let held = format!(
            "tmux -S {s} wait-for go-{name}; {command}; tmux -S {s} wait-for -S {name}-done",
            s = self.socket
        );
        self.run(&["new-window", "-d", "-t", "hold", "-n", name, &held]);
        self.run(&["select-pane", "-t", &format!("hold:{name}"), "-T", "before"]);
    }

    fn go(&self, name: &str) {
        self.run(&["wait-for", "-S", &format!("go-{name}")]);
    }

    fn title(&self, name: &str) -> String {
        self.run(&[
            "display-message",
            "-p",
            "-t",
            &format!("hold:{name}"),
            "#{pane_title}",
        ])
        .trim_end()
        .to_owned()
    }

    /// The window's screen and its history (where tmux moves the last screen of a command
    /// that ended), lines joined, with the cells' colours as escape sequences.
    fn styled(&self, name: &str) -> String {
        self.run(&[
            "capture-pane",
            "-p",
            "-e",
            "-J",
            "-S",
            "-",
            "-t",
            &format!("hold:{name}"),
        ])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_control_sequences_are_shown_escaped_and_never_obeyed() {
    if missing("tmux", "apt-get install tmux").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::seed(&store).await;
    let payload = b"text \x1b]0;payload\x07 \x1b[32mgreen".to_vec();
    let ids = store
        .enqueue(vec![NewRecord::new(payload)], support::NOW)
        .await
        .unwrap();
    assert_eq!(ids[0].0, 10);
    support::report(&store, 10, State::Retrying, HOSTILE).await;
    store.close().await;

    let tmux = Tmux {
        socket: dir.path().join("tmux").display().to_string(),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "hold",
        "-x",
        "200",
        "-y",
        "50",
        "cat",
    ]);
    tmux.run(&["set-option", "-g", "remain-on-exit", "on"]);
    let outbox = format!(
        "TZ=UTC {} --now {}",
        env!("CARGO_BIN_EXE_outbox"),
        support::NOW
    );
    let p = path.display();

    // The control: the same bytes printed raw set the title and colour the cell.
    tmux.window("raw", &format!("printf '%s\\n' '{HOSTILE}'"));
    let ended = |name: &str| {
        Command::new("tmux")
            .args(["-S", &tmux.socket, "wait-for", &format!("{name}-done")])
            .spawn()
            .expect("tmux wait-for")
    };
    let mut raw = ended("raw");
    tmux.go("raw");
    assert!(raw.wait().unwrap().success());
    assert_eq!(tmux.title("raw"), "x", "tmux obeys a raw title sequence");
    let raw_screen = tmux.styled("raw");
    assert!(
        raw_screen.contains("\x1b[31mred"),
        "and colours: {raw_screen:?}"
    );

    for (name, args) in [("list", "list"), ("show", "show"), ("stats", "stats")] {
        let extra = if name == "show" { " 10" } else { "" };
        tmux.window(name, &format!("{outbox} {args} {p}{extra}"));
        let mut done = ended(name);
        tmux.go(name);
        assert!(done.wait().unwrap().success());
        let screen = tmux.styled(name);
        assert!(screen.contains(ESCAPED), "{name}:\n{screen}");
        assert!(
            !screen.contains("\x1b[31m"),
            "{name} coloured a cell:\n{screen}"
        );
        assert_eq!(tmux.title(name), "before", "{name} set the title");
        if name == "show" {
            let payload = "text \\x1b]0;payload\\x07 \\x1b[32mgreen";
            assert!(screen.contains(payload), "{screen}");
            assert!(!screen.contains("\x1b[32m"), "{screen}");
        }
    }

    // watch: wait for a frame (its output wakes the test through a FIFO), then stop it.
    let fifo = dir.path().join("pane");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    tmux.window("watch", &format!("{outbox} watch {p} --interval 100ms"));
    tmux.run(&[
        "pipe-pane",
        "-t",
        "hold:watch",
        "-O",
        &format!("cat > {}", fifo.display()),
    ]);
    let (frames, redraws) = mpsc::channel();
    std::thread::spawn(move || {
        let mut pane = std::fs::File::open(fifo).expect("open the FIFO");
        let mut buf = [0u8; 4096];
        while let Ok(n) = pane.read(&mut buf) {
            if n == 0 || frames.send(()).is_err() {
                break;
            }
        }
    });
    let mut done = ended("watch");
    tmux.go("watch");
    let deadline = Instant::now() + Duration::from_secs(20);
    let screen = loop {
        let screen = tmux.styled("watch");
        if screen.contains("common errors") && screen.contains("HTTP 500") {
            break screen;
        }
        redraws
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("watch never drew its frame:\n{screen}"));
    };
    assert!(screen.contains(ESCAPED), "{screen}");
    assert!(!screen.contains("\x1b[31m"), "{screen}");
    assert_eq!(tmux.title("watch"), "before", "watch set the title");
    tmux.run(&["send-keys", "-t", "hold:watch", "C-c"]);
    assert!(done.wait().unwrap().success());
}
