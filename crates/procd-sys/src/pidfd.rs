//! Process file descriptors: the race-free way to signal a process.
//!
//! A pidfd refers to one process for as long as it is open, even after the
//! process dies and its pid number is reused. So procd checks the start time
//! once after opening the pidfd and then signals through the fd: a recycled
//! pid can never receive the signal. Exit is observable by polling the fd
//! (readable once the process has exited, zombie or reaped).
//!
//! nix 0.32 has no pidfd wrappers, hence the two raw syscalls below.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pid: i32,
}

impl PidFd {
    /// Opens a pidfd for `pid` (ESRCH if no such process).
    pub fn open(pid: i32) -> io::Result<PidFd> {
        if pid <= 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: pidfd_open(pid, flags) takes two integers and touches no
        // memory of ours. It returns a new fd that nobody else owns, or -1.
        let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, libc::PIDFD_NONBLOCK) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `ret` is a freshly created descriptor owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(ret as i32) };
        Ok(PidFd { fd, pid })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to exactly the process this fd was opened for.
    /// Returns Ok(false) if it had already exited (ESRCH).
    pub fn send_signal(&self, signal: i32) -> io::Result<bool> {
        // SAFETY: the fd is valid for the lifetime of `self`; a null siginfo
        // pointer is the documented "as kill(2) would" form; flags are 0.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if ret == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(err)
        }
    }

    /// Whether the process has exited (a zombie counts as exited).
    pub fn has_exited(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on our stack, count 1, zero timeout.
        let ret = unsafe { libc::poll(&mut pfd, 1, 0) };
        ret > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Blocks until the process exits or `limit` passes (for blocking
    /// callers such as the CLI). True if it exited.
    pub fn wait_exit_blocking(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd on our stack, count 1.
            let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
            if ret > 0 {
                return true;
            }
            if ret == 0 || left.is_zero() {
                return self.has_exited();
            }
            // EINTR: go round again with what is left.
        }
    }

    /// Waits until the process exits, or `limit` passes. True if it exited.
    pub async fn wait_exit(&self, limit: Duration) -> bool {
        // SAFETY: the BorrowedFd borrows `self.fd`, so the descriptor stays
        // open and names the same pidfd for the whole life of the AsyncFd,
        // which is dropped (deregistered) at the end of this match.
        let registered = unsafe {
            AsyncFd::register_with_interest(self.fd.as_fd(), tokio::io::Interest::READABLE)
        };
        match registered {
            Ok(async_fd) => {
                let _ = tokio::time::timeout(limit, async_fd.readable()).await;
            }
            Err(_) => {
                // Only if epoll refuses the fd (pidfds are pollable): fall
                // back to checking at a coarse interval until the limit.
                let deadline = tokio::time::Instant::now() + limit;
                while !self.has_exited() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        self.has_exited()
    }
}
