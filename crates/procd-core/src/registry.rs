//! `Registry`: the sessions of one daemon and every operation on them.
//!
//! Each public method is one protocol method (docs/protocol.md) minus the framing.
//! The session table is a std mutex held only for lookups and inserts,
//! never across an await or a syscall that can block.
//!
//! This file holds the table, lookups, listing and retention, and
//! `admit`, the one way a session comes in; the other operations are
//! `impl Registry` blocks by concern:
//! - `checks` (a spawn validated once into a `SessionSpec`; each param's
//!   bounds), `launch` (`start_child`: the cgroup or scope, the start on
//!   pipes or a PTY, the launch line), `spawn` (the spawn, `open_session`
//!   and a restart's `renew_session`, the supervisor's start and its
//!   reports);
//! - `exit` (a session's end: `record_end`, the only caller of
//!   `Session::mark_exited`, with its events and bookkeeping; the OOM
//!   watch of a run; the orphans a root leaves), `restarts` (the backoff
//!   and the next run, which `spawn`'s `renew_session` makes the
//!   session's),
//!   `onchange` (a run's files followed; restart or signal on a change);
//! - `reading` (poll, read, log, wait), `yields` (spawn- and
//!   write-and-yield), `wait_any` (one wait over many sessions and
//!   conditions), `search` (a regex over logs, matched off the event
//!   loop), `stdin`, `termination` (every kill), `update` (notify, watch
//!   patterns, meta), `listing` (`list` a page at a time), `names` (a
//!   named spawn reused, refused or replaced), `ports` (who listens;
//!   `port` and `ports` given or picked), `queue` (queued spawns), `jobs`
//!   (the jobserver's sessions), `shells` (what the shell layer asks);
//! - `recovery` (procs.json and ended.jsonl), `table` (the sessions by id,
//!   with what the checkpoint has yet to write and the order retention
//!   drops finished ones in), `handover` (what the keeper holds,
//!   `hand_over`, `adopt_handed`), `present` (results, and the text of
//!   every event an agent reads), `ready` (the readiness task, one
//!   session's probe, the readiness and input events).

use crate::child::env::EnvPolicy;
use crate::error::Error;
use crate::notify::NotificationQueue;
use crate::output::redact::Redactor;
use crate::output::store::OutputStore;
use crate::persist::checkpoint::{Checkpoint, CheckpointEntry};
use crate::procfs::ProcFs;
use crate::session::Session;
use crate::tree::reaper::Reaper;
use crate::tree::scope::Scopes;
use crate::Config;
use procd_proto::{CloseTerminalResult, DrainResult, Event};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

mod checks;
mod exit;
mod handover;
mod jobs;
mod launch;
mod listing;
mod names;
mod onchange;
mod ports;
mod present;
mod queue;
mod reading;
mod ready;
mod recovery;
mod restarts;
mod search;
mod shells;
mod spawn;
mod stdin;
mod table;
mod termination;
mod update;
mod wait_any;
mod yields;

pub use checks::MAX_META_BYTES;
pub use listing::ListPage;
pub use search::SearchAsk;
pub use termination::{normalize_id, Whose};
pub use wait_any::{WaitAnyAsk, MAX_WAIT_ANY_SESSIONS};

pub(crate) use checks::check_command;
pub use spawn::launch_script;

/// Largest command text accepted (bytes).
pub const MAX_COMMAND_BYTES: usize = 65_536;
/// Largest caller environment accepted.
pub const MAX_ENV_VARS: usize = 1_024;
pub const MAX_ENV_BYTES: usize = 256 * 1024;
pub const MAX_WATCH_PATTERNS: usize = 32;
pub const MAX_WATCH_PATTERN_BYTES: usize = 1024;
const MAX_READ_BYTES: u64 = 1 << 20;
/// Names the instance (its logs dir) in every child's environment, so that
/// a new daemon can find what a crashed one started but never recorded.
const INSTANCE_VAR: &str = "PROCD_INSTANCE";
const DEFAULT_READ_BYTES: u64 = 65_536;
/// The longest a `read` waits for output, a session's `timeout_s` and a
/// kill's grace: larger values are clamped, not refused (docs/protocol.md).
const MAX_READ_WAIT: Duration = Duration::from_secs(300);
const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_GRACE: Duration = Duration::from_secs(300);
const PREVIEW_CHARS: usize = 1000;
const LIST_PREVIEW_CHARS: usize = 200;
const WAIT_OUTPUT_CHARS: usize = 2000;

