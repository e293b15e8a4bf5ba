//! Spawning: validation, the start (pipes or PTY, in the session's cgroup
//! or scope), the supervisor and writer tasks, and spawn-and-yield. What
//! happens at exit is `exit.rs`.

use super::names::{env_digest, NameCheck};
use super::{
    yields::yield_duration, Registry, INSTANCE_VAR, MAX_COMMAND_BYTES, MAX_ENV_BYTES, MAX_ENV_VARS,
    MAX_TIMEOUT, MAX_WATCH_PATTERNS, MAX_WATCH_PATTERN_BYTES,
};
use crate::error::Error;
use crate::identity::ProcessIdentity;
use crate::ingest::OutputSource;
use crate::kill;
use crate::noise::NoiseFilter;
use crate::output::OutputStore;
use crate::procfs::ProcFs;
use crate::readiness::Readiness;
use crate::rewrite::rewrite_compound_background;
use crate::scope::unit_name;
use crate::session::{self, Session, SessionSpec, StdinSink};
use crate::watch::{WatchMatcher, WatchOutcome};
use procd_proto::{
    Cols, CompletionReason, Event, Limits, MaxOutputChars, MaxOutputTokens, MemoryBytes, Pids,
    Rows, SpawnParams, SpawnResult, StdinMode,
};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

impl Registry {
    pub async fn spawn(&self, params: SpawnParams) -> Result<SpawnResult, Error> {
        self.spawn_from(params, None, None).await
    }

    /// A stack's service: `spawn`, remembering the stack file `up` read.
    pub async fn spawn_service(
        &self,
        params: SpawnParams,
        stack_file: &Path,
    ) -> Result<SpawnResult, Error> {
        self.spawn_from(params, Some(stack_file), None).await
    }

