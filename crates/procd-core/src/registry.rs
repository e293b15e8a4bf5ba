//! `Registry`: the sessions of one daemon and every operation on them.
//!
//! Each public method is one protocol method (SPEC §3.1) minus the framing.
//! The session table is a std mutex held only for lookups and inserts,
//! never across an await or a syscall that can block.

use crate::checkpoint::{Checkpoint, CheckpointEntry};
use crate::clock::rfc3339;
use crate::env::EnvPolicy;
use crate::error::Error;
use crate::identity::ProcessIdentity;
use crate::kill::{self, parse_signal, signal_name};
use crate::noise::NoiseFilter;
use crate::notify::NotificationQueue;
use crate::output::OutputStore;
use crate::procfs::ProcFs;
use crate::reaper::Reaper;
use crate::redact::{is_env_dump, Redactor};
use crate::rewrite::rewrite_compound_background;
use crate::scope::{unit_name, Scopes};
use crate::session::{self, ExitRecord, PtyReader, Session, SessionSpec, StdinOp, StdinSink};
use crate::text::{first_chars, last_chars, strip_ansi};
use crate::watch::{WatchMatcher, WatchOutcome};
use crate::Config;
use procd_proto::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Largest command text accepted (bytes).
pub const MAX_COMMAND_BYTES: usize = 65_536;
/// Largest caller environment accepted.
pub const MAX_ENV_VARS: usize = 1_024;
pub const MAX_ENV_BYTES: usize = 256 * 1024;
pub const MAX_WATCH_PATTERNS: usize = 32;
pub const MAX_WATCH_PATTERN_BYTES: usize = 1024;
const MAX_READ_BYTES: u64 = 1 << 20;
const DEFAULT_READ_BYTES: u64 = 65_536;
const MAX_READ_WAIT_MS: f64 = 300_000.0;
const MAX_TIMEOUT_S: f64 = 30.0 * 24.0 * 3600.0;
const MAX_GRACE_S: f64 = 300.0;
const PREVIEW_CHARS: usize = 1000;
const LIST_PREVIEW_CHARS: usize = 200;
const WAIT_OUTPUT_CHARS: usize = 2000;

/// Everything the registry needs from its host (the daemon or a test).
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    pub config: Config,
    /// Where `<session_id>.log` files go (created if missing, mode 0700).
    pub logs_dir: PathBuf,
    /// Default cwd of sessions (the user's home).
    pub default_cwd: PathBuf,
    /// The environment children inherit before sanitising.
    pub inherited_env: Vec<(String, String)>,
    pub procfs: ProcFs,
    /// Where the checkpoint of running sessions goes (None: not kept).
    pub checkpoint: Option<PathBuf>,
    /// Wrap sessions in systemd scopes (the daemon runs under its unit).
    pub scopes: Option<Arc<Scopes>>,
    /// Test hook: fail every PTY spawn right after the child exists.
    pub fail_pty_after_spawn: bool,
    /// Test hook: fail every spawn right after the child exists (R18).
    pub fail_after_spawn: bool,
}

/// The `spawn` params after the wire layer parsed them.
#[derive(Debug, Clone, Default)]
pub struct SpawnRequest {
    pub command: String,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub pty: bool,
    pub rows: Option<u16>,
    pub cols: Option<u16>,
    pub task_id: Option<String>,
    pub session_key: Option<String>,
    pub owner: Option<String>,
    pub persist: bool,
    pub notify_on_complete: bool,
    pub watch_patterns: Vec<String>,
    pub timeout_s: Option<f64>,
    pub stdin: StdinMode,
    /// Wait up to this long for the session to exit or go quiet, and
    /// return its output so far (spawn-and-yield).
    pub yield_ms: Option<f64>,
    /// The character budget of returned output (see `budget`).
    pub budget: Option<usize>,
}

pub struct Registry {
    config: Config,
    logs_dir: PathBuf,
    default_cwd: PathBuf,
    procfs: ProcFs,
    env_policy: EnvPolicy,
    inherited_env: Vec<(String, String)>,
    shell: Vec<String>,
    reaper: Arc<Reaper>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Running sessions plus spawns in progress (the `max_running` gate).
    running: AtomicUsize,
    notifications: NotificationQueue,
    redactor: Redactor,
    checkpoint: Option<Checkpoint>,
    scopes: Option<Arc<Scopes>>,
    fail_pty_after_spawn: bool,
    /// Entries kept in the checkpoint though not tracked: dead sessions
    /// whose systemd scope could not be stopped (retried next start).
    retained: Mutex<Vec<CheckpointEntry>>,
    /// Set when the daemon is shutting down: spawns are refused.
    closing: std::sync::atomic::AtomicBool,
    fail_after_spawn: bool,
    me: Weak<Registry>,
}

impl Registry {
    pub fn new(options: RegistryOptions) -> std::io::Result<Arc<Registry>> {
        create_private_dir(&options.logs_dir)?;
        let shell = resolve_shell(&options.config.shell, &options.inherited_env);
        let inherited_env = options
            .inherited_env
            .into_iter()
            .filter(|(k, _)| !DAEMON_ONLY_VARS.contains(&k.as_str()))
            .collect();
        Ok(Arc::new_cyclic(|me| Registry {
            env_policy: EnvPolicy::new(&options.config.env_blocklist),
            redactor: Redactor {
                enabled: options.config.redact,
            },
            checkpoint: options.checkpoint.map(Checkpoint::new),
            scopes: options.scopes,
            fail_pty_after_spawn: options.fail_pty_after_spawn,
            retained: Mutex::new(Vec::new()),
            config: options.config,
            logs_dir: options.logs_dir,
            default_cwd: options.default_cwd,
            procfs: options.procfs,
            inherited_env,
            shell,
            reaper: Reaper::global(),
            sessions: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            notifications: NotificationQueue::default(),
            closing: std::sync::atomic::AtomicBool::new(false),
            fail_after_spawn: options.fail_after_spawn,
            me: me.clone(),
        }))
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn notifications(&self) -> &NotificationQueue {
        &self.notifications
    }

    /// Refuse new sessions from now on (the daemon is shutting down).
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    fn table(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn all_sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = self.table().values().cloned().collect();
        all.sort_by_key(|s| s.started_instant);
        all
    }

    /// (running, finished) session counts.
    pub fn counts(&self) -> (usize, usize) {
        let table = self.table();
        let running = table.values().filter(|s| s.is_running()).count();
        (running, table.len() - running)
    }

    /// Resolves a full id or a unique prefix (≥ 4 hex chars, `proc_` optional).
    pub fn find(&self, id: &str) -> Result<Arc<Session>, Error> {
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
            (None, _) => Err(Error::NotFound(format!("no session matches {id:?}"))),
            (Some(_), Some(_)) => Err(Error::NotFound(format!(
                "session id prefix {id:?} is ambiguous: give more characters"
            ))),
        }
    }

    // ----- spawn -----------------------------------------------------------

