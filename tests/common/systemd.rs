//! A real `systemd --user` for one test (`procd-usermanager`: a private
//! mount namespace, its own runtime dir, HOME and cgroup, procd's units as
//! shipped with ExecStart's program changed), and what the tests ask of
//! procd running under it. Dropping it ends and removes everything.

use super::*;
use procd_usermanager::dirs_in;

/// The environment variable that says the machine has no systemd.
pub const NO_SYSTEMD: &str = "PROCD_TEST_NO_SYSTEMD";

pub struct UserManager {
    manager: procd_usermanager::UserManager,
}

impl std::ops::Deref for UserManager {
    type Target = procd_usermanager::UserManager;

    fn deref(&self) -> &Self::Target {
        &self.manager
    }
}

impl UserManager {
    /// A running user manager, or None (said on stderr) when the suite is
    /// told the machine has no systemd. Panics with the reason otherwise.
    pub fn start() -> Option<UserManager> {
        if machine_lacks(NO_SYSTEMD, "systemd") {
            return None;
        }
        let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../systemd");
        let manager =
            procd_usermanager::UserManager::start(&units, Path::new(BIN)).unwrap_or_else(|e| {
                panic!("{e} (or set {NO_SYSTEMD}=1 where the machine cannot have systemd)")
            });
        Some(UserManager { manager })
    }

    /// The daemon serving now (the keeper's child), waited for.
    pub fn daemon_pid(&self) -> i32 {
        let mut pid = None;
        wait_until("a daemon serves below the keeper", || {
            pid = daemon_below(self.main_pid());
            pid.is_some() && status_pid(&self.socket()).map(|p| p as i32) == pid
        });
        pid.unwrap_or(0)
    }

    /// Waits until a daemon other than `old` serves; returns it.
    pub fn wait_new_daemon(&self, old: i32) -> i32 {
        let mut pid = 0;
        wait_until("a new daemon serves", || {
            pid = daemon_below(self.main_pid()).unwrap_or(0);
            pid != 0 && pid != old && status_pid(&self.socket()) == Some(pid as u64)
        });
        pid
    }

    /// `systemctl --user start procd.socket` (nothing else runs yet).
    pub fn start_socket(&self) {
        let out = self.systemctl(&["start", "procd.socket"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(self.active_state("procd.socket"), "active");
    }

    /// The procd CLI as the user would run it: default paths, from this
    /// HOME and runtime dir.
    pub fn procd(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env_remove("PROCD_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CONFIG_HOME");
        let out = self.run(cmd);
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("did not finish within"),
            "procd {}: {out:?}",
            args.join(" ")
        );
        out
    }

    /// The CLI's `--json` output.
    pub fn procd_json(&self, args: &[&str]) -> Value {
        let out = self.procd(args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{out:?}: {e}"))
    }

    /// The root pid of a session.
    pub fn session_pid(&self, id: &str) -> i32 {
        self.ok("poll", json!({"session_id": id}))["pid"]
            .as_i64()
            .expect("pid") as i32
    }

    /// Every process in a session cgroup of the service (`procd-*/<id>`).
    pub fn session_processes(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for tree in dirs_in(&self.service_cgroup()).filter(|d| file_name_starts(d, "procd-")) {
            for session in dirs_in(&tree) {
                pids.extend(
                    std::fs::read_to_string(session.join("cgroup.procs"))
                        .unwrap_or_default()
                        .lines()
                        .filter_map(|l| l.parse::<i32>().ok()),
                );
            }
        }
        pids
    }
}

impl Client for UserManager {
    fn socket(&self) -> PathBuf {
        self.runtime_dir().join("procd/procd.sock")
    }
}

impl Drop for UserManager {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.service_log());
            eprintln!("procd.service's output:\n{}", log.unwrap_or_default());
        }
    }
}

fn file_name_starts(path: &Path, prefix: &str) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(prefix))
}