/// Everything the registry needs from its host (the daemon or a test).
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    pub config: Config,
    /// Where `<session_id>.log` files go (created if missing, mode 0700).
    pub logs_dir: PathBuf,
    /// Where sandboxed sessions' own temp dirs go (docs/SECURITY.md).
    pub tmp_dir: PathBuf,
    /// The jobserver's FIFOs, record and make shim (`admission/jobserver.rs`).
    pub jobs_dir: PathBuf,
    /// procd's own files and dirs (state, runtime dir, config file), which
    /// no sandbox may make writable (docs/SECURITY.md).
    pub own_paths: Vec<PathBuf>,
    /// Default cwd of sessions (the user's home).
    pub default_cwd: PathBuf,
    /// The environment children inherit before sanitising.
    pub inherited_env: Vec<(String, String)>,
    pub procfs: ProcFs,
    /// Where the checkpoint of running sessions goes (None: not kept).
    pub checkpoint: Option<PathBuf>,
    /// The notification queue's journal (None: the queue is memory only).
    pub notifications: Option<PathBuf>,
    /// Wrap sessions in systemd scopes (the daemon runs under its unit).
    pub scopes: Option<Arc<Scopes>>,
    /// Give each session a cgroup of its own below this tree
    /// (docs/containment.md); takes precedence over `scopes`.
    pub cgroups: Option<Arc<procd_sys::cgroup::CgroupTree>>,
    /// The keeper that holds sessions' descriptors across a daemon's death
    /// (docs/survival.md), when the daemon runs under one.
    pub keeper: Option<Arc<procd_keeper::Link>>,
}

#[cfg(feature = "test-hooks")]
impl RegistryOptions {
    /// A registry of a test's own under `dir` (tests only): logs and
    /// temp dirs there, sessions with `dir` as their cwd and HOME (`bash
    /// -lic` would otherwise source the developer's dotfiles: slow, and
    /// here pyenv's start helpers outlive the test), no checkpoint,
    /// keeper, scopes or cgroups.
    pub fn isolated(dir: &Path) -> RegistryOptions {
        RegistryOptions {
            config: Config::default(),
            logs_dir: dir.join("logs"),
            tmp_dir: dir.join("tmp"),
            jobs_dir: dir.join("jobs"),
            own_paths: Vec::new(),
            default_cwd: dir.to_path_buf(),
            inherited_env: std::env::vars()
                .filter(|(k, _)| k != "HOME")
                .chain([("HOME".to_string(), dir.display().to_string())])
                .collect(),
            procfs: ProcFs::default(),
            notifications: None,
            checkpoint: None,
            scopes: None,
            cgroups: None,
            keeper: None,
        }
    }
}

/// Failures a real system cannot produce on demand, injected by tests
/// (`Registry::inject`, with the `test-hooks` feature only: production
/// builds have neither the switch nor the checks).
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Copy, Default)]
pub struct InjectedFailures {
    /// Fail every spawn right after the child exists (R18).
    pub after_spawn: bool,
    /// Fail every PTY spawn right after the child exists.
    pub pty_after_spawn: bool,
    /// Hold every spawn this long right after the child exists: a
    /// daemon slowed there by a loaded machine.
    pub slow_setup: Duration,
}