    /// `shell`: a shell's channel directory (`shell/`).
    pub(super) async fn spawn_from(
        &self,
        params: SpawnParams,
        stack_file: Option<&Path>,
        shell: Option<PathBuf>,
    ) -> Result<SpawnResult, Error> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::WrongState("procd is shutting down".into()));
        }
        let mut spec = self.validate(&params)?;
        spec.stack_file = stack_file.map(Path::to_path_buf);
        spec.shell = shell;
        // A named spawn holds the name from its check to its start, so
        // two callers of one name start one session.
        let _naming = match &spec.name {
            Some(_) => Some(self.naming.lock().await),
            None => None,
        };
        if let NameCheck::Reused(result) = self
            .check_name(&spec, params.replace.unwrap_or(false))
            .await?
        {
            return Ok(*result);
        }
        let port_in_use = match spec.ready.as_ref().and_then(|r| r.port.flatten()) {
            Some(port) => self.port_in_use(port).await,
            None => None,
        };
        let wait = yield_duration(params.yield_ms);
        let budget = crate::budget::chars_budget(
            params.max_output_chars.map(MaxOutputChars::get),
            params.max_output_tokens.map(MaxOutputTokens::get),
        );
        let env = params.env.unwrap_or_default();
        // Take a running slot first so concurrent spawns cannot overshoot;
        // the session owns it from then on (or an error path drops it).
        let max = self.config.max_running;
        let Some(slot) = self.running.try_take(max) else {
            return Err(Error::LimitReached(format!(
                "max_running ({max}) sessions are running; kill one first"
            )));
        };
        let (mut result, session) = self.spawn_reserved(spec, &env, slot).await?;
        result.port_in_use = port_in_use;
        if !wait.is_zero() {
            let y = self.yield_output(&session, 0, wait, budget).await?;
            result.status = y.status;
            result.output = Some(y.output);
            result.cursor = Some(y.cursor);
            result.original_chars = y.original_chars;
            result.kept_error_lines = y.kept_error_lines;
            result.exit = y.exit;
            result.ready = y.ready;
            result.waiting_for_input = Some(y.waiting_for_input);
        }
        Ok(result)
    }

    /// What `spawn` was asked, checked and with the defaults applied: the
    /// session's spec. Numbers come already checked by their procd-proto
    /// types; what is left is what only the daemon can judge.
    pub(super) fn validate(&self, req: &SpawnParams) -> Result<SessionSpec, Error> {
        check_command(&req.command)?;
        let cwd = self.cwd_of(req.cwd.as_deref())?;
        if let Some(env) = &req.env {
            check_env(env)?;
        }
        if req.replace.is_some() && req.name.is_none() {
            return Err(Error::InvalidParams(
                "replace: only for a named spawn (give name)".into(),
            ));
        }
        let timeout = req.timeout_s.map(|t| t.duration().min(MAX_TIMEOUT));
        // `owner` is checked against the leases by the daemon (procd-server).
        let watch_patterns = req.watch_patterns.clone().unwrap_or_default();
        check_watch_patterns(&watch_patterns)?;
        let meta = req.meta.clone().map(check_meta).transpose()?;
        let (rows, cols) = (
            req.rows.map_or(30, Rows::get),
            req.cols.map_or(120, Cols::get),
        );
        let (pty, stdin) = (req.pty.unwrap_or(false), req.stdin.unwrap_or_default());
        if pty && stdin == StdinMode::Null {
            return Err(Error::InvalidParams(
                "stdin: \"null\" is only for pipe sessions".into(),
            ));
        }
        let ready = req
            .ready
            .as_ref()
            .map(crate::readiness::ReadyCheck::parse)
            .transpose()
            .map_err(Error::InvalidParams)?;
        let limits = self.kernel_limits(
            req.limits
                .unwrap_or_default()
                .or(self.config.default_limits),
        )?;
        let junit = req
            .junit
            .as_deref()
            .map(|p| junit_path(&cwd, p))
            .transpose()?;
        let sandbox = crate::sandbox::SandboxPlan::new(
            req.sandbox.as_ref(),
            self.config.sandbox,
            &cwd,
            &self.tmp_dir,
            &self.own_paths,
        )?;
        Ok(SessionSpec {
            command: req.command.clone(),
            cwd,
            task_id: req.task_id.clone(),
            session_key: req.session_key.clone(),
            owner: req.owner.clone(),
            persist: req.persist.unwrap_or(false),
            pty,
            rows,
            cols,
            notify_on_complete: req.notify_on_complete.unwrap_or(false),
            watch_patterns,
            meta,
            timeout,
            stdin,
            ready,
            limits,
            name: req.name.clone(),
            project: req.project.clone(),
            stack_file: None,
            env_digest: Some(env_digest(req.env.as_ref().unwrap_or(&BTreeMap::new()))),
            restart: req
                .restart
                .as_ref()
                .and_then(crate::restart::RestartPlan::new),
            sandbox,
            junit,
            shell: None,
        })
    }

    /// The limits as the kernel takes them; -32002 naming the controller
    /// when there is no cgroup to write them to (never a silently
    /// unlimited session).
    fn kernel_limits(&self, limits: Limits) -> Result<procd_sys::cgroup::Limits, Error> {
        use procd_sys::cgroup::Controller;
        let asked = [
            (Controller::Memory, limits.memory_bytes.is_some()),
            (Controller::Cpu, limits.cpu_cores.is_some()),
            (Controller::Pids, limits.pids.is_some()),
        ];
        if let (None, Some((controller, _))) = (&self.cgroups, asked.iter().find(|(_, on)| *on)) {
            return Err(Error::WrongState(format!(
                "limits: the {} controller is not available: sessions get no cgroup here (see procd status: containment)",
                controller.name()
            )));
        }
        Ok(procd_sys::cgroup::Limits {
            memory_bytes: limits.memory_bytes.map(MemoryBytes::get),
            // CpuCores is at least 0.01: at least the kernel's 1 ms.
            cpu_quota_us: limits
                .cpu_cores
                .map(|c| (c.get() * procd_sys::cgroup::CPU_PERIOD_US as f64).round() as u64),
            pids: limits.pids.map(Pids::get),
        })
    }

    /// The argv that runs `script`: a non-interactive `bash -c` with the
    /// shell snapshot's variables in its environment, which sources the
    /// snapshot first when it has something to run (on its own line, so
    /// that aliases apply to the command); or, without a snapshot or when
    /// it cannot be made, the configured shell (`bash -lic`). The caller's
    /// variables and those procd sets per session win over the scripts'.
    pub(super) async fn launch_argv(
        &self,
        script: &str,
        env: &mut BTreeMap<String, String>,
        caller_env: &BTreeMap<String, String>,
    ) -> Vec<String> {
        if let Some(snapshot) = &self.snapshot {
            match snapshot.current().await {
                Ok(snapshot) => {
                    self.faults.clear(SNAPSHOT_FAULT);
                    let mut keep: Vec<&str> = caller_env
                        .keys()
                        .map(|k| k.strip_prefix(crate::env::FORCE_PREFIX).unwrap_or(k))
                        .collect();
                    keep.extend(SESSION_VARS);
                    for (name, value) in &snapshot.vars {
                        if !keep.contains(&name.as_str()) {
                            env.insert(name.clone(), value.clone());
                        }
                    }
                    let Some(path) = &snapshot.script else {
                        return vec![self.shell[0].clone(), "-c".into(), script.to_string()];
                    };
                    if snapshot.sets_vars {
                        env.insert(crate::snapshot::KEEP_VAR.into(), keep.join(" "));
                    }
                    let source = crate::snapshot::quote(&path.display().to_string());
                    return vec![
                        self.shell[0].clone(),
                        "-c".into(),
                        format!(". {source}\n{script}"),
                    ];
                }
                Err(e) => {
                    if !self.faults.has(SNAPSHOT_FAULT) {
                        tracing::warn!(error = %e, "no shell snapshot; commands start with the login shell");
                    }
                    self.faults.set(SNAPSHOT_FAULT, &e);
                }
            }
        }
        let mut argv = self.shell.clone();
        argv.push(script.to_string());
        argv
    }

    /// The session's log: the spare made ahead of time, renamed to its
    /// name (a rename is a fifth of a file's creation on ext4 here), else
    /// a file made now. Another spare is made off the spawn's path.
    fn new_log(&self, id: &str) -> std::io::Result<OutputStore> {
        let path = self.logs_dir.join(format!("{id}.log"));
        let (max, tail) = (self.config.max_log_bytes, self.config.memory_tail_bytes);
        let spare = {
            let mut spare = self.spare_log.lock().unwrap_or_else(|e| e.into_inner());
            // Taken and renamed under the lock: the file and the name it
            // is under stay one (see `make_spare_log`).
            spare
                .take()
                .filter(|_| std::fs::rename(self.logs_dir.join(SPARE_LOG), &path).is_ok())
        };
        self.make_spare_log();
        match spare {
            Some(file) => Ok(OutputStore::on_new_file(&path, file, max, tail)),
            None => OutputStore::create(&path, max, tail),
        }
    }

    /// Makes the next spare log, off the event loop: a new file under
    /// `SPARE_LOG`, made only if none is there (O_EXCL), so the spare
    /// held is always the file under that name. One left by a crash is
    /// removed at recovery.
    fn make_spare_log(&self) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        tokio::task::spawn_blocking(move || {
            if let Ok(file) = OutputStore::new_file(&me.logs_dir.join(SPARE_LOG), true) {
                *me.spare_log.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
            }
        });
    }

    /// The daemon's own PATH, where the programs procd runs are found.
    fn daemon_path(&self) -> Option<&str> {
        self.inherited_env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
    }

    /// `proc_` + 12 hex digits from the OS's CSPRNG (docs/SECURITY.md), unused.
    pub(super) fn new_session_id(&self) -> std::io::Result<String> {
        loop {
            let id = format!("proc_{}", crate::random::hex(6)?);
            if !self.table().contains_key(&id) {
                return Ok(id);
            }
        }
    }

    /// Spawns one session (its running slot already taken): the log, the
    /// environment and launch line, the fork (`launch`), the keeper's
    /// copies of its descriptors, the session itself (`open_session`), the
    /// checkpoint, the supervisor. A failure at any step leaves nothing.
    pub(super) async fn spawn_reserved(
        &self,
        spec: SessionSpec,
        caller_env: &BTreeMap<String, String>,
        slot: crate::slot::RunningSlot,
    ) -> Result<(SpawnResult, Arc<Session>), Error> {
        let spawn_err = |what: &str, e: std::io::Error| Error::SpawnFailed(format!("{what}: {e}"));
        let id = self
            .new_session_id()
            .map_err(|e| spawn_err("cannot make a session id", e))?;
        let output = Arc::new(
            self.new_log(&id)
                .map_err(|e| spawn_err("cannot create the session log", e))?,
        );
        let mut env = self
            .env_policy
            .build(self.inherited_env.iter().cloned(), caller_env, &id);
        env.insert(INSTANCE_VAR.into(), self.instance_marker());
        let argv = self
            .launch_argv(&launch_script(&spec.command), &mut env, caller_env)
            .await;
        let restarts = match spec.restart {
            Some(plan) => Some(Arc::new(self.first_restarts(plan, &argv, &env)?)),
            None => None,
        };
        let mut spec = spec;
        let started = match self.launch(&id, &mut spec, &env, &argv).await {
            Ok(started) => started,
            Err(e) => {
                output.delete_log();
                return Err(e);
            }
        };

        // From here on the child exists: any failure must kill it first.
        self.injected_slow_setup().await;
        if self.injected_failure(false) {
            self.end_unsupervised(&id, &started).await;
            output.delete_log();
            return Err(spawn_err(
                "session setup failed (the process was killed)",
                std::io::Error::other("injected failure after spawn"),
            ));
        }
        self.hold_in_keeper(&id, started.identity, &started.io, restarts.as_deref());
        let (session, reader, exit_rx) =
            self.open_session(id.clone(), spec, output, started, slot, restarts);
        // Make room: the new session counts towards max_sessions.
        self.prune();
        self.publish_started(&session);

        let checkpointed = self.write_running_checkpoint().await;
        self.supervise_in_background(session.clone(), reader, exit_rx, RunStart::Fresh);
        self.watch_oom(&session);

        if let Err(e) = checkpointed {
            return Err(self.refuse_unrecoverable(&session, e).await);
        }
        let result = super::present::spawn_result(&self.redactor, &session);
        Ok((result, session))
    }

    /// The `started` event of a session just opened.
    fn publish_started(&self, session: &Session) {
        self.notifications.publish(Event::Started {
            session_id: session.id.clone(),
            pid: session.pid(),
            command: session.shown_command(&self.redactor).to_string(),
            task_id: session.spec.task_id.clone(),
            session_key: session.spec.session_key.clone(),
            pty: session.spec.pty,
            started_at: session.started_at_text().to_string(),
            meta: session.meta(),
        });
    }

    /// A session whose checkpoint could not be written cannot be recovered
    /// after a crash: it is killed and forgotten rather than run as
    /// something procd could lose track of. Returns the spawn's error.
    async fn refuse_unrecoverable(&self, session: &Arc<Session>, e: std::io::Error) -> Error {
        self.terminate(
            session,
            libc::SIGKILL,
            Duration::ZERO,
            CompletionReason::FailedStart,
            "spawn",
        )
        .await;
        self.table().remove(&session.id);
        session.output.delete_log();
        Error::SpawnFailed(format!(
            "cannot write the checkpoint (the process was killed): {e}"
        ))
    }

    /// Forks the session's root (in its systemd scope, if scopes are used);
    /// a PTY that cannot be had falls back to pipes, never running the
    /// command twice.
    pub(super) async fn launch(
        &self,
        id: &str,
        spec: &mut SessionSpec,
        env: &BTreeMap<String, String>,
        argv: &[String],
    ) -> Result<StartedChild, Error> {
        let cgroup = match &self.cgroups {
            Some(tree) => Some(Arc::new(tree.create(id, &spec.limits)?)),
            None => None,
        };
        let started = self.launch_in(id, spec, env, argv, cgroup.as_ref()).await;
        if let (Err(_), Some(cgroup)) = (&started, &cgroup) {
            cgroup.remove();
        }
        started
    }

    pub(super) async fn launch_in(
        &self,
        id: &str,
        spec: &mut SessionSpec,
        env: &BTreeMap<String, String>,
        argv: &[String],
        cgroup: Option<&Arc<procd_sys::cgroup::SessionCgroup>>,
    ) -> Result<StartedChild, Error> {
        let mut unit = match &self.scopes {
            Some(scopes) if cgroup.is_none() && scopes.available().await => Some(unit_name(id)),
            _ => None,
        };
        let started = match self.start_child(spec, env, argv, unit.as_deref(), cgroup) {
            Err(e) if spec.pty => {
                // The PTY spawn failed, perhaps after its scope was created:
                // stop that scope before a pipe spawn under a distinct unit.
                if let (Some(u), Some(scopes)) = (&unit, &self.scopes) {
                    if !scopes.stop(u).await {
                        return Err(Error::SpawnFailed(format!(
                            "PTY spawn failed ({e}) and its scope {u} could not be reaped; not retrying without a PTY"
                        )));
                    }
                }
                tracing::warn!(session = %id, %e, "PTY spawn failed; falling back to pipes");
                spec.pty = false;
                unit = unit.map(|u| format!("{u}-pipe-fallback"));
                self.start_child(spec, env, argv, unit.as_deref(), cgroup)
            }
            other => other,
        };
        started.map_err(|e| Error::SpawnFailed(format!("cannot start {:?}: {e}", self.shell[0])))
    }

    /// Ends a child that exists but will not be supervised (its setup
    /// failed): its tree, SIGKILLed through the guard and waited for, and
    /// its scope, so that no process outlives the error.
    async fn end_unsupervised(&self, id: &str, started: &StartedChild) {
        let root = started.identity;
        let tree = kill::TreeSpec {
            root,
            pgid: root.pid,
            marker: format!("PROCD_SESSION_ID={id}").into_bytes(),
            root_pinned: true,
            adopted: Vec::new(),
            cgroup: started.cgroup.clone(),
        };
        kill::terminate(&tree, &self.procfs, true, libc::SIGKILL, Duration::ZERO).await;
        if let Some(cgroup) = &started.cgroup {
            cgroup.remove();
        }
        if let (Some(u), Some(scopes)) = (&started.unit, &self.scopes) {
            scopes.stop(u).await;
        }
    }

    /// The session of a child just started: its stdin writer, what it
    /// reads input from, the probe for unread output, its ready condition
    /// (watched from now on), its running slot; listed in the table.
    /// Returns it with what its supervisor is to read and wait for.
    pub(super) fn open_session(
        &self,
        id: String,
        spec: SessionSpec,
        output: Arc<OutputStore>,
        child: StartedChild,
        slot: crate::slot::RunningSlot,
        restarts: Option<Arc<session::Restarts>>,
    ) -> (
        Arc<Session>,
        OutputSource,
        oneshot::Receiver<crate::reaper::ChildExit>,
    ) {
        let StartedChild {
            identity,
            started,
            io,
            unit,
            cgroup,
            exit_rx,
            ..
        } = child;
        let output_probe = match &io {
            ChildIo::Pipe { output, .. } => output.probe(),
            ChildIo::Pty { master, .. } => master.try_clone().ok(),
        };
        let (reader, writer) = match io {
            ChildIo::Pipe { output, stdin } => (output, stdin.map(StdinSink::Pipe)),
            ChildIo::Pty {
                output,
                writer,
                master,
            } => (output, Some(StdinSink::Pty(writer, master))),
        };
        let stdin_tx = writer.map(|sink| {
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(session::stdin_writer(sink, rx));
            tx
        });
        let input = match spec.stdin {
            StdinMode::Null => None,
            StdinMode::Pipe => crate::observe::InputId::of_fd(&self.procfs, identity.pid, 0),
        };
        let ready = spec.ready.clone();
        let mut session = Session::new(id.clone(), spec, identity, output, stdin_tx, started);
        session.systemd_unit = unit;
        session.cgroup = cgroup;
        session.input = input;
        if let Some(fd) = output_probe {
            session.set_output_probe(fd);
        }
        if ready.is_some() {
            session.set_readiness(Readiness::Pending { timed_out: false });
        }
        session.hold_slot(slot);
        session.restarts = restarts;
        let session = Arc::new(session);
        self.table().insert(id, session.clone());
        if let Some(check) = ready {
            tokio::spawn(self.watch_readiness(session.clone(), check));
        }
        (session, reader, exit_rx)
    }

    /// Starts the session's supervisor task (session.rs): the output
    /// reader with its noise filter and watch patterns, the exit, the
    /// timeout; when it ends, the exit is recorded (`record_end`).
    pub(super) fn supervise_in_background(
        &self,
        session: Arc<Session>,
        reader: OutputSource,
        exit_rx: oneshot::Receiver<crate::reaper::ChildExit>,
        run: RunStart,
    ) {
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
        let watch = {
            let me = me.clone();
            let watched = Arc::downgrade(&session);
            let deliver: Box<dyn FnMut(WatchOutcome) + Send> = Box::new(move |outcome| {
                if let (Some(reg), Some(s)) = (me.upgrade(), watched.upgrade()) {
                    reg.deliver_watch(&s, outcome);
                }
            });
            let mut watch = session::Watch {
                matcher: None,
                deliver,
                asks: session.subscribe_asks(),
                min_interval: Duration::from_secs_f64(self.config.watch_min_interval_s),
                max_deliveries: self.config.watch_max_deliveries,
            };
            watch.matcher = WatchMatcher::new(
                &session.asks().watch_patterns,
                watch.min_interval,
                watch.max_deliveries,
            );
            Some(watch)
        };
        let tests = match run {
            RunStart::Fresh => {
                // A restart's run starts with none of the last run's counts.
                session.output.set_tests(None);
                crate::testrun::TestRun::for_command(&session.spec.command, session.output.end())
            }
            RunStart::TakenOver => None,
        };
        // Every log line of the supervisor names its session and root.
        let span = tracing::info_span!("session", id = %session.id, pid = session.pid());
        let supervised = session;
        let handing_over = self.handing_over.subscribe();
        let counted = self.count_supervisor();
        let supervisor = async move {
            let _counted = counted;
            let how = session::Supervision {
                noise,
                final_drain,
                on_timeout,
                watch,
                handing_over,
                tests,
            };
            let record = session::supervise(supervised.clone(), reader, exit_rx, how).await;
            if let Some(record) = record {
                Registry::record_end(&me, &supervised, record);
            }
        };
        tokio::spawn(tracing::Instrument::instrument(supervisor, span));
    }

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
        let channels = match &spec.shell {
            Some(dir) => crate::shell::Channels::open(dir)?.fds(),
            None => Vec::new(),
        };
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
        let relay = crate::ingest::Relay::new()?;
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
            crate::sandbox::TMPDIR.into(),
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
type ExitReceiver = tokio::sync::oneshot::Receiver<crate::reaper::ChildExit>;

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
            nofile: crate::limits::child_soft_nofile(),
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
    started: session::Started,
    exit_rx: oneshot::Receiver<crate::reaper::ChildExit>,
    pub(super) io: ChildIo,
    /// The systemd scope it runs in.
    unit: Option<String>,
    /// The cgroup it runs in.
    cgroup: Option<Arc<procd_sys::cgroup::SessionCgroup>>,
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

