//! Test harness: a real `procd daemon` in a temp PROCD_HOME, driven over its
//! Unix socket with plain line-delimited JSON (as any client would), and
//! helpers that look at what really happened in /proc.
//!
//! Every `Daemon` is shut down on drop and waited for; the daemon ends its
//! sessions' trees on shutdown, so no process outlives a test.

#![allow(dead_code)]

pub mod sshd;
pub mod swarm;
pub mod systemd;
pub mod tmux;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_procd");

/// Generous bound for conditions on a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Waits for a child we started and collects its output; a child still
/// running after `PATIENCE` is SIGKILLed (so a hung test leaks nothing)
/// and the test fails naming `what`.
pub fn output_within(child: Child, what: &str) -> Output {
    output_within_for(child, what, PATIENCE)
}

/// `output_within` with another limit.
pub fn output_within_for(child: Child, what: &str, limit: Duration) -> Output {
    let pid = child.id() as i32;
    let start = start_time(pid);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what}: {e}")),
        Err(_) => {
            // Still ours: its pid cannot be reused before the thread reaps it.
            if start.is_some() && start_time(pid) == start {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("{what} did not finish within {limit:?} (killed)");
        }
    }
}

/// Whether the suite is told, by the environment variable `var`, that
/// this machine lacks what a test needs (`what`): then the test says so
/// and does not run. Without it a test that cannot run its real thing
/// fails with the reason. The variables are listed in docs/testing.md,
/// and `.ci/run` prints the ones set.
pub fn machine_lacks(var: &str, what: &str) -> bool {
    let lacks = std::env::var_os(var).is_some();
    if lacks {
        eprintln!("{var} is set: this machine lacks {what}; not run");
    }
    lacks
}

/// The lines of a marks file that jobs append to (`start …`, `end …`,
/// each appended whole by one write); none if it is not there yet.
pub fn marks(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The most jobs running at once, from the order of their marks.
pub fn most_at_once(marks: &[String]) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for m in marks {
        if m.starts_with("start") {
            now += 1;
            most = most.max(now);
        } else if m.starts_with("end") {
            now = now.saturating_sub(1);
        }
    }
    most
}

/// Dates `path` a minute back, as a checkout's files are when a server
/// starts: an edit within the coarse clock's tick before a run's start
/// is taken as made after it (`tree_watch::mtime_slack`), so a file a
/// test writes just before its spawn could otherwise count as changed.
pub fn backdate(path: &Path) {
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(old))
        .unwrap_or_else(|e| panic!("backdating {}: {e}", path.display()));
}

/// Waits until `cond` holds, or panics with `what` after `PATIENCE`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What a test asks of a running procd, over its socket (a `Daemon` of
/// the test's own, or one a systemd user manager runs).
pub trait Client {
    /// The socket the daemon serves on.
    fn socket(&self) -> PathBuf;

    fn connect(&self) -> Conn {
        Conn::open(&self.socket())
    }

    /// Sends one request on a fresh connection; returns the whole response.
    fn call(&self, method: &str, params: Value) -> Value {
        self.connect().call(method, params)
    }

    /// The `result` of a call that must succeed.
    fn ok(&self, method: &str, params: Value) -> Value {
        let resp = self.call(method, params.clone());
        match resp.get("result") {
            Some(r) => r.clone(),
            None => panic!("{method}({params}) failed: {resp}"),
        }
    }

    /// (code, message) of a call that must fail.
    fn err(&self, method: &str, params: Value) -> (i64, String) {
        let resp = self.call(method, params.clone());
        let e = resp
            .get("error")
            .unwrap_or_else(|| panic!("{method}({params}) should fail: {resp}"));
        (
            e["code"].as_i64().unwrap_or(0),
            e["message"].as_str().unwrap_or("").to_string(),
        )
    }

