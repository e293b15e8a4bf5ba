//! A real `systemd --user` for one test (docs/operations.md, "Tested under
//! a real user manager"). systemd refuses to run as a user instance unless
//! `/run/systemd/system` exists, which would make the whole machine look
//! booted with systemd; so the manager runs in a private mount namespace
//! with a tmpfs on `/run/systemd`. It gets a cgroup of its own (in the
//! cgroup2 tree and in the v1 `name=systemd` one it tracks units in), a
//! runtime dir and a HOME of its own, and procd's units as shipped in
//! `systemd/` with only ExecStart's path changed.
//!
//! Drop ends it all: `systemctl --user exit` (which stops procd, and procd
//! its sessions), then whatever is still in the test's cgroups is killed
//! (`cgroup.kill`: they are only the test's own processes), the cgroups
//! are removed deepest first, and the directories with them.

use super::*;
use std::os::unix::process::CommandExt;

/// Where a hybrid host mounts the two hierarchies the manager needs.
const HIERARCHIES: [&str; 2] = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"];
const SYSTEMD: &str = "/lib/systemd/systemd";
/// The environment variable that says the machine has no systemd.
pub const NO_SYSTEMD: &str = "PROCD_TEST_NO_SYSTEMD";

pub struct UserManager {
    /// `unshare`, which became bash and then systemd: the manager's pid.
    child: Child,
    /// `rt/` (XDG_RUNTIME_DIR) and `home/` (HOME) live here.
    root: tempfile::TempDir,
    /// `procd-test-<pid>.slice`: the top of this test's cgroups.
    slice: String,
}

