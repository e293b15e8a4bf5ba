//! systemd's file-descriptor store (docs/survival.md). Under systemd the
//! keeper is the unit's main process, and its SIGKILL would take every
//! session's pipes and masters with it: the daemon below does not outlive
//! its keeper there. So the keeper also stores each descriptor it holds
//! with the user manager (`FDSTORE=1`, one per message, named for its
//! session and kind) and removes it when it lets go. The unit's next
//! keeper gets them back at start, beside the activated socket
//! (`LISTEN_FDS`, `LISTEN_FDNAMES`), and the root's pidfd gives it the
//! exit the user manager reaped (`procd_sys::pidfd::reaped_status`).

use crate::wire::FdKind;
use std::os::fd::BorrowedFd;

/// Every name procd stores starts so (the socket unit's own descriptor
/// is named after the unit: `procd.socket`).
const PREFIX: &str = "session.";

/// The longest session id stored (systemd takes names up to 255 bytes).
const MAX_ID: usize = 64;

/// A stored descriptor's name: `session.<id>.<kind>`; the root's pidfd
/// also carries the pid and start time the next daemon checks it by.
pub fn name(id: &str, kind: FdKind, pid: i32, start_time: u64) -> String {
    match kind {
        FdKind::Process => format!("{PREFIX}{id}.process.{pid}.{start_time}"),
        other => format!("{PREFIX}{id}.{}", other.name()),
    }
}

/// What a stored name says.
#[derive(Debug, PartialEq, Eq)]
pub struct Named {
    pub id: String,
    pub kind: FdKind,
    /// For the root's pidfd: its pid and start time.
    pub root: Option<(i32, u64)>,
}

/// Reads a name `name` made; None for any other (the socket's, or one
/// this version does not know).
pub fn parse(stored: &str) -> Option<Named> {
    let rest = stored.strip_prefix(PREFIX)?;
    let mut parts = rest.split('.');
    let id = parts.next().filter(|id| storable(id))?.to_string();
    let kind_name = parts.next()?;
    let kind = FdKind::ALL.into_iter().find(|k| k.name() == kind_name)?;
    let root = match kind {
        FdKind::Process => Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?)),
        _ => None,
    };
    parts.next().is_none().then_some(Named { id, kind, root })
}

/// Whether a session id can be part of a stored name (procd's ids are
/// `proc_` and hex; anything else is not stored rather than mangled).
pub fn storable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Stores `fd` under `name`. `FDPOLL=0`: systemd would otherwise drop a
/// descriptor on its first HUP, which is exactly when it matters here — a
/// pipe whose writer exited with output unread, a pidfd whose process was
/// reaped.
pub fn store(name: &str, fd: BorrowedFd<'_>) -> std::io::Result<()> {
    notify(&format!("FDSTORE=1\nFDNAME={name}\nFDPOLL=0\n"), &[fd])
}

/// Removes (closes) what is stored under `name`.
pub fn remove(name: &str) -> std::io::Result<()> {
    notify(&format!("FDSTOREREMOVE=1\nFDNAME={name}\n"), &[])
}

/// Sends one notification to `$NOTIFY_SOCKET` without ever waiting: a
/// manager that does not read must cost a lost message, never a stalled
/// keeper (a datagram socket's queue is short, and a blocked keeper
/// reaps nothing).
fn notify(state: &str, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
    use std::os::fd::{AsRawFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let addr = match path.as_bytes().strip_prefix(b"@") {
        Some(abstract_name) => UnixAddr::new_abstract(abstract_name)?,
        None => UnixAddr::new(path.as_os_str())?,
    };
    let socket = std::os::unix::net::UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    let iov = [std::io::IoSlice::new(state.as_bytes())];
    let sent = sendmsg(
        socket.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        Some(&addr),
    )?;
    if sent != state.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "a notification was cut short",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_nothing_else_does() {
        for kind in FdKind::ALL {
            let n = name("proc_0a1b2c", kind, 4242, 987654);
            let root = (kind == FdKind::Process).then_some((4242, 987654));
            let want = Named {
                id: "proc_0a1b2c".into(),
                kind,
                root,
            };
            assert_eq!(parse(&n), Some(want), "{n}");
        }
        for other in [
            "procd.socket",
            "session.",
            "session.proc_1.nothing",
            "session.proc_1.output.extra",
            "session.proc_1.process.12",
            "session.proc_1.process.x.1",
            "session.a:b.output",
            "session..output",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
        assert!(!storable(&"a".repeat(MAX_ID + 1)));
    }
}
