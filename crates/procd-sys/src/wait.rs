//! How a child ended, as wait(2) tells it: one type for the daemon's reaper
//! and for the keeper, which reaps the roots a dead daemon left to it and
//! passes their statuses on.

use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildExit {
    Code(i32),
    Signal(i32),
}

impl ChildExit {
    /// The child and how it ended, for a status that says it ended (not a
    /// stop or a continue).
    pub fn of(status: WaitStatus) -> Option<(Pid, ChildExit)> {
        match status {
            WaitStatus::Exited(pid, code) => Some((pid, ChildExit::Code(code))),
            WaitStatus::Signaled(pid, sig, _) => Some((pid, ChildExit::Signal(sig as i32))),
            _ => None,
        }
    }

    /// How a process ended, from a raw wait(2) status (as the kernel also
    /// gives it to a pidfd's holder, `pidfd::reaped_status`); None for a
    /// status that is not an end.
    pub fn from_raw(status: i32) -> Option<ChildExit> {
        if libc::WIFEXITED(status) {
            Some(ChildExit::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(ChildExit::Signal(libc::WTERMSIG(status)))
        } else {
            None
        }
    }
}
