//! Starting a session's root process: on pipes or a PTY, in its cgroup or
//! scope, sandboxed or not, with what the keeper is to hold.

use super::Registry;
use crate::identity::ProcessIdentity;
use crate::output::source::OutputSource;
use crate::procfs::ProcFs;
use crate::session::{self, SessionSpec};
use procd_proto::StdinMode;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Registry {
    /// Starts the session's root (`procd_sys::spawn`: no copy of the
    /// daemon): its own session, in its cgroup from before exec, stdio on
    /// pipes or on a new PTY (then its controlling terminal). Runs under
    /// the reaper's lock, so the start time is read before the child can
    /// be reaped.
    pub(super) fn start_child(
        &self,
        spec: &SessionSpec,
        env: &BTreeMap<String, String>,
        argv: &[String],
        unit: Option<&str>,
        cgroup: Option<&Arc<procd_sys::cgroup::SessionCgroup>>,
    ) -> std::io::Result<StartedChild> {
        let mut argv = argv.to_vec();
        if let (Some(unit), Some(scopes)) = (unit, &self.scopes) {
            argv = scopes.wrap(unit, &argv);
        }
        let mut env = terminal_env(spec, env);
        // A PTY session's terminal comes first: its sandbox names the slave.
        let terminal = match spec.pty {
            true => Some(pty_process::open().map_err(std::io::Error::other)?),
            false => None,
        };
        let sandbox = self.sandbox_of(spec, &mut env, terminal.as_ref().map(|(pty, _)| pty))?;
        let prepared = Prepared::new(&argv, &env, &spec.cwd, self.daemon_path(), sandbox)?;
        let entry = cgroup.map(|c| c.entry()).transpose()?;
        let join = entry.as_ref().map(|e| e.join());
        let procfs = &self.procfs;
        let inspect = |pid: i32| procfs.stat(pid).map(|s| s.start_time).unwrap_or(0);
        let mut channels = match &spec.shell {
            Some(dir) => crate::shell::Channels::open(dir)?.fds(),
            None => Vec::new(),
        };
        // A `jobs` session's FIFO, on `jobserver::CHILD_FD` (its env says
        // where: set by `open_jobs`, or kept across a restart).
        if let (true, Some(fifo)) = (spec.is_jobs(), env.get("PROCD_JOBSERVER")) {
            channels.insert(
                0,
                crate::admission::jobserver::JobServer::child_end(Path::new(fifo))?,
            );
        }
        let inherit: Vec<std::os::fd::BorrowedFd> = channels.iter().map(|f| f.as_fd()).collect();
        let start = |stdio: [std::os::fd::BorrowedFd; 3], terminal: bool| {
            let launch = prepared.launch(stdio, &inherit, terminal, join.as_ref());
            self.reaper
                .start(|| procd_sys::spawn::spawn(&launch), inspect)
        };
        let started = session::Started::now();
        let (pid, start_time, exit_rx, io) = match terminal {
            Some(terminal) => self.start_on_pty(terminal, spec, start)?,
            None => start_on_pipes(procfs, spec, start)?,
        };
        Ok(StartedChild {
            identity: ProcessIdentity { pid, start_time },
            started,
            exit_rx,
            io,
            unit: unit.map(str::to_string),
            cgroup: cgroup.cloned(),
        })
    }

    /// Starts the child on a new PTY's slave (its controlling terminal),
    /// with the master's copies made before, so nothing can fail after
    /// the start but what ends the child again.
    fn start_on_pty(
        &self,
        (pty, pts): (pty_process::Pty, pty_process::Pts),
        spec: &SessionSpec,
        start: impl FnOnce([BorrowedFd<'_>; 3], bool) -> std::io::Result<StartedRoot>,
    ) -> std::io::Result<(i32, u64, ExitReceiver, ChildIo)> {
        pty.resize(pty_process::Size::new(spec.rows, spec.cols))
            .map_err(std::io::Error::other)?;
        let master = pty.as_fd().try_clone_to_owned()?;
        let reading = pty.as_fd().try_clone_to_owned()?;
        let relay = crate::output::source::Relay::new()?;
        let slave = pts.as_fd();
        let (pid, start_time, exit_rx) = start([slave, slave, slave], true)?;
        // Only the child may hold the slave: EIO then marks the end.
        drop(pts);
        let procfs = &self.procfs;
        if self.injected_failure(true) {
            kill_started(procfs, pid, start_time);
            return Err(std::io::Error::other("injected PTY failure after spawn"));
        }
        let output = match OutputSource::pty(reading, relay) {
            Ok(output) => output,
            Err(e) => {
                kill_started(procfs, pid, start_time);
                return Err(e);
            }
        };
        let (_, writer) = pty.into_split();
        let io = ChildIo::Pty {
            output,
            writer,
            master,
        };
        Ok((pid, start_time, exit_rx, io))
    }

    /// What a sandboxed session's child enters (None: no sandbox), with
    /// its temp dir put in `env`; a PTY session's rules name its own
    /// `terminal`'s slave.
    fn sandbox_of(
        &self,
        spec: &SessionSpec,
        env: &mut BTreeMap<String, String>,
        terminal: Option<&pty_process::Pty>,
    ) -> std::io::Result<Option<procd_sys::sandbox::Enforcement>> {
        use std::os::unix::ffi::OsStringExt;
        let Some(plan) = &spec.sandbox else {
            return Ok(None);
        };
        env.insert(
            crate::child::sandbox::TMPDIR.into(),
            plan.tmp.display().to_string(),
        );
        let slave = match terminal {
            Some(pty) => Some(std::path::PathBuf::from(std::ffi::OsString::from_vec(
                rustix::pty::ptsname(pty.as_fd(), Vec::new())?.into_bytes(),
            ))),
            None => None,
        };
        plan.enforcement(&self.tmp_dir, slave.as_deref()).map(Some)
    }
}

/// A pipe session's output pipe (read end, the child's write end) and its
/// stdin (the child's end, ours if it is a pipe).
type ChildPipes = (
    (std::io::PipeReader, std::io::PipeWriter),
    (std::os::fd::OwnedFd, Option<std::io::PipeWriter>),
);

/// A started root, as the reaper gives it: pid, start time, its exit.
type StartedRoot = (i32, u64, ExitReceiver);
type ExitReceiver = tokio::sync::oneshot::Receiver<crate::tree::reaper::ChildExit>;

/// Starts the child on pipes: stdin (when it has one) and one pipe for
/// stdout and stderr both.
fn start_on_pipes(
    procfs: &ProcFs,
    spec: &SessionSpec,
    start: impl FnOnce([BorrowedFd<'_>; 3], bool) -> std::io::Result<StartedRoot>,
) -> std::io::Result<(i32, u64, ExitReceiver, ChildIo)> {
    let ((out_read, out_write), (stdin_read, stdin_write)) = child_pipes(spec.stdin)?;
    let out = out_write.as_fd();
    let (pid, start_time, exit_rx) = start([stdin_read.as_fd(), out, out], false)?;
    // Our copies of the child's ends must close, or EOF never comes.
    drop((out_write, stdin_read));
    let io = (|| {
        Ok::<_, std::io::Error>(ChildIo::Pipe {
            output: OutputSource::pipe(out_read.into())?,
            stdin: match stdin_write {
                Some(w) => Some(tokio::net::unix::pipe::Sender::from_owned_fd(w.into())?),
                None => None,
            },
        })
    })();
    match io {
        Ok(io) => Ok((pid, start_time, exit_rx, io)),
        Err(e) => {
            // The child exists but cannot be supervised: end it.
            kill_started(procfs, pid, start_time);
            Err(e)
        }
    }
}

fn child_pipes(stdin: StdinMode) -> std::io::Result<ChildPipes> {
    let (out_read, out_write) = std::io::pipe()?;
    // A larger pipe lets a chatty child write bigger bursts between our
    // reads (fewer wake-ups); it is only a hint.
    let _ = nix::fcntl::fcntl(&out_read, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
    let stdin = match stdin {
        StdinMode::Pipe => {
            let (r, w) = std::io::pipe()?;
            (r.into(), Some(w))
        }
        StdinMode::Null => (std::fs::File::open("/dev/null")?.into(), None),
    };
    Ok(((out_read, out_write), stdin))
}

/// What `procd_sys::spawn` needs, as C strings, made before the start.
struct Prepared {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    nofile: Option<u64>,
    sandbox: Option<procd_sys::sandbox::Enforcement>,
}

impl Prepared {
    fn new(
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: &Path,
        search_path: Option<&str>,
        sandbox: Option<procd_sys::sandbox::Enforcement>,
    ) -> std::io::Result<Prepared> {
        use std::os::unix::ffi::OsStrExt;
        let c = |s: &[u8]| {
            CString::new(s)
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL byte"))
        };
        let name = argv
            .first()
            .ok_or_else(|| std::io::Error::other("no program"))?;
        // The program is procd's (the shell, or systemd-run around it),
        // found on the daemon's PATH: the session's may be the scripts'.
        let program = procd_sys::spawn::resolve(name, search_path).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{name}: not found in PATH"),
            )
        })?;
        Ok(Prepared {
            program: c(program.as_os_str().as_bytes())?,
            argv: argv
                .iter()
                .map(|a| c(a.as_bytes()))
                .collect::<Result<_, _>>()?,
            envp: env
                .iter()
                .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
                .collect::<Result<_, _>>()?,
            cwd: c(cwd.as_os_str().as_bytes())?,
            nofile: crate::child::limits::child_soft_nofile(),
            sandbox,
        })
    }

    fn launch<'a>(
        &'a self,
        stdio: [std::os::fd::BorrowedFd<'a>; 3],
        inherit: &'a [std::os::fd::BorrowedFd<'a>],
        controlling_terminal: bool,
        cgroups: Option<&'a procd_sys::spawn::Join<'a>>,
    ) -> procd_sys::spawn::Launch<'a> {
        procd_sys::spawn::Launch {
            program: &self.program,
            argv: &self.argv,
            envp: &self.envp,
            cwd: &self.cwd,
            stdio,
            inherit,
            controlling_terminal,
            cgroups,
            nofile: self.nofile,
            sandbox: self.sandbox.as_ref(),
        }
    }
}

