//! Advisory flock(2) locks through std's `File::lock` (docs/operations.md). Order when
//! more than one is needed: transition → lifecycle → clients.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// An exclusive lock, released on drop.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

impl FileLock {
    /// Blocks until the lock is held (call off the event loop).
    pub fn acquire(path: &Path) -> io::Result<FileLock> {
        let file = open(path)?;
        file.lock()?;
        Ok(FileLock { _file: file })
    }

    /// The lock if it is free right now.
    pub fn try_acquire(path: &Path) -> io::Result<Option<FileLock>> {
        let file = open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(FileLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
