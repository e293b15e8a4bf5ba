//! Starting, stopping and inspecting the daemon from the outside (docs/operations.md): what `procd start|stop|restart|status` and on-demand clients do.
//! Blocking code; it never signals a process whose identity it cannot
//! verify, and it waits for exits through pidfds rather than sleeping.

use crate::lease::{self, Transition};
use crate::lock::FileLock;
use crate::paths::Paths;
use crate::state::{self, Liveness};
use procd_sys::pidfd::PidFd;
use procd_sys::procfs::ProcFs;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a started daemon may take to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);
/// After SIGKILL, how long to wait before declaring the stop timed out.
const KILL_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The recorded pid is alive but its identity cannot be verified.
    #[error(
        "refusing to signal pid {0}: its identity cannot be verified (reason identity_unavailable)"
    )]
    IdentityUnavailable(i32),
    /// The daemon survived SIGTERM, the timeout and SIGKILL; state kept.
    #[error("procd (pid {0}) did not stop; state kept (reason stop_timeout)")]
    StopTimeout(i32),
    #[error("procd is not running")]
    NotRunning,
    /// `restart` of a foreground daemon (it is not ours to detach).
    #[error("procd (pid {0}) runs in the foreground; restart it where it was started")]
    Foreground(i32),
    #[error("{0}")]
    Io(String),
}

impl From<io::Error> for ControlError {
    fn from(e: io::Error) -> Self {
        ControlError::Io(e.to_string())
    }
}

/// The instance's state; stale state is deleted (under the lifecycle lock).
pub fn status(paths: &Paths) -> Liveness {
    let procfs = ProcFs::default();
    let liveness = state::inspect(paths, &procfs);
    if let Liveness::Stale(stale) = &liveness {
        if let Ok(_lock) = FileLock::acquire(&paths.lifecycle_lock()) {
            // Re-check under the lock: a new daemon may have claimed it.
            if let Liveness::Stale(again) = state::inspect(paths, &procfs) {
                if again.pid == stale.pid {
                    let _ = std::fs::remove_file(paths.gateway_json());
                }
            }
        }
    }
    liveness
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    NotRunning,
    Stopped(i32),
}

/// `procd stop`: stops the daemon and clears the leases, all within one
/// transition so no client can lease the dying daemon meanwhile.
pub fn stop(paths: &Paths, timeout: Duration) -> Result<Stopped, ControlError> {
    let t = Transition::begin(paths)?;
    let result = stop_in(paths, &t, timeout)?;
    lease::with_clients(paths, |f| *f = lease::LeaseFile::default())?;
    Ok(result)
}

/// Stops the recorded daemon: SIGTERM, up to `timeout`, SIGKILL, 2 s more.
/// A daemon under a keeper is stopped through the keeper (docs/survival.md): it
/// tells the daemon to end every session (starting one first if none runs
/// right now) and then exits instead of starting another; what is waited
/// for is the keeper's exit.
pub fn stop_in(paths: &Paths, _t: &Transition, timeout: Duration) -> Result<Stopped, ControlError> {
    let record = match status(paths) {
        Liveness::NotStarted | Liveness::Stale(_) => return Ok(Stopped::NotRunning),
        Liveness::IdentityUnavailable(s) => return Err(ControlError::IdentityUnavailable(s.pid)),
        Liveness::Running(s) | Liveness::Restarting(s) => s,
    };
    let pid = record.pid;
    let procfs = ProcFs::default();
    let daemon = record.identity.and_then(|i| i.open(record.pid, &procfs));
    let keeper = record
        .keeper_pid
        .zip(record.keeper_identity)
        .and_then(|(pid, i)| i.open(pid, &procfs));
    // Whose exit ends the stop: the keeper's (it outlives its daemon).
    let Some(last) = keeper.as_ref().or(daemon.as_ref()) else {
        // It exited (or was recycled) between the check and now.
        return Ok(Stopped::NotRunning);
    };
    let pgid = record.identity.map(|i| i.pgid);
    match (&keeper, &daemon) {
        (Some(keeper), _) => drop(keeper.send_signal(libc::SIGTERM)?),
        (None, Some(daemon)) => send(daemon, pgid, libc::SIGTERM)?,
        (None, None) => {}
    }
    let mut exited = last.wait_exit_blocking(timeout);
    if !exited {
        if let Some(daemon) = &daemon {
            let _ = send(daemon, pgid, libc::SIGKILL);
        }
        if let Some(keeper) = &keeper {
            let _ = keeper.send_signal(libc::SIGKILL);
        }
        exited = last.wait_exit_blocking(KILL_WAIT);
    }
    // A process that exits right at the deadline counts as stopped.
    if !exited && !last.has_exited() {
        return Err(ControlError::StopTimeout(pid));
    }
    // The keeper went first when its daemon could not act on the stop (a
    // hung or stopped daemon is SIGKILLed above): stopped means the daemon
    // is gone too, not still exiting.
    if let (Some(_), Some(daemon)) = (&keeper, &daemon) {
        if !daemon.wait_exit_blocking(KILL_WAIT) {
            return Err(ControlError::StopTimeout(pid));
        }
    }
    // A daemon that died hard could not release its state; do it for it.
    let _lock = FileLock::acquire(&paths.lifecycle_lock())?;
    state::release_if_own(paths, pid);
    Ok(Stopped::Stopped(pid))
}

