//! The binary on a PostgreSQL schema, when a server answers at `OUTBOX_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Without one the test says so and skips, except
//! with `OUTBOX_PG_REQUIRED=1` (CI), where it fails.
//!
//! The TLS test makes the server TLS-only for one role of its own, `outbox_tls_only`: two
//! `pg_hba.conf` lines for that role alone (TLS trusted, plain refused), added once, ahead of
//! every other rule, and loaded with `pg_reload_conf()`. Nothing else on the server changes.
#![cfg(feature = "postgres")]

mod support;

use std::time::Duration;

use outbox_postgres::{PgConfig, PgStore};

fn url() -> String {
    std::env::var("OUTBOX_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A client to the server, or `None` (said loudly) when none answers and it is not required.
async fn server() -> Option<tokio_postgres::Client> {
    let config: tokio_postgres::Config = url().parse().expect("OUTBOX_PG_URL");
    let connect = config.connect(tokio_postgres::NoTls);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok((client, connection))) => {
            tokio::spawn(connection);
            Some(client)
        }
        failed => {
            let why = match failed {
                Ok(Err(err)) => err.to_string(),
                _ => "no answer within 5 s".to_owned(),
            };
            assert!(
                std::env::var("OUTBOX_PG_REQUIRED").as_deref() != Ok("1"),
                "OUTBOX_PG_REQUIRED=1 but no PostgreSQL server answers: {why}"
            );
            // Straight to the stderr handle: the harness captures `eprintln!`.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("\n*** SKIPPED: no PostgreSQL server answers ({why}) ***\n").as_bytes(),
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_and_repairs_a_postgres_outbox() {
    let Some(client) = server().await else { return };
    let schema = format!("outbox_cli_test_{}", std::process::id());
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
    let url = url();

    // A read of a schema that does not exist says so, and creates nothing.
    let (code, err) = support::fails(&["stats", &url, "--schema", &schema]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        format!("error: no outbox at schema {schema} at {url}")
    );
    let created = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .unwrap();
    assert!(created.is_none(), "a read created the schema");

    let store = PgStore::connect(PgConfig::new(&url, &schema))
        .await
        .unwrap();
    support::seed(&store).await;
    let stats = support::ok(&["stats", &url, "--schema", &schema]);
    golden!("stats", stats);
    let list = support::ok(&["list", &url, "--schema", &schema, "--json"]);
    golden!("list_json", list);
    let show = support::ok(&["show", &url, "--schema", &schema, "3", "--json"]);
    golden!("show_json", show);
    assert_eq!(
        support::ok(&["retry", &url, "--schema", &schema, "9"]),
        "retried #9: due now with a fresh budget\n"
    );
    // A verdict recorded between the look and the repair: refused, the verdict stands.
    let seen = support::show_on(&url, &schema, 3)["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    support::reject_now(&store, 3).await;
    let (code, err) = support::fails(&["retry", &url, "--schema", &schema, "3", "--seen", &seen]);
    assert_eq!(code, 1);
    assert!(
        err.contains("left #3 as it is: it changed since you looked"),
        "{err}"
    );
    assert_eq!(support::show_on(&url, &schema, 3)["state"], "rejected");
    let nine = outbox_core::Store::get(&store, outbox_core::RecordId(9))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(nine.state, outbox_core::State::Pending);
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

/// `outbox resume` lifts a halt that a runner of another process holds, and `outbox retry`
/// makes a record held for later due: the runner, woken by each command's `NOTIFY`, delivers
/// within a second of the command's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_and_retry_reach_a_runner_of_another_process_within_a_second() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use outbox_core::{sink_fn, Event, NewRecord, Outbox, Outcome, Record, RunnerConfig};

    let Some(client) = server().await else { return };
    let schema = format!("outbox_cli_resume_{}", std::process::id());
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
    let url = url();
    let store = PgStore::connect(PgConfig::new(&url, &schema))
        .await
        .unwrap();
    // The application: its credential is refused once; no safety poll, so only the
    // command's NOTIFY can wake it.
    let refused = Arc::new(AtomicBool::new(false));
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let sink = sink_fn({
        let refused = Arc::clone(&refused);
        move |record: Record| {
            let sent = sent.clone();
            let first = !refused.swap(true, Ordering::SeqCst);
            async move {
                if first {
                    Outcome::halt("HTTP 401 Unauthorized")
                } else {
                    let _ = sent.send(record.id);
                    Outcome::Delivered
                }
            }
        }
    });
    let outbox = Outbox::builder(Arc::new(store.clone()), sink)
        .config(RunnerConfig {
            safety_poll: None,
            ..RunnerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let _wakeups = store.wake_on_enqueue(outbox.notifier()).await.unwrap();
    let mut events = outbox.events();
    let id = outbox.enqueue(NewRecord::new(b"x".to_vec())).await.unwrap();
    let halted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.recv().await {
                Ok(Event::Halted { .. }) => return,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    panic!("the runner stopped before it halted")
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(halted.is_ok() && outbox.is_halted(), "the runner halted");

    let (target, name) = (url.clone(), schema.clone());
    let said = tokio::task::spawn_blocking(move || {
        support::ok(&["resume", &target, "--schema", &name, "--yes"])
    })
    .await
    .unwrap();
    assert!(said.starts_with("lifted the halt since"), "{said}");
    let started = std::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(1), received.recv())
        .await
        .expect("delivered within a second of `outbox resume`");
    assert_eq!(got, Some(id));
    eprintln!(
        "delivered {:?} after the command returned",
        started.elapsed()
    );
    assert!(!outbox.is_halted());

    // `outbox retry` while the runner is idle: a record held for an hour is due at once.
    let later = store.clock().now() + 3_600_000;
    let held = outbox_core::Store::enqueue(
        &store,
        vec![NewRecord::new(b"held".to_vec()).not_before(later)],
        store.clock().now(),
    )
    .await
    .unwrap()
    .ids[0];
    outbox.flush(Duration::from_secs(10)).await.unwrap();
    assert!(received.try_recv().is_err(), "nothing was due");
    let (target, name, id) = (url.clone(), schema.clone(), held.0.to_string());
    let said = tokio::task::spawn_blocking(move || {
        support::ok(&["retry", &target, "--schema", &name, &id])
    })
    .await
    .unwrap();
    assert!(said.starts_with(&format!("retried #{}", held.0)), "{said}");
    let started = std::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(1), received.recv())
        .await
        .expect("delivered within a second of `outbox retry`");
    assert_eq!(got, Some(held));
    eprintln!(
        "retry: delivered {:?} after the command returned",
        started.elapsed()
    );
    outbox.shutdown(Duration::from_secs(10)).await.unwrap();
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

/// The role the server admits over TLS only.
const TLS_ROLE: &str = "outbox_tls_only";

/// Makes `TLS_ROLE` exist and the server TLS-only for it (idempotent); `None` (said loudly)
/// when this server cannot be set up so here: no TLS, or its files are out of reach.
async fn tls_only(admin: &tokio_postgres::Client) -> Option<String> {
    let setting = |name: &'static str| async move {
        admin
            .query_one(&format!("SHOW {name}"), &[])
            .await
            .unwrap()
            .get::<_, String>(0)
    };
    let skip = |why: String| {
        assert!(
            std::env::var("OUTBOX_PG_REQUIRED").as_deref() != Ok("1"),
            "OUTBOX_PG_REQUIRED=1 but the TLS test cannot run: {why}"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("\n*** SKIPPED: TLS-only PostgreSQL: {why} ***\n").as_bytes(),
        );
        None
    };
    if setting("ssl").await != "on" {
        return skip("the server has ssl = off".into());
    }
    let cert = setting("ssl_cert_file").await;
    if std::fs::metadata(&cert).is_err() {
        return skip(format!("its certificate {cert} is not readable here"));
    }
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {TLS_ROLE} LOGIN; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ))
        .await
        .unwrap();
    let hba = setting("hba_file").await;
    let Ok(rules) = std::fs::read_to_string(&hba) else {
        return skip(format!("{hba} is not readable here"));
    };
    let ours = format!(
        "hostssl all {TLS_ROLE} 127.0.0.1/32 trust\nhostnossl all {TLS_ROLE} 127.0.0.1/32 reject\n"
    );
    if !rules.contains(&ours) {
        // First match wins: ahead of every rule, so the generic `host all all` line never
        // sees this role; no other role's rule is touched.
        let text = format!(
            "# outbox-cli tests: the role {TLS_ROLE} connects over TLS only (nothing else changes)\n{ours}{rules}"
        );
        if let Err(err) = std::fs::write(&hba, text) {
            return skip(format!("{hba} is not writable here: {err}"));
        }
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
    }
    // The reload is asynchronous: wait (bounded) until a plain connection of the role is
    // refused, each try a real connection.
    let plain = format!("host=127.0.0.1 port={} user={TLS_ROLE} dbname=test", port());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let config: tokio_postgres::Config = plain.parse().unwrap();
        match config.connect(tokio_postgres::NoTls).await {
            Err(err)
                if err
                    .as_db_error()
                    .is_some_and(|db| db.message().contains("no encryption")) =>
            {
                break
            }
            _ if std::time::Instant::now() > deadline => {
                panic!("the server still lets {TLS_ROLE} in without TLS after pg_reload_conf()")
            }
            _ => {}
        }
    }
    Some(cert)
}

fn port() -> u16 {
    let config: tokio_postgres::Config = url().parse().unwrap();
    config.get_ports().first().copied().unwrap_or(5432)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_only_server_is_inspected_with_sslmode_require() {
    let Some(admin) = server().await else { return };
    let Some(cert) = tls_only(&admin).await else {
        return;
    };
    let schema = format!("outbox_cli_tls_{}", std::process::id());
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema} AUTHORIZATION {TLS_ROLE}"
        ))
        .await
        .unwrap();
    // The certificate names `localhost`; the socket goes to 127.0.0.1, where the rules are.
    let base = format!(
        "postgres://{TLS_ROLE}@localhost:{}/test?hostaddr=127.0.0.1",
        port()
    );
    let tls = format!("{base}&sslmode=require&sslrootcert={cert}");
    let store = PgStore::connect(PgConfig::new(&base, &schema).with_tls(
        outbox_postgres::Tls::required_with_roots(std::fs::read(&cert).unwrap()),
    ))
    .await
    .expect("the role connects over TLS");
    support::seed(&store).await;

    golden!("stats", support::ok(&["stats", &tls, "--schema", &schema]));
    assert_eq!(
        support::ok(&["retry", &tls, "--schema", &schema, "9"]),
        "retried #9: due now with a fresh budget\n"
    );
    let full = format!("{base}&sslmode=verify-full&sslrootcert={cert}");
    assert_eq!(support::show_on(&full, &schema, 9)["state"], "pending");

    // Without TLS the server refuses the role; without the server's CA the command refuses
    // the server.
    let (code, err) = support::fails(&["stats", &base, "--schema", &schema]);
    assert_eq!(code, 1);
    assert!(err.contains("no encryption"), "{err}");
    let (code, err) = support::fails(&[
        "stats",
        &format!("{base}&sslmode=require"),
        "--schema",
        &schema,
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("certificate is not trusted") && err.contains("sslrootcert"),
        "{err}"
    );
    drop(store);
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