    pub async fn spawn(&self, req: SpawnRequest) -> Result<SpawnResult, Error> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::WrongState("procd is shutting down".into()));
        }
        let spec = self.validate(&req)?;
        // Reserve a running slot first so concurrent spawns cannot overshoot.
        let max = self.config.max_running;
        if self
            .running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            return Err(Error::LimitReached(format!(
                "max_running ({max}) sessions are running; kill one first"
            )));
        }
        let result = self.spawn_reserved(spec, &req.env).await;
        if result.is_err() {
            self.running.fetch_sub(1, Ordering::SeqCst);
        }
        let mut result = result?;
        let wait = yield_duration(req.yield_ms)?;
        if !wait.is_zero() {
            let s = self.find(&result.session_id)?;
            let y = self.yield_output(&s, 0, wait, req.budget).await?;
            result.status = y.status;
            result.output = Some(y.output);
            result.cursor = Some(y.cursor);
            result.original_chars = y.original_chars;
            result.exit = y.exit;
        }
        Ok(result)
    }

    /// Waits until the session exits, goes quiet after some output, or
    /// `wait` passes; then returns its output from `from` on.
    async fn yield_output(
        &self,
        s: &Session,
        from: u64,
        wait: Duration,
        budget: Option<usize>,
    ) -> Result<Yielded, Error> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut output_changed = s.output.subscribe();
            let mut state_changed = s.subscribe_state();
            if !s.is_running() {
                break;
            }
            let quiet_in = YIELD_QUIET.saturating_sub(s.output.quiet_for());
            let produced = s.output.end() > from;
            if produced && quiet_in.is_zero() {
                break;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let wake = if produced {
                deadline.min(now + quiet_in)
            } else {
                deadline
            };
            next_change(&mut output_changed, &mut state_changed, wake).await;
        }
        let r = self
            .read(&s.id, Some(from), Some(MAX_READ_BYTES), None, None)
            .await?;
        let fetch = format!("read from cursor {} to see all of it", r.cursor);
        let (output, original_chars) = crate::budget::apply(&r.data, budget, &fetch);
        let state = s.state();
        Ok(Yielded {
            output,
            cursor: r.next_cursor,
            original_chars,
            status: status_of(&state),
            exit: exit_info(&state),
        })
    }

    fn validate(&self, req: &SpawnRequest) -> Result<SessionSpec, Error> {
        let n = req.command.len();
        if n == 0 || n > MAX_COMMAND_BYTES {
            return Err(Error::InvalidParams(format!(
                "command: must be 1 to {MAX_COMMAND_BYTES} bytes, got {n}"
            )));
        }
        if req.command.contains('\0') {
            return Err(Error::InvalidParams("command: contains a NUL byte".into()));
        }
        let cwd = match &req.cwd {
            None => self.default_cwd.clone(),
            Some(c) if c.contains('\0') => {
                return Err(Error::InvalidParams("cwd: contains a NUL byte".into()))
            }
            Some(c) => self.default_cwd.join(c),
        };
        if !cwd.is_dir() {
            return Err(Error::InvalidParams(format!(
                "cwd: not an existing directory: {}",
                cwd.display()
            )));
        }
        if req.env.len() > MAX_ENV_VARS {
            return Err(Error::InvalidParams(format!(
                "env: at most {MAX_ENV_VARS} variables, got {}",
                req.env.len()
            )));
        }
        let env_bytes: usize = req.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        if env_bytes > MAX_ENV_BYTES {
            return Err(Error::InvalidParams(format!(
                "env: at most {MAX_ENV_BYTES} bytes in all, got {env_bytes}"
            )));
        }
        for (k, v) in &req.env {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return Err(Error::InvalidParams(format!(
                    "env: invalid variable name or value for {k:?}"
                )));
            }
        }
        let timeout = match req.timeout_s {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => {
                Some(Duration::from_secs_f64(t.min(MAX_TIMEOUT_S)))
            }
            Some(t) => {
                return Err(Error::InvalidParams(format!(
                    "timeout_s: must be a positive number of seconds, got {t}"
                )))
            }
        };
        // `owner` is checked against the leases by the daemon (procd-server).
        if req.watch_patterns.len() > MAX_WATCH_PATTERNS {
            return Err(Error::InvalidParams(format!(
                "watch_patterns: at most {MAX_WATCH_PATTERNS} patterns, got {}",
                req.watch_patterns.len()
            )));
        }
        if let Some(bad) = req
            .watch_patterns
            .iter()
            .find(|p| p.is_empty() || p.len() > MAX_WATCH_PATTERN_BYTES || p.contains('\n'))
        {
            return Err(Error::InvalidParams(format!(
                "watch_patterns: each pattern must be 1 to {MAX_WATCH_PATTERN_BYTES} bytes on one line, got {bad:?}"
            )));
        }
        let (rows, cols) = (req.rows.unwrap_or(30), req.cols.unwrap_or(120));
        for (name, v) in [("rows", rows), ("cols", cols)] {
            if !(1..=4096).contains(&v) {
                return Err(Error::InvalidParams(format!(
                    "{name}: must be 1 to 4096, got {v}"
                )));
            }
        }
        if req.pty && req.stdin == StdinMode::Null {
            return Err(Error::InvalidParams(
                "stdin: \"null\" is only for pipe sessions".into(),
            ));
        }
        Ok(SessionSpec {
            command: req.command.clone(),
            cwd,
            task_id: req.task_id.clone(),
            session_key: req.session_key.clone(),
            owner: req.owner.clone(),
            persist: req.persist,
            pty: req.pty,
            rows,
            cols,
            notify_on_complete: req.notify_on_complete,
            watch_patterns: req.watch_patterns.clone(),
            timeout,
            stdin: req.stdin,
        })
    }

    fn new_session_id(&self) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        loop {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos(),
            );
            let id = format!("proc_{:012x}", h.finish() & 0xffff_ffff_ffff);
            if !self.table().contains_key(&id) {
                return id;
            }
        }
    }

    async fn spawn_reserved(
        &self,
        spec: SessionSpec,
        caller_env: &BTreeMap<String, String>,
    ) -> Result<SpawnResult, Error> {
        let id = self.new_session_id();
        let spawn_err = |what: &str, e: std::io::Error| Error::SpawnFailed(format!("{what}: {e}"));
        let output = Arc::new(
            OutputStore::create(
                &self.logs_dir.join(format!("{id}.log")),
                self.config.max_log_bytes,
                self.config.memory_tail_bytes,
            )
            .map_err(|e| spawn_err("cannot create the session log", e))?,
        );
        let env = self
            .env_policy
            .build(self.inherited_env.iter().cloned(), caller_env, &id);
        let script = format!("set +m; {}", rewrite_compound_background(&spec.command));

        let mut spec = spec;
        let mut unit = match &self.scopes {
            Some(scopes) if scopes.available().await => Some(unit_name(&id)),
            _ => None,
        };
        let started = match self.start_child(&spec, &env, &script, unit.as_deref()) {
            Err(e) if spec.pty => {
                // The PTY spawn failed, perhaps after its scope was created:
                // stop that scope before a pipe spawn under a distinct unit,
                // and never run the command twice.
                if let (Some(u), Some(scopes)) = (&unit, &self.scopes) {
                    if !scopes.stop(u).await {
                        output.delete_log();
                        return Err(Error::SpawnFailed(format!(
                            "PTY spawn failed ({e}) and its scope {u} could not be reaped; not retrying without a PTY"
                        )));
                    }
                }
                tracing::warn!(session = %id, %e, "PTY spawn failed; falling back to pipes");
                spec.pty = false;
                unit = unit.map(|u| format!("{u}-pipe-fallback"));
                self.start_child(&spec, &env, &script, unit.as_deref())
            }
            other => other,
        };
        let started = match started {
            Ok(s) => s,
            Err(e) => {
                output.delete_log();
                return Err(spawn_err(&format!("cannot start {:?}", self.shell[0]), e));
            }
        };
        let (pid, identity, exit_rx) = (started.pid, started.identity, started.exit_rx);

        // From here on the child exists: any failure must kill it first.
        let setup = (|| {
            if self.fail_after_spawn {
                return Err(std::io::Error::other("injected failure after spawn"));
            }
            Ok::<_, std::io::Error>(started.io)
        })();
        let io = match setup {
            Ok(io) => io,
            Err(e) => {
                let tree = kill::TreeSpec {
                    root: identity,
                    pgid: pid,
                    marker: format!("PROCD_SESSION_ID={id}").into_bytes(),
                    root_pinned: true,
                };
                // Wait for the kill so that no process outlives the error.
                kill::terminate(&tree, &self.procfs, true, libc::SIGKILL, Duration::ZERO).await;
                if let (Some(u), Some(scopes)) = (&unit, &self.scopes) {
                    scopes.stop(u).await;
                }
                output.delete_log();
                return Err(spawn_err(
                    "session setup failed (the process was killed)",
                    e,
                ));
            }
        };
        let (reader, writer) = match io {
            ChildIo::Pipe { output, stdin } => {
                (OutputReader::Pipe(output), stdin.map(StdinSink::Pipe))
            }
            ChildIo::Pty {
                reader,
                writer,
                master,
            } => (
                OutputReader::Pty(PtyReader(reader)),
                Some(StdinSink::Pty(writer, master)),
            ),
        };

        let stdin_tx = writer.map(|sink| {
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(session::stdin_writer(sink, rx));
            tx
        });
        let mut session = Session::new(id.clone(), spec, identity, output, stdin_tx);
        session.systemd_unit = unit;
        let session = Arc::new(session);
        self.table().insert(id.clone(), session.clone());
        // Make room: the new session counts towards max_sessions.
        self.prune();
        self.notifications.publish(serde_json::json!({
            "type": "started",
            "session_id": id,
            "pid": pid,
            "command": self.redactor.command(&session.spec.command),
            "task_id": session.spec.task_id,
            "session_key": session.spec.session_key,
            "pty": session.spec.pty,
            "started_at": rfc3339(session.started_at),
        }));

        let me = self.me.clone();
        let noise = NoiseFilter::new(&self.shell[0]);
        let final_drain = Duration::from_millis(self.config.final_drain_ms);
        let grace = Duration::from_secs_f64(self.config.kill_grace_s);
        let on_timeout = {
            let me = me.clone();
            move |s: Arc<Session>| {
                if let Some(reg) = me.upgrade() {
                    tokio::spawn(async move {
                        reg.terminate(
                            &s,
                            libc::SIGTERM,
                            grace,
                            CompletionReason::Timeout,
                            "timeout",
                        )
                        .await;
                    });
                }
            }
        };
        let watch = WatchMatcher::new(
            &session.spec.watch_patterns,
            Duration::from_secs_f64(self.config.watch_min_interval_s),
            self.config.watch_max_deliveries,
        )
        .map(|matcher| {
            let me = me.clone();
            let watched = Arc::downgrade(&session);
            let deliver: Box<dyn FnMut(WatchOutcome) + Send> = Box::new(move |outcome| {
                if let (Some(reg), Some(s)) = (me.upgrade(), watched.upgrade()) {
                    reg.deliver_watch(&s, outcome);
                }
            });
            session::Watch { matcher, deliver }
        });
        let supervised = session.clone();
        let checkpointed = self.write_checkpoint().await;
        tokio::spawn(async move {
            let record = session::supervise(
                supervised.clone(),
                reader,
                exit_rx,
                noise,
                final_drain,
                on_timeout,
                watch,
            )
            .await;
            let reg = me.upgrade();
            if let Some(reg) = &reg {
                reg.on_exit(&supervised, &record);
            }
            supervised.mark_exited(record);
            if let Some(reg) = reg {
                reg.checkpoint_soon();
            }
        });

        if let Err(e) = checkpointed {
            // The session cannot be recovered after a crash: refuse it
            // rather than run something procd could lose track of.
            self.terminate(
                &session,
                libc::SIGKILL,
                Duration::ZERO,
                CompletionReason::FailedStart,
                "spawn",
            )
            .await;
            self.table().remove(&id);
            session.output.delete_log();
            return Err(Error::SpawnFailed(format!(
                "cannot write the checkpoint (the process was killed): {e}"
            )));
        }
        Ok(SpawnResult {
            session_id: id,
            pid,
            pty: session.spec.pty,
            status: SessionStatus::Running,
            command: self.redactor.command(&session.spec.command).into_owned(),
            started_at: rfc3339(session.started_at),
            output: None,
            cursor: None,
            original_chars: None,
            exit: None,
        })
    }

    /// Forks the session's root: `setsid`, stdio on pipes or on a new PTY
    /// (then the PTY is its controlling terminal). Runs under the reaper's
    /// lock, so the start time is read before the child can be reaped.
    fn start_child(
        &self,
        spec: &SessionSpec,
        env: &BTreeMap<String, String>,
        script: &str,
        unit: Option<&str>,
    ) -> std::io::Result<StartedChild> {
        let mut argv: Vec<String> = self.shell.clone();
        argv.push(script.to_string());
        if let (Some(unit), Some(scopes)) = (unit, &self.scopes) {
            argv = scopes.wrap(unit, &argv);
        }
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env)
            .current_dir(&spec.cwd);
        let procfs = &self.procfs;
        let inspect = |pid: u32| procfs.stat(pid as i32).map(|s| s.start_time).unwrap_or(0);
        let (child, start_time, exit_rx, io) = if spec.pty {
            use std::os::fd::AsFd;
            let (pty, pts) = pty_process::open().map_err(std::io::Error::other)?;
            pty.resize(pty_process::Size::new(spec.rows, spec.cols))
                .map_err(std::io::Error::other)?;
            let slave = pts.as_fd();
            cmd.stdin(slave.try_clone_to_owned()?)
                .stdout(slave.try_clone_to_owned()?)
                .stderr(slave.try_clone_to_owned()?);
            if !env.contains_key("TERM") {
                cmd.env("TERM", "xterm-256color");
            }
            for pager in ["PAGER", "GIT_PAGER"] {
                if !env.contains_key(pager) {
                    cmd.env(pager, "cat");
                }
            }
            // SAFETY: runs in the forked child before exec, after std has
            // put the PTY slave on fds 0-2; setsid(2) and ioctl(2) are
            // async-signal-safe and touch no memory shared with the parent.
            unsafe {
                cmd.pre_exec(|| {
                    nix::unistd::setsid().map_err(std::io::Error::from)?;
                    if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            // Duplicated before the fork, so nothing can fail after it.
            let master = pty.as_fd().try_clone_to_owned()?;
            let (child, start_time, exit_rx) = self.reaper.spawn(&mut cmd, inspect)?;
            // Only the child may hold the slave: EIO then marks the end.
            drop(cmd);
            drop(pts);
            if self.fail_pty_after_spawn {
                let root = ProcessIdentity {
                    pid: child.id() as i32,
                    start_time,
                };
                if let Some(fd) = root.open(procfs) {
                    let _ = fd.send_signal(libc::SIGKILL);
                }
                return Err(std::io::Error::other("injected PTY failure after spawn"));
            }
            let (reader, writer) = pty.into_split();
            (
                child,
                start_time,
                exit_rx,
                ChildIo::Pty {
                    reader,
                    writer,
                    master,
                },
            )
        } else {
            let (out_read, out_write) = std::io::pipe()?;
            // A larger pipe lets a chatty child write bigger bursts between
            // our reads (fewer wake-ups); it is only a hint.
            let _ = nix::fcntl::fcntl(&out_read, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
            let err_write = out_write.try_clone()?;
            cmd.stdout(out_write).stderr(err_write);
            let stdin_write = match spec.stdin {
                StdinMode::Pipe => {
                    let (r, w) = std::io::pipe()?;
                    cmd.stdin(r);
                    Some(w)
                }
                StdinMode::Null => {
                    cmd.stdin(Stdio::null());
                    None
                }
            };
            // SAFETY: runs in the forked child before exec and calls only
            // setsid(2), which is async-signal-safe; it touches no memory
            // shared with the parent and allocates nothing.
            unsafe {
                cmd.pre_exec(|| {
                    nix::unistd::setsid()
                        .map(drop)
                        .map_err(std::io::Error::from)
                });
            }
            let (child, start_time, exit_rx) = self.reaper.spawn(&mut cmd, inspect)?;
            // Our copies of the child's pipe ends must close, or EOF never comes.
            drop(cmd);
            let io = (|| {
                Ok::<_, std::io::Error>(ChildIo::Pipe {
                    output: tokio::net::unix::pipe::Receiver::from_owned_fd(out_read.into())?,
                    stdin: match stdin_write {
                        Some(w) => Some(tokio::net::unix::pipe::Sender::from_owned_fd(w.into())?),
                        None => None,
                    },
                })
            })();
            match io {
                Ok(io) => (child, start_time, exit_rx, io),
                Err(e) => {
                    // The child exists but cannot be supervised: end it.
                    let root = ProcessIdentity {
                        pid: child.id() as i32,
                        start_time,
                    };
                    if let Some(fd) = root.open(procfs) {
                        let _ = fd.send_signal(libc::SIGKILL);
                    }
                    return Err(e);
                }
            }
        };
        let pid = child.id() as i32;
        Ok(StartedChild {
            pid,
            identity: ProcessIdentity { pid, start_time },
            exit_rx,
            io,
        })
    }

    /// Queues a watch event; when the delivery cap is reached, watching
    /// stops and the session is switched to notify on completion instead.
    fn deliver_watch(&self, s: &Session, outcome: WatchOutcome) {
        let mut fields = BTreeMap::new();
        let (kind, text) = match outcome {
            WatchOutcome::Match {
                pattern,
                output,
                suppressed,
            } => {
                let output = self
                    .redactor
                    .output(&output, is_env_dump(&s.spec.command))
                    .into_owned();
                let text = format!(
                    "Background process {} printed a line matching {pattern:?}{}: {}",
                    s.id,
                    if suppressed > 0 {
                        format!(" ({suppressed} more matches suppressed)")
                    } else {
                        String::new()
                    },
                    first_chars(&output, 300)
                );
                fields.insert("pattern".into(), serde_json::json!(pattern));
                fields.insert("output".into(), serde_json::json!(output));
                fields.insert("suppressed".into(), serde_json::json!(suppressed));
                ("watch_match", text)
            }
            WatchOutcome::Disabled { deliveries } => {
                s.enable_notify_on_complete();
                fields.insert("deliveries".into(), serde_json::json!(deliveries));
                let text = format!(
                    "Background process {}: watch patterns matched {deliveries} times, so watching stopped; you will be notified when it completes.",
                    s.id
                );
                ("watch_disabled", text)
            }
        };
        self.notifications.push(Event {
            kind: kind.into(),
            session_id: s.id.clone(),
            session_key: s.spec.session_key.clone(),
            task_id: s.spec.task_id.clone(),
            command: self.redactor.command(&s.spec.command).into_owned(),
            text,
            fields,
        });
    }

    /// Bookkeeping when a session ends, before its state flips to exited
    /// (so a `wait` that returns sees the completion event already queued).
    fn on_exit(&self, session: &Session, record: &ExitRecord) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        if session.notify_on_complete() {
            self.notifications
                .push(completion_event(&self.redactor, session, record));
        }
        self.notifications.publish(serde_json::json!({
            "type": "exited",
            "session_id": session.id,
            "command": self.redactor.command(&session.spec.command),
            "task_id": session.spec.task_id,
            "session_key": session.spec.session_key,
            "exit_code": record.exit_code,
            "signal": record.signal.map(signal_name),
            "completion_reason": record.reason,
            "termination_source": record.source,
            "exited_at": rfc3339(record.exited_at),
        }));
    }

    // ----- checkpoint and recovery ----------------------------------------------

    /// Records an exit in the checkpoint (called after the state flipped,
    /// so the snapshot no longer lists the session).
    fn checkpoint_soon(&self) {
        if let Some(me) = self.me.upgrade() {
            tokio::spawn(async move {
                if let Err(err) = me.write_checkpoint().await {
                    tracing::warn!(%err, "cannot write the checkpoint");
                }
            });
        }
    }

    /// Writes `procs.json`: every running session (command redacted), plus
    /// retained entries whose scope still needs stopping.
    pub async fn write_checkpoint(&self) -> std::io::Result<()> {
        let Some(checkpoint) = &self.checkpoint else {
            return Ok(());
        };
        checkpoint.write(|| self.checkpoint_entries()).await
    }

    fn checkpoint_entries(&self) -> Vec<CheckpointEntry> {
        let mut entries: Vec<CheckpointEntry> = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .map(|s| CheckpointEntry {
                session_id: s.id.clone(),
                command: self.redactor.command(&s.spec.command).into_owned(),
                pid: s.pid(),
                start_time: s.identity.start_time,
                identity: crate::identity::identity_string(s.pid(), s.identity.start_time),
                pgid: s.pid(),
                cwd: s.spec.cwd.display().to_string(),
                started_at: rfc3339(s.started_at),
                task_id: s.spec.task_id.clone(),
                session_key: s.spec.session_key.clone(),
                owner: s.spec.owner.clone(),
                persist: s.spec.persist,
                pty: s.spec.pty,
                notify_on_complete: s.notify_on_complete(),
                watch_patterns: s.spec.watch_patterns.clone(),
                systemd_unit: s.systemd_unit.clone(),
                log_path: s.output.path().display().to_string(),
            })
            .collect();
        entries.extend(
            self.retained
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        entries
    }

    /// Re-adopts the sessions of a previous daemon from the checkpoint:
    /// a pid still alive with the recorded start time (and, where readable,
    /// this session's marker) becomes a detached session; anything else is
    /// dropped. Then the checkpoint is rewritten to exactly what is tracked.
    /// Returns (recovered, dropped).
    pub async fn recover(&self) -> std::io::Result<(usize, usize)> {
        let Some(checkpoint) = &self.checkpoint else {
            return Ok((0, 0));
        };
        let path = checkpoint.path().to_path_buf();
        let (entries, skipped) = tokio::task::spawn_blocking(move || Checkpoint::read(&path))
            .await
            .map_err(std::io::Error::other)?;
        let mut recovered = 0;
        let mut dropped = skipped;
        for entry in entries {
            match self.adopt(&entry).await {
                Some(()) => recovered += 1,
                None => {
                    dropped += 1;
                    // A dead session's scope is stopped; if that fails the
                    // entry stays in the checkpoint to be retried next start.
                    if let Some(unit) = &entry.systemd_unit {
                        let stopped = match &self.scopes {
                            Some(scopes) => scopes.stop(unit).await,
                            None => {
                                Scopes::new(self.config.worker_memory_max_mb)
                                    .stop(unit)
                                    .await
                            }
                        };
                        if !stopped {
                            self.retained
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(entry);
                        }
                    }
                }
            }
        }
        self.write_checkpoint().await?;
        Ok((recovered, dropped))
    }

    /// Adopts one checkpoint entry if its process is still the same one.
    async fn adopt(&self, e: &CheckpointEntry) -> Option<()> {
        let hex = e.session_id.strip_prefix("proc_")?;
        if hex.len() != 12 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let identity = ProcessIdentity {
            pid: e.pid,
            start_time: e.start_time,
        };
        let pidfd = identity.open(&self.procfs)?;
        if pidfd.has_exited() {
            return None;
        }
        // Where the environment is readable it must carry this session's
        // marker: a process that merely shares pid and start time with a
        // record from another system (a restored snapshot) is not ours.
        let marker = format!("PROCD_SESSION_ID={}", e.session_id);
        let environ = self.procfs.root().join(e.pid.to_string()).join("environ");
        if std::fs::metadata(&environ).is_ok()
            && std::fs::read(&environ).is_ok_and(|env| !env.is_empty())
            && !self.procfs.environ_has(e.pid, marker.as_bytes())
        {
            return None;
        }
        let log_path = PathBuf::from(&e.log_path);
        let (max, tail) = (self.config.max_log_bytes, self.config.memory_tail_bytes);
        let lp = log_path.clone();
        let output = tokio::task::spawn_blocking(move || {
            OutputStore::open_existing(&lp, max, tail)
                .or_else(|_| OutputStore::create(&lp, max, tail))
        })
        .await
        .ok()?
        .ok()?;
        let spec = SessionSpec {
            command: e.command.clone(),
            cwd: PathBuf::from(&e.cwd),
            task_id: e.task_id.clone(),
            session_key: e.session_key.clone(),
            owner: e.owner.clone(),
            persist: e.persist,
            pty: e.pty,
            rows: 30,
            cols: 120,
            notify_on_complete: e.notify_on_complete,
            watch_patterns: e.watch_patterns.clone(),
            timeout: None,
            stdin: StdinMode::Null,
        };
        let started_at = parse_rfc3339(&e.started_at).unwrap_or_else(std::time::SystemTime::now);
        let mut session = Session::recovered(
            e.session_id.clone(),
            spec,
            identity,
            Arc::new(output),
            started_at,
        );
        session.systemd_unit = e.systemd_unit.clone();
        let session = Arc::new(session);
        self.running.fetch_add(1, Ordering::SeqCst);
        self.table().insert(session.id.clone(), session.clone());
        let me = self.me.clone();
        tokio::spawn(async move {
            let record = session::supervise_detached(session.clone(), pidfd).await;
            let reg = me.upgrade();
            if let Some(reg) = &reg {
                reg.on_exit(&session, &record);
            }
            session.mark_exited(record);
            if let Some(reg) = reg {
                reg.checkpoint_soon();
            }
        });
        Some(())
    }

    // ----- reading -------------------------------------------------------------

    pub fn poll(&self, id: &str, budget: Option<usize>) -> Result<PollResult, Error> {
        let s = self.find(id)?;
        let mut r = poll_result(&self.redactor, &s);
        let (text, original) = crate::budget::apply(
            &r.output_preview,
            budget,
            "use log (offset/limit) or read with a cursor for all of it",
        );
        r.output_preview = text;
        r.original_chars = original;
        Ok(r)
    }

    pub async fn read(
        &self,
        id: &str,
        cursor: Option<u64>,
        max_bytes: Option<u64>,
        wait_ms: Option<f64>,
        budget: Option<usize>,
    ) -> Result<ReadResult, Error> {
        let s = self.find(id)?;
        let cursor = cursor.unwrap_or(0);
        let max_bytes = max_bytes
            .unwrap_or(DEFAULT_READ_BYTES)
            .clamp(1, MAX_READ_BYTES);
        let wait = duration_param(
            "wait_ms",
            wait_ms.unwrap_or(0.0) / 1000.0,
            MAX_READ_WAIT_MS / 1000.0,
        )?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Subscribe before looking, so no change between the two is lost.
            let mut output_changed = s.output.subscribe();
            let mut state_changed = s.subscribe_state();
            let state = s.state();
            let window = s
                .output
                .window(cursor, max_bytes)
                .await
                .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
            let exited = state.exit().is_some();
            let eof = exited && window.end() >= s.output.end();
            let now = tokio::time::Instant::now();
            if !window.bytes.is_empty() || eof || now >= deadline {
                let text = String::from_utf8_lossy(&window.bytes);
                let data = self.redactor.output(&text, is_env_dump(&s.spec.command));
                let fetch = format!(
                    "read from cursor {} with a smaller max_bytes to see all of it",
                    window.start
                );
                let (data, original_chars) = crate::budget::apply(&data, budget, &fetch);
                return Ok(ReadResult {
                    original_chars,
                    data,
                    cursor: window.start,
                    next_cursor: window.end(),
                    eof,
                    status: status_of(&state),
                    exit_code: state.exit().and_then(|e| e.exit_code),
                    dropped: window.dropped,
                });
            }
            let wake = if window.partial_pending {
                deadline.min(
                    now + s
                        .output
                        .partial_line_ready_in()
                        .max(Duration::from_millis(1)),
                )
            } else {
                deadline
            };
            next_change(&mut output_changed, &mut state_changed, wake).await;
        }
    }

    pub async fn log(
        &self,
        id: &str,
        offset: Option<u64>,
        limit: Option<u64>,
        budget: Option<usize>,
    ) -> Result<LogResult, Error> {
        let s = self.find(id)?;
        let limit = limit.unwrap_or(200).min(100_000);
        let (lines, first, total) = s
            .output
            .lines(offset, limit)
            .await
            .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
        let n = lines.len() as u64;
        let showing = if n == 0 {
            format!("0 lines (of {total})")
        } else {
            format!("{n} lines ({}-{} of {total})", first, first + n - 1)
        };
        let mut output = strip_ansi(&lines.join("\n"));
        if n > 0 {
            output.push('\n');
        }
        let output = self.redactor.output(&output, is_env_dump(&s.spec.command));
        let (output, original_chars) = crate::budget::apply(
            &output,
            budget,
            &format!("use log with offset {first} and a smaller limit to see all of it"),
        );
        Ok(LogResult {
            original_chars,
            session_id: s.id.clone(),
            command: self.redactor.command(&s.spec.command).into_owned(),
            status: status_of(&s.state()),
            output,
            total_lines: total,
            showing,
        })
    }

    pub async fn wait(
        &self,
        id: &str,
        timeout_s: Option<f64>,
        budget: Option<usize>,
    ) -> Result<WaitResult, Error> {
        let s = self.find(id)?;
        let timeout = match timeout_s {
            None => Duration::from_secs_f64(self.config.max_wait_s),
            Some(t) if t.is_finite() && t > 0.0 => {
                Duration::from_secs_f64(t.min(self.config.max_wait_s))
            }
            Some(t) => {
                return Err(Error::InvalidParams(format!(
                    "timeout_s: must be greater than 0, got {t}"
                )))
            }
        };
        let exited = s.wait_exited(timeout).await;
        let poll = poll_result(&self.redactor, &s);
        let tail = s.output.tail_text(WAIT_OUTPUT_CHARS);
        let output = self.redactor.output(&tail, is_env_dump(&s.spec.command));
        let (output, original_chars) = crate::budget::apply(
            &output,
            budget,
            "use log (offset/limit) or read with a cursor for all of it",
        );
        Ok(WaitResult {
            session_id: poll.session_id,
            command: poll.command,
            status: if exited.is_some() {
                WaitStatus::Exited
            } else {
                WaitStatus::Timeout
            },
            pid: poll.pid,
            started_at: poll.started_at,
            uptime_seconds: poll.uptime_seconds,
            output_preview: poll.output_preview,
            output,
            original_chars,
            process_running: exited.is_none().then_some(true),
            exit: poll.exit,
        })
    }

    // ----- killing ---------------------------------------------------------

    /// Ends one session's tree; the single path every kill takes.
    async fn terminate(
        &self,
        s: &Arc<Session>,
        signal: i32,
        grace: Duration,
        reason: CompletionReason,
        source: &str,
    ) -> KillResult {
        if !s.is_running() {
            // Leftovers still in its group or carrying its marker.
            let out = kill::terminate(&s.tree(), &self.procfs, false, signal, grace).await;
            self.stop_scope(s).await;
            let state = s.state();
            return KillResult {
                session_id: s.id.clone(),
                status: KillStatus::AlreadyExited,
                orphans_killed: (out.signalled - out.survivors.len().min(out.signalled)) as u32,
                error: None,
                survivors: out.survivors,
                process_running: None,
                exit: exit_info(&state),
            };
        }
        s.request_termination(reason, source);
        let out = kill::terminate(&s.tree(), &self.procfs, true, signal, grace).await;
        if out.survivors.is_empty() {
            self.stop_scope(s).await;
        }
        // The root is dead or being reaped: give the supervisor its drain.
        let settle = Duration::from_millis(self.config.final_drain_ms) + Duration::from_secs(2);
        let exited = if out.survivors.contains(&s.pid()) {
            None
        } else {
            s.wait_exited(settle).await
        };
        let state = s.state();
        if !out.survivors.is_empty() || exited.is_none() {
            if state.exit().is_none() {
                s.clear_termination();
            }
            let mut survivors = out.survivors;
            if exited.is_none() && !survivors.contains(&s.pid()) {
                survivors.push(s.pid());
            }
            return KillResult {
                session_id: s.id.clone(),
                status: KillStatus::Error,
                orphans_killed: 0,
                error: Some(format!(
                    "Kill incomplete: {} process(es) still alive",
                    survivors.len()
                )),
                survivors,
                process_running: Some(true),
                exit: exit_info(&state),
            };
        }
        KillResult {
            session_id: s.id.clone(),
            status: KillStatus::Killed,
            orphans_killed: 0,
            error: None,
            survivors: Vec::new(),
            process_running: None,
            exit: exit_info(&state),
        }
    }

    /// Stops the session's systemd scope, if it has one.
    async fn stop_scope(&self, s: &Session) -> bool {
        match (&s.systemd_unit, &self.scopes) {
            (Some(unit), Some(scopes)) => scopes.stop(unit).await,
            _ => true,
        }
    }

    fn grace(&self, grace_s: Option<f64>) -> Duration {
        let g = grace_s.unwrap_or(self.config.kill_grace_s);
        let g = if g.is_finite() {
            g.clamp(0.0, MAX_GRACE_S)
        } else {
            0.0
        };
        Duration::from_secs_f64(g)
    }

    pub async fn kill(
        &self,
        id: &str,
        signal: Option<SignalSpec>,
        grace_s: Option<f64>,
    ) -> Result<KillResult, Error> {
        let s = self.find(id)?;
        let signal = match signal {
            None => libc::SIGTERM,
            Some(spec) => parse_signal(&spec)
                .ok_or_else(|| Error::InvalidParams(format!("signal: unknown signal {spec:?}")))?,
        };
        let grace = self.grace(grace_s);
        Ok(self
            .terminate(&s, signal, grace, CompletionReason::Killed, "kill")
            .await)
    }

    pub async fn signal(&self, id: &str, signal: SignalSpec) -> Result<SignalResult, Error> {
        let s = self.find(id)?;
        let sig = parse_signal(&signal)
            .ok_or_else(|| Error::InvalidParams(format!("signal: unknown signal {signal:?}")))?;
        if !s.is_running() {
            return Err(Error::WrongState(format!(
                "session {} has already exited",
                s.id
            )));
        }
        let delivered = kill::signal_group(&s.tree(), &self.procfs, sig).await as u32;
        Ok(SignalResult {
            session_id: s.id.clone(),
            status: "ok".into(),
            signal: signal_name(sig),
            delivered,
        })
    }

    async fn kill_many(&self, victims: Vec<Arc<Session>>, source: &str) -> u32 {
        let grace = self.grace(None);
        let kills = victims
            .iter()
            .map(|s| self.terminate(s, libc::SIGTERM, grace, CompletionReason::Killed, source));
        futures::future::join_all(kills)
            .await
            .into_iter()
            .filter(|r| r.status == KillStatus::Killed)
            .count() as u32
    }

    pub async fn kill_all(
        &self,
        task_id: Option<&str>,
        exclude_ids: &[String],
        source: Option<&str>,
    ) -> u32 {
        let exclude: HashSet<String> = exclude_ids.iter().map(|i| normalize_id(i)).collect();
        let victims = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .filter(|s| task_id.is_none_or(|t| s.spec.task_id.as_deref() == Some(t)))
            .filter(|s| !exclude.contains(&s.id))
            .collect();
        self.kill_many(victims, source.unwrap_or("kill_all")).await
    }

    pub async fn kill_started_since(
        &self,
        task_id: &str,
        baseline: &[String],
        source: Option<&str>,
    ) -> u32 {
        let baseline: HashSet<String> = baseline.iter().map(|i| normalize_id(i)).collect();
        let victims = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running() && s.spec.task_id.as_deref() == Some(task_id))
            .filter(|s| !baseline.contains(&s.id))
            .collect();
        self.kill_many(victims, source.unwrap_or("kill_started_since"))
            .await
    }

    /// Whether a running session has an owner (whose lease must be watched).
    pub fn has_owned_sessions(&self) -> bool {
        self.table()
            .values()
            .any(|s| s.spec.owner.is_some() && s.is_running())
    }

    /// Ends the non-persistent sessions of owners whose lease is gone.
    pub async fn kill_orphaned_owners(&self, live_owners: &HashSet<String>) -> u32 {
        let victims = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running() && !s.spec.persist)
            .filter(|s| {
                s.spec
                    .owner
                    .as_ref()
                    .is_some_and(|o| !live_owners.contains(o))
            })
            .collect();
        self.kill_many(victims, "owner_released").await
    }

    /// Terminates every running session (daemon shutdown).
    pub async fn shutdown_all(&self) -> u32 {
        let victims = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .collect();
        self.kill_many(victims, "shutdown").await
    }

    // ----- stdin -----------------------------------------------------------

    pub async fn write_stdin(
        &self,
        id: &str,
        data: &str,
        submit: bool,
        yield_ms: Option<f64>,
        budget: Option<usize>,
    ) -> Result<StdinResult, Error> {
        let wait = yield_duration(yield_ms)?;
        let s = self.find(id)?;
        let from = s.output.end();
        let mut result = self.write_stdin_now(&s, data, submit).await?;
        if !wait.is_zero() && result.status == StdinStatus::Ok {
            let y = self.yield_output(&s, from, wait, budget).await?;
            result.output = Some(y.output);
            result.cursor = Some(y.cursor);
            result.original_chars = y.original_chars;
            result.session_status = Some(y.status);
            result.exit = y.exit;
        }
        Ok(result)
    }

    async fn write_stdin_now(
        &self,
        s: &Session,
        data: &str,
        submit: bool,
    ) -> Result<StdinResult, Error> {
        if !s.is_running() {
            return Ok(already_exited());
        }
        if s.is_detached() {
            return Err(Error::WrongState(format!(
                "session {} was recovered after a procd restart; its stdin is not available",
                s.id
            )));
        }
        let tx = self.stdin_of(s)?;
        let mut bytes = data.as_bytes().to_vec();
        if submit {
            bytes.push(if s.spec.pty { b'\r' } else { b'\n' });
        }
        let n = bytes.len() as u64;
        let (reply, done) = oneshot::channel();
        if tx.send(StdinOp::Write(bytes, reply)).await.is_err() {
            return Ok(already_exited());
        }
        match done.await {
            Ok(Ok(())) => Ok(stdin_result(StdinStatus::Ok, n, None)),
            Ok(Err(e)) if !s.is_running() || e.kind() == std::io::ErrorKind::BrokenPipe => {
                if s.is_running() {
                    Err(Error::WrongState(format!(
                        "session {} is no longer reading its stdin",
                        s.id
                    )))
                } else {
                    Ok(already_exited())
                }
            }
            Ok(Err(e)) => Err(Error::Internal(format!("writing to stdin failed: {e}"))),
            Err(_) => Ok(already_exited()),
        }
    }

    /// The session's stdin writer, or -32002 when it has none or is closed.
    fn stdin_of(&self, s: &Session) -> Result<mpsc::Sender<StdinOp>, Error> {
        if s.spec.stdin == StdinMode::Null {
            return Err(Error::WrongState(format!(
                "session {} was spawned with stdin \"null\"",
                s.id
            )));
        }
        match s.stdin_sender() {
            Some(tx) if !s.stdin_closed() => Ok(tx),
            _ => Err(Error::WrongState(format!(
                "stdin of session {} is closed",
                s.id
            ))),
        }
    }

    pub async fn close_stdin(&self, id: &str) -> Result<StdinResult, Error> {
        let s = self.find(id)?;
        if !s.is_running() {
            return Ok(already_exited());
        }
        let tx = self.stdin_of(&s)?;
        if !s.mark_stdin_closed() {
            return Err(Error::WrongState(format!(
                "stdin of session {} is already closed",
                s.id
            )));
        }
        if !s.spec.pty {
            // The pipe's writer ends after the close; a PTY keeps its writer
            // (resize goes through it).
            s.take_stdin();
        }
        // Queued writes go first.
        let (reply, done) = oneshot::channel();
        if tx.send(StdinOp::Close(reply)).await.is_err() {
            return Ok(already_exited());
        }
        match done.await {
            Ok(Ok(message)) => Ok(stdin_result(StdinStatus::Ok, 0, Some(message))),
            Ok(Err(e)) => Err(Error::Internal(format!("closing stdin failed: {e}"))),
            Err(_) => Ok(already_exited()),
        }
    }

    pub async fn resize(&self, id: &str, rows: u16, cols: u16) -> Result<(), Error> {
        let s = self.find(id)?;
        if !s.spec.pty {
            return Err(Error::WrongState(format!(
                "session {} is not a PTY session",
                s.id
            )));
        }
        for (name, v) in [("rows", rows), ("cols", cols)] {
            if !(1..=4096).contains(&v) {
                return Err(Error::InvalidParams(format!(
                    "{name}: must be 1 to 4096, got {v}"
                )));
            }
        }
        let Some(tx) = s.stdin_sender().filter(|_| s.is_running()) else {
            return Err(Error::WrongState(format!("session {} has exited", s.id)));
        };
        let (reply, done) = oneshot::channel();
        if tx.send(StdinOp::Resize(rows, cols, reply)).await.is_err() {
            return Err(Error::WrongState(format!("session {} has exited", s.id)));
        }
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Internal(format!("resize failed: {e}"))),
            Err(_) => Err(Error::WrongState(format!("session {} has exited", s.id))),
        }
    }

    // ----- listing -----------------------------------------------------------

    pub fn list(
        &self,
        task_id: Option<&str>,
        session_key: Option<&str>,
        filter: ListFilter,
    ) -> ListResult {
        let processes = self
            .all_sessions()
            .into_iter()
            .filter_map(|s| {
                let own_task = task_id.is_none_or(|t| s.spec.task_id.as_deref() == Some(t));
                let same_key =
                    session_key.is_some_and(|k| s.spec.session_key.as_deref() == Some(k));
                let (shown, scoped) = match (task_id, session_key) {
                    (None, None) => (true, false),
                    (None, Some(_)) => (same_key, false),
                    (Some(_), None) => (own_task, false),
                    (Some(_), Some(_)) => (own_task || same_key, !own_task && same_key),
                };
                let running = s.is_running();
                let wanted = match filter {
                    ListFilter::All => true,
                    ListFilter::Running => running,
                    ListFilter::Exited => !running,
                };
                (shown && wanted).then(|| process_entry(&self.redactor, &s, scoped))
            })
            .collect();
        ListResult { processes }
    }

    pub fn has_active(
        &self,
        task_id: Option<&str>,
        session_key: Option<&str>,
        max_active_age_s: Option<f64>,
    ) -> HasActiveResult {
        let max_age = max_active_age_s
            .filter(|a| a.is_finite() && *a >= 0.0)
            .map(Duration::from_secs_f64);
        let count = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .filter(|s| match (task_id, session_key) {
                (None, None) => true,
                (t, k) => {
                    t.is_some_and(|t| s.spec.task_id.as_deref() == Some(t))
                        || k.is_some_and(|k| s.spec.session_key.as_deref() == Some(k))
                }
            })
            .filter(|s| max_age.is_none_or(|age| s.started_instant.elapsed() <= age))
            .count() as u32;
        HasActiveResult {
            active: count > 0,
            count,
        }
    }

    pub fn snapshot_running(&self, task_id: &str) -> SnapshotResult {
        SnapshotResult {
            session_ids: self
                .all_sessions()
                .into_iter()
                .filter(|s| s.is_running() && s.spec.task_id.as_deref() == Some(task_id))
                .map(|s| s.id.clone())
                .collect(),
        }
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
        self.notifications.publish(serde_json::json!({
            "type": "close_terminal",
            "session_id": s.id,
        }));
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

    /// Drops finished sessions past the TTL, then the earliest-exited ones
    /// while more than `max_sessions` are kept. Running sessions stay.
    pub fn prune(&self) {
        let ttl = Duration::from_secs_f64(self.config.finished_ttl_s);
        let mut removed = Vec::new();
        {
            let mut table = self.table();
            let mut finished: Vec<(Instant, String)> = table
                .values()
                .filter_map(|s| s.state().exit().map(|e| (e.exited_instant, s.id.clone())))
                .collect();
            finished.sort();
            let mut excess = table.len().saturating_sub(self.config.max_sessions);
            for (exited, id) in finished {
                if exited.elapsed() >= ttl || excess > 0 {
                    if let Some(s) = table.remove(&id) {
                        removed.push(s);
                    }
                    excess = excess.saturating_sub(1);
                }
            }
        }
        for s in removed {
            s.output.delete_log();
        }
    }
}