pub struct Registry {
    config: Config,
    logs_dir: PathBuf,
    /// Sandboxed sessions' temp dirs (`child/sandbox.rs`).
    tmp_dir: PathBuf,
    /// What no sandbox may make writable (`RegistryOptions::own_paths`).
    own_paths: Vec<PathBuf>,
    default_cwd: PathBuf,
    procfs: ProcFs,
    env_policy: EnvPolicy,
    inherited_env: Vec<(String, String)>,
    shell: Vec<String>,
    /// The login scripts' setup, sourced instead of re-run (docs/operations.md).
    snapshot: Option<crate::child::snapshot::ShellSnapshot>,
    reaper: Arc<Reaper>,
    sessions: Mutex<table::Table>,
    /// Running sessions plus spawns in progress (the `max_running` gate).
    running: crate::admission::slot::Slots,
    /// Spawn queues: who waits for a slot, and in what order (`admission/queue.rs`,
    /// `registry/queue.rs`).
    queues: crate::admission::queue::Queues,
    /// The machine-wide jobserver of `jobs` sessions (None: its directory
    /// could not be made; such spawns are refused).
    jobs: Option<Arc<crate::admission::jobserver::JobServer>>,
    /// Set once the task that starts queued spawns runs.
    starter: std::sync::atomic::AtomicBool,
    /// Sandboxed spawns whose sessions are not in the table yet: until
    /// they are, their children's connections cannot be told apart.
    pub sandbox_launches: crate::child::sandbox::Launches,
    notifications: NotificationQueue,
    /// Watch matches of all sessions, past a rate, are held (`observation/watch.rs`).
    watch_breaker: Mutex<crate::observation::watch::Breaker>,
    redactor: Redactor,
    checkpoint: Option<Checkpoint>,
    /// Faults being lived with (a checkpoint or log that cannot be written).
    pub faults: crate::persist::faults::Faults,
    scopes: Option<Arc<Scopes>>,
    /// Where sessions' cgroups are made (None: no cgroup containment).
    cgroups: Option<Arc<procd_sys::cgroup::CgroupTree>>,
    /// Entries kept in the checkpoint though not tracked: dead sessions
    /// whose systemd scope could not be stopped (retried next start).
    retained: Mutex<Vec<CheckpointEntry>>,
    /// `procs.json`'s records as last written, serialized (`recovery`).
    records: Mutex<crate::persist::checkpoint::RecordCache<Session, recovery::Moving>>,
    /// The next session's log file, made ahead of time under
    /// `spawn::SPARE_LOG` (`Registry::new_log`).
    spare_log: Mutex<Option<std::fs::File>>,
    /// Held by a named spawn from its check of the name to its start, so
    /// two spawns of one name start one session (docs/stacks.md).
    naming: tokio::sync::Mutex<()>,
    /// Ports picked for `port: "auto"` spawns not yet in the table, so
    /// that two spawns at once never get one port (`registry/ports.rs`).
    picking: Mutex<std::collections::BTreeSet<u16>>,
    /// `up`'s service tasks waiting for their dependencies (`stacks/up.rs`).
    waiting: crate::admission::slot::Slots,
    /// Sessions watched for staleness (`observation/stale.rs`; a bound on the inotify
    /// instances they hold).
    stale_watches: crate::admission::slot::Slots,
    /// Set when the daemon is shutting down: spawns are refused.
    closing: std::sync::atomic::AtomicBool,
    /// A checkpoint write is scheduled and has not begun (`checkpoint_soon`).
    checkpoint_pending: std::sync::atomic::AtomicBool,
    keeper: Option<Arc<procd_keeper::Link>>,
    /// Set when the daemon hands its sessions to the next one: supervisors
    /// stop reading (nothing read is left unstored) and record no exit.
    handing_over: tokio::sync::watch::Sender<bool>,
    /// Supervisor tasks still running (`hand_over` waits for none).
    supervisors: tokio::sync::watch::Sender<usize>,
    #[cfg(feature = "test-hooks")]
    injected: Mutex<InjectedFailures>,
    me: Weak<Registry>,
}

