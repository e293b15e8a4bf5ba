//! Where a session's output comes from, and how it reaches the log with
//! no byte held only in this process (issue "lose nothing across a
//! crash"): it is spliced from a pipe into the log file
//! (`OutputStore::splice_in`), so at every instant a byte is in a pipe the
//! keeper also holds, or in the file. A PTY master is not a pipe, so a
//! PTY's bytes cross a relay pipe first (splice needs a pipe on one side);
//! the keeper holds the relay as well, and the next daemon empties it
//! before it reads the master again.

use crate::output::store::OutputStore;
use procd_keeper::FdKind;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use tokio::io::unix::AsyncFd;

/// A session's output, as its supervisor reads it.
pub enum OutputSource {
    /// A pipe session's output pipe (the read end).
    Pipe(AsyncFd<OwnedFd>),
    /// A PTY session's master, and its relay pipe.
    Pty {
        master: AsyncFd<OwnedFd>,
        relay: Relay,
    },
}

/// The pipe a PTY's output crosses on its way into the log.
pub struct Relay {
    pub read: OwnedFd,
    pub write: OwnedFd,
}

impl Relay {
    /// A new relay, non-blocking at both ends.
    pub fn new() -> io::Result<Relay> {
        use rustix::pipe::PipeFlags;
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Relay { read, write })
    }
}

impl OutputSource {
    /// A pipe session's output (its read end, made non-blocking).
    pub fn pipe(output: OwnedFd) -> io::Result<OutputSource> {
        set_nonblocking(&output)?;
        Ok(OutputSource::Pipe(procd_sys::cgroup::watch_async(output)?))
    }

    /// A PTY session's output: a descriptor of its master, and its relay.
    pub fn pty(master: OwnedFd, relay: Relay) -> io::Result<OutputSource> {
        set_nonblocking(&master)?;
        Ok(OutputSource::Pty {
            master: procd_sys::cgroup::watch_async(master)?,
            relay,
        })
    }

    /// A pipe, whose unread bytes `FIONREAD` counts exactly (a PTY's may
    /// still be on their way through the kernel's flip buffers).
    pub fn is_pipe(&self) -> bool {
        matches!(self, OutputSource::Pipe(_))
    }

    /// The descriptors the keeper holds so that the output outlives the
    /// daemon (the relay with its master: what is in it is output).
    pub fn kept(&self) -> Vec<(FdKind, BorrowedFd<'_>)> {
        match self {
            OutputSource::Pipe(pipe) => vec![(FdKind::Output, pipe.get_ref().as_fd())],
            OutputSource::Pty { master, relay } => vec![
                (FdKind::Pty, master.get_ref().as_fd()),
                (FdKind::RelayOut, relay.read.as_fd()),
                (FdKind::RelayIn, relay.write.as_fd()),
            ],
        }
    }

    /// A duplicate of what the output is read from, to tell unread output
    /// (`Opening::output_probe`).
    pub fn probe(&self) -> Option<OwnedFd> {
        match self {
            OutputSource::Pipe(fd) | OutputSource::Pty { master: fd, .. } => {
                fd.get_ref().try_clone().ok()
            }
        }
    }

    /// Waits for output, moves up to `buf.len()` bytes of it into `store`
    /// (undecided until `settle`; only into memory where the log cannot
    /// take them: the store knows which) and copies them into `buf`.
    /// Returns how many, as `read` does: 0 once the writers are gone.
    /// WouldBlock: a drain was asked (`OutputStore::drained`) and the
    /// source is empty; the caller settles what it holds and says so.
    /// An empty `buf` is made `MIN_READ_BUF` long at the first read, so a
    /// pipe or PTY that never has output never costs a buffer.
    pub async fn next(&mut self, store: &OutputStore, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            OutputSource::Pipe(pipe) => next_from_pipe(pipe, store, buf).await,
            OutputSource::Pty { master, relay } => next_from_pty(master, relay, store, buf).await,
        }
    }
}

/// `OutputSource::next` for a pipe session.
async fn next_from_pipe(
    pipe: &AsyncFd<OwnedFd>,
    store: &OutputStore,
    buf: &mut Vec<u8>,
) -> io::Result<usize> {
    loop {
        tokio::select! {
            ready = pipe.readable() => {
                let mut ready = ready?;
                store.look_begins();
                match ready.try_io(|fd| take(store, fd.get_ref(), sized(buf))) {
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(got) => return got,
                    // Empty, and the caller settled all it took
                    // before it came back here.
                    Err(_would_block) => store.look_found_nothing(),
                }
            }
            () = store.drain_asked() => {
                store.look_begins();
                match take(store, pipe.get_ref(), sized(buf)) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => store.drain_on(),
                    step => return drain_step(store, step),
                }
            }
        }
    }
}