/// A child that exists, with its I/O not yet wired to tasks.
struct StartedChild {
    pid: i32,
    identity: ProcessIdentity,
    exit_rx: oneshot::Receiver<crate::reaper::ChildExit>,
    io: ChildIo,
}

enum ChildIo {
    Pipe {
        output: tokio::net::unix::pipe::Receiver,
        stdin: Option<tokio::net::unix::pipe::Sender>,
    },
    Pty {
        reader: pty_process::OwnedReadPty,
        writer: pty_process::OwnedWritePty,
        master: std::os::fd::OwnedFd,
    },
}

enum OutputReader {
    Pipe(tokio::net::unix::pipe::Receiver),
    Pty(PtyReader),
}

impl tokio::io::AsyncRead for OutputReader {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            OutputReader::Pipe(r) => std::pin::Pin::new(r).poll_read(cx, buf),
            OutputReader::Pty(r) => std::pin::Pin::new(r).poll_read(cx, buf),
        }
    }
}

/// Sleeps until a session's output or state changes, or until `wake`.
/// The receivers are subscribed before the caller looked, so no change
/// between that look and this wait is lost.
async fn next_change(
    output: &mut tokio::sync::watch::Receiver<u64>,
    state: &mut tokio::sync::watch::Receiver<session::SessionState>,
    wake: tokio::time::Instant,
) {
    tokio::select! {
        _ = output.changed() => {}
        _ = state.changed() => {}
        _ = tokio::time::sleep_until(wake) => {}
    }
}

