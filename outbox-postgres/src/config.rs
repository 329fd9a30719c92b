//! Where the outbox lives (server and schema) and how the store talks to it.

use std::time::Duration;

use outbox_core::{Cap, Error, Result, DEFAULT_MAX_PAYLOAD};

use crate::schema::check_schema_name;

/// Settings of a [`PgStore`](crate::PgStore).
///
/// ## Defaults
/// - `pool_size`: **8** connections: enough for a runner (claims, reports, lease renewals) and
///   the application's enqueues at once, few enough that dozens of hosts fit in PostgreSQL's
///   default of 100 connections.
/// - `max_payload`: **1 MiB** ([`DEFAULT_MAX_PAYLOAD`]), as every backend.
/// - `application_name`: **`outbox`**, so an operator can find the store's sessions in
///   `pg_stat_activity`.
/// - `connect_timeout`: **10 s** to open a connection or wait for a free one in the pool; past
///   it a call fails with [`Error::Unavailable`] (the runner then backs off and tries again)
///   instead of hanging. `None` waits as long as the operating system does.
/// - `tls`: **[`Tls::Off`]**, plain TCP, as for a server on the same host or a private network.
///   A managed server (or any across an untrusted network) needs [`PgConfig::with_tls`].
/// - `statement_timeout`: **20 s** for any one statement of the store's connections (set as
///   the session's `statement_timeout`): a statement that takes longer is cancelled by the
///   server and the call fails with [`Error::Unavailable`], so the runner backs off instead of
///   waiting on a stuck server. Below the runner's own `store_timeout` (30 s), so the server
///   cancels first and no statement goes on after the runner gave up on it.
/// - `lock_timeout`: **5 s** to wait for a lock (set as `lock_timeout`): an application's
///   transaction that holds a group's lock (it enqueued into the group and has not committed)
///   makes the store's call fail and back off, instead of stalling lease renewals until other
///   hosts deliver the same records again.
/// - `keepalive_idle`: **30 s** without traffic before TCP keepalives probe the server (then
///   every 10 s, 3 times): a half-open connection (a server or a NAT gone silently) is found
///   in about a minute instead of the operating system's two hours. `None` turns them off.
/// - `runner_clock`: **false**: every runner judges leases and deadlines by the database
///   server's clock ([`PgStore::clock`](crate::PgStore::clock)), with no wiring, so hosts
///   whose clocks disagree still agree on whose lease has expired.
/// - `cap`: **none** ([`Cap::none`]): no limit on what the outbox holds, and enqueues pay
///   nothing for counting. See [`PgConfig::with_cap`].
///
/// The store's sessions also run with `jit = off` (their statements are short index lookups,
/// which JIT compilation only slows down); a URL's `options` can turn it back on.
///
/// A URL's own `options` (e.g. `-c search_path=...`) are kept; these are added after them.
///
/// ```
/// use outbox_postgres::PgConfig;
///
/// let config = PgConfig::new("host=127.0.0.1 user=postgres dbname=test", "billing_outbox")
///     .with_pool_size(4);
/// assert_eq!(config.schema, "billing_outbox");
/// assert_eq!(config.pool_size, 4);
/// config.validate().unwrap();
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgConfig {
    /// The server, as a URL (`postgres://user@host:5432/db`) or key-value text
    /// (`host=... user=... dbname=...`), as `tokio_postgres::Config` parses it.
    pub url: String,
    /// The schema that holds this outbox's tables: lowercase letters, digits and `_`, starting
    /// with a letter or `_`, at most 63 bytes. Created if missing.
    pub schema: String,
    /// Most connections the store's pool holds open; at least 1.
    pub pool_size: usize,
    /// Largest payload `enqueue` accepts, in bytes.
    pub max_payload: usize,
    /// Reported to the server for every connection of the store.
    pub application_name: String,
    /// Longest wait to connect, or for a free pooled connection; `None` for no limit.
    pub connect_timeout: Option<Duration>,
    /// Whether connections use TLS, and which certificates they trust.
    pub tls: Tls,
    /// Longest any one statement of the store may run; `None` for the server's setting.
    pub statement_timeout: Option<Duration>,
    /// Longest a statement of the store waits for a lock; `None` for the server's setting.
    pub lock_timeout: Option<Duration>,
    /// Idle time before TCP keepalives probe the server; `None` for no keepalives.
    pub keepalive_idle: Option<Duration>,
    /// When true, the store names no clock of its own (see [`PgConfig::with_runner_clock`]).
    pub runner_clock: bool,
    /// The most records and payload bytes the outbox holds (see [`PgConfig::with_cap`]).
    pub cap: Cap,
}