impl UserManager {
    /// A running user manager, or None (said on stderr) when the suite is
    /// told the machine has no systemd. Panics with the reason otherwise.
    pub fn start() -> Option<UserManager> {
        if machine_lacks(NO_SYSTEMD, "systemd") {
            return None;
        }
        assert!(
            Path::new(SYSTEMD).exists(),
            "{SYSTEMD} is missing: install systemd (apt-get install systemd), or set {NO_SYSTEMD}=1 where the machine cannot have it"
        );
        for h in HIERARCHIES {
            assert!(Path::new(h).is_dir(), "{h} is not mounted");
        }
        let root = short_tempdir();
        let slice = format!("procd-test-{}.slice", std::process::id());
        let service = format!("{slice}/user@0.service");
        for h in HIERARCHIES {
            std::fs::create_dir_all(Path::new(h).join(&service)).expect("make the test's cgroup");
        }
        let (rt, home) = (root.path().join("rt"), root.path().join("home"));
        for dir in [&rt, &home] {
            std::fs::create_dir(dir).expect("mkdir");
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .expect("chmod");
        }
        let script = format!(
            "echo $$ > {unified}/{service}/cgroup.procs && \
             echo $$ > {v1}/{service}/cgroup.procs && \
             mount -t tmpfs -o mode=755 tmpfs /run/systemd && \
             mkdir -p /run/systemd/system && \
             exec {SYSTEMD} --user --log-target=console",
            unified = HIERARCHIES[0],
            v1 = HIERARCHIES[1],
        );
        let log = std::fs::File::create(root.path().join("manager.log")).expect("log");
        let child = Command::new("unshare")
            .args([
                "-m",
                "--propagation",
                "private",
                "--",
                "bash",
                "-c",
                &script,
            ])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &home)
            .env("USER", "root")
            .env("XDG_RUNTIME_DIR", &rt)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start unshare");
        let m = UserManager { child, root, slice };
        wait_until("the user manager runs", || {
            let out = m.systemctl(&["is-system-running"]);
            let state = String::from_utf8_lossy(&out.stdout);
            matches!(state.trim(), "running" | "degraded")
        });
        m.install_units();
        Some(m)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.root.path().join("rt")
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// `systemctl --user ARGS` inside the manager's mount namespace.
    pub fn systemctl(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid().to_string(), "-m", "--"])
            .args(["systemctl", "--user"])
            .args(args);
        self.run(cmd, &format!("systemctl --user {}", args.join(" ")))
    }

    /// Runs `cmd` as this user (HOME, runtime dir), its output collected.
    fn run(&self, mut cmd: Command, what: &str) -> Output {
        let child = cmd
            .env("XDG_RUNTIME_DIR", self.runtime_dir())
            .env("HOME", self.home())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {what}: {e}"));
        output_within(child, what)
    }

    /// `systemctl --user show -p PROPERTY --value UNIT`.
    pub fn property(&self, unit: &str, property: &str) -> String {
        let out = self.systemctl(&["show", "-p", property, "--value", unit]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn active_state(&self, unit: &str) -> String {
        self.property(unit, "ActiveState")
    }

    /// The unit's main process: the keeper (0 when none runs).
    pub fn main_pid(&self) -> i32 {
        self.property("procd.service", "MainPID")
            .parse()
            .unwrap_or(0)
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

    /// Copies `systemd/procd.{service,socket}` into the user's unit dir,
    /// ExecStart pointing at the procd under test, and reloads.
    fn install_units(&self) {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../systemd");
        let dir = self.home().join(".config/systemd/user");
        std::fs::create_dir_all(&dir).expect("unit dir");
        let service =
            std::fs::read_to_string(shipped.join("procd.service")).expect("procd.service");
        let exec = "ExecStart=%h/.cargo/bin/procd daemon";
        assert_eq!(service.matches(exec).count(), 1, "procd.service: {exec}");
        let service = service.replace(exec, &format!("ExecStart={BIN} daemon"));
        std::fs::write(dir.join("procd.service"), service).expect("write unit");
        std::fs::copy(shipped.join("procd.socket"), dir.join("procd.socket")).expect("socket");
        // No journal runs here: the service's output goes to a file in
        // HOME (a drop-in, so the unit itself stays as shipped).
        let dropin = dir.join("procd.service.d");
        std::fs::create_dir_all(&dropin).expect("drop-in dir");
        let log = self.home().join("procd.service.log");
        std::fs::write(
            dropin.join("test-log.conf"),
            format!(
                "[Service]\nStandardOutput=append:{0}\nStandardError=append:{0}\n",
                log.display()
            ),
        )
        .expect("write drop-in");
        let out = self.systemctl(&["daemon-reload"]);
        assert!(out.status.success(), "{out:?}");
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
        self.run(cmd, &format!("procd {}", args.join(" ")))
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
        let service = Path::new(HIERARCHIES[0])
            .join(&self.slice)
            .join("user@0.service/app.slice/procd.service");
        let mut pids = Vec::new();
        for tree in dirs_in(&service).filter(|d| file_name_starts(d, "procd-")) {
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
            let log = std::fs::read_to_string(self.home().join("procd.service.log"));
            eprintln!("procd.service's output:\n{}", log.unwrap_or_default());
        }
        let _ = self.systemctl(&["exit"]);
        let top = Path::new(HIERARCHIES[0]).join(&self.slice);
        let populated = || {
            std::fs::read_to_string(top.join("cgroup.events"))
                .is_ok_and(|e| e.contains("populated 1"))
        };
        // What the manager left (or a manager that did not exit): only
        // this test's processes are in its cgroups.
        if !exited_within(&mut self.child, PATIENCE) || populated() {
            let _ = std::fs::write(top.join("cgroup.kill"), "1");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = Instant::now() + PATIENCE;
        while populated() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for h in HIERARCHIES {
            remove_tree(&Path::new(h).join(&self.slice));
        }
        // Not a panic in a drop (it may run while a test unwinds).
        if populated() {
            eprintln!("{} still holds processes", top.display());
        }
    }
}

/// Whether the manager exits by itself within `limit`.
fn exited_within(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn dirs_in(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
}

fn file_name_starts(path: &Path, prefix: &str) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(prefix))
}

/// Removes an (empty) cgroup tree, deepest first.
fn remove_tree(dir: &Path) {
    for child in dirs_in(dir).collect::<Vec<_>>() {
        remove_tree(&child);
    }
    let _ = std::fs::remove_dir(dir);
}
