//! A real `systemd --user` for one test or one benchmark run
//! (docs/operations.md, "Tested under a real user manager"). systemd
//! refuses to run as a user instance unless `/run/systemd/system` exists,
//! which would make the whole machine look booted with systemd; so the
//! manager runs in a private mount namespace with a tmpfs on
//! `/run/systemd`. It gets a cgroup of its own (in the cgroup2 tree and in
//! the v1 `name=systemd` one it tracks units in), a runtime dir and a HOME
//! of its own, and procd's units as shipped in `systemd/` with only
//! ExecStart's program changed.
//!
//! Drop ends it all: `systemctl --user exit` (which stops procd, and procd
//! its sessions), then whatever is still in this manager's cgroups is
//! killed (`cgroup.kill`: they hold only processes it started), the
//! cgroups are removed deepest first, and the directories with them.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where a hybrid host mounts the two hierarchies the manager needs.
const HIERARCHIES: [&str; 2] = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"];
/// The manager's program.
pub const SYSTEMD: &str = "/lib/systemd/systemd";
/// How long the manager, or a command run through it, may take.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct UserManager {
    /// `unshare`, which became bash and then systemd: the manager's pid.
    child: Child,
    /// `rt/` (XDG_RUNTIME_DIR) and `home/` (HOME) live here.
    root: tempfile::TempDir,
    /// `procd-test-<pid>-<n>.slice`: the top of this manager's cgroups.
    slice: String,
}

impl UserManager {
    /// A running user manager with `units` (the repository's `systemd/`)
    /// installed, `procd.service` running `program` where the shipped unit
    /// says `%h/.cargo/bin/procd`. Its service's output goes to
    /// `service_log()` (a drop-in: no journal runs here). An error says
    /// what is missing or what failed.
    pub fn start(units: &Path, program: &Path) -> Result<UserManager, String> {
        if !Path::new(SYSTEMD).exists() {
            return Err(format!(
                "{SYSTEMD} is missing: install systemd (apt-get install systemd)"
            ));
        }
        for h in HIERARCHIES {
            if !Path::new(h).is_dir() {
                return Err(format!("{h} is not mounted"));
            }
        }
        let root = tempfile::Builder::new()
            .prefix("pd")
            .tempdir_in("/tmp")
            .map_err(|e| format!("a temp dir: {e}"))?;
        let slice = unique_slice();
        let service = format!("{slice}/user@0.service");
        for h in HIERARCHIES {
            std::fs::create_dir_all(Path::new(h).join(&service))
                .map_err(|e| format!("make the manager's cgroup in {h}: {e}"))?;
        }
        let (rt, home) = (root.path().join("rt"), root.path().join("home"));
        for dir in [&rt, &home] {
            std::fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
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
        let log = std::fs::File::create(root.path().join("manager.log"))
            .map_err(|e| format!("the manager's log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "--"])
            .args(["bash", "-c", &script])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &home)
            .env("USER", "root")
            .env("XDG_RUNTIME_DIR", &rt)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("start unshare: {e}"))?;
        let m = UserManager { child, root, slice };
        m.wait_for("the user manager runs", || {
            let out = m.systemctl(&["is-system-running"]);
            let state = String::from_utf8_lossy(&out.stdout);
            matches!(state.trim(), "running" | "degraded")
        })?;
        m.install_units(units, program)?;
        Ok(m)
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

    /// Where procd.service's stdout and stderr go.
    pub fn service_log(&self) -> PathBuf {
        self.home().join("procd.service.log")
    }

    /// `systemctl --user ARGS` inside the manager's mount namespace.
    pub fn systemctl(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid().to_string(), "-m", "--"])
            .args(["systemctl", "--user"])
            .args(args);
        self.run(cmd)
    }

