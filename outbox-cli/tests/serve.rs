//! `outbox serve` over raw HTTP and in headless Chromium: nothing is served without the
//! token of the printed URL, the page loads with it; read-only unless `--write`, where a
//! discard needs a reason and a confirmation, a repair of a record that changed since the
//! page showed it is refused, and every change is logged with the operating-system user.
#![cfg(feature = "sqlite")]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use outbox_core::{RecordId, State, Store};
use outbox_sqlite::{SqliteConfig, SqliteStore};
use serde_json::{json, Value};
use support::cdp::{missing, Browser};

/// The `serve` child, killed when the test ends however it ends.
struct Server {
    child: Child,
    port: u16,
    url: String,
    /// Lines of its stderr, as they come.
    log: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Waits (at most 20 s) for a stderr line containing every one of `words`.
    fn logged(&self, words: &[&str]) -> String {
        loop {
            let line = self
                .log
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no log line with {words:?}"));
            if words.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    }

    fn token(&self) -> &str {
        self.url
            .split("?token=")
            .nth(1)
            .expect("a token in the URL")
    }
}

fn serve(path: &Path, write: bool) -> Server {
    let mut command = support::outbox();
    command.args(["serve", path.to_str().unwrap(), "--port", "0"]);
    if write {
        command.arg("--write");
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start outbox serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("the address line");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    let port = url["http://127.0.0.1:".len()..]
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url:?}"));
    let stderr = child.stderr.take().unwrap();
    let (lines, log) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(std::io::stderr(), "serve: {line}");
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    Server {
        child,
        port,
        url,
        log,
    }
}

/// An answer: status, headers (lower-case names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection.
fn http(port: u16, method: &str, path: &str, headers: &str, body: &str) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let host = if headers.starts_with("Host:") {
        String::new()
    } else {
        format!("Host: 127.0.0.1:{port}\r\n")
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\n{host}{headers}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default()[9..12]
        .parse()
        .expect("status code");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

async fn seeded(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("app.db");
    let store = SqliteStore::create(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::seed(&store).await;
    store.close().await;
    path
}

async fn record(path: &Path, id: u64) -> Option<outbox_core::Record> {
    let store = SqliteStore::open(path, SqliteConfig::default().read_only(true))
        .await
        .unwrap();
    let record = store.get(RecordId(id)).await.unwrap();
    store.close().await;
    record
}

/// Waits in the page until `condition` (a JavaScript expression) holds, then returns
/// `value` (another expression).
fn wait_for(browser: &mut Browser, page: &str, condition: &str, value: &str) -> Value {
    browser.eval(
        page,
        &format!(
            "new Promise((resolve) => {{
                const done = () => {{ try {{ return {condition}; }} catch (_) {{ return false; }} }};
                if (done()) return resolve({value});
                new MutationObserver((_, observer) => {{
                    if (done()) {{ observer.disconnect(); resolve({value}); }}
                }}).observe(document, {{ childList: true, subtree: true, characterData: true, attributes: true }});
            }})"
        ),
    )
}

/// Saves a screenshot of the page next to the build's other test output, for a person to
/// look at (the path is printed).
fn screenshot(browser: &mut Browser, page: &str, name: &str) {
    let shot = browser.call(
        Some(page),
        "Page.captureScreenshot",
        json!({ "format": "png" }),
    );
    let data = shot["data"].as_str().expect("image data");
    let png = base64_decode(data);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&file, png).unwrap();
    let _ = writeln!(
        std::io::stderr(),
        "screenshot of the page: {}",
        file.display()
    );
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
        out.extend_from_slice(&bits.to_be_bytes()[1..digits.len()]);
    }
    out
}

