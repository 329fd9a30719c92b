//! Opening a target: the only module that knows the backends.
//!
//! A file is told apart by its first bytes (SQLite's header or redb's magic number), a
//! PostgreSQL target by its URL scheme. Read commands open read-only, so they never change the
//! file: SQLite with its read-only flag, redb with its read-only handle (which fails at once,
//! instead of waiting, while another process has the file open).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use outbox_core::{Error, Store};

use crate::cli::Target;
use crate::error::CliError;

/// The first 16 bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// The first 9 bytes of every redb file.
const REDB_MAGIC: &[u8; 9] = b"redb\x1a\x0a\xa9\x0d\x0a";

/// The schema a PostgreSQL target uses unless `--schema` says otherwise.
pub const DEFAULT_SCHEMA: &str = "outbox";

/// Whether a command may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads once (`stats`, `list`, `show`): the target is opened read-only and never changed;
    /// a SQLite file an older build wrote is read through an upgraded copy, since its schema
    /// must be migrated before it can be read.
    Look,
    /// Reads as the target changes (`watch`, the read-only page): opened read-only and never
    /// changed; a copy would not follow the file, so an older SQLite file is refused.
    Read,
    /// A verb: the target is opened for writing.
    Write,
}

impl Access {
    /// True for the reads, which never change the target.
    pub fn reads(self) -> bool {
        self != Access::Write
    }
}

/// The kind of storage behind a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A SQLite file.
    Sqlite,
    /// A redb file.
    Redb,
    /// A PostgreSQL schema.
    Postgres,
}

impl Kind {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "SQLite",
            Kind::Redb => "redb",
            Kind::Postgres => "PostgreSQL",
        }
    }
}

/// True for a `postgres://` or `postgresql://` URL.
pub fn is_postgres_url(target: &str) -> bool {
    target.starts_with("postgres://") || target.starts_with("postgresql://")
}

/// The target as shown in messages and on the page: a URL's password replaced by `***`.
///
/// ```
/// use outbox_cli::open::shown;
/// assert_eq!(shown("postgres://app:s3cret@db/prod"), "postgres://app:***@db/prod");
/// assert_eq!(shown("app.db"), "app.db");
/// ```
pub fn shown(target: &str) -> String {
    let Some((scheme, rest)) = target.split_once("://") else {
        return target.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => {
                format!("{scheme}://{user}:***@{host}{}", &rest[authority_end..])
            }
            None => target.to_owned(),
        },
        None => target.to_owned(),
    }
}

/// Tells what kind of outbox `target` is, reading at most the file's first 16 bytes.
///
/// ```
/// use outbox_cli::cli::Target;
/// use outbox_cli::open::{detect, Kind};
/// let target = Target { target: "postgres://postgres@127.0.0.1/test".into(), schema: None };
/// assert_eq!(detect(&target).unwrap(), Kind::Postgres);
/// ```
pub fn detect(target: &Target) -> Result<Kind, CliError> {
    if is_postgres_url(&target.target) {
        return Ok(Kind::Postgres);
    }
    if target.schema.is_some() {
        return Err(CliError::Usage(format!(
            "--schema applies to a PostgreSQL URL only, and {} is a file path",
            target.target
        )));
    }
    let path = Path::new(&target.target);
    let mut file = File::open(path).map_err(|err| open_error(path, err))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(CliError::Open(format!(
            "{} is a directory, not an outbox file",
            path.display()
        )));
    }
    let mut head = [0; 16];
    let mut len = 0;
    while len < head.len() {
        match file.read(&mut head[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(open_error(path, err)),
        }
    }
    let head = &head[..len];
    if head.starts_with(SQLITE_MAGIC) {
        Ok(Kind::Sqlite)
    } else if head.starts_with(REDB_MAGIC) {
        Ok(Kind::Redb)
    } else if head.is_empty() {
        Err(CliError::Open(format!(
            "{} is empty, not an outbox file",
            path.display()
        )))
    } else {
        Err(CliError::Open(format!(
            "{} is not an outbox file (neither SQLite nor redb)",
            path.display()
        )))
    }
}

