//! Upgrading the keeper in place (the module doc above): its table
//! written to a memfd and read back by the new program after the exec.

use super::{Held, Keeper, Launch};
use crate::wire::{Exit, FdKind};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

/// The environment variable naming the memfd that carries a keeper's
/// table across its exec onto a new program.
const STATE_ENV: &str = "PROCD_KEEPER_STATE";
/// The memfd's name (checked before it is trusted).
const STATE_NAME: &str = "procd-keeper-state";

/// What a keeper carries across its exec: its table, descriptors by number
/// (they stay open: close-on-exec is cleared for the exec).
#[derive(Debug, Serialize, Deserialize)]
struct Carried {
    listener: Option<RawFd>,
    activated: bool,
    ready_told: bool,
    /// The descriptor limit daemons get back.
    nofile: Option<u64>,
    sessions: Vec<CarriedSession>,
    #[serde(default)]
    instance: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct CarriedSession {
    id: String,
    pid: i32,
    start_time: u64,
    exit: Option<Exit>,
    fds: Vec<(FdKind, RawFd)>,
    #[serde(default)]
    foreign: bool,
}

/// Whether the program at `exe` (the path the keeper was started from)
/// is another file than the one this process runs: an upgrade installed.
pub(super) fn program_changed(exe: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(exe), std::fs::metadata("/proc/self/exe")) {
        (Ok(on_disk), Ok(running)) => {
            (on_disk.dev(), on_disk.ino()) != (running.dev(), running.ino())
        }
        _ => false,
    }
}

/// Replaces this process with `launch` (its environment and signal mask
/// kept); returns only on failure.
fn exec_as(launch: &Launch) -> std::io::Error {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &std::ffi::OsStr| CString::new(s.as_bytes()).map_err(std::io::Error::other);
    let argv = std::iter::once(launch.exe.as_os_str())
        .chain(launch.args.iter().map(OsString::as_os_str))
        .map(c)
        .collect::<std::io::Result<Vec<CString>>>();
    match (c(launch.exe.as_os_str()), argv) {
        (Ok(path), Ok(argv)) => match nix::unistd::execv(&path, &argv) {
            Err(e) => e.into(),
            Ok(never) => match never {},
        },
        (Err(e), _) | (_, Err(e)) => e,
    }
}

/// Sets or clears close-on-exec on `fd`.
fn set_cloexec(fd: RawFd, on: bool) -> std::io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD only read and set a descriptor flag; an fd
    // that is not open makes them fail with EBADF, which is returned.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        if flags == -1 || libc::fcntl(fd, libc::F_SETFD, flags) == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Keeper {
    /// Execs the program now at `launch.exe` in this process, carrying the
    /// table over (see the module's doc). Returns only on failure, with
    /// every descriptor as it was.
    pub(super) fn exec_upgrade(&self, launch: &Launch, nofile: Option<u64>) -> std::io::Error {
        let carried = Carried {
            listener: self.listener.as_ref().map(AsRawFd::as_raw_fd),
            activated: self.activated,
            ready_told: self.ready_told,
            nofile,
            instance: self.instance.clone(),
            sessions: self
                .sessions
                .iter()
                .map(|(id, h)| CarriedSession {
                    id: id.clone(),
                    pid: h.pid,
                    start_time: h.start_time,
                    exit: h.exit,
                    fds: h.fds.iter().map(|(k, fd)| (*k, fd.as_raw_fd())).collect(),
                    foreign: h.foreign,
                })
                .collect(),
        };
        let kept: Vec<RawFd> = carried
            .listener
            .into_iter()
            .chain(
                carried
                    .sessions
                    .iter()
                    .flat_map(|s| s.fds.iter().map(|(_, fd)| *fd)),
            )
            .collect();
        let state = (|| {
            let memfd = rustix::fs::memfd_create(STATE_NAME, rustix::fs::MemfdFlags::empty())?;
            let bytes = serde_json::to_vec(&carried).map_err(std::io::Error::other)?;
            std::fs::File::from(memfd.try_clone()?).write_all(&bytes)?;
            for fd in &kept {
                set_cloexec(*fd, false)?;
            }
            Ok::<_, std::io::Error>(memfd)
        })();
        let err = match state {
            Ok(memfd) => {
                // execv(2) itself, not std's Command::exec: that empties
                // the signal mask first, and a SIGTERM arriving in between
                // would end the keeper (and with it every session).
                std::env::set_var(STATE_ENV, memfd.as_raw_fd().to_string());
                let err = exec_as(launch);
                std::env::remove_var(STATE_ENV);
                err
            }
            Err(e) => e,
        };
        for fd in &kept {
            let _ = set_cloexec(*fd, true);
        }
        err
    }

    /// The table a previous keeper (this pid, before its exec) carried
    /// over, if it did, and the descriptor limit it kept.
    pub(super) fn carried() -> std::io::Result<Option<(Keeper, Option<u64>)>> {
        let Some(raw) = std::env::var_os(STATE_ENV) else {
            return Ok(None);
        };
        std::env::remove_var(STATE_ENV);
        let fd: RawFd = raw
            .to_str()
            .and_then(|r| r.parse().ok())
            .filter(|fd| *fd > 2)
            .ok_or_else(|| std::io::Error::other(format!("{STATE_ENV} is not a descriptor")))?;
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
        if !link
            .to_string_lossy()
            .starts_with(&format!("/memfd:{STATE_NAME}"))
        {
            return Err(std::io::Error::other(format!(
                "{STATE_ENV} names no keeper state"
            )));
        }
        // SAFETY: the previous program of this process left `fd` open for
        // us (a memfd of ours, checked just above); nothing else in this
        // freshly exec'd program owns it.
        let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut bytes = Vec::new();
        std::io::Seek::rewind(&mut file)?;
        std::io::Read::take(&mut file, 16 << 20).read_to_end(&mut bytes)?;
        let carried: Carried = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
        let mut seen = std::collections::HashSet::new();
        let mut adopt = |fd: RawFd| -> std::io::Result<OwnedFd> {
            if fd <= 2 || !seen.insert(fd) {
                return Err(std::io::Error::other(format!(
                    "descriptor {fd} carried twice"
                )));
            }
            set_cloexec(fd, true)?; // EBADF when it is not open
                                    // SAFETY: open (checked by fcntl just above), named once in the
                                    // table our previous program wrote, and owned by nothing else
                                    // in this fresh program: it becomes ours alone.
            Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
        };
        let mut keeper = Keeper {
            listener: carried.listener.map(&mut adopt).transpose()?,
            activated: carried.activated,
            ready_told: carried.ready_told,
            instance: carried.instance,
            ..Keeper::default()
        };
        for s in carried.sessions {
            let fds = s
                .fds
                .into_iter()
                .map(|(kind, fd)| Ok((kind, adopt(fd)?)))
                .collect::<std::io::Result<Vec<_>>>()?;
            keeper.sessions.insert(
                s.id,
                Held {
                    pid: s.pid,
                    start_time: s.start_time,
                    fds,
                    exit: s.exit,
                    foreign: s.foreign,
                },
            );
        }
        Ok(Some((keeper, carried.nofile)))
    }
}