/// Clicks `selector` and waits for the status line to change; returns its text.
fn click_for_status(browser: &mut Browser, page: &str, selector: &str) -> Value {
    browser.eval(
        page,
        &format!(
            "new Promise((resolve) => {{
                const status = document.getElementById('status');
                new MutationObserver((_, observer) => {{ observer.disconnect(); resolve(status.textContent); }})
                    .observe(status, {{ childList: true, characterData: true, subtree: true }});
                document.querySelector('{selector}').click();
            }})"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_nothing_is_served_and_the_page_only_reads_unless_told_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let server = serve(&path, false);
    let port = server.port;

    // No token, a wrong token, a rebound host name: nothing but a refusal.
    for target in [
        "/",
        "/page.js",
        "/api/stats",
        "/api/records/9",
        "/?token=00",
    ] {
        let answer = http(port, "GET", target, "", "");
        assert_eq!(answer.status, 401, "{target}: {}", answer.body);
        assert!(answer.body.contains("needs its token"), "{target}");
        assert!(!answer.body.contains("<html"), "{target}");
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    }
    let rebound = http(
        port,
        "GET",
        &format!("/?token={}", server.token()),
        "Host: evil.example\r\n",
        "",
    );
    assert_eq!(rebound.status, 403, "a rebound host name is refused");

    // The printed URL sets the cookie and leaves the address bar.
    let first = http(port, "GET", &format!("/?token={}", server.token()), "", "");
    assert_eq!(first.status, 303);
    assert_eq!(first.header("location"), Some("/"));
    let cookie = first.header("set-cookie").expect("a cookie").to_owned();
    assert!(
        cookie.contains("; HttpOnly; SameSite=Strict; Path=/"),
        "{cookie}"
    );
    let cookie = format!("Cookie: {}\r\n", cookie.split(';').next().unwrap());
    let page = http(port, "GET", "/", &cookie, "");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert!(page
        .body
        .contains(r#"<meta name="outbox-write" content="false">"#));
    assert!(
        !page.body.contains(server.token()),
        "the page does not hold the token"
    );
    let csrf = csrf_of(&page.body);

    // The API pages and filters like `list --json`.
    let get = |target: &str| -> Value {
        let answer = http(port, "GET", target, &cookie, "");
        assert_eq!(answer.status, 200, "{target}: {}", answer.body);
        serde_json::from_str(&answer.body).unwrap()
    };
    let one = get("/api/records?state=needs-attention&limit=1");
    assert_eq!(
        (&one["records"][0]["id"], &one["next_after"]),
        (&json!(1), &json!(1))
    );
    let rest = get("/api/records?state=needs-attention&after=1");
    assert_eq!(
        (&rest["records"][0]["id"], &rest["next_after"]),
        (&json!(9), &json!(null))
    );
    assert_eq!(
        http(port, "GET", "/api/records?state=done", &cookie, "").status,
        400
    );

    // Read-only: a POST is refused even with the cookie, the CSRF value and the revision.
    let seen = get("/api/records/9")["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = json!({ "seen": seen }).to_string();
    let csrf_header =
        format!("{cookie}X-Outbox-Csrf: {csrf}\r\nContent-Type: application/json\r\n");
    let refused = http(port, "POST", "/api/records/9/retry", &csrf_header, &body);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("read-only"), "{}", refused.body);
    let no_csrf = http(port, "POST", "/api/records/9/retry", &cookie, &body);
    assert_eq!(no_csrf.status, 403);
    assert!(no_csrf.body.contains("X-Outbox-Csrf"), "{}", no_csrf.body);
    assert_eq!(record(&path, 9).await.unwrap().state, State::NeedsAttention);
    let halt = get("/api/stats")["halt"].clone();
    let lift = json!({ "seen": halt }).to_string();
    let refused = http(port, "POST", "/api/halt/resume", &csrf_header, &lift);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(get("/api/stats")["halt"].is_object(), "still halted");

    if missing("chromium", "apt-get install chromium").is_some() {
        return;
    }
    let (bare, with_token) = (format!("http://127.0.0.1:{port}/"), server.url.clone());
    let attempts_of_9 = record(&path, 9).await.unwrap().history.len();
    assert!(
        attempts_of_9 > 0,
        "the seed gives record 9 attempts to show"
    );
    tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch();
        // Without the token the browser gets the refusal and no page.
        let page = browser.open(&bare);
        let text = browser.eval(&page, "document.body.innerText");
        assert!(text.as_str().unwrap().contains("needs its token"), "{text}");
        assert_eq!(browser.eval(&page, "document.getElementById('counts') === null"), json!(true));
        // With it, the page loads: counts and list, and not one button that writes.
        let page = browser.open(&with_token);
        let rows = wait_for(
            &mut browser,
            &page,
            "document.querySelectorAll('tr[data-record]').length > 0 && document.querySelector('#counts button[data-count=\"needs-attention\"]')",
            "document.querySelectorAll('tr[data-record]').length",
        );
        assert_eq!(rows, json!(7), "every record and no tombstone is listed");
        assert_eq!(browser.eval(&page, "location.pathname + location.search"), json!("/"));
        assert_eq!(browser.eval(&page, "document.cookie"), json!(""), "HttpOnly");
        assert_eq!(
            browser.eval(&page, "document.querySelectorAll('button[data-action]').length"),
            json!(0)
        );
        browser.eval(&page, "document.querySelector('tr[data-record=\"9\"]').click()");
        let detail = wait_for(
            &mut browser,
            &page,
            "!document.getElementById('detail').hidden",
            "document.getElementById('detail').innerText",
        );
        assert!(detail.as_str().unwrap().contains("record #9"), "{detail}");
        assert!(!detail.as_str().unwrap().contains("[object"), "{detail}");
        // The attempts are a table of their own: a header row and one row each.
        assert_eq!(
            browser.eval(&page, "document.querySelectorAll('#detail table.attempts tr').length"),
            json!(attempts_of_9 + 1),
            "{detail}"
        );
        assert_eq!(
            browser.eval(&page, "document.querySelectorAll('#detail button').length"),
            json!(0)
        );
        let mode = browser.eval(&page, "document.getElementById('mode').textContent");
        assert!(mode.as_str().unwrap().starts_with("Read-only"), "{mode}");
    })
    .await
    .unwrap();
    drop(server);
}