    /// A call that must be refused as invalid params (-32602) by a
    /// message that names `name` (the field, or the param refused).
    fn refused(&self, method: &str, params: Value, name: &str) {
        let (code, message) = self.err(method, params.clone());
        assert_eq!(code, -32602, "{method}({params}): {message}");
        assert!(message.contains(name), "{method}({params}): {message}");
    }

    /// Spawns `command` and returns its session id.
    fn spawn(&self, command: &str) -> String {
        self.spawn_with(json!({ "command": command }))
    }

    fn spawn_with(&self, params: Value) -> String {
        let r = self.ok("spawn", params);
        r["session_id"].as_str().expect("session_id").to_string()
    }

    /// Waits for the session to exit (or panics) and returns the result.
    fn wait_exit(&self, id: &str) -> Value {
        let r = self.ok(
            "wait",
            json!({"session_id": id, "timeout_s": PATIENCE.as_secs()}),
        );
        assert_eq!(r["status"], "exited", "session {id} did not exit: {r}");
        r
    }

    /// Reads from `cursor` until `needle` appears in the collected text.
    fn read_until(&self, id: &str, needle: &str) -> String {
        self.read_until_from(id, 0, needle)
    }

    /// Reads from `cursor` until the text read contains `needle`.
    fn read_until_from(&self, id: &str, mut cursor: u64, needle: &str) -> String {
        let mut text = String::new();
        let deadline = Instant::now() + PATIENCE;
        while !text.contains(needle) {
            assert!(
                Instant::now() < deadline,
                "output of {id} never contained {needle:?}: {text:?}"
            );
            let r = self.ok(
                "read",
                json!({"session_id": id, "cursor": cursor, "wait_ms": 1000}),
            );
            text.push_str(r["data"].as_str().unwrap_or(""));
            cursor = r["next_cursor"].as_u64().unwrap_or(cursor);
            if r["eof"] == true && !text.contains(needle) {
                panic!("{id} ended without printing {needle:?}: {text:?}");
            }
        }
        text
    }

    /// Everything the session printed, read by cursor until end of output.
    fn read_all(&self, id: &str) -> String {
        let mut text = String::new();
        let mut cursor = 0;
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(
                Instant::now() < deadline,
                "the output of {id} never reached its end: {text:?}"
            );
            let r = self.ok(
                "read",
                serde_json::json!({"session_id": id, "cursor": cursor, "wait_ms": 5000}),
            );
            text.push_str(r["data"].as_str().unwrap_or(""));
            cursor = r["next_cursor"].as_u64().unwrap_or(cursor);
            if r["eof"] == true {
                return text;
            }
        }
    }
}

impl Client for Daemon {
    fn socket(&self) -> PathBuf {
        self.home.path().join("run/procd.sock")
    }
}

