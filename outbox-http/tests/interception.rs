//! A network that intercepts HTTPS, from outside: our server's
//! address answers the TLS handshake with certificates the client does not trust (the
//! interceptor's own issuer, then one of ours that expired, then one of ours for another
//! name), across a restart of the outbox on the same store, and then with the trusted one.
//! Never a halt, no budget spent, the link reported down with what is wrong, and then every
//! write delivered. The URL's query-string secret appears in no reason, event or log line,
//! although every failure here is a transport error, whose text names the URL.
//!
//! Real time, backoffs of milliseconds, and only bounded waits for events (see `support`).

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use outbox_core::{Backoff, Event, ListQuery, NewRecord, Outbox, RetryPolicy, RunnerConfig, Store};
use outbox_http::HttpSink;
use outbox_memory::MemoryStore;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use support::{delivered, next, until, Events, Logs};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

const SECRET: &str = "s3cret-signature";

/// The certificates of the test: a CA the client trusts and what it signs, and an
/// interceptor's own.
struct Pki {
    /// The CA's certificate, the client's only root.
    ca: CertificateDer<'static>,
    trusted: Arc<ServerConfig>,
    /// Each a certificate the client must refuse, with what is wrong with it.
    untrusted: Vec<(&'static str, Arc<ServerConfig>)>,
}

fn server_config(cert: CertificateDer<'static>, key: KeyPair) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], PrivateKeyDer::from(key))
        .unwrap();
    Arc::new(config)
}

/// A certificate for `names` signed by `issuer`, with `edit` applied to its parameters.
fn leaf(
    names: &[&str],
    issuer: &CertifiedIssuer<'_, KeyPair>,
    edit: impl FnOnce(&mut CertificateParams),
) -> Arc<ServerConfig> {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    edit(&mut params);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    server_config(cert.der().clone(), key)
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// Made at test time, so no key is ever checked in.
fn pki() -> Pki {
    let ca = authority("outbox test CA");
    let interceptor = authority("Hotel Wi-Fi secure gateway");
    Pki {
        ca: ca.der().clone(),
        trusted: leaf(&["127.0.0.1"], &ca, |_| {}),
        untrusted: vec![
            ("unknown issuer", leaf(&["127.0.0.1"], &interceptor, |_| {})),
            (
                "expired",
                leaf(&["127.0.0.1"], &ca, |p| {
                    p.not_before = rcgen::date_time_ymd(2000, 1, 1);
                    p.not_after = rcgen::date_time_ymd(2001, 1, 1);
                }),
            ),
            ("wrong name", leaf(&["api.example"], &ca, |_| {})),
        ],
    }
}

/// Our server's address behind an interceptor: each handshake presents the next of the
/// `untrusted` certificates until `fixed`, then the `trusted` one.
struct Interceptor {
    tcp: TcpListener,
    untrusted: Vec<Arc<ServerConfig>>,
    trusted: Arc<ServerConfig>,
    fixed: Arc<AtomicBool>,
    /// Handshakes the client broke off.
    refused: Arc<AtomicUsize>,
}

impl Interceptor {
    /// Serves `/writes` (201, keeping each idempotency key) behind the interceptor; returns
    /// the URL, with a secret in its query string.
    async fn serve(
        untrusted: Vec<Arc<ServerConfig>>,
        trusted: Arc<ServerConfig>,
        fixed: Arc<AtomicBool>,
        refused: Arc<AtomicUsize>,
        requests: Arc<Mutex<Vec<String>>>,
    ) -> String {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = Router::new().route(
            "/writes",
            post(move |headers: HeaderMap| async move {
                let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                requests.lock().unwrap().push(key);
                StatusCode::CREATED
            }),
        );
        let listener = Interceptor {
            tcp,
            untrusted,
            trusted,
            fixed,
            refused,
        };
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("https://{addr}/writes?sig={SECRET}")
    }
}

impl axum::serve::Listener for Interceptor {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let config = if self.fixed.load(Ordering::SeqCst) {
                self.trusted.clone()
            } else {
                let n = self.refused.load(Ordering::SeqCst);
                self.untrusted[n % self.untrusted.len()].clone()
            };
            match TlsAcceptor::from(config).accept(tcp).await {
                Ok(tls) => return (tls, addr),
                Err(_) => {
                    self.refused.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

fn sink(url: &str, ca: &CertificateDer<'static>) -> HttpSink {
    let roots = [reqwest::Certificate::from_der(ca).unwrap()];
    HttpSink::post(url)
        .unwrap()
        .timeout(Duration::from_secs(10))
        .client(reqwest::Client::builder().tls_certs_only(roots))
        .unwrap()
}

async fn start(store: Arc<MemoryStore>, sink: HttpSink) -> Outbox {
    let policy = RetryPolicy::default().with_backoff(Backoff::exponential(
        Duration::from_millis(10),
        2.0,
        Duration::from_millis(100),
    ));
    Outbox::builder(store, Arc::new(sink))
        .policy(policy)
        .config(
            RunnerConfig::default()
                .with_link_down_warn_every(Duration::from_millis(50))
                .with_seed(11),
        )
        .start()
        .await
        .unwrap()
}

/// Each certificate the client must refuse is a no-answer that says what is wrong with it,
/// and not a halt; the trusted one delivers.
#[tokio::test]
async fn each_untrusted_certificate_is_no_answer_saying_why() {
    use outbox_core::{Outcome, Record, RecordId, Sink};
    let pki = pki();
    let record = Record::fresh(RecordId(1), None, b"x".to_vec(), "k".into(), 0);
    for ((kind, config), says) in
        pki.untrusted
            .iter()
            .zip(["unknownissuer", "expired", "not valid for name"])
    {
        let url = Interceptor::serve(
            vec![config.clone()],
            pki.trusted.clone(),
            Arc::default(),
            Arc::default(),
            Arc::default(),
        )
        .await;
        let outcome = sink(&url, &pki.ca).deliver(&record).await;
        let Outcome::NoAnswer { error } = outcome else {
            panic!("{kind}: {outcome:?}")
        };
        assert!(
            error.starts_with("certificate not trusted"),
            "{kind}: {error}"
        );
        assert!(error.to_ascii_lowercase().contains(says), "{kind}: {error}");
        assert!(!error.contains(SECRET), "{kind}: {error}");
    }
    let fixed = Arc::new(AtomicBool::new(true));
    let url = Interceptor::serve(
        vec![],
        pki.trusted.clone(),
        fixed,
        Arc::default(),
        Arc::default(),
    )
    .await;
    assert_eq!(
        sink(&url, &pki.ca).deliver(&record).await,
        Outcome::Delivered
    );
}

/// While the certificate is refused: nothing spent, nothing delivered, no halt.
async fn nothing_spent(outbox: &Outbox, store: &MemoryStore) {
    assert!(!outbox.is_halted());
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.halt, None, "no halt persisted");
    assert_eq!(stats.delivered, 0);
    let records = store.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.attempts == 0), "{records:?}");
    assert!(records.iter().any(|r| r.unanswered > 0), "{records:?}");
    for record in &records {
        let error = record.last_error.as_deref().unwrap_or_default();
        assert!(!error.contains(SECRET), "{error}");
        if record.unanswered > 0 {
            assert!(error.contains("certificate not trusted"), "{error}");
        }
    }
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_link_down_never_a_halt_also_after_a_restart() {
    let (logs, _guard) = Logs::capture();
    let pki = Arc::new(pki());
    let fixed = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::<String>::new()));
    let untrusted = pki.untrusted.iter().map(|(_, c)| c.clone()).collect();
    let url = Interceptor::serve(
        untrusted,
        pki.trusted.clone(),
        fixed.clone(),
        refused.clone(),
        requests.clone(),
    )
    .await;
    let shown = url[..url.find('?').unwrap()].to_owned();

    let store = Arc::new(MemoryStore::new());
    let first = start(store.clone(), sink(&url, &pki.ca)).await;
    let mut events = first.events();
    let kept_first = Events::record(first.events());
    let writes: Vec<NewRecord> = (0..3u8).map(|i| NewRecord::new(vec![i])).collect();
    let mut keys: Vec<String> = writes.iter().map(|w| w.key.clone()).collect();
    first.enqueue_batch(writes).await.unwrap();
    let down = next(&mut events, |e| match e {
        Event::LinkDown { error, .. } => Some(error.clone()),
        _ => None,
    })
    .await;
    assert!(
        down.starts_with("certificate not trusted: interception or an expired certificate?"),
        "{down}"
    );
    // Probed on backoff through every kind of refusal, twice, and warned again meanwhile.
    until(
        &mut events,
        "six refused handshakes and a repeated warning",
        || refused.load(Ordering::SeqCst) >= 6 && logs.text().contains("the link is still down"),
    )
    .await;
    nothing_spent(&first, &store).await;
    first.shutdown(Duration::from_secs(5)).await.unwrap();
    let before_restart = refused.load(Ordering::SeqCst);

    // A restart on the same store: still not halted, still probing.
    let second = start(store.clone(), sink(&url, &pki.ca)).await;
    let mut events = second.events();
    let kept_second = Events::record(second.events());
    next(&mut events, |e| {
        matches!(e, Event::LinkDown { .. }).then_some(())
    })
    .await;
    until(&mut events, "three more refused handshakes", || {
        refused.load(Ordering::SeqCst) >= before_restart + 3
    })
    .await;
    nothing_spent(&second, &store).await;
    assert!(
        requests.lock().unwrap().is_empty(),
        "no request got through"
    );

    // The network stops intercepting: our certificate is presented, and everything goes.
    fixed.store(true, Ordering::SeqCst);
    delivered(&mut events, 3).await;
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.delivered, stats.halt), (3, None));
    assert!(store.list(&ListQuery::new(10)).await.unwrap().is_empty());
    let mut accepted = requests.lock().unwrap().clone();
    accepted.sort();
    keys.sort();
    assert_eq!(accepted, keys, "each write once, with its key");
    second.shutdown(Duration::from_secs(5)).await.unwrap();

    let all_events: Vec<Event> = [kept_first.all(), kept_second.all()].concat();
    assert!(
        !all_events.iter().any(|e| matches!(e, Event::Halted { .. })),
        "never halted: {all_events:?}"
    );
    let log = logs.text();
    assert!(
        log.contains("link down") && log.contains("certificate not trusted"),
        "the link down is warned, saying why: {log}"
    );
    // Every refusal was a transport error carrying the URL; no message shows its query.
    for (what, text) in [
        (
            "events",
            format!("{}{}", kept_first.text(), kept_second.text()),
        ),
        ("logs", log),
    ] {
        assert!(text.contains(&shown), "{what} name the URL: {text}");
        assert!(
            !text.contains(SECRET),
            "{what} show the query string: {text}"
        );
    }
}
