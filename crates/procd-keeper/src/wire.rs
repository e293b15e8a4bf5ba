//! The keeper protocol: one JSON message per SEQPACKET datagram, with the
//! descriptors it names attached (SCM_RIGHTS). Both ends are this crate,
//! so the shapes live here and nowhere else.

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Bumped when a message changes shape; a daemon refuses a keeper of
/// another version (and runs without one).
pub const VERSION: u32 = 4;

/// The environment variable that tells a daemon it runs under a keeper:
/// the descriptor number of its end of the link.
pub const ENV: &str = "PROCD_KEEPER_FD";

/// Exit status of a daemon that hands its sessions over (restart, upgrade):
/// the keeper starts the next one at once.
pub const EXIT_HANDOVER: i32 = 75;

/// What a descriptor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FdKind {
    /// The read end of a pipe session's output pipe.
    Output,
    /// The write end of a pipe session's stdin pipe.
    Stdin,
    /// A PTY session's master.
    Pty,
    /// The read end of a PTY session's relay pipe (its output on the way
    /// from the master into the log).
    RelayOut,
    /// The write end of that relay.
    RelayIn,
    /// A pidfd of the session's root: under systemd, where the keeper's
    /// death gives the roots to the user manager, the next keeper learns
    /// their exits from it (docs/survival.md).
    Process,
    /// A restarting session's launch (its argv and environment) in a
    /// sealed memfd: how the next daemon starts its next run without the
    /// environment ever touching the disk (docs/stacks.md).
    Launch,
}

impl FdKind {
    pub const ALL: [FdKind; 7] = [
        FdKind::Output,
        FdKind::Stdin,
        FdKind::Pty,
        FdKind::RelayOut,
        FdKind::RelayIn,
        FdKind::Process,
        FdKind::Launch,
    ];

    /// Its name in systemd's fd store (the wire's name).
    pub fn name(self) -> &'static str {
        match self {
            FdKind::Output => "output",
            FdKind::Stdin => "stdin",
            FdKind::Pty => "pty",
            FdKind::RelayOut => "relay_out",
            FdKind::RelayIn => "relay_in",
            FdKind::Process => "process",
            FdKind::Launch => "launch",
        }
    }
}

/// How a process ended (wait(2)); written `{"code": N}` or `{"signal": N}`.
pub use procd_sys::wait::ChildExit as Exit;

/// Daemon → keeper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ToKeeper {
    /// Keep the listening socket (attached) for the next daemon.
    Listener,
    /// Keep a session's descriptors (attached, in the order of `fds`).
    Hold {
        session_id: String,
        pid: i32,
        start_time: u64,
        fds: Vec<FdKind>,
    },
    /// The session's stdin was closed: let go of its write end too.
    CloseStdin { session_id: String },
    /// The session is over: let go of everything of it.
    Release { session_id: String },
    /// The daemon serves: from now on its death is a crash to recover from.
    Serving,
}

/// Keeper → daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ToDaemon {
    /// The first message. `fd_store`: the keeper also keeps every session
    /// in systemd's fd store, so a daemon that loses its keeper hands over
    /// and exits (the next keeper has the sessions) instead of serving on.
    Hello {
        version: u32,
        #[serde(default)]
        fd_store: bool,
        /// This keeper's instance id (`status.instance`): made when the
        /// keeper starts, kept across its daemons and its upgrades.
        #[serde(default)]
        instance: Option<String>,
    },
    /// The listening socket (attached); `activated`: systemd made it (the
    /// socket file is systemd's, never removed by procd).
    Listener {
        #[serde(default)]
        activated: bool,
    },
    /// A session a previous daemon started, its descriptors attached; its
    /// root's exit if the keeper reaped it meanwhile.
    Session {
        session_id: String,
        pid: i32,
        start_time: u64,
        fds: Vec<FdKind>,
        exit: Option<Exit>,
    },
    /// Everything held has been sent.
    HandedOver,
    /// A handed-over session's root ended (it is the keeper's child now).
    Exited { pid: i32, exit: Exit },
    /// Hand the sessions over and exit with `EXIT_HANDOVER` (procd restart).
    HandOver,
    /// End every session and exit (procd stop reached the keeper).
    Stop,
}

