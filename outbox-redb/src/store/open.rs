//! How a redb file becomes a store: its header checked, a new file laid out, an older one
//! brought to the current schema, and the writer started.

use super::*;

pub(super) fn empty_file() -> Error {
    Error::NotAnOutbox {
        detail: "an empty file".into(),
        source: None,
    }
}

pub(super) fn not_redb() -> Error {
    Error::NotAnOutbox {
        detail: "not a redb file".into(),
        source: None,
    }
}

/// Checks that `path` holds a redb file, reading only its first bytes.
pub(super) fn check_header(path: &Path) -> Result<()> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(Error::NotFound {
                path: path.display().to_string(),
            })
        }
        Err(err) => return Err(from_io(err)),
    };
    let meta = file.metadata().map_err(from_io)?;
    if meta.is_dir() {
        return Err(Error::NotAnOutbox {
            detail: "a directory".into(),
            source: None,
        });
    }
    if meta.len() == 0 {
        return Err(empty_file());
    }
    let mut head = [0; REDB_MAGIC.len()];
    match file.read_exact(&mut head) {
        Ok(()) if head == REDB_MAGIC => Ok(()),
        Ok(()) => Err(not_redb()),
        Err(err) if err.kind() == ErrorKind::UnexpectedEof => Err(not_redb()),
        Err(err) => Err(from_io(err)),
    }
}

/// Builds a new outbox under a temporary name next to `path`, then links it into place only if
/// `path` is still free ([`outbox_core::file::create_new`]): whoever looks at `path` finds
/// nothing or a whole outbox, held by this store's lock until it is closed, never an empty or
/// half-written file.
pub(super) fn create_file(path: PathBuf, config: RedbConfig) -> Result<RedbStore> {
    let sync_dir = config.durability == crate::Durability::Immediate;
    let db = outbox_core::file::create_new(&path, sync_dir, from_io, |temp| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(temp)
            .map_err(from_io)?;
        let db = FileBackend::new(file)
            .and_then(|backend| config.builder().create_with_backend(backend))
            .map_err(from_redb)?;
        lay_out(&db, &config)?;
        Ok(db)
    })?;
    start(db, config, Some(path))
}

pub(super) fn open_file(path: PathBuf, config: RedbConfig) -> Result<RedbStore> {
    check_header(&path)?;
    // Look before writing: a read-only handle never changes the file, so a foreign database
    // or a newer schema is refused with the file's bytes unchanged.
    match config.builder().open_read_only(&path) {
        Ok(db) => {
            schema::check(schema::inspect(&db)?)?;
            db.close().map_err(from_redb)?;
        }
        // Not closed cleanly: only a writable open can repair it; look after the repair.
        Err(redb::DatabaseError::RepairAborted) => {}
        Err(err) => return Err(from_redb(err)),
    }
    let db = config.builder().open(&path).map_err(from_redb)?;
    let version = schema::check(schema::inspect(&db)?)?;
    converge(db, config, version, Some(path))
}

/// Lays out a new outbox in a fresh database and starts the store on it.
pub(super) fn initialize(
    db: Database,
    config: RedbConfig,
    path: Option<PathBuf>,
) -> Result<RedbStore> {
    lay_out(&db, &config)?;
    start(db, config, path)
}

/// Lays out a new outbox in a fresh database, durably.
fn lay_out(db: &Database, config: &RedbConfig) -> Result<()> {
    let mut txn = db.begin_write().map_err(from_redb)?;
    config.prepare(&mut txn)?;
    txn.set_durability(redb::Durability::Immediate)
        .map_err(from_redb)?;
    schema::init(&txn)?;
    txn.commit().map_err(from_redb)
}

/// Migrates an opened outbox to the current schema and expires the leases of the dead process.
pub(super) fn converge(
    db: Database,
    config: RedbConfig,
    version: u32,
    path: Option<PathBuf>,
) -> Result<RedbStore> {
    let mut txn = db.begin_write().map_err(from_redb)?;
    config.prepare(&mut txn)?;
    // The migration and the lease rewrite must not be lost whatever the configured level.
    txn.set_durability(redb::Durability::Immediate)
        .map_err(from_redb)?;
    schema::migrate(&txn, version)?;
    schema::expire_leases(&txn)?;
    txn.commit().map_err(from_redb)?;
    start(db, config, path)
}

fn start(db: Database, config: RedbConfig, path: Option<PathBuf>) -> Result<RedbStore> {
    let db = Arc::new(db);
    let writer = Writer::start(Arc::clone(&db), config.clone())?;
    Ok(RedbStore {
        db: Db::Write(db),
        writer: Some(writer),
        config,
        path,
    })
}