/// How the store's connections (its pool and its listener) protect their traffic.
///
/// TLS is rustls (the crate's `tls` feature, **on by default**; no system OpenSSL is needed).
/// Built without the feature, only [`Tls::Off`] connects.
///
/// ```
/// use outbox_postgres::{PgConfig, Tls};
/// let config = PgConfig::new("postgres://app@db.example.com/prod", "outbox")
///     .with_tls(Tls::required());
/// assert!(matches!(config.tls, Tls::Required { .. }));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tls {
    /// Plain TCP. A server that requires TLS refuses the store.
    #[default]
    Off,
    /// TLS on every connection: a server that does not offer it is refused, and the server's
    /// certificate must chain to one of the Mozilla roots (bundled, as browsers trust them) or
    /// to one of `extra_roots`, and name the host the URL connects to.
    Required {
        /// More trusted certificates, PEM-encoded: a private CA's, or a self-signed server's.
        extra_roots: Vec<u8>,
    },
}

impl Tls {
    /// TLS verified against the Mozilla roots only.
    pub fn required() -> Self {
        Tls::Required {
            extra_roots: Vec::new(),
        }
    }

    /// TLS verified against the Mozilla roots and the PEM certificates in `pem`.
    pub fn required_with_roots(pem: impl Into<Vec<u8>>) -> Self {
        Tls::Required {
            extra_roots: pem.into(),
        }
    }
}

impl PgConfig {
    /// Settings for the outbox in `schema` on the server at `url`, with the defaults above.
    pub fn new(url: impl Into<String>, schema: impl Into<String>) -> Self {
        PgConfig {
            url: url.into(),
            schema: schema.into(),
            pool_size: 8,
            max_payload: DEFAULT_MAX_PAYLOAD,
            application_name: "outbox".into(),
            connect_timeout: Some(Duration::from_secs(10)),
            tls: Tls::Off,
            statement_timeout: Some(Duration::from_secs(20)),
            lock_timeout: Some(Duration::from_secs(5)),
            keepalive_idle: Some(Duration::from_secs(30)),
            runner_clock: false,
            cap: Cap::none(),
        }
    }

    /// Holds every enqueue of this store to `cap` ([`Cap`]): one that would take the records
    /// the outbox holds (every state, rejected ones too) or their payload bytes past a limit
    /// is refused with [`Error::QueueFull`] naming the limit and the usage, before any of its
    /// records is written; nothing already queued is touched. Inside your own transaction
    /// (`enqueue_pending`, `enqueue_in`, the sqlx and diesel paths) the refusal leaves the
    /// transaction usable: your own writes can still commit.
    ///
    /// The check is exact across processes and hosts: every capped enqueue first takes the
    /// outbox's one *turn* (a row it updates, held until its transaction ends), then reads
    /// the counts the triggers keep, then decides. The cost is that capped enqueues run one
    /// at a time per outbox: a transaction that enqueued holds the turn until it commits, so
    /// commit promptly (the store's own enqueues wait for it up to `lock_timeout`).
    /// Deliveries, claims and reports never take the turn. In a REPEATABLE READ or
    /// SERIALIZABLE transaction, an enqueue whose snapshot predates another capped enqueue's
    /// commit fails with a serialization error ([`Error::Unavailable`]; retry the
    /// transaction) rather than decide on counts it cannot see. Every process that enqueues
    /// must be given the same cap: one opened without a cap neither takes the turn nor checks.
    ///
    /// ```
    /// use outbox_core::Cap;
    /// use outbox_postgres::PgConfig;
    ///
    /// let config = PgConfig::new("host=127.0.0.1 user=postgres dbname=test", "device_outbox")
    ///     .with_cap(Cap::none().with_max_records(1_000).with_max_bytes(64 << 20));
    /// assert_eq!(config.cap.max_records, Some(1_000));
    /// config.validate().unwrap();
    /// ```
    pub fn with_cap(mut self, cap: Cap) -> Self {
        self.cap = cap;
        self
    }

    /// Lets each runner on this store judge leases and deadlines by the clock it is built with
    /// ([`OutboxBuilder::clock`](outbox_core::OutboxBuilder::clock), or its host's) instead of
    /// the server's. Only for an outbox that every process opens on one host's clock: a test
    /// on tokio's paused clock or a manual one. Hosts whose clocks disagree then take over
    /// each other's live leases and deliver records twice.
    ///
    /// ```
    /// use outbox_postgres::PgConfig;
    /// let config = PgConfig::new("host=localhost", "test_outbox").with_runner_clock();
    /// assert!(config.runner_clock);
    /// ```
    pub fn with_runner_clock(mut self) -> Self {
        self.runner_clock = true;
        self
    }

    /// Sets how connections use TLS.
    pub fn with_tls(mut self, tls: Tls) -> Self {
        self.tls = tls;
        self
    }

