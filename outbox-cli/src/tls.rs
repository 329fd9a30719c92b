//! PostgreSQL over TLS: the `sslmode` and `sslrootcert` of a target URL, written as libpq
//! users write them, turned into `outbox_postgres`'s rustls setup ([`Tls`]).
//!
//! | `sslmode` | connection |
//! |---|---|
//! | absent, `disable`, `allow`, `prefer` | plain TCP |
//! | `require`, `verify-ca`, `verify-full` | TLS, and the server's certificate must chain to a trusted root and name the host |
//!
//! The command always checks the certificate, even for `require` (where libpq does not):
//! an unchecked connection would hand the operator's password and the queue's payloads to
//! anyone in the middle. The trusted roots are the ones `outbox_postgres` bundles (Mozilla's),
//! plus the system's (`SSL_CERT_FILE`, or the usual bundle files) or, with
//! `sslrootcert=FILE`, the PEM certificates in that file (`sslrootcert=system`: the system's).
//! Both parameters are taken out of the URL before it reaches the driver.

use std::path::{Path, PathBuf};

#[cfg(feature = "postgres")]
pub use outbox_postgres::Tls;

use crate::error::CliError;

/// Where the system keeps its trusted roots, most common first (Debian and Ubuntu, Fedora
/// and RHEL, Alpine and macOS, openSUSE).
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

/// What a URL asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Plain TCP.
    Plain,
    /// TLS, the server verified against these roots (plus the bundled ones).
    Verified {
        /// The PEM file of trusted roots: the given CA file or the system's bundle; `None`
        /// when the system has none (the bundled roots alone).
        roots: Option<PathBuf>,
    },
}

/// A target URL without its TLS parameters, and what they asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The URL the driver gets.
    pub url: String,
    /// The connection asked for.
    pub wanted: Wanted,
}

fn decode(text: &str) -> Result<String, CliError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        CliError::Usage(format!("the URL has a bad %-escape in {text:?}"))
                    })?;
                out.push(hex);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| CliError::Usage(format!("{text:?} is not UTF-8")))
}

/// The system's bundle of trusted roots, if it has one.
fn system_roots() -> Option<PathBuf> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE") {
        return Some(PathBuf::from(file));
    }
    SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
}

/// Takes `sslmode` and `sslrootcert` out of a `postgres://` URL.
///
/// ```
/// use outbox_cli::tls::{split, Wanted};
/// let s = split("postgres://app@db.example.com/prod?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=5").unwrap();
/// assert_eq!(s.url, "postgres://app@db.example.com/prod?connect_timeout=5");
/// assert_eq!(s.wanted, Wanted::Verified { roots: Some("/etc/ca.pem".into()) });
/// assert_eq!(split("postgres://app@db/prod").unwrap().wanted, Wanted::Plain);
/// assert!(split("postgres://app@db/prod?sslmode=sometimes").is_err());
/// ```
pub fn split(url: &str) -> Result<Split, CliError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Split {
            url: url.to_owned(),
            wanted: Wanted::Plain,
        });
    };
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => mode = Some(decode(value)?),
            "sslrootcert" => root = Some(decode(value)?),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let wanted = match mode.as_deref().unwrap_or("prefer") {
        "disable" | "allow" | "prefer" => Wanted::Plain,
        "require" | "verify-ca" | "verify-full" => Wanted::Verified {
            roots: match root.as_deref() {
                None | Some("system") => system_roots(),
                Some(file) => Some(PathBuf::from(file)),
            },
        },
        other => {
            return Err(CliError::Usage(format!(
                "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, \
                 verify-full"
            )))
        }
    };
    if wanted == Wanted::Plain && root.is_some() {
        return Err(CliError::Usage(
            "sslrootcert is given, but sslmode does not ask for TLS: add sslmode=verify-full"
                .into(),
        ));
    }
    Ok(Split { url, wanted })
}

/// The store's TLS setting for what the URL asked, reading the roots file.
#[cfg(feature = "postgres")]
pub fn setting(wanted: &Wanted) -> Result<Tls, CliError> {
    match wanted {
        Wanted::Plain => Ok(Tls::Off),
        Wanted::Verified { roots: None } => Ok(Tls::required()),
        Wanted::Verified { roots: Some(file) } => std::fs::read(file)
            .map(Tls::required_with_roots)
            .map_err(|err| {
                CliError::Open(format!(
                    "cannot read the trusted certificates {}: {err}",
                    file.display()
                ))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tls_parameters_leave_the_url() {
        let s = split("postgres://u@h/db?application_name=x&sslmode=require&hostaddr=127.0.0.1")
            .unwrap();
        assert_eq!(
            s.url,
            "postgres://u@h/db?application_name=x&hostaddr=127.0.0.1"
        );
        assert!(matches!(s.wanted, Wanted::Verified { .. }));
        let plain = split("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(
            (plain.url.as_str(), plain.wanted),
            ("postgres://u@h/db", Wanted::Plain)
        );
        assert!(split("postgres://u@h/db?sslrootcert=/ca.pem").is_err());
        assert!(split("postgres://u@h/db?sslmode=require&sslrootcert=%zz").is_err());
    }
}