/// The largest message (a session id and a few numbers need far less).
const MAX_MESSAGE: usize = 16 * 1024;
/// At most this many descriptors ride on one message.
pub const MAX_FDS: usize = 5;

/// Sends one message with `fds` attached, waiting for room if the peer's
/// queue is full (the keeper's sends: bounded by the link's send
/// timeout). Never raises SIGPIPE.
pub fn send<T: Serialize>(
    socket: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    send_with(socket, msg, fds, MsgFlags::MSG_NOSIGNAL)
}

/// `send`, but never waiting: EAGAIN when the peer's queue is full (the
/// daemon's sends, made on its event loop, must not block on a keeper
/// that does not read).
pub fn send_now<T: Serialize>(
    socket: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    send_with(
        socket,
        msg,
        fds,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    )
}

fn send_with<T: Serialize>(
    socket: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
    flags: MsgFlags,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &rights };
    sendmsg::<UnixAddr>(
        socket.as_raw_fd(),
        &[IoSlice::new(&body)],
        cmsgs,
        flags,
        None,
    )?;
    Ok(())
}

/// What `recv` got.
pub enum Received<T> {
    Message(T, Vec<OwnedFd>),
    /// Nothing queued (non-blocking receive only).
    Empty,
    /// The other end is gone.
    Closed,
}

/// Receives one message. A message that does not parse is skipped (its
/// descriptors closed) and reported as an error.
pub fn recv<T: for<'de> Deserialize<'de>>(
    socket: BorrowedFd<'_>,
    nonblocking: bool,
) -> std::io::Result<Received<T>> {
    let mut body = vec![0u8; MAX_MESSAGE];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let (len, fds, truncated) = loop {
        let mut iov = [IoSliceMut::new(&mut body)];
        match recvmsg::<UnixAddr>(socket.as_raw_fd(), &mut iov, Some(&mut space), flags) {
            Ok(msg) => {
                let mut fds = Vec::new();
                if let Ok(cmsgs) = msg.cmsgs() {
                    for cmsg in cmsgs {
                        if let ControlMessageOwned::ScmRights(raw) = cmsg {
                            // SAFETY: SCM_RIGHTS installed these descriptors
                            // in this process for this message; nothing else
                            // knows them, so each is owned exactly once here.
                            fds.extend(
                                raw.into_iter()
                                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                            );
                        }
                    }
                }
                let truncated = msg
                    .flags
                    .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
                break (msg.bytes, fds, truncated);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) if nonblocking => return Ok(Received::Empty),
            Err(e) => return Err(e.into()),
        }
    };
    if len == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    if truncated {
        return Err(std::io::Error::other("a keeper message was truncated"));
    }
    match serde_json::from_slice(&body[..len]) {
        Ok(msg) => Ok(Received::Message(msg, fds)),
        Err(e) => Err(std::io::Error::other(format!(
            "a keeper message does not parse: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsFd;

    #[test]
    fn messages_carry_their_descriptors() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let msg = ToKeeper::Hold {
            session_id: "proc_0123456789ab".into(),
            pid: 42,
            start_time: 7,
            fds: vec![FdKind::Output],
        };
        send(a.as_fd(), &msg, &[r.as_fd()]).unwrap();
        drop(r);
        let Received::Message(got, fds) = recv::<ToKeeper>(b.as_fd(), false).unwrap() else {
            panic!("no message");
        };
        assert_eq!(got, msg);
        assert_eq!(fds.len(), 1);
        // The received descriptor is the pipe's read end: what is written
        // arrives through it.
        std::io::Write::write_all(&mut &w, b"x").unwrap();
        let mut buf = [0u8; 1];
        let n = std::io::Read::read(
            &mut std::fs::File::from(fds.into_iter().next().unwrap()),
            &mut buf,
        )
        .unwrap();
        assert_eq!(&buf[..n], b"x");
        assert!(matches!(
            recv::<ToKeeper>(b.as_fd(), true).unwrap(),
            Received::Empty
        ));
        drop(a);
        assert!(matches!(
            recv::<ToKeeper>(b.as_fd(), false).unwrap(),
            Received::Closed
        ));
    }
}
