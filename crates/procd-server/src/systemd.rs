//! The two systemd protocols procd speaks, through the `sd-notify` crate:
//! socket activation (LISTEN_PID/LISTEN_FDS, the socket is fd 3) and
//! readiness notification (a datagram to NOTIFY_SOCKET).

use std::os::fd::{FromRawFd, OwnedFd};

pub use sd_notify::NotifyState;

/// The listening socket systemd passed us, if it did (and it is for us:
/// `sd_notify::listen_fds` checks LISTEN_PID and sets close-on-exec).
/// Taken once; the LISTEN_* variables are not passed on to children.
pub fn take_listen_fd() -> Option<std::os::unix::net::UnixListener> {
    let mut fds = sd_notify::listen_fds().ok()?;
    if fds.len() > 1 {
        tracing::warn!(
            count = fds.len(),
            "systemd passed several sockets; serving on the first"
        );
    }
    let fd = fds.next()?;
    // The fd must be a listening socket before we own it.
    // SAFETY: borrowing for one getsockopt call; if the fd is not open the
    // call fails with EBADF, which reads as "not a listener".
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let is_listener =
        nix::sys::socket::getsockopt(&borrowed, nix::sys::socket::sockopt::AcceptConn)
            .unwrap_or(false);
    if !is_listener {
        tracing::warn!(
            fd,
            "LISTEN_FDS names a descriptor that is not a listening socket"
        );
        return None;
    }
    // SAFETY: by the socket-activation protocol this fd was opened for this
    // process (LISTEN_PID matched) and nothing else in procd owns it; we
    // take ownership exactly once (the variables are read only here, at
    // start-up, before any other fd is opened by us at that number).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Some(std::os::unix::net::UnixListener::from(owned))
}

/// Tells the service manager `state`, if there is one.
pub fn notify(state: NotifyState<'_>) {
    if let Err(err) = sd_notify::notify(&[state]) {
        tracing::warn!(%err, "sd_notify failed");
    }
}
