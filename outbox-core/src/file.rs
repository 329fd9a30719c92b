//! For backends that keep their outbox in one file: creating it so that no one ever sees a
//! half-made one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Creates the outbox file at `path` without ever showing a half-made one there.
///
/// `build` makes the whole file under a temporary name in the same directory and returns what
/// it keeps of it (an open database that holds the file's lock, say); the file is then linked
/// to `path` only if `path` is still free, else [`Error::AlreadyExists`], so of two callers
/// racing on a missing path one creates and the other is told to open. The temporary name is
/// removed either way, after what `build` returned is dropped on failure. With `sync_dir`, the
/// directory is synced after the link, so the new entry survives a power cut. I/O errors go
/// through `io_error`, the backend's own mapping.
///
/// ```
/// use outbox_core::{file, Error};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("outbox.db");
/// let build = |temp: &std::path::Path| {
///     std::fs::write(temp, b"whole").map_err(Error::backend)
/// };
/// file::create_new(&path, true, Error::backend, build).unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"whole");
/// // Only the file: no temporary name is left behind.
/// assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
/// assert!(matches!(
///     file::create_new(&path, true, Error::backend, build),
///     Err(Error::AlreadyExists { .. })
/// ));
/// ```
pub fn create_new<T>(
    path: &Path,
    sync_dir: bool,
    io_error: fn(io::Error) -> Error,
    build: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let exists = || Error::AlreadyExists {
        path: path.display().to_string(),
    };
    if fs::symlink_metadata(path).is_ok() {
        return Err(exists());
    }
    let name = path
        .file_name()
        .ok_or_else(|| Error::InvalidConfig(format!("{} names no file", path.display())))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = dir.join(format!(
        ".{}.creating-{:016x}",
        name.to_string_lossy(),
        fastrand::u64(..)
    ));
    let placed = build(&temp).and_then(|built| {
        match fs::hard_link(&temp, path) {
            Ok(()) => Ok(built),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Err(exists()),
            // A file system without hard links: fall back to a rename, checked just before.
            Err(_) if fs::symlink_metadata(path).is_err() => {
                fs::rename(&temp, path).map(|()| built).map_err(io_error)
            }
            Err(_) => Err(exists()),
        }
        // On failure, what `build` returned is dropped here, before the temporary file goes.
    });
    let _ = fs::remove_file(&temp);
    let built = placed?;
    #[cfg(unix)]
    if sync_dir {
        fs::File::open(&dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io_error)?;
    }
    #[cfg(not(unix))]
    let _ = sync_dir;
    Ok(built)
}

/// How many times [`open_or_create`] tries again when the file vanished between its open and
/// its create.
pub const OPEN_OR_CREATE_PASSES: usize = 3;

/// Opens a one-file store, creating the file first when it is missing, whatever other
/// processes do meanwhile: the one loop every one-file backend (SQLite, redb) runs.
///
/// `open` fails with [`Error::NotFound`] for a missing file; `create` makes it (with
/// [`create_new`]) and returns the store, or [`Error::AlreadyExists`] when another caller
/// created it first, and then the file is opened. A pass fails only when the file is gone at
/// the open and present at the create (another process deleting it as fast as it appears, or
/// a dangling symlink): after [`OPEN_OR_CREATE_PASSES`] such passes the error is returned.
///
/// ```
/// use std::cell::Cell;
/// use outbox_core::{file, Error};
///
/// // The file appears between our open and our create: we open theirs.
/// let opens = Cell::new(0);
/// let open = || {
///     opens.set(opens.get() + 1);
///     if opens.get() == 1 { Err(Error::NotFound { path: "q.db".into() }) } else { Ok("theirs") }
/// };
/// let create = || Err(Error::AlreadyExists { path: "q.db".into() });
/// assert_eq!(file::open_or_create(open, create).unwrap(), "theirs");
///
/// // Always gone at the open and present at the create: given up, not looped for ever.
/// let open = || Err::<(), _>(Error::NotFound { path: "q.db".into() });
/// let create = || Err(Error::AlreadyExists { path: "q.db".into() });
/// assert!(matches!(file::open_or_create(open, create), Err(Error::AlreadyExists { .. })));
/// ```
pub fn open_or_create<T>(
    mut open: impl FnMut() -> Result<T>,
    mut create: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut passes = 0;
    loop {
        match open() {
            Err(Error::NotFound { .. }) => {}
            opened => return opened,
        }
        match create() {
            // Someone else created it first: open theirs.
            Err(Error::AlreadyExists { .. }) if passes < OPEN_OR_CREATE_PASSES => passes += 1,
            created => return created,
        }
    }
}
