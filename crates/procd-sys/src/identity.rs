//! The identity guard: a pid together with its start time names one process
//! for all time. Every signal procd sends goes through `ProcessIdentity::open`,
//! which returns a pidfd only if the pid still belongs to the same process.

use crate::pidfd::PidFd;
use crate::procfs::ProcFs;
use std::io;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: i32,
    pub start_time: u64,
}

impl ProcessIdentity {
    /// Records the identity of a live process.
    pub fn of(procfs: &ProcFs, pid: i32) -> io::Result<ProcessIdentity> {
        let stat = procfs.stat(pid)?;
        Ok(ProcessIdentity {
            pid,
            start_time: stat.start_time,
        })
    }

    /// A pidfd for this exact process, or None if it is gone or its pid now
    /// belongs to another process. The start time is checked after the pidfd
    /// is opened, so the fd cannot refer to a process started later.
    pub fn open(&self, procfs: &ProcFs) -> Option<PidFd> {
        if self.pid <= 1 {
            return None;
        }
        let pidfd = PidFd::open(self.pid).ok()?;
        match procfs.stat(self.pid) {
            Ok(stat) if stat.start_time == self.start_time => Some(pidfd),
            _ => None,
        }
    }

    /// Whether the process is alive and still the same one (zombies are dead).
    pub fn is_alive(&self, procfs: &ProcFs) -> bool {
        matches!(procfs.stat(self.pid), Ok(s) if s.start_time == self.start_time && !s.is_dead())
    }
}

/// The on-disk identity form "<pgid>:<starttime>".
pub fn identity_string(pgid: i32, start_time: u64) -> String {
    format!("{pgid}:{start_time}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_start_time_is_never_opened() {
        let procfs = ProcFs::default();
        let me = ProcessIdentity::of(&procfs, std::process::id() as i32).expect("self");
        assert!(me.open(&procfs).is_some());
        let impostor = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(impostor.open(&procfs).is_none());
        assert!(!impostor.is_alive(&procfs));
    }
}
