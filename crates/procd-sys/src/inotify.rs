//! An inotify instance registered with the event loop, closed off it.
//!
//! Closing an inotify instance waits for an SRCU grace period in the
//! kernel (`fsnotify_destroy_group`): 5 to 20 ms measured here. On a
//! Tokio worker that close stalls every task queued behind it — a kill's
//! answer, a restart's next run, whatever a wakeup had put in the
//! worker's slot. So the descriptor is taken out of the event loop at
//! once and closed on a thread of its own, one close after another (on
//! the blocking pool, a kill of 256 sessions grew it by 24 threads).

use std::io;
use std::os::fd::OwnedFd;
use tokio::io::unix::AsyncFd;

/// An inotify descriptor (or another whose close may block) read through
/// the event loop; dropping it deregisters it at once and closes it on
/// the closing thread.
#[derive(Debug)]
pub struct Inotify(AsyncFd<ClosedOffTheLoop>);

impl Inotify {
    /// Registers `fd` with the current runtime's event loop (if that
    /// fails, `fd` is dropped: closed off the loop).
    pub fn register(fd: ClosedOffTheLoop) -> io::Result<Inotify> {
        // SAFETY: a ClosedOffTheLoop owns its descriptor and lets go of it
        // only when dropped, so it stays open and the same, and `as_raw_fd`
        // names it, for the whole life of the AsyncFd that owns it.
        let registered = unsafe { AsyncFd::register(fd) };
        registered.map(Inotify).map_err(|e| e.into_parts().1)
    }
}

impl std::ops::Deref for Inotify {
    type Target = AsyncFd<ClosedOffTheLoop>;
    fn deref(&self) -> &AsyncFd<ClosedOffTheLoop> {
        &self.0
    }
}

/// An inotify descriptor closed on the closing thread when dropped,
/// whatever drops it: read when asked, or registered (`Inotify`).
#[derive(Debug)]
pub struct ClosedOffTheLoop(Option<OwnedFd>);

impl ClosedOffTheLoop {
    pub fn new(fd: OwnedFd) -> ClosedOffTheLoop {
        ClosedOffTheLoop(Some(fd))
    }
}

impl std::os::fd::AsFd for ClosedOffTheLoop {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_ref().expect("taken only by drop").as_fd()
    }
}

impl std::os::fd::AsRawFd for ClosedOffTheLoop {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsFd::as_fd(self).as_raw_fd()
    }
}

impl Drop for ClosedOffTheLoop {
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            close_off_the_loop(fd);
        }
    }
}

/// Closes `fd` on the closing thread (here, if that thread cannot be
/// had).
pub fn close_off_the_loop(fd: OwnedFd) {
    use std::sync::mpsc::{channel, SendError, Sender};
    static CLOSER: std::sync::OnceLock<Option<Sender<OwnedFd>>> = std::sync::OnceLock::new();
    let closer = CLOSER.get_or_init(|| {
        let (tx, rx) = channel::<OwnedFd>();
        std::thread::Builder::new()
            .name("procd-close".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = closer {
        if let Err(SendError(fd)) = tx.send(fd) {
            drop(fd);
        }
        return;
    }
    drop(fd);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new inotify descriptor and its number.
    fn inotify() -> (OwnedFd, i32) {
        use std::os::fd::AsRawFd;
        let fd = rustix::fs::inotify::init(
            rustix::fs::inotify::CreateFlags::CLOEXEC | rustix::fs::inotify::CreateFlags::NONBLOCK,
        )
        .expect("inotify");
        let raw = fd.as_raw_fd();
        assert!(is_inotify(raw));
        (fd, raw)
    }

    fn is_inotify(raw: i32) -> bool {
        std::fs::read_link(format!("/proc/self/fd/{raw}"))
            .is_ok_and(|l| l.to_string_lossy().contains("inotify"))
    }

    fn wait_closed(raw: i32) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while is_inotify(raw) {
            assert!(std::time::Instant::now() < deadline, "never closed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Dropped, the descriptor is closed (on the closing thread), never
    /// leaked. That the close no longer stalls a worker is measured, not
    /// asserted: the bench's kill rows (a kill's answer went from 3 ms or
    /// 10-20 ms, by whether a worker was closing an inotify instance, to
    /// 3 ms).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_closes_the_descriptor() {
        let (fd, raw) = inotify();
        drop(Inotify::register(ClosedOffTheLoop::new(fd)).expect("registered"));
        tokio::task::spawn_blocking(move || wait_closed(raw))
            .await
            .expect("waited");
    }

    #[test]
    fn dropping_an_unregistered_one_closes_it() {
        let (fd, raw) = inotify();
        drop(ClosedOffTheLoop::new(fd));
        wait_closed(raw);
    }
}
