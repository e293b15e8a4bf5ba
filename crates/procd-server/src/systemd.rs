//! The two systemd protocols procd speaks, without libsystemd: socket
//! activation (LISTEN_PID/LISTEN_FDS, the socket is fd 3) and readiness
//! notification (a datagram to NOTIFY_SOCKET).

use std::os::fd::{FromRawFd, OwnedFd};

/// The first fd systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: i32 = 3;

/// The listening socket systemd passed us, if it did (and it is for us).
/// Takes it once; the LISTEN_* variables are not passed on to children.
pub fn take_listen_fd() -> Option<std::os::unix::net::UnixListener> {
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.trim().parse::<i32>().ok())
        .unwrap_or(0);
    if !for_us || count < 1 {
        return None;
    }
    if count > 1 {
        tracing::warn!(
            count,
            "systemd passed several sockets; serving on the first"
        );
    }
    let fd = LISTEN_FDS_START;
    // The fd must be a listening socket before we own it.
    // SAFETY: borrowing for one getsockopt call; if fd 3 is not open the
    // call fails with EBADF, which reads as "not a listener".
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let is_unix_listener =
        nix::sys::socket::getsockopt(&borrowed, nix::sys::socket::sockopt::AcceptConn)
            .unwrap_or(false);
    if !is_unix_listener {
        tracing::warn!("LISTEN_FDS names fd 3, but it is not a listening socket");
        return None;
    }
    // SAFETY: by the socket-activation protocol fd 3 was opened for this
    // process (LISTEN_PID matched) and nothing else in procd owns it; we
    // take ownership exactly once (the variables are checked only here,
    // at start-up, before any other fd is opened by us at that number).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Children must not inherit it.
    let _ = nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    Some(std::os::unix::net::UnixListener::from(owned))
}

/// Sends `state` (e.g. "READY=1") to the service manager, if there is one.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(err) = sent {
        tracing::warn!(%err, "sd_notify failed");
    }
}