impl Registry {
    pub fn new(options: RegistryOptions) -> std::io::Result<Arc<Registry>> {
        create_private_dir(&options.logs_dir)?;
        let shell = resolve_shell(&options.config.shell, &options.inherited_env);
        let inherited_env: Vec<(String, String)> = options
            .inherited_env
            .into_iter()
            .filter(|(k, _)| !DAEMON_ONLY_VARS.contains(&k.as_str()))
            .collect();
        let snapshot = snapshot_for(
            &options.config,
            &shell,
            &inherited_env,
            &options.default_cwd,
            &options.logs_dir,
        )
        .map(|(login, state_dir)| {
            crate::child::snapshot::ShellSnapshot::new(
                login,
                &state_dir,
                Duration::from_secs_f64(options.config.shell_snapshot_timeout_s),
                Reaper::global(),
                options.procfs.clone(),
            )
        });
        let (queues, jobs) = queues_and_jobserver(
            &options.config,
            &options.jobs_dir,
            options.checkpoint.as_deref(),
        );
        let checkpoint = options.checkpoint.map(Checkpoint::new).transpose()?;
        Ok(Arc::new_cyclic(|me| Registry {
            env_policy: EnvPolicy::new(&options.config.env_blocklist),
            redactor: Redactor {
                enabled: options.config.redact,
            },
            checkpoint,
            faults: crate::persist::faults::Faults::default(),
            scopes: options.scopes,
            cgroups: options.cgroups,
            retained: Mutex::new(Vec::new()),
            records: Mutex::default(),
            spare_log: Mutex::new(None),
            config: options.config,
            logs_dir: options.logs_dir,
            tmp_dir: options.tmp_dir,
            own_paths: options.own_paths,
            default_cwd: options.default_cwd,
            procfs: options.procfs,
            inherited_env,
            shell,
            snapshot,
            reaper: Reaper::global(),
            sessions: Mutex::new(table::Table::default()),
            running: crate::admission::slot::Slots::default(),
            queues,
            jobs,
            sandbox_launches: Default::default(),
            starter: std::sync::atomic::AtomicBool::new(false),
            watch_breaker: Mutex::new(crate::observation::watch::Breaker::default()),
            notifications: options
                .notifications
                .as_deref()
                .map(NotificationQueue::persistent)
                .unwrap_or_default(),
            naming: tokio::sync::Mutex::new(()),
            stale_watches: crate::admission::slot::Slots::default(),
            picking: Mutex::new(std::collections::BTreeSet::new()),
            waiting: crate::admission::slot::Slots::default(),
            closing: std::sync::atomic::AtomicBool::new(false),
            checkpoint_pending: std::sync::atomic::AtomicBool::new(false),
            keeper: options.keeper,
            handing_over: tokio::sync::watch::channel(false).0,
            supervisors: tokio::sync::watch::channel(0).0,
            #[cfg(feature = "test-hooks")]
            injected: Mutex::new(InjectedFailures::default()),
            me: me.clone(),
        }))
    }

    /// Makes the next spawns fail as `failures` says (tests only).
    #[cfg(feature = "test-hooks")]
    pub fn inject(&self, failures: InjectedFailures) {
        *self.injected.lock().unwrap_or_else(|e| e.into_inner()) = failures;
    }

    /// Whether a test asked spawns to fail after the fork (`pty`: PTY ones).
    fn injected_failure(&self, pty: bool) -> bool {
        #[cfg(feature = "test-hooks")]
        {
            let f = *self.injected.lock().unwrap_or_else(|e| e.into_inner());
            if pty {
                f.pty_after_spawn
            } else {
                f.after_spawn
            }
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            let _ = pty;
            false
        }
    }

    /// Holds a spawn right after its fork as long as a test asked.
    async fn injected_slow_setup(&self) {
        #[cfg(feature = "test-hooks")]
        {
            let delay = self
                .injected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .slow_setup;
            tokio::time::sleep(delay).await;
        }
    }

    pub fn notifications(&self) -> &NotificationQueue {
        &self.notifications
    }

    /// Refuse new sessions from now on (the daemon is shutting down).
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    fn table(&self) -> MutexGuard<'_, table::Table> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The one way a session comes in, spawned, handed over or recovered:
    /// made of all it starts with, and put in the table (in place of the
    /// run before it, for a restart's next run).
    fn admit(&self, opening: crate::session::Opening) -> Arc<Session> {
        let session = Arc::new(Session::new(opening, &self.redactor));
        self.table().insert(session.id.clone(), session.clone());
        session
    }

