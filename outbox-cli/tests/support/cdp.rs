//! Just enough of the Chrome DevTools Protocol to drive headless Chromium from a test: launch
//! Debian's `chromium`, speak WebSocket to its debugging port, call methods, await events.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

/// How long one answer or event may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

/// `Some(reason)` when a test that needs `program` must skip: the program is missing and this
/// is not CI. In CI (`CI=true`) a missing program fails the test.
pub fn missing(program: &str, install: &str) -> Option<String> {
    let found = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return None;
    }
    let reason = format!("`{program}` is not installed ({install})");
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{reason}: CI must have it (.ci/run installs it)"
    );
    // Straight to the stderr handle: the harness captures `eprintln!`, and a skip must show.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {reason}; this test did not run ***\n"
    );
    Some(reason)
}

/// A headless Chromium and one WebSocket to its browser target.
pub struct Browser {
    child: Child,
    ws: Socket,
    next_id: u64,
    events: VecDeque<Value>,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium with a throwaway profile and connects to it.
    pub fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        // Chromium says where it listens on stderr; read it on a thread so a silent browser
        // fails the test after PATIENCE instead of blocking it.
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(PATIENCE)
            .expect("chromium printed its DevTools address");
        Browser {
            child,
            ws: Socket::connect(&url),
            next_id: 1,
            events: VecDeque::new(),
            _profile: profile,
        }
    }

    /// Calls `method` (on a page's `session`, or the browser) and returns its result.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.ws.send(&message.to_string());
        loop {
            let reply: Value = serde_json::from_str(&self.ws.receive()).expect("CDP JSON");
            if reply["id"] == json!(id) {
                if let Some(error) = reply.get("error") {
                    panic!("{method} failed: {error}");
                }
                return reply["result"].clone();
            }
            if reply.get("method").is_some() {
                self.events.push_back(reply);
            }
        }
    }

    /// Waits for the event `method` on `session`.
    pub fn event(&mut self, session: &str, method: &str) -> Value {
        let matches = |e: &Value| e["method"] == json!(method) && e["sessionId"] == json!(session);
        if let Some(at) = self.events.iter().position(matches) {
            return self.events.remove(at).expect("event");
        }
        loop {
            let event: Value = serde_json::from_str(&self.ws.receive()).expect("CDP JSON");
            if matches(&event) {
                return event;
            }
            self.events.push_back(event);
        }
    }

    /// Opens a new tab on `url` and returns its session once the page has loaded.
    pub fn open(&mut self, url: &str) -> String {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        let session = attached["sessionId"].as_str().expect("session").to_owned();
        self.call(Some(&session), "Page.enable", json!({}));
        self.call(Some(&session), "Page.navigate", json!({ "url": url }));
        self.event(&session, "Page.loadEventFired");
        session
    }

    /// Evaluates `expression` in the page, awaiting it if it is a promise; returns its value.
    pub fn eval(&mut self, session: &str, expression: &str) -> Value {
        let result = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
        );
        if let Some(details) = result.get("exceptionDetails") {
            panic!("page script failed: {details}");
        }
        result["result"]["value"].clone()
    }
}

/// A client WebSocket (RFC 6455) on a TCP stream: text frames, masked as a client must.
struct Socket {
    stream: BufReader<TcpStream>,
}

impl Socket {
    fn connect(url: &str) -> Socket {
        let rest = url.strip_prefix("ws://").expect("ws:// address");
        let (host, path) = rest.split_at(rest.find('/').expect("path"));
        let stream = TcpStream::connect(host).expect("connect to DevTools");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut stream = BufReader::new(stream);
        write!(
            stream.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: b3V0Ym94LWNsaS10ZXN0cw==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .expect("handshake");
        let mut status = String::new();
        stream.read_line(&mut status).expect("handshake answer");
        assert!(
            status.contains(" 101 "),
            "DevTools refused the WebSocket: {status}"
        );
        loop {
            let mut line = String::new();
            stream.read_line(&mut line).expect("handshake headers");
            if line == "\r\n" {
                break;
            }
        }
        Socket { stream }
    }

    fn frame(&mut self, opcode: u8, payload: &[u8]) {
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n @ 0..=125 => frame.push(0x80 | n as u8),
            n @ 126..=0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask: [u8; 4] = fastrand_mask();
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.get_mut().write_all(&frame).expect("send frame");
    }

    fn send(&mut self, text: &str) {
        self.frame(0x1, text.as_bytes());
    }

    fn receive(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream
                .read_exact(&mut head)
                .expect("frame from DevTools");
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0f;
            let len = match head[1] & 0x7f {
                126 => {
                    let mut n = [0u8; 2];
                    self.stream.read_exact(&mut n).expect("length");
                    u64::from(u16::from_be_bytes(n))
                }
                127 => {
                    let mut n = [0u8; 8];
                    self.stream.read_exact(&mut n).expect("length");
                    u64::from_be_bytes(n)
                }
                n => u64::from(n),
            };
            let mut payload = vec![0u8; len as usize];
            self.stream.read_exact(&mut payload).expect("payload");
            match opcode {
                0x9 => self.frame(0xA, &payload), // ping: answer, keep reading
                0x8 => panic!("DevTools closed the WebSocket"),
                0x0..=0x2 => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8(message).expect("UTF-8 message");
                    }
                }
                _ => {}
            }
        }
    }
}

fn fastrand_mask() -> [u8; 4] {
    outbox_core::fastrand::u32(..).to_be_bytes()
}
