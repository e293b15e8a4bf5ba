//! What a session was asked for (fixed for its life), its launch as the
//! keeper keeps it, and how a restarting session starts its runs.

use super::ExitRecord;
use procd_proto::StdinMode;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the caller asked for; fixed for the session's life.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub command: String,
    pub cwd: PathBuf,
    pub task_id: Option<String>,
    pub session_key: Option<String>,
    pub owner: Option<String>,
    pub persist: bool,
    pub pty: bool,
    /// PTY window size.
    pub rows: u16,
    pub cols: u16,
    pub notify_on_complete: bool,
    /// As spawned; what holds now is `Session::asks`.
    pub watch_patterns: Vec<String>,
    /// The caller's `meta` as spawned; what holds now is `Session::asks`.
    pub meta: Option<Arc<serde_json::Value>>,
    pub timeout: Option<Duration>,
    pub stdin: StdinMode,
    /// When it counts as ready (docs/agents.md).
    pub ready: Option<crate::observation::readiness::ReadyCheck>,
    /// Limits on its tree, as its cgroup takes them.
    pub limits: procd_sys::cgroup::Limits,
    /// Its name, unique among the running sessions of `project`
    /// (docs/stacks.md).
    pub name: Option<procd_proto::SessionName>,
    pub project: Option<procd_proto::ProjectName>,
    /// The stack file `up` started it from: how `procd top` restarts a
    /// service (down, then up from the same file).
    pub stack_file: Option<PathBuf>,
    /// A digest of the env the caller gave, for a named spawn to tell
    /// the same service from another; in memory only (the env may hold
    /// secrets), so None for a session a previous daemon started.
    pub env_digest: Option<u64>,
    /// When its command starts again after it ends (docs/stacks.md).
    pub restart: Option<crate::stacks::restart::RestartPlan>,
    /// What its tree may touch (docs/SECURITY.md); None: no sandbox.
    pub sandbox: Option<crate::child::sandbox::SandboxPlan>,
    /// The JUnit XML report its command writes, read at its end for its
    /// test summary (`testrun/junit.rs`).
    pub junit: Option<PathBuf>,
    /// A shell's channel directory (`shell/`): the shell inherits its
    /// command FIFO, its file of ends and its wake FIFO as fds 3, 4, 5.
    pub shell: Option<PathBuf>,
    /// The TCP port it was given (spawn's `port`; picked for `"auto"`):
    /// in its `PORT` and for `{port}` in its command, held by it for the
    /// other sessions' picks while it runs or restarts.
    pub port: Option<u16>,
    /// The ports spawn's `ports` gave it, by variable (held likewise).
    pub named_ports: std::collections::BTreeMap<String, u16>,
    /// What a change of its files does (`spawn{watch}`; `stacks/onchange.rs`).
    pub on_change: Option<Arc<crate::stacks::onchange::ChangePlan>>,
    /// The queue whose slot it holds while it runs (docs/queues.md).
    pub queue: Option<procd_proto::QueueName>,
    /// How long it waited in that queue before it started (zero when a
    /// slot was free at once).
    pub queued_for: Duration,
}

impl SessionSpec {
    /// Spawned with `jobs`: it holds a jobserver token as its queue slot
    /// and draws more from its FIFO (`admission/jobserver.rs`).
    pub fn is_jobs(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|q| q.as_str() == crate::admission::jobserver::QUEUE)
    }

    /// The command as it runs: the ports it was given put for `{port}`
    /// and `{NAME}`. `command` stays as asked, so that a named spawn of
    /// the same command (an `up` again) finds it the same service
    /// whichever port it got.
    pub fn command_to_run(&self) -> std::borrow::Cow<'_, str> {
        let given = self
            .port
            .map(|p| ("port", p))
            .into_iter()
            .chain(self.named_ports.iter().map(|(n, &p)| (n.as_str(), p)));
        let mut command = std::borrow::Cow::Borrowed(self.command.as_str());
        for (name, port) in given {
            let placeholder = format!("{{{name}}}");
            if command.contains(&placeholder) {
                command = command.replace(&placeholder, &port.to_string()).into();
            }
        }
        command
    }
}

/// How a restarting session's runs start: the first run's argv and
/// environment, kept in memory (the environment may hold secrets) and, as
/// a sealed memfd, by the keeper (docs/survival.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: std::collections::BTreeMap<String, String>,
}

/// The largest launch memfd read back (a command and an environment are
/// far smaller: 64 KiB and 256 KiB, plus the shell snapshot's variables).
const MAX_LAUNCH_BYTES: u64 = 4 << 20;

impl Launch {
    /// The launch in a sealed memfd, for the keeper to hold.
    pub fn to_memfd(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        procd_sys::memfd::sealed("procd-launch", &bytes)
    }

    /// A launch the keeper kept (a sealed memfd `to_memfd` made).
    pub fn from_memfd(fd: impl std::os::fd::AsFd) -> std::io::Result<Launch> {
        let bytes = procd_sys::memfd::read_sealed(fd, MAX_LAUNCH_BYTES)?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }
}

/// How a restarting session starts its runs: the policy and the launch,
/// fixed for its life. Where its runs stand is in the session's view
/// (`Runs`), which it is opened with (`Opening::restarts`).
pub struct Restarts {
    pub plan: crate::stacks::restart::RestartPlan,
    /// None for a session a previous daemon started whose launch the
    /// keeper did not keep: it cannot be started again.
    pub launch: Option<Arc<Launch>>,
    /// The launch as a sealed memfd, for the keeper to hold with each run
    /// (made only when there is a keeper).
    pub launch_memfd: Option<std::os::fd::OwnedFd>,
}

impl Restarts {
    pub fn new(
        plan: crate::stacks::restart::RestartPlan,
        launch: Option<(Arc<Launch>, Option<std::os::fd::OwnedFd>)>,
    ) -> Restarts {
        let (launch, launch_memfd) = launch.unzip();
        Restarts {
            plan,
            launch,
            launch_memfd: launch_memfd.flatten(),
        }
    }
}

/// Where a restarting session's runs stand (in its view), changed
/// together.
#[derive(Clone, Default)]
pub struct Runs {
    /// The run now going (or last gone).
    pub(crate) count: crate::stacks::restart::RunCount,
    /// How the run before it ended.
    pub(crate) last_exit: Option<Arc<ExitRecord>>,
    /// From a run's end until the next run starts (its backoff): which
    /// run is next and when it starts. A checkpoint keeps it, so that the
    /// next daemon starts that run itself: the one that ended was this
    /// daemon's child, reaped here, and no keeper will report its exit.
    pub(crate) next: Option<NextRun>,
    /// The files whose change ended the last run (`spawn{watch}`), for
    /// the `restarted` event to name.
    pub(crate) changed: Vec<String>,
}

impl Runs {
    /// Runs as a checkpoint recorded them: `count`, the last run's exit,
    /// and the run its backoff waits for, if it was in one.
    pub fn recorded(
        count: crate::stacks::restart::RunCount,
        last_exit: Option<Arc<ExitRecord>>,
        next: Option<NextRun>,
    ) -> Runs {
        Runs {
            count,
            last_exit,
            next,
            changed: Vec::new(),
        }
    }
}

/// The run a backoff waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRun {
    pub count: crate::stacks::restart::RunCount,
    /// When it starts (wall clock: a checkpoint carries it to the next
    /// daemon).
    pub at: SystemTime,
}
