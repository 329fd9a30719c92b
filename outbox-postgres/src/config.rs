//! Where the outbox lives (server and schema) and how the store talks to it.

use std::time::Duration;

use outbox_core::{Error, Result, DEFAULT_MAX_PAYLOAD};

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
        }
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
        if self.connect_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::InvalidConfig(
                "connect_timeout must not be zero".into(),
            ));
        }
        self.pg_config().map(drop)
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
        Ok(pg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let ok = PgConfig::new("postgres://postgres@127.0.0.1:5432/test", "outbox");
        assert!(ok.validate().is_ok());
        for bad in [
            ok.clone().with_pool_size(0),
            ok.clone().with_connect_timeout(Some(Duration::ZERO)),
            PgConfig::new("postgres://[::1", "outbox"),
            PgConfig::new("host=x", "1starts_with_digit"),
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidConfig(_))),
                "{bad:?} was accepted"
            );
        }
    }
}