/// How long output must pause before a yield returns ("it went quiet").
const YIELD_QUIET: Duration = Duration::from_millis(300);
/// The longest a spawn or write may yield.
const MAX_YIELD_MS: f64 = 300_000.0;

/// What a spawn or write that yields returns.
struct Yielded {
    output: String,
    cursor: u64,
    original_chars: Option<u64>,
    status: SessionStatus,
    exit: Option<ExitInfo>,
}

fn yield_duration(yield_ms: Option<f64>) -> Result<Duration, Error> {
    duration_param(
        "yield_ms",
        yield_ms.unwrap_or(0.0) / 1000.0,
        MAX_YIELD_MS / 1000.0,
    )
}

/// Variables that describe the daemon's own supervision and must not leak
/// into children (a child would otherwise think it was socket-activated).
const DAEMON_ONLY_VARS: &[&str] = &[
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
];

/// Parses what `rfc3339` writes (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
fn parse_rfc3339(text: &str) -> Option<std::time::SystemTime> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, millis) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let millis: i64 = millis.parse().ok()?;
    // Days from civil (H. Hinnant), the inverse of clock::civil_from_days.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let ms = u64::try_from(secs * 1000 + millis).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_millis(ms))
}

fn normalize_id(id: &str) -> String {
    if id.starts_with("proc_") {
        id.to_ascii_lowercase()
    } else {
        format!("proc_{}", id.to_ascii_lowercase())
    }
}