/// Signals the daemon, and its group when it leads one of its own (a
/// foreground daemon started from a shell shares the shell job's group,
/// which may hold the user's other processes: then only the daemon).
fn send(pidfd: &PidFd, pgid: Option<i32>, signal: i32) -> io::Result<()> {
    let pid = pidfd.pid();
    pidfd.send_signal(signal)?;
    if pgid == Some(pid) && pid > 1 {
        // The group exists while its leader is alive (checked through the
        // pidfd just above); ESRCH/EPERM as it vanishes are not errors.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::try_from(signal).ok(),
        );
    }
    Ok(())
}

/// How to run the daemon program.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub exe: PathBuf,
    /// Passed as `--home` (None: the daemon resolves its own paths).
    pub home: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    Started(i32),
    AlreadyRunning(i32),
    /// An on-demand daemon was running; it is explicit now.
    Promoted(i32),
}

/// `procd start`: an explicit background daemon (idempotent).
pub fn start_background(paths: &Paths, launcher: &Launcher) -> Result<Started, ControlError> {
    let t = Transition::begin(paths)?;
    lease::wait_out_stopping(paths, &t)?;
    match status(paths) {
        Liveness::Running(s) | Liveness::IdentityUnavailable(s) | Liveness::Restarting(s) => {
            let promoted =
                lease::with_clients(paths, |f| std::mem::replace(&mut f.auto_stop, false))?;
            return Ok(if promoted {
                Started::Promoted(s.pid)
            } else {
                Started::AlreadyRunning(s.pid)
            });
        }
        Liveness::NotStarted | Liveness::Stale(_) => {}
    }
    lease::with_clients(paths, |f| f.auto_stop = false)?;
    launch_detached(paths, launcher)
}

/// Starts an on-demand daemon (the caller holds a lease and the
/// transition); the lifetime is recorded before the daemon is spawned.
pub fn start_on_demand(
    paths: &Paths,
    _t: &Transition,
    launcher: &Launcher,
) -> Result<Started, ControlError> {
    if let Liveness::Running(s) | Liveness::IdentityUnavailable(s) | Liveness::Restarting(s) =
        status(paths)
    {
        return Ok(Started::AlreadyRunning(s.pid));
    }
    lease::mark_ephemeral(paths)?;
    launch_detached(paths, launcher)
}

