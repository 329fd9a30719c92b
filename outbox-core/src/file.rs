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