/// The CSRF value the page carries.
fn csrf_of(page: &str) -> String {
    page.split(r#"<meta name="outbox-csrf" content=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's CSRF value")
        .to_owned()
}

/// The cookie line and the CSRF header lines of a session on `server`.
fn session(server: &Server) -> (String, String) {
    let port = server.port;
    let first = http(port, "GET", &format!("/?token={}", server.token()), "", "");
    let cookie = first.header("set-cookie").expect("a cookie");
    let cookie = format!("Cookie: {}\r\n", cookie.split(';').next().unwrap());
    let page = http(port, "GET", "/", &cookie, "");
    let csrf = csrf_of(&page.body);
    let post = format!("{cookie}X-Outbox-Csrf: {csrf}\r\nContent-Type: application/json\r\n");
    (cookie, post)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_write_resume_lifts_the_halt_the_page_showed_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let server = serve(&path, true);
    let port = server.port;
    let (cookie, post) = session(&server);
    let stats = || -> Value {
        serde_json::from_str(&http(port, "GET", "/api/stats", &cookie, "").body).unwrap()
    };
    let shown = stats()["halt"].clone();
    assert_eq!(shown["reason"], "HTTP 401 Unauthorized: token expired");

    // A halt other than the one shown (the runner resumed and halted again): left, 409.
    let mut other = shown.clone();
    other["since"] = json!(shown["since"].as_u64().unwrap() - 1);
    let stale = http(
        port,
        "POST",
        "/api/halt/resume",
        &post,
        &json!({ "seen": other }).to_string(),
    );
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert!(
        stale.body.contains("changed since you looked"),
        "{}",
        stale.body
    );
    let line = server.logged(&["via=page", "verb=resume"]);
    assert!(line.contains(" unchanged: "), "{line}");
    assert_eq!(stats()["halt"], shown, "still halted");

    // The halt as shown: lifted, logged with the person's user.
    let lift = json!({ "seen": shown }).to_string();
    let lifted = http(port, "POST", "/api/halt/resume", &post, &lift);
    assert_eq!(lifted.status, 200, "{}", lifted.body);
    let message: Value = serde_json::from_str(&lifted.body).unwrap();
    assert!(
        message["message"]
            .as_str()
            .unwrap()
            .starts_with("lifted the halt since"),
        "{message}"
    );
    let line = server.logged(&["via=page", "verb=resume"]);
    let user = outbox_cli::audit::User::current();
    assert!(
        line.contains(&format!(" user={user} ")) && line.contains(" done: lifted "),
        "{line}"
    );
    assert!(stats()["halt"].is_null(), "lifted");

    // Again: nothing to lift, said.
    let again = http(port, "POST", "/api/halt/resume", &post, &lift);
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("was lifted already"), "{}", again.body);
    // No body: a clear 400.
    let bare = http(port, "POST", "/api/halt/resume", &post, "{}");
    assert_eq!(bare.status, 400, "{}", bare.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_write_a_discard_needs_a_reason_and_a_confirmation_and_every_change_is_logged() {
    if missing("chromium", "apt-get install chromium").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    let server = serve(&path, true);
    let url = server.url.clone();
    let (to_browser, steps) = mpsc::channel::<()>();
    let (to_test, done) = mpsc::channel::<&'static str>();
    let browser = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch();
        let page = browser.open(&url);
        let retry = r#"button[data-action="retry"][data-id="9"]"#;
        wait_for(
            &mut browser,
            &page,
            &format!("document.querySelector('{retry}')"),
            "true",
        );
        screenshot(&mut browser, &page, "outbox-serve.png");

        // Retry: one click, logged.
        let status = click_for_status(&mut browser, &page, retry);
        assert_eq!(status, json!("retried #9: due now with a fresh budget"));
        to_test.send("retried").unwrap();

        // Discard: the button only asks.
        let discard = r#"button[data-action="discard"][data-id="4"]"#;
        browser.eval(
            &page,
            &format!("document.querySelector('{discard}').click()"),
        );
        assert_eq!(
            browser.eval(&page, "document.getElementById('confirm').open"),
            json!(true)
        );
        assert_eq!(
            browser.eval(&page, "document.getElementById('confirm-reason').value"),
            json!(""),
            "no reason is offered for the person"
        );
        // Confirmed without a reason: refused on the page, nothing sent.
        browser.eval(&page, "document.getElementById('confirm-yes').click()");
        let problem = browser.eval(
            &page,
            "document.getElementById('confirm-problem').textContent",
        );
        assert_eq!(problem, json!("Say why: a discard needs a reason."));
        assert_eq!(
            browser.eval(&page, "document.getElementById('confirm').open"),
            json!(true)
        );
        screenshot(&mut browser, &page, "outbox-serve-discard.png");
        to_test.send("asked").unwrap();
        steps.recv().unwrap();
        // Cancelled: nothing changes.
        let status = click_for_status(&mut browser, &page, "#confirm-no");
        assert_eq!(status, json!("discard of #4 cancelled; nothing changed"));
        // With a reason and the confirmation: discarded.
        browser.eval(
            &page,
            &format!("document.querySelector('{discard}').click()"),
        );
        browser.eval(
            &page,
            "document.getElementById('confirm-reason').value = 'sent by hand'",
        );
        let status = click_for_status(&mut browser, &page, "#confirm-yes");
        assert_eq!(
            status,
            json!("discarded #4; its tombstone stays until pruned")
        );
        to_test.send("discarded").unwrap();

        // #1 changes after the page drew it: its retry is refused, and the page says why.
        steps.recv().unwrap();
        let status = click_for_status(
            &mut browser,
            &page,
            r#"button[data-action="retry"][data-id="1"]"#,
        );
        let status = status.as_str().unwrap().to_owned();
        assert!(
            status.starts_with("left #1 as it is: it changed since you looked"),
            "{status}"
        );
        to_test.send("refused").unwrap();

        // Resume: the button asks, then lifts the halt the page shows.
        browser.eval(&page, "document.getElementById('resume').click()");
        assert_eq!(
            browser.eval(&page, "document.getElementById('resume-confirm').open"),
            json!(true)
        );
        let question = browser.eval(
            &page,
            "document.getElementById('resume-question').textContent",
        );
        assert!(
            question.as_str().unwrap().contains("token expired"),
            "{question}"
        );
        let status = click_for_status(&mut browser, &page, "#resume-yes");
        let status = status.as_str().unwrap().to_owned();
        assert!(status.starts_with("lifted the halt since"), "{status}");
        wait_for(
            &mut browser,
            &page,
            "document.getElementById('facts').textContent.includes('runner not halted')",
            "true",
        );
        to_test.send("resumed").unwrap();
    });

    let user = outbox_cli::audit::User::current();
    let name = user.name.clone().unwrap();
    let next = |want: &str| {
        let got = done
            .recv_timeout(Duration::from_secs(60))
            .expect("the browser's next step");
        assert_eq!(got, want);
    };
    next("retried");
    let line = server.logged(&["via=page", "verb=retry", "record=#9"]);
    assert!(
        line.starts_with("audit: ")
            && line.contains(&format!(" user={user} "))
            && line.ends_with(" done"),
        "{line}"
    );
    assert_eq!(record(&path, 9).await.unwrap().state, State::Pending);
    next("asked");
    assert_eq!(
        record(&path, 4).await.unwrap().state,
        State::Rejected,
        "asking changed nothing"
    );
    to_browser.send(()).unwrap();
    next("discarded");
    let line = server.logged(&["via=page", "verb=discard", "record=#4"]);
    assert!(line.ends_with(" done reason=\"sent by hand\""), "{line}");
    assert!(record(&path, 4).await.is_none());
    let tombstone = support::show(&path, 4);
    assert_eq!(
        tombstone["reason"],
        format!("sent by hand (discarded by a person, {name}, on the outbox page)")
    );

    // The application records a verdict on #1 while the page shows it as needs-attention.
    let app = SqliteStore::open(&path, SqliteConfig::default())
        .await
        .unwrap();
    support::reject_now(&app, 1).await;
    to_browser.send(()).unwrap();
    next("refused");
    let line = server.logged(&["via=page", "verb=retry", "record=#1"]);
    assert!(line.contains(" unchanged: "), "{line}");
    assert_eq!(
        app.get(RecordId(1)).await.unwrap().unwrap().state,
        State::Rejected
    );
    next("resumed");
    let line = server.logged(&["via=page", "verb=resume"]);
    assert!(line.contains(" done: lifted "), "{line}");
    assert_eq!(app.halt().await.unwrap(), None);
    app.close().await;
    browser.await.unwrap();
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_read_is_listed_and_shown_without_buttons() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path()).await;
    // Record 9's state code damaged, as a hand edit or a bit flip leaves it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let damaged = conn
        .execute("UPDATE records SET state = 9 WHERE id = 9", [])
        .unwrap();
    assert_eq!(damaged, 1);
    drop(conn);
    let server = serve(&path, true);
    let port = server.port;
    let (cookie, _) = session(&server);
    let get = |target: &str| -> Value {
        let answer = http(port, "GET", target, &cookie, "");
        assert_eq!(answer.status, 200, "{target}: {}", answer.body);
        serde_json::from_str(&answer.body).unwrap()
    };
    let row = json!({ "id": 9, "state": "unreadable", "reason": "unknown state code 9" });
    assert_eq!(
        get("/api/records?state=unreadable"),
        json!({ "records": [row.clone()], "next_after": null })
    );
    assert_eq!(get("/api/records/9"), row);

    if missing("chromium", "apt-get install chromium").is_some() {
        return;
    }
    let with_token = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch();
        let page = browser.open(&with_token);
        wait_for(
            &mut browser,
            &page,
            "document.querySelectorAll('tr[data-record]').length > 0",
            "true",
        );
        browser.eval(&page, "setFilter('unreadable', '')");
        assert_eq!(
            browser.eval(&page, "document.getElementById('filter').state.value"),
            json!("unreadable"),
            "the filter offers it"
        );
        let listed = wait_for(
            &mut browser,
            &page,
            "document.querySelectorAll('tr[data-record]').length === 1",
            "document.getElementById('rows').innerText",
        );
        assert!(
            listed.as_str().unwrap().contains("unknown state code 9"),
            "{listed}"
        );
        browser.eval(
            &page,
            "document.querySelector('tr[data-record=\"9\"]').click()",
        );
        let detail = wait_for(
            &mut browser,
            &page,
            "!document.getElementById('detail').hidden",
            "document.getElementById('detail').innerText",
        );
        let detail = detail.as_str().unwrap();
        assert!(detail.contains("unknown state code 9"), "{detail}");
        assert!(detail.contains("outbox discard"), "{detail}");
        // Even with --write: such a row has no revision for a button to send.
        assert_eq!(
            browser.eval(&page, "document.querySelectorAll('#detail button').length"),
            json!(0)
        );
    })
    .await
    .unwrap();
    drop(server);
}
