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
pub struct Inotify(Option<AsyncFd<OwnedFd>>);

impl Inotify {
    /// Registers `fd` with the current runtime's event loop.
    pub fn register(fd: OwnedFd) -> io::Result<Inotify> {
        match crate::cgroup::watch_async_or_give_back(fd) {
            Ok(fd) => Ok(Inotify(Some(fd))),
            Err((fd, e)) => {
                close_off_the_loop(fd);
                Err(e)
            }
        }
    }
}

impl std::ops::Deref for Inotify {
    type Target = AsyncFd<OwnedFd>;
    fn deref(&self) -> &AsyncFd<OwnedFd> {
        self.0.as_ref().expect("taken only by drop")
    }
}

impl Drop for Inotify {
    fn drop(&mut self) {
        let Some(registered) = self.0.take() else {
            return;
        };
        let fd = registered.into_inner();
        close_off_the_loop(fd);
    }
}

/// An inotify descriptor read without the event loop (its queue read
/// when asked), closed on the closing thread when dropped, whatever
/// drops it.
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

    /// Dropped, the descriptor is closed (on the closing thread), never
    /// leaked. That the close no longer stalls a worker is measured, not
    /// asserted: the bench's kill rows (a kill's answer went from 3 ms or
    /// 10-20 ms, by whether a worker was closing an inotify instance, to
    /// 3 ms).
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
        drop(Inotify::register(fd).expect("registered"));
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
