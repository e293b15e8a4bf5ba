//! Named pipes of tokens: a GNU make jobserver's pipe, made as a FIFO so
//! the daemon and a session's processes each open it on their own (a
//! daemon that restarts opens it again by its path).
//!
//! A token is one byte. Whoever reads one holds a job; writing it back
//! returns it. The bytes sit in the pipe only while someone holds it
//! open, so the daemon keeps one descriptor of its own.

use rustix::fs::{FileType, Mode, OFlags};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// What a token is (GNU make writes back the byte it read; any will do).
const TOKEN: u8 = b'+';

/// Makes the FIFO at `path`, the owner's only (0600); one already there
/// (a previous daemon's, or planted) is removed first, so what is opened
/// is the one made here.
pub fn make(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )?;
    Ok(())
}

/// Opens the FIFO at `path` for reading and writing (which never blocks
/// on a FIFO, and keeps its bytes while open); `nonblocking` for the
/// daemon's own descriptor, blocking for a child's (GNU make 4.3 blocks
/// on its read). The open refuses to follow a symlink, and anything but
/// a FIFO is refused after it.
pub fn open(path: &Path, nonblocking: bool) -> io::Result<OwnedFd> {
    let mut flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if nonblocking {
        flags |= OFlags::NONBLOCK;
    }
    // NONBLOCK too for the child's open: a FIFO is never waited on when
    // opened for both; then the flag is taken off again.
    let fd = rustix::fs::open(path, flags | OFlags::NONBLOCK, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::Fifo {
        return Err(io::Error::other(format!(
            "{} is not a FIFO",
            path.display()
        )));
    }
    if !nonblocking {
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    }
    Ok(fd)
}

/// How many tokens sit in the pipe now.
pub fn available(fd: impl AsFd) -> io::Result<usize> {
    Ok(rustix::io::ioctl_fionread(fd)? as usize)
}

/// Puts `n` tokens in the pipe (a pipe holds 64 KiB: far more tokens than
/// a jobserver has).
pub fn put(fd: impl AsFd, n: usize) -> io::Result<()> {
    let bytes = vec![TOKEN; n];
    let mut done = 0;
    while done < n {
        done += rustix::io::write(fd.as_fd(), &bytes[done..])?;
    }
    Ok(())
}

/// Takes up to `n` of the tokens sitting in the pipe, without waiting
/// (the descriptor is non-blocking): how many it took.
pub fn take(fd: impl AsFd, n: usize) -> io::Result<usize> {
    let mut buf = vec![0u8; n];
    let mut taken = 0;
    while taken < n {
        match rustix::io::read(fd.as_fd(), &mut buf[taken..]) {
            Ok(0) => break,
            Ok(got) => taken += got,
            Err(rustix::io::Errno::AGAIN) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_put_are_counted_and_taken_back_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs");
        make(&path).unwrap();
        let ours = open(&path, true).unwrap();
        let child = open(&path, false).unwrap();
        put(&ours, 3).unwrap();
        assert_eq!(available(&ours).unwrap(), 3);
        // The child's descriptor blocks (make 4.3 waits on it), ours not.
        let flags = rustix::fs::fcntl_getfl(&child).unwrap();
        assert!(!flags.contains(OFlags::NONBLOCK));
        let mut one = [0u8; 1];
        rustix::io::read(&child, &mut one).unwrap();
        assert_eq!(take(&ours, 5).unwrap(), 2);
        assert_eq!(take(&ours, 5).unwrap(), 0);
        // A planted file in its place is replaced; a symlink is refused.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "x").unwrap();
        assert!(open(&path, true).is_err());
        make(&path).unwrap();
        assert!(open(&path, true).is_ok());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(open(&link, true).is_err());
    }
}