    fn all_sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = self.table().values().cloned().collect();
        // By id among equals, so that the order is the same on every call
        // (list's pages depend on it).
        all.sort_unstable_by(|a, b| {
            (a.started_instant(), &a.id).cmp(&(b.started_instant(), &b.id))
        });
        all
    }

    /// (running, finished) session counts.
    pub fn counts(&self) -> (usize, usize) {
        let table = self.table();
        let running = table.values().filter(|s| s.is_running()).count();
        (running, table.len() - running)
    }

    /// Where relative paths (a spawn's cwd, a stack file) are taken from.
    pub fn default_cwd(&self) -> &Path {
        &self.default_cwd
    }

    /// Resolves a full id or a unique prefix (≥ 4 hex chars, `proc_` optional).
    pub fn find(&self, id: &str) -> Result<Arc<Session>, Error> {
        // The common case: the id exactly as procd gave it.
        if let Some(s) = self.table().get(id) {
            return Ok(s.clone());
        }
        let hex = id.strip_prefix("proc_").unwrap_or(id);
        if hex.len() < 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::InvalidParams(format!(
                "session_id: expected proc_ followed by at least 4 hex characters, got {id:?}"
            )));
        }
        let hex = hex.to_ascii_lowercase();
        let table = self.table();
        if let Some(s) = table.get(&format!("proc_{hex}")) {
            return Ok(s.clone());
        }
        let mut matches = table
            .iter()
            .filter(|(k, _)| k[5..].starts_with(&hex))
            .map(|(_, s)| s);
        match (matches.next(), matches.next()) {
            (Some(s), None) => Ok(s.clone()),
            (None, _) => {
                drop(table);
                Err(match self.find_queued(id) {
                    Some(queued) => Error::WrongState(format!(
                        "{} is queued in {}: it has not started yet (poll, wait or kill it)",
                        queued.id, queued.queue
                    )),
                    None => Error::NotFound(format!("no session matches {id:?}")),
                })
            }
            (Some(_), Some(_)) => Err(Error::NotFound(format!(
                "session id prefix {id:?} is ambiguous: give more characters"
            ))),
        }
    }

    // ----- who asks ----------------------------------------------------------

    /// Whether a sandboxed session is tracked: only then is a connection's
    /// peer looked at (`sandboxed_session_of`).
    pub fn has_sandboxed(&self) -> bool {
        self.sandbox_launches.any() || self.table().values().any(|s| s.spec.sandbox.is_some())
    }

    /// The sandboxed session whose tree holds process `pid`, if one does.
    /// Its processes are not served (docs/SECURITY.md): through procd a
    /// sandboxed command could otherwise start an unsandboxed one, or type
    /// into another session's shell. Reads /proc: call it off the event
    /// loop.
    pub fn sandboxed_session_of(&self, pid: i32) -> Option<String> {
        let sandboxed: Vec<Arc<Session>> = self
            .table()
            .values()
            .filter(|s| s.spec.sandbox.is_some())
            .cloned()
            .collect();
        if sandboxed.is_empty() {
            return None;
        }
        // As the kill finds a session's processes (`TreeSpec::holds`); a
        // process cannot leave a cgroup or scope (that takes a write the
        // sandbox refuses), but can leave a group and drop its marker.
        let holds = |s: &Session| {
            let run = s.run();
            match (&run.cgroup, &run.systemd_unit) {
                (None, Some(unit)) => procd_sys::cgroup::in_unit(
                    &pid.to_string(),
                    &crate::tree::scope::scope_of(unit),
                ),
                // An ended session's root pid may be another's by now.
                (None, None) if !s.is_running() => false,
                _ => s.tree().holds(pid, &self.procfs),
            }
        };
        sandboxed.iter().find(|s| holds(s)).map(|s| s.id.clone())
    }

    /// A UI drops its view of a session: an event to UI subscribers; the
    /// process is untouched. Without a subscriber there is no UI to tell.
    pub fn close_terminal(&self, id: &str) -> Result<CloseTerminalResult, Error> {
        let s = self.find(id)?;
        if self.notifications.subscribers() == 0 {
            return Err(Error::WrongState(
                "no UI is attached (nobody is subscribed to events)".into(),
            ));
        }
        self.notifications.publish_now(Event::CloseTerminal {
            session_id: s.id.clone(),
        });
        Ok(CloseTerminalResult {
            status: "ok".into(),
            closed: s.id.clone(),
        })
    }

    pub fn drain_notifications(
        &self,
        session_key: Option<&str>,
        owned_keys: &[String],
    ) -> DrainResult {
        DrainResult {
            events: self.notifications.drain(session_key, owned_keys),
        }
    }

    // ----- retention -------------------------------------------------------

    /// Drops finished sessions past the TTL (the monitor's tick), and the
    /// earliest-exited ones while more than `max_sessions` are kept.
    /// Running sessions stay.
    pub fn prune(&self) {
        self.drop_finished(true);
    }

    /// Makes room for a session just added: drops the earliest-exited
    /// finished sessions while more than `max_sessions` are kept, from an
    /// order the table keeps (`Table::earliest_finished`), so a spawn's
    /// cost does not grow with the sessions retained. The tick drops those
    /// past their TTL.
    fn make_room(&self) {
        self.drop_finished(false);
    }

    fn drop_finished(&self, expired_too: bool) {
        let ttl = Duration::from_secs_f64(self.config.finished_ttl_s);
        let removed: Vec<Arc<Session>> = {
            let mut table = self.table();
            let excess = table.len().saturating_sub(self.config.max_sessions);
            let mut doomed = table.earliest_finished(excess);
            if expired_too {
                doomed.extend(
                    table
                        .values()
                        .filter(|s| {
                            s.state()
                                .exit()
                                .is_some_and(|e| e.exited_instant.elapsed() >= ttl)
                        })
                        .map(|s| s.id.clone()),
                );
            }
            doomed.iter().filter_map(|id| table.remove(id)).collect()
        };
        if removed.is_empty() {
            return;
        }
        // Unlinking a large log can take a while: not on the event loop.
        let stores: Vec<Arc<OutputStore>> = removed.iter().map(|s| s.output.clone()).collect();
        // A cgroup with leftovers in it stays until they end or procd stops.
        let cgroups: Vec<_> = removed
            .iter()
            .filter_map(|s| s.run().cgroup.clone())
            .collect();
        let delete = move || {
            stores.iter().for_each(|o| o.delete_log());
            cgroups.iter().for_each(|c| {
                c.remove();
            });
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(delete)),
            Err(_) => delete(),
        }
    }
}