fn duration_param(name: &str, secs: f64, max: f64) -> Result<Duration, Error> {
    if secs.is_nan() || secs < 0.0 {
        return Err(Error::InvalidParams(format!(
            "{name}: must not be negative"
        )));
    }
    Ok(Duration::from_secs_f64(secs.min(max)))
}

fn already_exited() -> StdinResult {
    stdin_result(
        StdinStatus::AlreadyExited,
        0,
        Some("the session has already exited"),
    )
}

fn stdin_result(status: StdinStatus, bytes_written: u64, message: Option<&str>) -> StdinResult {
    StdinResult {
        status,
        bytes_written,
        message: message.map(String::from),
        output: None,
        cursor: None,
        original_chars: None,
        session_status: None,
        exit: None,
    }
}

fn status_of(state: &session::SessionState) -> SessionStatus {
    match state {
        session::SessionState::Running => SessionStatus::Running,
        session::SessionState::Exited(_) => SessionStatus::Exited,
    }
}

fn exit_info(state: &session::SessionState) -> Option<ExitInfo> {
    state.exit().map(|e| ExitInfo {
        exit_code: e.exit_code,
        signal: e.signal.map(signal_name),
        completion_reason: e.reason,
        termination_source: e.source.clone(),
        exited_at: rfc3339(e.exited_at),
    })
}

