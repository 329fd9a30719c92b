//! `outbox serve` in headless Chromium: the page loads, a screenshot is taken, "retry" is
//! pressed on a needs-attention record and the record is pending afterwards; a POST without
//! the page's token is refused.
#![cfg(feature = "sqlite")]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

use outbox_core::{RecordId, State, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use serde_json::json;
use support::cdp::{missing, Browser};

/// The `serve` child, killed when the test ends however it ends.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(path: &std::path::Path) -> Server {
    let mut child = support::outbox()
        .args(["serve", path.to_str().unwrap(), "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start outbox serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("the address line");
    let port = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Server { child, port }
}

/// One HTTP/1.1 request on a fresh connection; returns the status and the body.
fn http(port: u16, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    let status = answer[9..12].parse().expect("status code");
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

fn post(port: u16, path: &str, extra_headers: &str) -> (u16, String) {
    http(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra_headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
}

async fn state_of(path: &std::path::Path, id: u64) -> State {
    let store = SqliteStore::open(path, SqliteConfig::default().read_only(true))
        .await
        .unwrap();
    let state = store
        .get(RecordId(id))
        .await
        .unwrap()
        .expect("record")
        .state;
    store.close().await;
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_retries_a_record_and_refuses_a_post_without_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::seed(&store).await;
    store.close().await;
    let server = serve(&path);
    let port = server.port;

    // Another page cannot press the buttons: no token, a wrong token, another host name.
    let (status, body) = post(port, "/api/records/9/retry", "");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("missing or wrong token"), "{body}");
    let (status, _) = post(port, "/api/records/9/retry", "X-Outbox-Token: 00000000\r\n");
    assert_eq!(status, 403);
    let (status, _) = http(
        port,
        "GET / HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 403, "a rebound host name is refused");
    assert_eq!(state_of(&path, 9).await, State::NeedsAttention);

    // The list pages and filters like `list --json`.
    let get = |path: &str| {
        http(
            port,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
        )
    };
    let (status, body) = get("/api/records?state=needs-attention&limit=1");
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&page["records"][0]["id"], &page["next_after"]),
        (&json!(1), &json!(1))
    );
    let (_, body) = get("/api/records?state=needs-attention&after=1");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&page["records"][0]["id"], &page["next_after"]),
        (&json!(9), &json!(null))
    );
    let (status, body) = get("/api/records?state=done");
    assert_eq!(status, 400, "{body}");

    if missing("chromium", "apt-get install chromium").is_some() {
        return;
    }
    let url = format!("http://127.0.0.1:{port}/");
    tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch();
        let page = browser.open(&url);
        // The page's script fills the counts and the list after load: wait for both.
        let retry = r#"button[data-action="retry"][data-id="9"]"#;
        let appeared = browser.eval(
            &page,
            &format!(
                "new Promise((resolve) => {{
                    const found = () => document.querySelector('{retry}')
                        && document.querySelector('#counts button[data-count=\"needs-attention\"]');
                    if (found()) return resolve(true);
                    new MutationObserver((_, observer) => {{
                        if (found()) {{ observer.disconnect(); resolve(true); }}
                    }}).observe(document.body, {{ childList: true, subtree: true }});
                }})"
            ),
        );
        assert_eq!(appeared, json!(true));
        let parked = browser.eval(
            &page,
            r#"document.querySelector('#counts button[data-count="needs-attention"] b').textContent"#,
        );
        assert_eq!(parked, json!("2"), "the counts show both needs-attention records");
        let shot = browser.call(Some(&page), "Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64_decode(shot["data"].as_str().expect("image data"));
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("outbox-serve.png");
        std::fs::write(&file, &png).unwrap();
        eprintln!("screenshot of the page: {}", file.display());

        // Press "retry" and wait for the page to report the server's answer.
        let status = browser.eval(
            &page,
            &format!(
                "new Promise((resolve) => {{
                    const status = document.getElementById('status');
                    new MutationObserver(() => resolve(status.textContent))
                        .observe(status, {{ childList: true, characterData: true, subtree: true }});
                    document.querySelector('{retry}').click();
                }})"
            ),
        );
        assert_eq!(status, json!("retried #9: due now with a fresh budget"));
        let row = browser.eval(
            &page,
            r#"document.querySelector('tr[data-record="9"]').innerText"#,
        );
        assert!(row.as_str().unwrap().contains("pending"), "the list shows it: {row}");

        // A count filters the list by its state.
        let ids = browser.eval(
            &page,
            r#"new Promise((resolve) => {
                const rows = document.getElementById('rows');
                new MutationObserver((_, observer) => {
                    observer.disconnect();
                    resolve([...rows.querySelectorAll('tr[data-record]')].map((r) => r.dataset.record));
                }).observe(rows, { childList: true });
                document.querySelector('#counts button[data-count="rejected"]').click();
            })"#,
        );
        assert_eq!(ids, json!(["4"]));
    })
    .await
    .unwrap();
    // The file says so too: #9 (parked by a crash loop, never attempted) is pending again.
    assert_eq!(state_of(&path, 9).await, State::Pending);
    drop(server);
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let bits = digits
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | value(c) << (18 - 6 * i));
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..digits.len()]);
    }
    out
}