/// Variables that describe the daemon's own supervision and must not leak
/// into children (a child would otherwise think it was socket-activated).
/// The service manager's own variables too (docs/containment.md: a session gets
/// what a plain fork+exec from a shell gives it).
const DAEMON_ONLY_VARS: &[&str] = &[
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "MANAGERPID",
    "SYSTEMD_EXEC_PID",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
];

/// Creates `dir` (and parents), mode 0700 for what it creates.
/// The spawn queues and the jobserver whose tokens one of them counts
/// (None when its directory cannot be made: `jobs` spawns are refused).
fn queues_and_jobserver(
    config: &Config,
    jobs_dir: &Path,
    checkpoint: Option<&Path>,
) -> (
    crate::admission::queue::Queues,
    Option<Arc<crate::admission::jobserver::JobServer>>,
) {
    let tokens = config.jobserver_tokens.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let jobs = match crate::admission::jobserver::JobServer::new(tokens, jobs_dir) {
        Ok(jobs) => Some(Arc::new(jobs)),
        Err(e) => {
            tracing::warn!(%e, dir = %jobs_dir.display(), "no jobserver: jobs spawns are refused");
            None
        }
    };
    let queues = crate::admission::queue::Queues::new(
        config,
        checkpoint.map(|p| p.with_file_name("queue.json")),
    );
    match &jobs {
        Some(js) => (queues.with_jobserver(js.clone()), jobs),
        None => (queues, None),
    }
}

pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Where a shell snapshot applies: the launch is bash with `-lic` (as by
/// default), and it is not switched off. (The login shell, the state dir.)
fn snapshot_for(
    config: &Config,
    shell: &[String],
    env: &[(String, String)],
    default_cwd: &Path,
    logs_dir: &Path,
) -> Option<(crate::child::snapshot::LoginShell, PathBuf)> {
    let bash = Path::new(shell.first()?);
    let is_bash = bash.file_name().is_some_and(|n| n == "bash");
    if !config.shell_snapshot || !is_bash || shell.get(1..) != Some(&["-lic".to_string()][..]) {
        return None;
    }
    let home = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| default_cwd.to_path_buf());
    let state_dir = logs_dir.parent()?.to_path_buf();
    let login = crate::child::snapshot::LoginShell {
        shell: bash.to_path_buf(),
        home,
        env: env.to_vec(),
        policy: EnvPolicy::new(&config.env_blocklist),
    };
    Some((login, state_dir))
}

/// The shell argv: the configured one, except that the default `bash`
/// falls back to /usr/bin/bash, /bin/bash, $SHELL, then /bin/sh -lc.
fn resolve_shell(configured: &[String], env: &[(String, String)]) -> Vec<String> {
    resolve_shell_among(configured, env, &["/usr/bin/bash", "/bin/bash"])
}

/// `resolve_shell` with the fixed places to look for bash given.
fn resolve_shell_among(
    configured: &[String],
    env: &[(String, String)],
    fixed: &[&str],
) -> Vec<String> {
    if configured.first().map(String::as_str) != Some("bash") {
        return configured.to_vec();
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/bin:/bin");
    let in_path = path
        .split(':')
        .map(|d| Path::new(d).join("bash"))
        .find(|p| is_executable(p));
    let candidates = in_path.into_iter().chain(fixed.iter().map(PathBuf::from));
    for candidate in candidates {
        if is_executable(&candidate) {
            let mut argv = configured.to_vec();
            argv[0] = candidate.display().to_string();
            return argv;
        }
    }
    if let Some((_, shell)) = env.iter().find(|(k, _)| k == "SHELL") {
        if is_executable(Path::new(shell)) {
            let mut argv = configured.to_vec();
            argv[0] = shell.clone();
            return argv;
        }
    }
    vec!["/bin/sh".into(), "-lc".into()]
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_default_bash_falls_back_along_the_documented_chain() {
        let dir = tempfile::tempdir().unwrap();
        let exe = |name: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p.display().to_string()
        };
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let in_path = exe("bin/bash");
        let fixed = exe("fixed-bash");
        let user_shell = exe("zsh");
        let missing = dir.path().join("none").display().to_string();
        let default = vec!["bash".to_string(), "-lic".to_string()];
        let env = |path: &str, shell: &str| {
            vec![
                ("PATH".to_string(), path.to_string()),
                ("SHELL".to_string(), shell.to_string()),
            ]
        };
        let argv0 =
            |env: &[(String, String)], fixed: &[&str]| resolve_shell_among(&default, env, fixed);
        let bin_dir = bin.display().to_string();
        // 1. bash on PATH, 2. the fixed places, 3. $SHELL, 4. /bin/sh -lc.
        assert_eq!(argv0(&env(&bin_dir, &user_shell), &[&fixed])[0], in_path);
        assert_eq!(
            argv0(&env("/nonexistent", &user_shell), &[&missing, &fixed])[0],
            fixed
        );
        assert_eq!(
            argv0(&env("/nonexistent", &user_shell), &[&missing]),
            vec![user_shell.clone(), "-lic".to_string()]
        );
        assert_eq!(
            argv0(&env("/nonexistent", &missing), &[&missing]),
            vec!["/bin/sh".to_string(), "-lc".to_string()]
        );
        // A configured shell is taken as given.
        let zsh = vec!["zsh".to_string(), "-c".to_string()];
        assert_eq!(
            resolve_shell_among(&zsh, &env("/nonexistent", &missing), &[]),
            zsh
        );
    }
}
