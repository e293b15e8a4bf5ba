//! Process file descriptors: the race-free way to signal a process.
//!
//! A pidfd refers to one process for as long as it is open, even after the
//! process dies and its pid number is reused. So procd checks the start time
//! once after opening the pidfd and then signals through the fd: a recycled
//! pid can never receive the signal. Exit is observable by polling the fd
//! (readable once the process has exited, zombie or reaped).
//!
//! A process that is not the parent learns the exit status too, from a
//! pidfd it opened before the exit (`reaped_status`, Linux 6.15): a keeper
//! that lost its roots to the user manager still reports exact exits.
//!
//! The syscalls through rustix (nix 0.32 has no pidfd wrappers).

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
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

    /// The pidfd of the process at the other end of a unix socket, as
    /// the kernel recorded it at connect (`SO_PEERPIDFD`, Linux 6.5):
    /// unlike the peer's pid number, it cannot come to name another
    /// process. `pid` is that peer's pid (from `SO_PEERCRED`).
    pub fn of_peer(socket: BorrowedFd<'_>, pid: i32) -> io::Result<PidFd> {
        let mut fd: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `socket` is an open descriptor for the whole call; the
        // kernel writes at most `len` (an int's size) bytes into `fd`, a
        // live local of that size, and sets `len` to what it wrote.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERPIDFD,
                (&mut fd as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the kernel just installed `fd` as a new descriptor of
        // this process's (close-on-exec), owned by nothing else. Owned
        // before the length is checked, so that it is closed either way.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        if len as usize != std::mem::size_of::<libc::c_int>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
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
        // A process already gone costs one poll, not an epoll registration
        // and its removal (a kill confirms each of its tree's processes).
        if self.has_exited() {
            return true;
        }
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

/// `struct pidfd_info` of linux/pidfd.h, its first version (64 bytes).
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    /// pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid.
    ids: [u32; 11],
    exit_code: i32,
}

/// `PIDFD_INFO_EXIT`: the exit status, kept once the process is reaped.
const PIDFD_INFO_EXIT: u64 = 1 << 3;
/// `PIDFD_GET_INFO`: `_IOWR(0xFF, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: u64 =
    (3 << 30) | ((std::mem::size_of::<PidfdInfo>() as u64) << 16) | (0xFF << 8) | 11;

/// The raw wait(2) status of the process `pidfd` refers to, once whoever
/// was its parent has reaped it (`PIDFD_INFO_EXIT`, Linux 6.15), whether
/// or not that was this process. Ok(None) while it runs or waits unreaped
/// (a poll of the pidfd reports HUP when it is reaped); an error where the
/// kernel cannot tell (ENOTTY or EINVAL before 6.15).
pub fn reaped_status(pidfd: BorrowedFd<'_>) -> io::Result<Option<i32>> {
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: PIDFD_GET_INFO reads `mask` from, and writes at most the
    // size encoded in the request number (size_of::<PidfdInfo>()) into,
    // the struct it is given: here a live, exclusively borrowed, aligned
    // repr(C) value of exactly that size. Any other descriptor makes the
    // call fail without touching it.
    let r = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            &mut info as *mut PidfdInfo,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code))
}

/// Whether this kernel gives a pidfd's holder the exit status
/// (`reaped_status`; Linux 6.15 and later).
pub fn exits_visible() -> bool {
    // Asked once: the kernel does not change under a running process.
    static VISIBLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VISIBLE.get_or_init(|| {
        PidFd::open(std::process::id() as i32).is_ok_and(|me| reaped_status(me.as_fd()).is_ok())
    })
}

impl PidFd {
    /// The pidfd itself (to hand to another process).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_parent_learns_the_exit_status_once_the_parent_reaps() {
        // The child exits 7, its pidfd is polled and asked by this process
        // as a non-parent would: nothing until it is reaped, then 7.
        let child = std::process::Command::new("sh")
            .args(["-c", "read _; exit 7"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let mut child = child;
        let pidfd = PidFd::open(child.id() as i32).expect("pidfd");
        assert_eq!(reaped_status(pidfd.as_fd()).expect("6.15 or later"), None);
        drop(child.stdin.take());
        assert!(pidfd.wait_exit_blocking(Duration::from_secs(10)));
        assert_eq!(
            reaped_status(pidfd.as_fd()).expect("info"),
            None,
            "a zombie has no status yet"
        );
        let status = child.wait().expect("reap");
        assert_eq!(status.code(), Some(7));
        let raw = reaped_status(pidfd.as_fd()).expect("info").expect("reaped");
        assert_eq!(
            crate::wait::ChildExit::from_raw(raw),
            Some(crate::wait::ChildExit::Code(7))
        );
    }
}