/// `OutputSource::next` for a PTY session: its master's bytes cross the
/// relay pipe first.
async fn next_from_pty(
    master: &AsyncFd<OwnedFd>,
    relay: &Relay,
    store: &OutputStore,
    buf: &mut Vec<u8>,
) -> io::Result<usize> {
    loop {
        // What the relay holds comes first: a previous daemon's,
        // or what the last step moved there. Until the PTY has
        // printed, the relay is asked how much it holds rather
        // than read, so that one that never prints (a sleeper, a
        // server waiting for its first request) never costs a
        // buffer either.
        if !buf.is_empty() || rustix::io::ioctl_fionread(&relay.read).map_or(true, |n| n > 0) {
            match take(store, &relay.read, sized(buf)) {
                Ok(0) => {} // cannot be: the write end is ours
                Ok(n) => return Ok(n),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        let flags = rustix::pipe::SpliceFlags::NONBLOCK;
        let len = buf.len().max(MIN_READ_BUF);
        let to_relay = |fd: &OwnedFd| {
            rustix::pipe::splice(fd, None, &relay.write, None, len, flags).map_err(io::Error::from)
        };
        let moved = tokio::select! {
            ready = master.readable() => match ready?.try_io(|fd| to_relay(fd.get_ref())) {
                Ok(moved) => moved,
                Err(_would_block) => continue,
            },
            // A read of an empty master first waits for the
            // kernel's pending flip work, so WouldBlock here means
            // nothing written before is still on its way.
            () = store.drain_asked() => match to_relay(master.get_ref()) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    store.drain_on();
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    store.drain_on();
                    continue;
                }
                other => return drain_step(store, other),
            },
        };
        match moved {
            Ok(0) => return Ok(0),
            Ok(_) => {}
            // No slave left: the end of output.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The smallest read buffer a supervisor keeps once it has read (its
/// size then follows the output's pace: `supervise.rs`). Most sessions are
/// idle most of the time; one that never prints has no buffer at all.
pub(crate) const MIN_READ_BUF: usize = 16 * 1024;

/// `buf`, made `MIN_READ_BUF` long if it is empty.
fn sized(buf: &mut Vec<u8>) -> &mut [u8] {
    if buf.is_empty() {
        buf.resize(MIN_READ_BUF, 0);
    }
    buf
}

/// The answer to one step of a drain: bytes (and the drain goes on at
/// the next look), the end, or WouldBlock once the source is empty. (An
/// interrupted step is looked at again by the caller.)
fn drain_step(store: &OutputStore, step: io::Result<usize>) -> io::Result<usize> {
    match step {
        Ok(n) if n > 0 => {
            store.drain_on();
            Ok(n)
        }
        Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(0),
        other => other,
    }
}

/// One step from a pipe: spliced into the log, or, where the log cannot
/// take it now, read into `buf`. 0: the pipe's writers are gone.
fn take(store: &OutputStore, pipe: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    match store.splice_in(pipe.as_fd(), buf)? {
        Some(n) => Ok(n),
        None => Ok(rustix::io::read(pipe, &mut *buf)?),
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(fd)?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PTY that has printed nothing holds no read buffer (a thousand
    /// quiet PTY sessions would hold 16 MiB); its first output makes one
    /// and is read.
    #[tokio::test]
    async fn a_pty_holds_no_buffer_until_it_prints() {
        let dir = tempfile::tempdir().unwrap();
        let store = OutputStore::create(&dir.path().join("s.log"), 1 << 20, 4096).unwrap();
        let (pty, pts) = pty_process::open().unwrap();
        let master = pty.as_fd().try_clone_to_owned().unwrap();
        let mut source = OutputSource::pty(master, Relay::new().unwrap()).unwrap();
        let mut buf = Vec::new();
        // Nothing was printed, so `next` waits; the timeout only ends
        // the wait.
        let quiet = std::time::Duration::from_millis(100);
        let waited = tokio::time::timeout(quiet, source.next(&store, &mut buf)).await;
        assert!(waited.is_err(), "a quiet PTY gave {waited:?}");
        assert_eq!(buf.capacity(), 0, "a buffer before any output");
        rustix::io::write(&pts, b"hello\n").unwrap();
        let read = source.next(&store, &mut buf).await.unwrap();
        assert!(read > 0, "the output was not read");
        assert!(buf.len() >= MIN_READ_BUF, "read without a buffer");
    }
}