/// The line the session's shell runs. `set +m`: no job control. The traps
/// make the shell honour the signals a kill sends (an interactive bash
/// ignores SIGTERM without one): it exits 128+n as soon as its current
/// step ends, instead of going on to the next one. (What bash then prints
/// about restoring a terminal it never had is dropped by the noise filter.)
pub fn launch_script(command: &str) -> String {
    format!(
        "set +m; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; {}",
        rewrite_compound_background(command)
    )
}

/// The spare log's name in the logs dir (a dot file: no session's id).
pub(super) const SPARE_LOG: &str = ".spare.log";

/// The fault `status.faults` shows while no shell snapshot can be made.
const SNAPSHOT_FAULT: &str = "shell snapshot";
/// Variables procd sets per session: a snapshot never overrides them.
const SESSION_VARS: [&str; 6] = [
    "PYTHONUNBUFFERED",
    "PROCD_SESSION_ID",
    INSTANCE_VAR,
    "TERM",
    "PAGER",
    "GIT_PAGER",
];

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

/// The extra environment: bounded in count and size, each name and value
/// one a process can have.
fn check_env(env: &std::collections::BTreeMap<String, String>) -> Result<(), Error> {
    if env.len() > MAX_ENV_VARS {
        return Err(Error::InvalidParams(format!(
            "env: at most {MAX_ENV_VARS} variables, got {}",
            env.len()
        )));
    }
    let env_bytes: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if env_bytes > MAX_ENV_BYTES {
        return Err(Error::InvalidParams(format!(
            "env: at most {MAX_ENV_BYTES} bytes in all, got {env_bytes}"
        )));
    }
    match env
        .iter()
        .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
    {
        Some((k, _)) => Err(Error::InvalidParams(format!(
            "env: invalid variable name or value for {k:?}"
        ))),
        None => Ok(()),
    }
}