    /// Sets the pool size.
    pub fn with_pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }

    /// Sets the payload limit.
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_payload = max_payload;
        self
    }

    /// Sets the application name the store's connections report.
    pub fn with_application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }

    /// Sets the longest any one statement of the store may run (`None`: the server's setting).
    pub fn with_statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Sets the longest a statement of the store waits for a lock (`None`: the server's).
    pub fn with_lock_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// Sets the idle time before TCP keepalives probe the server (`None`: no keepalives).
    pub fn with_keepalive_idle(mut self, idle: Option<Duration>) -> Self {
        self.keepalive_idle = idle;
        self
    }

    /// Sets the connect and pool wait timeout.
    pub fn with_connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Checks every value, returning [`Error::InvalidConfig`] for the first one out of range.
    ///
    /// ```
    /// use outbox_postgres::PgConfig;
    /// assert!(PgConfig::new("host=localhost", "Robert'); DROP TABLE x; --").validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        check_schema_name(&self.schema)?;
        if self.pool_size == 0 {
            return Err(Error::InvalidConfig("pool_size must be at least 1".into()));
        }
        for (name, limit) in [
            ("connect_timeout", self.connect_timeout),
            ("statement_timeout", self.statement_timeout),
            ("lock_timeout", self.lock_timeout),
            ("keepalive_idle", self.keepalive_idle),
        ] {
            if limit.is_some_and(|t| t.is_zero()) {
                return Err(Error::InvalidConfig(format!("{name} must not be zero")));
            }
        }
        let pg = self.pg_config()?;
        if self.tls == Tls::Off && pg.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(Error::InvalidConfig(
                "the URL asks for sslmode=require but the store's TLS is off; set \
                 PgConfig::with_tls"
                    .into(),
            ));
        }
        crate::tls::check(&self.tls)
    }

    /// The connection settings with this config's application name and timeout applied.
    pub(crate) fn pg_config(&self) -> Result<tokio_postgres::Config> {
        let mut pg: tokio_postgres::Config = self.url.parse().map_err(|err| {
            Error::InvalidConfig(format!("the PostgreSQL connection text is invalid: {err}"))
        })?;
        pg.application_name(&self.application_name);
        if let Some(timeout) = self.connect_timeout {
            pg.connect_timeout(timeout);
        }
        if matches!(self.tls, Tls::Required { .. }) {
            pg.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        match self.keepalive_idle {
            Some(idle) => {
                pg.keepalives(true)
                    .keepalives_idle(idle)
                    .keepalives_interval(Duration::from_secs(10))
                    .keepalives_retries(3);
            }
            None => {
                pg.keepalives(false);
            }
        }
        // JIT compilation off, ahead of the URL's own options (which may turn it back on): the
        // store's statements are short index lookups, and on a table whose statistics are
        // stale the planner's estimates can make one of them cost 100 ms of compiling.
        let mut options = format!("-c jit=off {}", pg.get_options().unwrap_or_default())
            .trim_end()
            .to_owned();
        for (name, limit) in [
            ("statement_timeout", self.statement_timeout),
            ("lock_timeout", self.lock_timeout),
        ] {
            if let Some(limit) = limit {
                let ms = limit.as_millis().max(1);
                options = format!("{options} -c {name}={ms}").trim_start().to_owned();
            }
        }
        if !options.is_empty() {
            pg.options(&options);
        }
        Ok(pg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_run_without_jit_unless_the_url_asks_for_it() {
        let plain = PgConfig::new("postgres://u@h/db", "outbox")
            .pg_config()
            .unwrap();
        let options = plain.get_options().unwrap();
        assert!(options.starts_with("-c jit=off"), "{options}");
        let asked = PgConfig::new("postgres://u@h/db?options=-c%20jit%3Don", "outbox")
            .pg_config()
            .unwrap();
        let options = asked.get_options().unwrap();
        let (off, on) = (options.find("jit=off"), options.find("jit=on"));
        assert!(
            off < on,
            "the URL's own setting comes later and wins: {options}"
        );
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let ok = PgConfig::new("postgres://postgres@127.0.0.1:5432/test", "outbox");
        assert!(ok.validate().is_ok());
        for bad in [
            ok.clone().with_pool_size(0),
            ok.clone().with_connect_timeout(Some(Duration::ZERO)),
            ok.clone().with_statement_timeout(Some(Duration::ZERO)),
            ok.clone().with_lock_timeout(Some(Duration::ZERO)),
            ok.clone().with_keepalive_idle(Some(Duration::ZERO)),
            PgConfig::new("postgres://[::1", "outbox"),
            PgConfig::new("host=x", "1starts_with_digit"),
            PgConfig::new("host=x sslmode=require", "outbox"),
            ok.clone()
                .with_tls(Tls::required_with_roots(b"not a certificate".to_vec())),
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidConfig(_))),
                "{bad:?} was accepted"
            );
        }
    }
}