    /// Runs `cmd` as this manager's user (HOME, runtime dir) and collects
    /// its output; one still running after `PATIENCE` is SIGKILLed and
    /// reported as a failed run (its stderr says so).
    pub fn run(&self, mut cmd: Command) -> Output {
        cmd.env("XDG_RUNTIME_DIR", self.runtime_dir())
            .env("HOME", self.home())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let failed = |why: String| Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(1 << 8),
            stdout: Vec::new(),
            stderr: why.into_bytes(),
        };
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => return failed(format!("cannot run {cmd:?}: {e}")),
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(PATIENCE) {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => failed(format!("{cmd:?}: {e}")),
            Err(_) => {
                // Unreaped until the thread's wait returns: still ours.
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                failed(format!(
                    "{cmd:?} did not finish within {PATIENCE:?} (killed)"
                ))
            }
        }
    }

    /// `systemctl --user show -p PROPERTY --value UNIT`.
    pub fn property(&self, unit: &str, property: &str) -> String {
        let out = self.systemctl(&["show", "-p", property, "--value", unit]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn active_state(&self, unit: &str) -> String {
        self.property(unit, "ActiveState")
    }

    /// procd.service's main process (the keeper), or 0.
    pub fn main_pid(&self) -> i32 {
        self.property("procd.service", "MainPID")
            .parse()
            .unwrap_or(0)
    }

    /// procd.service's cgroup2 directory.
    pub fn service_cgroup(&self) -> PathBuf {
        Path::new(HIERARCHIES[0])
            .join(&self.slice)
            .join("user@0.service/app.slice/procd.service")
    }

    /// Waits (at most `PATIENCE`) until `cond` holds.
    pub fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        while !cond() {
            if Instant::now() >= deadline {
                return Err(format!("timed out waiting until {what}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Copies `procd.{service,socket}` from `units` into the user's unit
    /// dir, ExecStart running `program`, with a drop-in sending the
    /// service's output to `service_log()`, and reloads.
    fn install_units(&self, units: &Path, program: &Path) -> Result<(), String> {
        let dir = self.home().join(".config/systemd/user");
        let dropin = dir.join("procd.service.d");
        std::fs::create_dir_all(&dropin).map_err(|e| format!("unit dir: {e}"))?;
        let read = |name: &str| {
            std::fs::read_to_string(units.join(name)).map_err(|e| format!("{name}: {e}"))
        };
        let service = read("procd.service")?;
        let shipped = "ExecStart=%h/.cargo/bin/procd ";
        if service.matches(shipped).count() != 1 {
            return Err(format!("procd.service has no one `{shipped}…` line"));
        }
        let service = service.replace(shipped, &format!("ExecStart={} ", program.display()));
        let log = self.service_log();
        let files = [
            (dir.join("procd.service"), service),
            (dir.join("procd.socket"), read("procd.socket")?),
            (
                dropin.join("test-log.conf"),
                format!(
                    "[Service]\nStandardOutput=append:{0}\nStandardError=append:{0}\n",
                    log.display()
                ),
            ),
        ];
        for (path, text) in files {
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let out = self.systemctl(&["daemon-reload"]);
        match out.status.success() {
            true => Ok(()),
            false => Err(format!("daemon-reload: {out:?}")),
        }
    }
}

/// A slice name no other manager of this process or another uses.
fn unique_slice() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("procd-test-{}-{n}.slice", std::process::id())
}

impl Drop for UserManager {
    fn drop(&mut self) {
        let _ = self.systemctl(&["exit"]);
        let top = Path::new(HIERARCHIES[0]).join(&self.slice);
        let populated = || {
            std::fs::read_to_string(top.join("cgroup.events"))
                .is_ok_and(|e| e.contains("populated 1"))
        };
        // What the manager left (or a manager that did not exit): only
        // this manager's processes are in its cgroups.
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

/// The directories in `dir`.
pub fn dirs_in(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
}

/// Removes an (empty) cgroup tree, deepest first.
fn remove_tree(dir: &Path) {
    for child in dirs_in(dir).collect::<Vec<_>>() {
        remove_tree(&child);
    }
    let _ = std::fs::remove_dir(dir);
}
