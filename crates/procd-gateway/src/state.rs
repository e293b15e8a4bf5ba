//! `gateway.json`: who the running daemon is (docs/operations.md), and the identity
//! test that tells a live daemon from a stale record or a recycled pid.

use crate::atomic;
use crate::paths::Paths;
pub use procd_sys::identity::RecordedIdentity;
use procd_sys::procfs::ProcFs;
use serde::{Deserialize, Serialize};

/// The record. Read leniently (docs/operations.md: the seed's records are minimal):
/// only `pid` is required, unknown fields are ignored, `identity` may be a
/// string or an integer (a legacy pgid), `command` a string or an argv.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayState {
    pub pid: i32,
    /// "<pgid>:<starttime>"; older records may hold only "<pgid>" or nothing.
    #[serde(default, deserialize_with = "procd_sys::identity::lenient")]
    pub identity: Option<RecordedIdentity>,
    #[serde(default)]
    pub started_at: String,
    /// "foreground" or "background".
    #[serde(default)]
    pub launch_mode: String,
    #[serde(default)]
    pub socket: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, deserialize_with = "lenient::command")]
    pub command: String,
    #[serde(default)]
    pub log_path: Option<String>,
    /// The keeper above the daemon (docs/survival.md), if it runs under one: it
    /// outlives a daemon that dies and starts the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keeper_pid: Option<i32>,
    /// The keeper's identity, as `identity` is the daemon's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "procd_sys::identity::lenient"
    )]
    pub keeper_identity: Option<RecordedIdentity>,
}

impl GatewayState {
    /// Whether the recorded keeper is alive and still the recorded process.
    pub fn keeper_alive(&self, procfs: &ProcFs) -> bool {
        let (Some(pid), Some(recorded)) = (self.keeper_pid, self.keeper_identity) else {
            return false;
        };
        matches!(RecordedIdentity::of(procfs, pid), Ok(Some(actual)) if recorded.matches(&actual))
    }
}

mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// A command line, or an argv joined with spaces.
    pub fn command<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::String(s) => s,
            Value::Array(argv) => argv
                .iter()
                .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        })
    }
}

/// What a state file says about the instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Liveness {
    /// No state file.
    NotStarted,
    /// The recorded process is gone or is someone else now.
    Stale(GatewayState),
    /// The pid is alive but its identity cannot be checked: assume running.
    IdentityUnavailable(GatewayState),
    Running(GatewayState),
    /// The recorded daemon is gone but its keeper lives: a new daemon is
    /// about to serve (the keeper holds the listening socket meanwhile).
    Restarting(GatewayState),
}

impl Liveness {
    pub fn reason(&self) -> &'static str {
        match self {
            Liveness::NotStarted => "not_started",
            Liveness::Stale(_) => "stale_state",
            Liveness::IdentityUnavailable(_) => "identity_unavailable",
            Liveness::Running(_) => "running",
            Liveness::Restarting(_) => "restarting",
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(
            self,
            Liveness::Running(_) | Liveness::IdentityUnavailable(_) | Liveness::Restarting(_)
        )
    }
}

/// Reads and judges the state file without changing it. A file that is
/// not a record at all is never taken for "no daemon" while a daemon
/// answers on the socket: then the listener (by SO_PEERCRED) is reported,
/// with its identity unavailable (so `stop` will not signal it).
pub fn inspect(paths: &Paths, procfs: &ProcFs) -> Liveness {
    let state = match atomic::read_json_checked::<GatewayState>(&paths.gateway_json()) {
        atomic::Read::Parsed(state) => state,
        atomic::Read::Missing => return Liveness::NotStarted,
        atomic::Read::Corrupt => {
            return match listener_pid(paths) {
                Some(pid) => Liveness::IdentityUnavailable(GatewayState {
                    pid,
                    identity: None,
                    started_at: String::new(),
                    launch_mode: String::new(),
                    socket: paths.socket().display().to_string(),
                    version: String::new(),
                    command: String::new(),
                    log_path: None,
                    keeper_pid: None,
                    keeper_identity: None,
                }),
                None => Liveness::NotStarted,
            };
        }
    };
    match RecordedIdentity::of(procfs, state.pid) {
        Ok(None) if state.keeper_alive(procfs) => Liveness::Restarting(state),
        Ok(None) => Liveness::Stale(state),
        Err(_) => Liveness::IdentityUnavailable(state),
        Ok(Some(actual)) => match state.identity {
            None => Liveness::IdentityUnavailable(state),
            Some(recorded) if recorded.matches(&actual) => Liveness::Running(state),
            Some(_) => Liveness::Stale(state),
        },
    }
}

/// The pid of whatever accepts connections on the socket, if anything does.
fn listener_pid(paths: &Paths) -> Option<i32> {
    let stream = std::os::unix::net::UnixStream::connect(paths.socket()).ok()?;
    let cred =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    Some(cred.pid())
}

/// Moves a `gateway.json` that is not a record aside (the daemon does this
/// when it claims the instance, under the lifecycle lock).
pub fn set_aside_if_corrupt(paths: &Paths) {
    let path = paths.gateway_json();
    if let atomic::Read::Corrupt = atomic::read_json_checked::<GatewayState>(&path) {
        let _ = atomic::move_aside(&path);
    }
}

/// Removes the state file if it still records `pid` (a replacement's state,
/// or a file that is not a record at all, is left alone). Call with the
/// lifecycle lock held.
pub fn release_if_own(paths: &Paths, pid: i32) {
    if let atomic::Read::Parsed(state) =
        atomic::read_json_checked::<GatewayState>(&paths.gateway_json())
    {
        if state.pid == pid {
            let _ = std::fs::remove_file(paths.gateway_json());
            // Its cgroup tree too, if no session cgroup is left in it (a
            // directory with sessions in it is never removed).
            if let Ok(tree) = procd_sys::cgroup::CgroupTree::locate_instance(&paths.state_dir) {
                tree.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_judged_by_identity() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::resolve(Some(dir.path()));
        paths.create_dirs().unwrap();
        let procfs = ProcFs::default();
        assert_eq!(inspect(&paths, &procfs), Liveness::NotStarted);
        let me = std::process::id() as i32;
        let mine = RecordedIdentity::of(&procfs, me).unwrap().unwrap();
        let mut state = GatewayState {
            pid: me,
            identity: Some(mine),
            started_at: String::new(),
            launch_mode: "foreground".into(),
            socket: String::new(),
            version: String::new(),
            command: String::new(),
            log_path: None,
            keeper_pid: None,
            keeper_identity: None,
        };
        atomic::write_json(&paths.gateway_json(), &state).unwrap();
        assert!(matches!(inspect(&paths, &procfs), Liveness::Running(_)));
        state.identity = Some(RecordedIdentity {
            start_time: mine.start_time.map(|s| s * 10 + 9),
            ..mine
        });
        atomic::write_json(&paths.gateway_json(), &state).unwrap();
        assert_eq!(inspect(&paths, &procfs).reason(), "stale_state");
        state.identity = None;
        atomic::write_json(&paths.gateway_json(), &state).unwrap();
        assert_eq!(inspect(&paths, &procfs).reason(), "identity_unavailable");
        release_if_own(&paths, me + 1);
        assert!(paths.gateway_json().exists(), "another pid's state is kept");
        release_if_own(&paths, me);
        assert!(!paths.gateway_json().exists());
    }
}