/// SIGKILL to a child just started whose setup then failed (it is ours
/// and unreaped, so the guard cannot miss).
fn kill_started(procfs: &ProcFs, pid: i32, start_time: u64) {
    if let Some(fd) = (ProcessIdentity { pid, start_time }).open(procfs) {
        let _ = fd.send_signal(libc::SIGKILL);
    }
}

/// A child that exists, with its I/O not yet wired to tasks.
pub(super) struct StartedChild {
    pub(super) identity: ProcessIdentity,
    /// Read just before the fork: the session's start.
    pub(super) started: session::Started,
    pub(super) exit_rx: oneshot::Receiver<crate::tree::reaper::ChildExit>,
    pub(super) io: ChildIo,
    /// The systemd scope it runs in.
    pub(super) unit: Option<String>,
    /// The cgroup it runs in.
    pub(super) cgroup: Option<Arc<procd_sys::cgroup::SessionCgroup>>,
}

pub(super) enum ChildIo {
    Pipe {
        output: OutputSource,
        stdin: Option<tokio::net::unix::pipe::Sender>,
    },
    Pty {
        output: OutputSource,
        writer: pty_process::OwnedWritePty,
        master: std::os::fd::OwnedFd,
    },
}

impl ChildIo {
    /// What the keeper is to hold for the session to outlive the daemon.
    pub(super) fn kept(&self) -> Vec<(procd_keeper::FdKind, std::os::fd::BorrowedFd<'_>)> {
        match self {
            ChildIo::Pipe { output, stdin } => {
                let mut fds = output.kept();
                if let Some(s) = stdin {
                    fds.push((procd_keeper::FdKind::Stdin, std::os::fd::AsFd::as_fd(s)));
                }
                fds
            }
            ChildIo::Pty { output, .. } => output.kept(),
        }
    }
}

/// The environment, and for a PTY session a terminal type and pagers that
/// do not wait for a key (unless the caller set them).
fn terminal_env(spec: &SessionSpec, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = env.clone();
    if spec.pty {
        env.entry("TERM".into())
            .or_insert_with(|| "xterm-256color".into());
        for pager in ["PAGER", "GIT_PAGER"] {
            env.entry(pager.into()).or_insert_with(|| "cat".into());
        }
    }
    env
}
