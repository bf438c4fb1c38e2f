//! File helpers: how perfmodel writes what it keeps (models, calibrations, profiles, reports, configs).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// How the temporary files of [`write_atomic`] are named (`.perfmodel-XXXXXX.tmp`), so that a directory's owner
/// can recognise and remove those a killed process left behind.
const TEMP_PREFIX: &str = ".perfmodel-";
const TEMP_SUFFIX: &str = ".tmp";

/// Whether `name` (a file name, no directory) is a temporary file of [`write_atomic`].
pub fn is_temp_file_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX)
}

/// Write `bytes` to `path` atomically: a temporary file in the same directory, fsync, then rename, so a crash
/// never leaves a half-written file where a good one was expected (only, at worst, a temporary file that
/// [`is_temp_file_name`] recognises).
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let path = path.as_ref();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).suffix(TEMP_SUFFIX);
    // Ordinary file permissions (0666 less the umask), not tempfile's private 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = builder.tempfile_in(&dir).map_err(|e| Error::io(&dir, e))?;
    tmp.write_all(bytes).map_err(|e| Error::io(path, e))?;
    tmp.as_file().sync_all().map_err(|e| Error::io(path, e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    // The rename itself reaches the disk with the directory's entry: without this a power cut could lose a file
    // that was reported written. Best effort (some filesystems refuse to sync a directory).
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// An exclusive advisory lock on a file, held until dropped (the kernel releases it when the process dies, so a
/// killed process leaves nothing to clean up).
#[derive(Debug)]
pub struct Lock {
    _file: std::fs::File,
}

/// Take the lock of `path` (created, with its directory, if missing) without waiting; `held_by_another` words
/// the error when another process holds it. On a filesystem without file locks (some network and FUSE mounts)
/// the lock is not held, and the caller goes on as before there were locks.
pub fn try_lock(path: &Path, held_by_another: impl FnOnce() -> String) -> Result<Lock> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(Lock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Invalid(held_by_another())),
        Err(std::fs::TryLockError::Error(e)) if unsupported(&e) => Ok(Lock { _file: file }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

/// Whether a lock error says the filesystem has no locks.
fn unsupported(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Unsupported || matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::ENOLCK))
}

/// The `*.json` files directly in `dir`, sorted.
pub fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}