fn uptime(s: &Session) -> f64 {
    let end = s
        .state()
        .exit()
        .map(|e| e.exited_instant)
        .unwrap_or_else(Instant::now);
    let secs = end
        .saturating_duration_since(s.started_instant)
        .as_secs_f64();
    (secs * 1000.0).round() / 1000.0
}

fn poll_result(r: &Redactor, s: &Session) -> PollResult {
    let state = s.state();
    let env_dump = is_env_dump(&s.spec.command);
    PollResult {
        session_id: s.id.clone(),
        command: r.command(&s.spec.command).into_owned(),
        status: status_of(&state),
        pid: s.pid(),
        started_at: rfc3339(s.started_at),
        uptime_seconds: uptime(s),
        output_preview: r
            .output(&s.output.tail_text(PREVIEW_CHARS), env_dump)
            .into_owned(),
        note: s.note.clone(),
        original_chars: None,
        exit: exit_info(&state),
    }
}

fn process_entry(r: &Redactor, s: &Session, session_scoped: bool) -> ProcessEntry {
    let state = s.state();
    let env_dump = is_env_dump(&s.spec.command);
    ProcessEntry {
        session_id: s.id.clone(),
        command: first_chars(&r.command(&s.spec.command), 200).to_string(),
        cwd: s.spec.cwd.display().to_string(),
        pid: s.pid(),
        status: status_of(&state),
        exit_code: state.exit().and_then(|e| e.exit_code),
        started_at: rfc3339(s.started_at),
        uptime_seconds: uptime(s),
        output_preview: r
            .output(&s.output.tail_text(LIST_PREVIEW_CHARS), env_dump)
            .into_owned(),
        task_id: s.spec.task_id.clone(),
        session_key: s.spec.session_key.clone(),
        pty: s.spec.pty,
        persist: s.spec.persist,
        notify_on_complete: s.notify_on_complete(),
        watch_patterns: s.spec.watch_patterns.clone(),
        session_scoped,
        note: s.note.clone(),
    }
}