pub struct Daemon {
    pub home: tempfile::TempDir,
    child: Option<Child>,
    /// Extra environment for the daemon process.
    env: Vec<(String, String)>,
    /// The procd program it runs (BIN, or a copy a test upgrades).
    program: PathBuf,
}

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::with_config("")
    }

    /// A daemon whose config.toml holds `config` (TOML).
    pub fn with_config(config: &str) -> Daemon {
        Daemon::in_home(short_tempdir(), config)
    }

    /// A daemon on an existing home (which may hold leftovers to handle).
    pub fn in_home(home: tempfile::TempDir, config: &str) -> Daemon {
        Daemon::in_home_with_env(home, config, &[])
    }

    /// A daemon whose own environment also holds `env`.
    pub fn with_env(config: &str, env: &[(&str, &str)]) -> Daemon {
        Daemon::in_home_with_env(short_tempdir(), config, env)
    }

    pub fn in_home_with_env(home: tempfile::TempDir, config: &str, env: &[(&str, &str)]) -> Daemon {
        if !config.is_empty() {
            std::fs::write(home.path().join("config.toml"), config).expect("write config");
        }
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut d = Daemon {
            home,
            child: None,
            env,
            program: PathBuf::from(BIN),
        };
        d.child = Some(d.spawn_daemon());
        d.wait_serving();
        d
    }

    /// A daemon running `program` (a copy of procd the test may replace).
    pub fn running(program: &Path) -> Daemon {
        let mut d = Daemon {
            home: short_tempdir(),
            child: None,
            env: Vec::new(),
            program: program.to_path_buf(),
        };
        d.child = Some(d.spawn_daemon());
        d.wait_serving();
        d
    }

    /// Starts `procd daemon` on this home (does not wait for it).
    /// HOME is the temp home too: sessions run `bash -lic`, and the tests
    /// must not depend on (or be slowed by) the developer's dotfiles.
    pub fn spawn_daemon(&self) -> Child {
        let err = std::fs::File::create(self.home.path().join("daemon.err")).expect("stderr file");
        Command::new(&self.program)
            .args(["daemon", "--home"])
            .arg(self.home.path())
            .env("HOME", self.home.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start procd daemon")
    }

    /// The daemon that serves: the child of the keeper (`procd daemon`,
    /// the process this helper started) that runs procd (docs/survival.md); 0 when
    /// none runs right now.
    pub fn pid(&self) -> u32 {
        daemon_below(self.keeper_pid()).unwrap_or(0) as u32
    }

    /// The daemon's descriptors and what each is open on (it must be
    /// running: none from a daemon that is gone would pass for few).
    pub fn fds(&self) -> Vec<(i32, String)> {
        let dir = format!("/proc/{}/fd", self.pid());
        assert!(Path::new(&dir).is_dir(), "the daemon is gone");
        fd_links(&dir)
    }

    /// The keeper: the `procd daemon` process this helper started.
    pub fn keeper_pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// SIGKILLs the daemon alone (its keeper starts another) and waits
    /// until a new one serves; returns the new daemon's pid.
    pub fn kill_daemon(&self) -> u32 {
        let old = self.pid();
        assert!(old > 0, "no daemon runs below the keeper");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(old as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        self.next_daemon_after(old)
    }

    /// Waits until the daemon `old` is gone (however it died) and a new
    /// one serves; returns the new daemon's pid.
    pub fn next_daemon_after(&self, old: u32) -> u32 {
        // Until it is dead it may still accept a connection (it shares the
        // listening socket with its keeper) and then drop it.
        wait_until("the dead daemon let go of its socket", || {
            released(old as i32)
        });
        let mut new = 0;
        wait_until("the keeper starts a new daemon", || {
            new = self.pid();
            new != 0 && new != old
        });
        self.wait_serving();
        new
    }

    pub fn state_dir(&self) -> PathBuf {
        self.home.path().join("state")
    }

    /// Takes a client lease for `pid` through the CLI; returns its token.
    pub fn lease(&self, pid: i32) -> String {
        let out = self.cli(&["lease", "acquire", "--pid", &pid.to_string(), "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout).expect("json")["token"]
            .as_str()
            .expect("token")
            .to_string()
    }

    /// Runs the CLI against this daemon's home.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--home")
            .arg(self.home.path())
            .env("HOME", self.home.path())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run procd")
    }

    /// Stops the daemon (SIGTERM) and returns its exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                // A killed daemon cannot end its sessions: end the ones it
                // checkpointed (this test started them), then fail.
                kill_checkpointed_sessions(self.home.path());
                // (From Drop during a failing test, a second panic would
                // abort and skip the remaining clean-up.)
                if std::thread::panicking() {
                    return None;
                }
                panic!("daemon did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the keeper and then the daemon with SIGKILL (both die): nothing
    /// can clean anything up, and no daemon comes back by itself.
    pub fn crash(&mut self) {
        let daemon = self.pid();
        let mut child = self.child.take().expect("daemon");
        let _ = child.kill();
        let _ = child.wait();
        if daemon > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(daemon as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            wait_until("the daemon let go of its socket", || {
                released(daemon as i32)
            });
        }
    }

    /// Starts a new daemon on the same home (after `crash` or `stop`).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the previous daemon still runs");
        self.child = Some(self.spawn_daemon());
        self.wait_serving();
    }

    /// Starts a new daemon on the same home and returns at once, without
    /// waiting until it serves (a client may then race its start).
    pub fn restart_at_once(&mut self) {
        assert!(self.child.is_none(), "the previous daemon still runs");
        self.child = Some(self.spawn_daemon());
    }

    /// Waits until the daemon below this helper's keeper answers on the
    /// socket (accepting a connection is not enough: the keeper holds the
    /// listening socket while no daemon runs).
    fn wait_serving(&self) {
        let socket = self.socket();
        wait_until("the daemon serves", || {
            let pid = self.pid();
            pid != 0 && status_pid(&socket) == Some(u64::from(pid))
        });
    }

    /// Waits for the daemon child to exit by itself.
    pub fn wait_exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.as_mut()?.try_wait() {
                self.child = None;
                return status.code();
            }
            // Still ours if this fails: Drop stops it.
            assert!(Instant::now() < deadline, "daemon did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
        // A failing test shows what the daemon said.
        if std::thread::panicking() {
            if let Ok(log) = std::fs::read_to_string(self.home.path().join("daemon.err")) {
                let tail = &log[log.len().saturating_sub(4000)..];
                eprintln!("--- the daemon's stderr (last 4000 bytes) ---\n{tail}");
            }
        }
        // A daemon a CLI test started on demand in this home.
        stop_recorded_daemon(self.home.path());
        // What a crashed daemon could not remove: this instance's cgroups.
        remove_instance_cgroups(self.home.path());
    }
}

/// Where the daemon on `home` makes its cgroups (the daemons the tests
/// start sit in the tests' own cgroups), made or not.
fn instance_cgroups(home: &Path) -> procd_sys::cgroup::CgroupTree {
    procd_sys::cgroup::CgroupTree::locate_instance(&home.join("state"))
        .expect("a cgroup2 hierarchy")
}

/// `procd-<tag>`: the directory of this instance's cgroups.
pub fn instance_cgroup_name(home: &Path) -> String {
    let tree = instance_cgroups(home);
    tree.base()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The directory of the cgroups of the daemon on `home`.
pub fn instance_cgroup(home: &Path) -> PathBuf {
    instance_cgroups(home).base().to_path_buf()
}

/// The v2 cgroup of a session of the daemon on `home`.
pub fn session_cgroup(home: &Path, id: &str) -> PathBuf {
    instance_cgroup(home).join(id)
}

/// The live pids in a session's cgroup.
pub fn cgroup_pids(home: &Path, id: &str) -> Vec<i32> {
    std::fs::read_to_string(session_cgroup(home, id).join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// Ends and removes every cgroup of the instance on `home` (only procd's
/// own directories for that instance, never another cgroup).
pub fn remove_instance_cgroups(home: &Path) {
    let Ok(tree) = procd_sys::cgroup::CgroupTree::locate_instance(&home.join("state")) else {
        return;
    };
    for cgroup in tree.sessions() {
        let _ = cgroup.kill();
        let deadline = Instant::now() + PATIENCE;
        while !cgroup.remove() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    tree.remove();
}

/// Stops the daemon recorded in `<home>/run/gateway.json`, if it is alive
/// and still the recorded process (it was started by this test).
pub fn stop_recorded_daemon(home: &Path) {
    let Ok(text) = std::fs::read_to_string(home.join("run/gateway.json")) else {
        return;
    };
    let Ok(state) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let pid = state["pid"].as_i64().unwrap_or(0) as i32;
    let recorded_start = state["identity"]
        .as_str()
        .and_then(|i| i.split(':').nth(1))
        .and_then(|s| s.parse::<u64>().ok());
    if pid <= 1 || recorded_start.is_none() || start_time(pid) != recorded_start {
        return;
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    );
    // Runs from Drop: never panic here (a second panic aborts the test
    // binary and skips the rest of the clean-up); fall back to SIGKILL and
    // end the sessions the daemon can no longer end.
    let deadline = Instant::now() + PATIENCE;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if alive(pid) && start_time(pid) == recorded_start {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        kill_checkpointed_sessions(home);
        eprintln!("the recorded daemon {pid} ignored SIGTERM and was SIGKILLed");
    }
}

/// The entries of `<home>/state/procs.json` as they are now (none when it
/// is missing or not a JSON array).
pub fn checkpointed(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join("state/procs.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// SIGKILLs the processes recorded in `<home>/state/procs.json` whose start
/// time still matches the record (never a recycled pid).
pub fn kill_checkpointed_sessions(home: &Path) {
    let entries = checkpointed(home);
    let sigkill = |pid: i32| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    for e in entries {
        let pid = e["pid"].as_i64().unwrap_or(0) as i32;
        if pid > 1 && start_time(pid) == e["start_time"].as_u64() {
            sigkill(pid);
        }
        // Its descendants too: they carry the session's marker.
        if let Some(id) = e["session_id"].as_str() {
            session_pids(id).into_iter().for_each(sigkill);
        }
    }
}

/// The pid a `status` call on `socket` answers with; None if the call
/// fails in any way.
pub fn status_pid(socket: &Path) -> Option<u64> {
    let stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut writer = stream.try_clone().ok()?;
    writer
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}\n")
        .ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    serde_json::from_str::<Value>(&line).ok()?["result"]["pid"].as_u64()
}

/// The procd process among `keeper`'s children (session roots that a dead
/// daemon left to it are children too, but run a shell, not procd).
pub fn daemon_below(keeper: i32) -> Option<i32> {
    if keeper <= 0 {
        return None;
    }
    let children =
        std::fs::read_to_string(format!("/proc/{keeper}/task/{keeper}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .find(|pid| comm(*pid) == "procd")
}

/// A temp dir with a short path (Unix socket paths must fit 108 bytes).
/// Runs one of the scripts in tests/ that make something the suite needs
/// (idempotently, once per machine) and print its path; panics saying
/// `what` could not be made.
pub fn prepared(script: &str, what: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests")
        .join(script);
    let out = Command::new(&path)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "cannot make {what} (see the message above)"
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// clients/python, the `procd-client` package.
pub const PYTHON_PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");

/// pytest over `tests` of clients/python with `python`, against this
/// suite's procd (`PROCD_BIN`), writing nothing into the repository.
pub fn python_package_tests(python: &str, tests: &str) -> Command {
    let mut pytest = Command::new(python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", tests])
        .current_dir(PYTHON_PACKAGE)
        .env("PYTHONPATH", Path::new(PYTHON_PACKAGE).join("src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PROCD_BIN", BIN)
        .env_remove("PROCD_HOME");
    pytest
}

/// Runs `command` to its end (within 5 minutes) and returns what it
/// printed; panics, showing it, if it failed.
pub fn run_ok(what: &str, command: &mut Command) -> String {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = output_within_for(child, what, Duration::from_secs(300));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// The Python of the project's test venv (tests/mcp-venv.sh), to run an
/// MCP SDK client or kubernetes-validate with.
pub fn mcp_python() -> String {
    prepared("mcp-venv.sh", "the Python test venv")
}

pub fn short_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pd")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

/// One connection speaking line-delimited JSON-RPC.
pub struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Conn {
    pub fn open(socket: &Path) -> Conn {
        Conn::from_stream(UnixStream::connect(socket).expect("connect to procd"))
    }

    pub fn from_stream(stream: UnixStream) -> Conn {
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        Conn {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
            next_id: 1,
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).expect("write");
        self.writer.write_all(b"\n").expect("write");
    }

    /// The next line the daemon sends, or None at end of stream.
    pub fn recv_raw(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(line),
            Err(e) => panic!("reading from procd failed: {e}"),
        }
    }

    pub fn recv(&mut self) -> Value {
        let line = self.recv_raw().expect("procd closed the connection");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}"))
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&req.to_string());
        self.recv()
    }
}

// ----- /proc observations ----------------------------------------------------

fn stat_fields(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(19)?.parse().ok()?,
    ))
}

pub fn start_time(pid: i32) -> Option<u64> {
    stat_fields(pid).map(|f| f.1)
}

/// A command that counts its runs in `dir/runs` (a restarting session's
/// runs; `$n` is this one), prints "run N <VAR>" and then does `then`.
pub fn counting(dir: &Path, then: &str) -> String {
    format!(
        "n=$(( $(cat {runs} 2>/dev/null || echo 0) + 1 )); echo $n > {runs}; echo \"run $n ${{PROCD_TEST_VAR:-}}\"; {then}",
        runs = dir.join("runs").display()
    )
}

/// How many runs `counting` has counted in `dir`.
pub fn runs(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("runs"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The `restarted` events of session `id` drained now (for `key`'s
/// sessions, or every one).
pub fn restarted_events(d: &Daemon, id: &str, key: Option<&str>) -> Vec<Value> {
    let params = match key {
        Some(key) => json!({"session_key": key}),
        None => json!({}),
    };
    d.ok("drain_notifications", params)["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "restarted" && e["session_id"] == id)
        .cloned()
        .collect()
}

/// The pid `poll` shows for session `id`.
pub fn pid_of(d: &Daemon, id: &str) -> i32 {
    d.ok("poll", serde_json::json!({"session_id": id}))["pid"]
        .as_i64()
        .expect("pid") as i32
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    matches!(stat_fields(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// Whether `pid` has let go of its descriptors: gone, or a zombie whose
/// every other thread has exited. A killed multi-threaded process's leader
/// is a zombie, with an empty `fd` directory, before its other threads
/// finish exiting; the descriptor table is theirs until the last one
/// exits, and so is a listening socket in it, which still accepts (and
/// then resets) connections. Only the leader left in `task/` means the
/// table was closed.
pub fn released(pid: i32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    let leader = pid.to_string();
    !alive(pid)
        && threads
            .flatten()
            .all(|thread| thread.file_name().to_str() == Some(leader.as_str()))
}

/// A figure of `/proc/<pid>/status` in KiB (`field` with its colon, as
/// "VmHWM:").
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {status}"))
}

/// Every pid in /proc.
pub fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
}

/// The descriptors listed in `dir` (`/proc/<pid>/fd`, or a thread's
/// `/proc/<pid>/task/<tid>/fd`), each with what it links to; none when
/// `dir` cannot be read (the process is gone).
pub fn fd_links(dir: &str) -> Vec<(i32, String)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            Some((fd, std::fs::read_link(e.path()).ok()?.display().to_string()))
        })
        .collect()
}

/// Live pids whose environment carries `PROCD_SESSION_ID=<id>`.
pub fn session_pids(id: &str) -> Vec<i32> {
    let marker = format!("PROCD_SESSION_ID={id}");
    all_pids()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == marker.as_bytes()))
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// Zombies whose parent is `parent` (exited, not reaped).
pub fn zombie_children(parent: i32) -> Vec<i32> {
    all_pids()
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let rest: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            rest.first() == Some(&"Z") && rest.get(1).and_then(|p| p.parse().ok()) == Some(parent)
        })
        .collect()
}

/// The children of `pid` (any of its threads may have forked them).
pub fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A daemon started the way systemd socket activation starts it: the
/// listening socket on fd 3, `LISTEN_PID` = the daemon's pid (a shell
/// `exec`s it, keeping its pid), `LISTEN_FDS=1`. Stopped on drop.
pub struct Activated {
    pub child: Child,
    pub socket: PathBuf,
}

impl Activated {
    pub fn start(home: &Path, env: &[(&str, &str)]) -> Activated {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        std::fs::create_dir_all(home.join("run")).expect("run dir");
        let socket = home.join("run/procd.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let fd = listener.as_raw_fd();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" daemon --home \"$1\"")
            .arg(BIN)
            .arg(home)
            .env("HOME", home)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: dup2(2)/fcntl(2) in the forked child before exec are
        // async-signal-safe; they put the listener on fd 3 without
        // close-on-exec (dup2 onto itself would keep the flag, hence fcntl).
        unsafe {
            cmd.pre_exec(move || {
                let r = if fd == 3 {
                    nix::libc::fcntl(3, nix::libc::F_SETFD, 0)
                } else {
                    nix::libc::dup2(fd, 3)
                };
                if r == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("activated daemon");
        drop(listener); // only the daemon holds the socket now
        let a = Activated { child, socket };
        wait_until("the activated daemon answers", || {
            UnixStream::connect(&a.socket)
                .ok()
                .and_then(|s| {
                    let mut c = Conn::from_stream(s);
                    c.call("status", serde_json::json!({}))["result"]["pid"].as_u64()
                })
                .is_some()
        });
        a
    }

    pub fn connect(&self) -> Conn {
        Conn::open(&self.socket)
    }

    /// SIGTERM, then its exit code; SIGKILL (and None) if it has not
    /// exited within `PATIENCE`.
    pub fn stop(&mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("the activated daemon {pid} ignored SIGTERM and was SIGKILLed");
        None
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.stop();
        }
        if let Some(home) = self.socket.parent().and_then(Path::parent) {
            remove_instance_cgroups(home);
        }
    }
}

/// Stand-in `systemd-run` and `systemctl` in `dir` that append their argv
/// to `dir/calls`. systemd-run answers the availability probe (`-- true`)
/// with `probe_exit` and otherwise runs the command after `--`.
pub fn systemd_stand_ins(dir: &Path, probe_exit: i32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("dir");
    let calls = dir.join("calls");
    let run = format!(
        "#!/bin/sh\necho \"systemd-run $*\" >> {c}\nwhile [ \"$1\" != -- ]; do shift; done; shift\n[ \"$1\" = true ] && exit {probe_exit}\nexec \"$@\"\n",
        c = calls.display()
    );
    let ctl = format!(
        "#!/bin/sh\necho \"systemctl $*\" >> {}\nexit 0\n",
        calls.display()
    );
    for (name, body) in [("systemd-run", run), ("systemctl", ctl)] {
        let p = dir.join(name);
        std::fs::write(&p, body).expect("stand-in");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    calls
}

/// A process of the test's own (a `sleep`), to stand in for some recorded
/// pid; optionally carrying a session marker. Killed and reaped on drop.
pub struct Stand(pub Child);

impl Stand {
    pub fn sleep() -> Stand {
        Stand::marked(None)
    }

    pub fn marked(marker: Option<&str>) -> Stand {
        let mut cmd = Command::new("sleep");
        cmd.arg("300");
        if let Some(id) = marker {
            cmd.env("PROCD_SESSION_ID", id);
        }
        Stand(cmd.spawn().expect("sleep"))
    }

    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Stand {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Live pids whose argv is exactly `argv` (for processes that dropped the
/// session marker, such as `setsid -f env -i …`).
pub fn pids_with_argv(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    all_pids()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| alive(*pid))
        .collect()
}

/// Processes a test caused to run outside any session marker: SIGKILLed on
/// drop if they are still the same processes, so a failing test leaks none.
#[derive(Default)]
pub struct Strays(Vec<(i32, u64)>);

impl Strays {
    /// Records the live processes with exactly this argv; returns their pids.
    pub fn find(&mut self, argv: &[&str]) -> Vec<i32> {
        let pids = pids_with_argv(argv);
        for &pid in &pids {
            if let Some(start) = start_time(pid) {
                self.0.push((pid, start));
            }
        }
        pids
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        for &(pid, start) in &self.0 {
            if start_time(pid) == Some(start) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Whether every thread of `pid` is in the stopped state ('T').
pub fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    })
}

/// The session ids of a `list` answer, in its order.
pub fn listed_ids(list: &Value) -> Vec<String> {
    list["processes"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["session_id"].as_str())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}
