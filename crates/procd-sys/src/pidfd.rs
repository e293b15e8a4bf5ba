//! Process file descriptors: the race-free way to signal a process.
//!
//! A pidfd refers to one process for as long as it is open, even after the
//! process dies and its pid number is reused. So procd checks the start time
//! once after opening the pidfd and then signals through the fd: a recycled
//! pid can never receive the signal. Exit is observable by polling the fd
//! (readable once the process has exited, zombie or reaped).
//!
//! The syscalls through rustix (nix 0.32 has no pidfd wrappers).

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
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
        let target = Pid::from_raw(pid)
            .filter(|_| pid > 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        let fd = pidfd_open(target, PidfdFlags::NONBLOCK)?;
        Ok(PidFd { fd, pid })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to exactly the process this fd was opened for.
    /// Returns Ok(false) if it had already exited (ESRCH).
    pub fn send_signal(&self, signal: i32) -> io::Result<bool> {
        let Some(signal) = Signal::from_named_raw(signal) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        match pidfd_send_signal(&self.fd, signal) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::SRCH) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the process has exited (a zombie counts as exited).
    pub fn has_exited(&self) -> bool {
        self.poll_exit(Some(&Timespec::default()))
    }

    /// Polls the pidfd (readable once the process has exited) for up to
    /// `timeout` (None: no limit). EINTR counts as not yet.
    fn poll_exit(&self, timeout: Option<&Timespec>) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
            && fds[0]
                .revents()
                .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
    }

    /// Blocks until the process exits or `limit` passes (for blocking
    /// callers such as the CLI). True if it exited.
    pub fn wait_exit_blocking(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            });
            if self.poll_exit(Some(&timeout)) {
                return true;
            }
            if left.is_zero() || std::time::Instant::now() >= deadline {
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