/// `command`, checked: 1 to `MAX_COMMAND_BYTES` bytes, no NUL (for
/// `spawn` and a shell's commands alike).
pub(crate) fn check_command(command: &str) -> Result<(), Error> {
    let n = command.len();
    if n == 0 || n > MAX_COMMAND_BYTES {
        return Err(Error::InvalidParams(format!(
            "command: must be 1 to {MAX_COMMAND_BYTES} bytes, got {n}"
        )));
    }
    if command.contains('\0') {
        return Err(Error::InvalidParams("command: contains a NUL byte".into()));
    }
    Ok(())
}

impl Registry {
    /// Where a session runs: `cwd` from the default one (the user's home),
    /// an existing directory.
    fn cwd_of(&self, cwd: Option<&str>) -> Result<PathBuf, Error> {
        let cwd = match cwd {
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
        Ok(cwd)
    }
}

/// The largest `meta`, as JSON.
pub const MAX_META_BYTES: usize = 4096;

/// `spawn{junit}`: a report path, relative to the cwd; read by the daemon
/// at the end (regular files only, at most 64 MiB: `testrun/junit.rs`).
fn junit_path(cwd: &Path, path: &str) -> Result<PathBuf, Error> {
    if path.is_empty() || path.len() > 4096 || path.contains('\0') {
        return Err(Error::InvalidParams(
            "junit: a path of 1 to 4096 bytes, without NUL".into(),
        ));
    }
    Ok(cwd.join(path))
}

/// `meta`, checked: a JSON object of at most `MAX_META_BYTES`.
pub(super) fn check_meta(meta: serde_json::Value) -> Result<Arc<serde_json::Value>, Error> {
    let kind = match &meta {
        serde_json::Value::Object(_) => None,
        serde_json::Value::Null => Some("null"),
        serde_json::Value::Bool(_) => Some("a boolean"),
        serde_json::Value::Number(_) => Some("a number"),
        serde_json::Value::String(_) => Some("a string"),
        serde_json::Value::Array(_) => Some("an array"),
    };
    if let Some(kind) = kind {
        return Err(Error::InvalidParams(format!(
            "meta: a JSON object of at most {MAX_META_BYTES} bytes, got {kind}"
        )));
    }
    let size = serde_json::to_vec(&meta).map_or(usize::MAX, |b| b.len());
    if size > MAX_META_BYTES {
        return Err(Error::InvalidParams(format!(
            "meta: a JSON object of at most {MAX_META_BYTES} bytes, got {size}"
        )));
    }
    Ok(Arc::new(meta))
}

pub(super) fn check_watch_patterns(patterns: &[String]) -> Result<(), Error> {
    if patterns.len() > MAX_WATCH_PATTERNS {
        return Err(Error::InvalidParams(format!(
            "watch_patterns: at most {MAX_WATCH_PATTERNS} patterns, got {}",
            patterns.len()
        )));
    }
    match patterns
        .iter()
        .find(|p| p.is_empty() || p.len() > MAX_WATCH_PATTERN_BYTES || p.contains('\n'))
    {
        Some(bad) => Err(Error::InvalidParams(format!(
            "watch_patterns: each pattern must be 1 to {MAX_WATCH_PATTERN_BYTES} bytes on one line, got {bad:?}"
        ))),
        None => Ok(()),
    }
}

/// Where a supervisor starts reading a run's output.
pub(super) enum RunStart {
    /// At the run's first byte.
    Fresh,
    /// Where a previous daemon stopped reading.
    TakenOver,
}