fn open_error(path: &Path, err: io::Error) -> CliError {
    match err.kind() {
        io::ErrorKind::NotFound => CliError::Open(format!("no such file: {}", path.display())),
        io::ErrorKind::PermissionDenied => {
            CliError::Open(format!("permission denied: {}", path.display()))
        }
        _ => CliError::Open(format!("cannot read {}: {err}", path.display())),
    }
}

/// Closes a store and waits until its connections are closed.
pub type Closing = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// An opened outbox.
pub struct Opened {
    /// The store.
    pub store: Arc<dyn Store>,
    /// What it is.
    pub kind: Kind,
    /// A line for the person when the command reads a copy of the target (see
    /// [`Access::Look`]).
    pub note: Option<String>,
    /// For a copy: to await once `store` (every clone of it) is dropped, so that the copy is
    /// removed before the process exits (its connections close on threads of their own,
    /// which an exiting process would not wait for).
    pub closing: Option<Closing>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("store", &self.store)
            .field("kind", &self.kind)
            .field("note", &self.note)
            .finish_non_exhaustive()
    }
}

/// What opening a target through a copy adds to it.
#[derive(Default)]
struct Copied {
    note: Option<String>,
    closing: Option<Closing>,
}

/// Opens `target` for `access`.
pub async fn open(target: &Target, access: Access) -> Result<Opened, CliError> {
    let kind = detect(target)?;
    let mut copied = Copied::default();
    let store = match kind {
        Kind::Sqlite => sqlite(&target.target, access, &mut copied).await,
        Kind::Redb => redb(&target.target, access).await,
        Kind::Postgres => {
            let schema = target.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
            // A bad sslmode is a usage mistake, said before anything connects.
            let split = crate::tls::split(&target.target)?;
            postgres(split, schema, access).await
        }
    }
    .map_err(|err| describe(target, kind, access, err))?;
    Ok(Opened {
        store,
        kind,
        note: copied.note,
        closing: copied.closing,
    })
}

/// Turns a store's refusal to open into one line that names the target and what to do.
fn describe(target: &Target, kind: Kind, access: Access, err: Error) -> CliError {
    let name = match kind {
        Kind::Postgres => format!(
            "schema {} at {}",
            target.schema.as_deref().unwrap_or(DEFAULT_SCHEMA),
            shown(&target.target)
        ),
        _ => target.target.clone(),
    };
    let line = match &err {
        Error::NotFound { .. } => format!("no outbox at {name}"),
        Error::NotAnOutbox { detail, .. } => format!("{name} is not an outbox: {detail}"),
        Error::SchemaTooNew { found, supported } => format!(
            "{name} was written by a newer outbox (schema version {found}; this build reads up \
             to {supported}): install a newer `outbox` command"
        ),
        Error::Locked { .. } => format!(
            "{name} is in use by another process (a redb file is opened by one process at a \
             time): stop the application using it, or copy the file and look at the copy"
        ),
        Error::ReadOnly { .. } if access == Access::Look => {
            format!("{name} cannot be opened from where it lies (a read-only medium): {err}")
        }
        Error::ReadOnly { .. } if access == Access::Read => format!(
            "{name} has an older schema that must be migrated before it can be followed; run \
             the application (or any write command) on it once, or look at it with `stats`, \
             `list` or `show`, which read an upgraded copy"
        ),
        Error::ReadOnly { .. } => format!("{name} cannot be written (read-only file or medium)"),
        Error::Corrupted { detail, .. } => format!("{name} is damaged: {detail}"),
        Error::Unavailable { detail, .. } => format!("{name} is not reachable: {detail}"),
        _ => {
            let failed = CliError::Store(err);
            let text = failed.line();
            // A refused certificate: say what the command trusts and how to add a root.
            if kind == Kind::Postgres && text.contains("no encryption") {
                return CliError::Open(format!(
                    "{name} takes connections over TLS only ({text}): add \
                     ?sslmode=verify-full (and &sslrootcert=FILE for a private CA) to the URL"
                ));
            }
            if kind == Kind::Postgres && text.contains("certificate") {
                return CliError::Open(format!(
                    "{name}: the server's certificate is not trusted ({text}); the command \
                     checks it for every sslmode that asks for TLS: name its CA with \
                     &sslrootcert=FILE"
                ));
            }
            return failed;
        }
    };
    CliError::Open(line)
}