fn completion_event(r: &Redactor, s: &Session, e: &ExitRecord) -> Event {
    let output = r
        .output(
            &s.output.tail_text(WAIT_OUTPUT_CHARS),
            is_env_dump(&s.spec.command),
        )
        .into_owned();
    let command = r.command(&s.spec.command).into_owned();
    let how = match (e.reason, e.exit_code) {
        (CompletionReason::Exited, Some(0)) => "completed normally (exit code 0)".to_string(),
        (CompletionReason::Exited, Some(c)) => format!("failed (exit code {c})"),
        (CompletionReason::Killed, _) => format!(
            "was killed ({})",
            e.signal
                .map(signal_name)
                .unwrap_or_else(|| "exit code unknown".into())
        ),
        (CompletionReason::Timeout, _) => "timed out and was killed".to_string(),
        _ => "ended; its exit status is unknown".to_string(),
    };
    let text = format!(
        "Background process {} {how}. Command: {}. Output: {}",
        s.id,
        first_chars(&command, 200),
        last_chars(&output, 500)
    );
    let mut fields = BTreeMap::new();
    fields.insert("exit_code".into(), serde_json::json!(e.exit_code));
    fields.insert("completion_reason".into(), serde_json::json!(e.reason));
    fields.insert("termination_source".into(), serde_json::json!(e.source));
    fields.insert("output".into(), serde_json::json!(output));
    fields.insert(
        "started_at".into(),
        serde_json::json!(rfc3339(s.started_at)),
    );
    fields.insert("exited_at".into(), serde_json::json!(rfc3339(e.exited_at)));
    Event {
        kind: "completion".into(),
        session_id: s.id.clone(),
        session_key: s.spec.session_key.clone(),
        task_id: s.spec.task_id.clone(),
        command,
        text,
        fields,
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The shell argv: the configured one, except that the default `bash`
/// falls back to /usr/bin/bash, /bin/bash, $SHELL, then /bin/sh -lc.
fn resolve_shell(configured: &[String], env: &[(String, String)]) -> Vec<String> {
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
    let candidates = in_path
        .into_iter()
        .chain(["/usr/bin/bash", "/bin/bash"].map(PathBuf::from));
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
