//! How connections are made: plain TCP, or TLS with rustls, for the pool and the listener
//! alike.

use deadpool_postgres::{Manager, ManagerConfig};
use futures::stream::BoxStream;
use futures::StreamExt;
use outbox_core::{Error, Result};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, NoTls, Socket};

use crate::config::Tls;
use crate::error::pg;

/// What a connection sends on its own (notifications, notices), as a stream.
pub(crate) type Messages =
    BoxStream<'static, std::result::Result<AsyncMessage, tokio_postgres::Error>>;

/// The pool's connection manager for `tls`.
pub(crate) fn manager(
    pg_config: tokio_postgres::Config,
    tls: &Tls,
    manager: ManagerConfig,
) -> Result<Manager> {
    Ok(match tls {
        Tls::Off => Manager::from_config(pg_config, NoTls, manager),
        Tls::Required { extra_roots } => {
            Manager::from_config(pg_config, connector(extra_roots)?, manager)
        }
    })
}

/// One connection outside the pool (the listener's), with its messages as a stream.
pub(crate) async fn connect(
    pg_config: &tokio_postgres::Config,
    tls: &Tls,
) -> Result<(Client, Messages)> {
    match tls {
        Tls::Off => open(pg_config, NoTls).await,
        Tls::Required { extra_roots } => open(pg_config, connector(extra_roots)?).await,
    }
}

async fn open<T>(pg_config: &tokio_postgres::Config, tls: T) -> Result<(Client, Messages)>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, mut connection) = pg_config.connect(tls).await.map_err(pg)?;
    let messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
    Ok((client, messages))
}

/// Checks that `tls` can be set up (the feature is built in, the roots parse).
pub(crate) fn check(tls: &Tls) -> Result<()> {
    match tls {
        Tls::Off => Ok(()),
        Tls::Required { extra_roots } => connector(extra_roots).map(drop),
    }
}

#[cfg(feature = "tls")]
fn connector(extra_roots: &[u8]) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    use std::sync::Arc;

    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if !extra_roots.is_empty() {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(extra_roots) {
            let cert = cert.map_err(|err| {
                Error::InvalidConfig(format!("TLS extra roots: not PEM certificates: {err}"))
            })?;
            roots.add(cert).map_err(|err| {
                Error::InvalidConfig(format!("TLS extra roots: a certificate is unusable: {err}"))
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::InvalidConfig(
                "TLS extra roots: no PEM certificate found".into(),
            ));
        }
    }
    // The ring provider named here, not a process-wide default: the store works beside any
    // other rustls user in the application.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| Error::InvalidConfig(format!("TLS: {err}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[cfg(not(feature = "tls"))]
fn connector(_: &[u8]) -> Result<NoTls> {
    Err(Error::InvalidConfig(
        "TLS was asked for, but outbox-postgres was built without its `tls` feature".into(),
    ))
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    #[test]
    fn the_connector_takes_pem_roots_and_refuses_anything_else() {
        assert!(connector(b"").is_ok(), "the bundled roots alone");
        for bad in [
            &b"no certificate here"[..],
            b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
        ] {
            assert!(
                matches!(connector(bad), Err(Error::InvalidConfig(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
