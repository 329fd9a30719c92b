//! Whether an outbox's schema exists, asked without creating it: for a tool that only reads
//! (the `outbox` command's read commands) and must leave a server as it found it, over the
//! same connection settings, TLS included, as the store itself.

use futures::StreamExt;
use outbox_core::{Error, Result};

use crate::config::PgConfig;
use crate::error::pg;
use crate::store::PgStore;
use crate::tls;

impl PgStore {
    /// True when the schema `config.schema` exists on the server. One connection with the
    /// config's TLS and timeout, one catalogue query; nothing is created or migrated (which
    /// [`PgStore::connect`] would do).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> outbox_core::Result<()> {
    /// use outbox_postgres::{PgConfig, PgStore};
    /// let config = PgConfig::new("postgres://postgres@127.0.0.1/test", "billing_outbox");
    /// if !PgStore::schema_exists(&config).await? {
    ///     eprintln!("no outbox there");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`PgStore::connect`] for the connection: [`Error::InvalidConfig`] for a bad
    /// setting, [`Error::Unavailable`] when no server answers in time.
    pub async fn schema_exists(config: &PgConfig) -> Result<bool> {
        config.validate()?;
        let (client, mut messages) = tls::connect(&config.pg_config()?, &config.tls).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&config.schema];
        let query = client.query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &params);
        tokio::pin!(query);
        // The connection makes progress only while its messages are read.
        loop {
            tokio::select! {
                row = &mut query => return Ok(row.map_err(pg)?.is_some()),
                message = messages.next() => match message {
                    Some(Ok(_)) => {}
                    Some(Err(err)) => return Err(pg(err)),
                    None => {
                        return Err(Error::Unavailable {
                            detail: "the connection closed during the schema check".into(),
                            source: None,
                        })
                    }
                },
            }
        }
    }
}