#[cfg(not(all(feature = "sqlite", feature = "redb", feature = "postgres")))]
fn not_built(kind: Kind) -> Error {
    Error::InvalidConfig(format!(
        "this `outbox` was built without {} support (cargo feature `{}`)",
        kind.name(),
        kind.name().to_ascii_lowercase()
    ))
}

#[cfg(feature = "sqlite")]
async fn sqlite(path: &str, access: Access, copied: &mut Copied) -> Result<Arc<dyn Store>, Error> {
    use outbox_sqlite::{SqliteConfig, SqliteStore};
    let config = SqliteConfig::default().read_only(access.reads());
    match SqliteStore::open(path, config.clone()).await {
        // An older schema, which a read-only open cannot migrate: a look reads a copy.
        Err(Error::ReadOnly { source }) if access == Access::Look => {
            let file = std::path::PathBuf::from(path);
            let found =
                tokio::task::spawn_blocking(move || outbox_sqlite::schema::version_of(&file))
                    .await
                    .map_err(Error::backend)??;
            if found >= outbox_sqlite::SCHEMA_VERSION {
                // Refused for another reason (a read-only medium): no copy would say better.
                return Err(Error::ReadOnly { source });
            }
            let copy = Arc::new(SqliteStore::open_copy(path, config).await?);
            copied.note = Some(format!(
                "{path} was written by an older outbox (schema version {found}): read from an \
                 upgraded copy made now (the file is not changed)"
            ));
            let closed = Arc::clone(&copy);
            copied.closing = Some(Box::pin(async move {
                if let Ok(copy) = Arc::try_unwrap(closed) {
                    copy.close().await;
                }
            }));
            Ok(copy)
        }
        opened => Ok(Arc::new(opened?)),
    }
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(_: &str, _: Access, _: &mut Copied) -> Result<Arc<dyn Store>, Error> {
    Err(not_built(Kind::Sqlite))
}

#[cfg(feature = "redb")]
async fn redb(path: &str, access: Access) -> Result<Arc<dyn Store>, Error> {
    use outbox_redb::{RedbConfig, RedbStore};
    let store = match access {
        Access::Look | Access::Read => {
            RedbStore::open_read_only(path, RedbConfig::default()).await?
        }
        Access::Write => RedbStore::open(path, RedbConfig::default()).await?,
    };
    Ok(Arc::new(store))
}

#[cfg(not(feature = "redb"))]
async fn redb(_: &str, _: Access) -> Result<Arc<dyn Store>, Error> {
    Err(not_built(Kind::Redb))
}

#[cfg(feature = "postgres")]
async fn postgres(
    split: crate::tls::Split,
    schema: &str,
    access: Access,
) -> Result<Arc<dyn Store>, Error> {
    use outbox_postgres::{PgConfig, PgStore};
    let tls = crate::tls::setting(&split.wanted).map_err(|e| Error::InvalidConfig(e.line()))?;
    // A small pool: one command makes a few queries at a time, and the application's own
    // runners should keep the server's connections.
    let config = PgConfig::new(split.url, schema)
        .with_pool_size(2)
        .with_application_name("outbox-cli")
        .with_tls(tls);
    config.validate()?;
    // Connecting creates a missing schema: a read must not, so look first (over the same
    // connection settings, TLS included).
    if access.reads() && !PgStore::schema_exists(&config).await? {
        return Err(Error::NotFound {
            path: schema.to_owned(),
        });
    }
    Ok(Arc::new(PgStore::connect(config).await?))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: crate::tls::Split, _: &str, _: Access) -> Result<Arc<dyn Store>, Error> {
    Err(not_built(Kind::Postgres))
}
