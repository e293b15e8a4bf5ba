//! `gateway.json`: who the running daemon is (SPEC §6.1), and the identity
//! test that tells a live daemon from a stale record or a recycled pid.

use crate::atomic;
use crate::paths::Paths;
use procd_core::procfs::ProcFs;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayState {
    pub pid: i32,
    /// "<pgid>:<starttime>"; older records may hold only "<pgid>" or nothing.
    #[serde(default)]
    pub identity: Option<String>,
    pub started_at: String,
    /// "foreground" or "background".
    pub launch_mode: String,
    pub socket: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub log_path: Option<String>,
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
}

impl Liveness {
    pub fn reason(&self) -> &'static str {
        match self {
            Liveness::NotStarted => "not_started",
            Liveness::Stale(_) => "stale_state",
            Liveness::IdentityUnavailable(_) => "identity_unavailable",
            Liveness::Running(_) => "running",
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(
            self,
            Liveness::Running(_) | Liveness::IdentityUnavailable(_)
        )
    }
}

/// The identity "<pgid>:<starttime>" of a live process; Ok(None) if it is
/// gone or a zombie; Err if /proc could not tell.
pub fn process_identity(procfs: &ProcFs, pid: i32) -> std::io::Result<Option<String>> {
    if pid <= 0 {
        return Ok(None);
    }
    match procfs.stat(pid) {
        Ok(stat) if stat.is_dead() => Ok(None),
        Ok(stat) => Ok(Some(procd_core::identity::identity_string(
            stat.pgrp,
            stat.start_time,
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `recorded` names the process whose identity is `actual`
/// (a legacy pgid-only record matches on the pgid).
pub fn identity_matches(recorded: &str, actual: &str) -> bool {
    if recorded.contains(':') {
        recorded == actual
    } else {
        actual.split(':').next() == Some(recorded)
    }
}

/// Reads and judges the state file without changing it.
pub fn inspect(paths: &Paths, procfs: &ProcFs) -> Liveness {
    let Some(state) = atomic::read_json::<GatewayState>(&paths.gateway_json()) else {
        return Liveness::NotStarted;
    };
    match process_identity(procfs, state.pid) {
        Ok(None) => Liveness::Stale(state),
        Err(_) => Liveness::IdentityUnavailable(state),
        Ok(Some(actual)) => match state.identity.as_deref() {
            None | Some("") => Liveness::IdentityUnavailable(state),
            Some(recorded) if identity_matches(recorded, &actual) => Liveness::Running(state),
            Some(_) => Liveness::Stale(state),
        },
    }
}

/// Removes the state file if it still records `pid` (a replacement's state
/// is left alone). Call with the lifecycle lock held.
pub fn release_if_own(paths: &Paths, pid: i32) {
    if let Some(state) = atomic::read_json::<GatewayState>(&paths.gateway_json()) {
        if state.pid != pid {
            return;
        }
    }
    let _ = std::fs::remove_file(paths.gateway_json());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_match_exactly_or_by_legacy_pgid() {
        assert!(identity_matches("10:500", "10:500"));
        assert!(!identity_matches("10:500", "10:501"));
        assert!(identity_matches("10", "10:501"));
        assert!(!identity_matches("11", "10:501"));
    }

    #[test]
    fn records_are_judged_by_identity() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::resolve(Some(dir.path()));
        paths.create_dirs().unwrap();
        let procfs = ProcFs::default();
        assert_eq!(inspect(&paths, &procfs), Liveness::NotStarted);
        let me = std::process::id() as i32;
        let mine = process_identity(&procfs, me).unwrap().unwrap();
        let mut state = GatewayState {
            pid: me,
            identity: Some(mine.clone()),
            started_at: String::new(),
            launch_mode: "foreground".into(),
            socket: String::new(),
            version: String::new(),
            command: String::new(),
            log_path: None,
        };
        atomic::write_json(&paths.gateway_json(), &state).unwrap();
        assert!(matches!(inspect(&paths, &procfs), Liveness::Running(_)));
        state.identity = Some(format!("{mine}9"));
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