/// `procd restart`: a background daemon, or one that systemd runs (the
/// unit's ExecReload= does the same). Under a keeper the sessions are
/// handed over and the keeper stays where it runs, so nothing is detached;
/// a foreground daemon started from a shell is refused (G11: it is
/// restarted where it was started).
pub fn restart(
    paths: &Paths,
    launcher: &Launcher,
    timeout: Duration,
) -> Result<Started, ControlError> {
    let record = match status(paths) {
        Liveness::Running(s) | Liveness::Restarting(s) => s,
        Liveness::IdentityUnavailable(s) => return Err(ControlError::IdentityUnavailable(s.pid)),
        _ => return Err(ControlError::NotRunning),
    };
    let keeper = record
        .keeper_pid
        .zip(record.keeper_identity)
        .and_then(|(pid, i)| i.open(pid, &ProcFs::default()));
    let by_systemd = keeper
        .as_ref()
        .is_some_and(|k| procd_sys::cgroup::in_procd_unit(&k.pid().to_string()));
    if record.launch_mode != "background" && !by_systemd {
        return Err(ControlError::Foreground(record.pid));
    }
    let t = Transition::begin(paths)?;
    // Under a keeper the sessions are handed over, not ended (docs/survival.md):
    // the daemon exits, the keeper starts the program on disk (perhaps a
    // new version) and gives it everything.
    if let Some(keeper) = keeper {
        keeper.send_signal(libc::SIGUSR1)?;
        return wait_until_serving(paths, Some(record.pid));
    }
    let on_demand = lease::with_clients(paths, |f| f.auto_stop)?;
    stop_in(paths, &t, timeout)?;
    if on_demand {
        // Keep the lifetime the daemon had.
        lease::mark_ephemeral(paths)?;
    }
    launch_detached(paths, launcher)
}

/// Runs `procd daemon --background` in a new session with its output in
/// procd.log, and waits until it records itself and accepts connections.
/// A shell in between exits at once, so the daemon is nobody's child here.
fn launch_detached(paths: &Paths, launcher: &Launcher) -> Result<Started, ControlError> {
    use std::os::unix::process::CommandExt;
    paths.create_dirs()?;
    let mut args: Vec<std::ffi::OsString> = vec!["daemon".into(), "--background".into()];
    if let Some(home) = &launcher.home {
        args.push("--home".into());
        args.push(home.into());
    }
    if let Some(config) = &launcher.config {
        args.push("--config".into());
        args.push(config.into());
    }
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("\"$0\" \"$@\" </dev/null >>\"$PROCD_DAEMON_LOG\" 2>&1 &")
        .arg(&launcher.exe)
        .args(&args)
        .env("PROCD_DAEMON_LOG", paths.daemon_log())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: runs in the forked child before exec; setsid(2) is
    // async-signal-safe and touches no shared memory.
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
    }
    let status = cmd
        .status()
        .map_err(|e| ControlError::Io(format!("cannot start {}: {e}", launcher.exe.display())))?;
    if !status.success() {
        return Err(ControlError::Io(format!(
            "starting procd failed ({status})"
        )));
    }
    wait_until_serving(paths, None)
}

/// Waits (≤ 5 s) until a live daemon (other than `not`) is recorded and
/// its socket accepts. No event announces another process's listening
/// socket, so this retries with a short, growing pause.
fn wait_until_serving(paths: &Paths, not: Option<i32>) -> Result<Started, ControlError> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Liveness::Running(s) = state::inspect(paths, &ProcFs::default()) {
            if Some(s.pid) != not && std::os::unix::net::UnixStream::connect(paths.socket()).is_ok()
            {
                return Ok(Started::Started(s.pid));
            }
        }
        if Instant::now() >= deadline {
            return Err(ControlError::Io(format!(
                "procd did not start within {}s; see {}",
                START_TIMEOUT.as_secs(),
                paths.daemon_log().display()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Ends a lease. The last client of an on-demand daemon stops it (when
/// `wait_for_stop`), or leaves that to the daemon's monitor. (The lease
/// file is lease.rs's; stopping is this module's, so the call lives here
/// and lease.rs needs nothing from control.rs.)
pub fn release(
    paths: &Paths,
    token: &str,
    wait_for_stop: bool,
    stop_timeout: Duration,
) -> io::Result<lease::Released> {
    let t = Transition::begin(paths)?;
    let last = lease::with_clients(paths, |f| {
        f.clients.remove(token);
        f.auto_stop && f.clients.is_empty()
    })?;
    if !last {
        return Ok(lease::Released::Kept);
    }
    if !wait_for_stop {
        return Ok(lease::Released::LeftToMonitor);
    }
    match stop_in(paths, &t, stop_timeout) {
        Ok(_) => {
            lease::with_clients(paths, |f| {
                if f.clients.is_empty() {
                    *f = lease::LeaseFile::default();
                }
            })?;
            Ok(lease::Released::Stopped)
        }
        Err(e) => Ok(lease::Released::StopFailed(e.to_string())),
    }
}
