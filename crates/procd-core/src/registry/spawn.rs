//! Spawning: a checked spec (`checks.rs`) started (`launch.rs`), the
//! session opened, its supervisor and writer tasks, and spawn-and-yield.
//! What happens at exit is `exit.rs`.

use super::launch::{ChildIo, StartedChild};
use super::names::NameCheck;
use super::queue::Entered;
use super::{yields::yield_duration, Registry, INSTANCE_VAR};
use crate::child::rewrite::rewrite_compound_background;
use crate::error::Error;
use crate::observation::readiness::Readiness;
use crate::output::noise::NoiseFilter;
use crate::output::source::OutputSource;
use crate::output::store::OutputStore;
use crate::session::{self, Origin, Session, SessionSpec, StdinSink};
use crate::tree::kill;
use crate::tree::scope::unit_name;
use procd_proto::{
    CompletionReason, Event, MaxOutputChars, MaxOutputTokens, SpawnParams, SpawnResult, StdinMode,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
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
        // A spawn naming a queue takes its slot now, or waits its turn
        // (`registry/queue.rs`; named sessions are never queued).
        let queue_slot = match spec.queue.clone() {
            None => None,
            Some(queue) => match self.enter_queue(&queue, &params, stack_file).await? {
                Entered::Now(slot) => Some(slot),
                Entered::Queued(result) => return Ok(*result),
            },
        };
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
        // Take a running slot first so concurrent spawns cannot overshoot;
        // the session owns it from then on (or an error path drops it).
        let max = self.config.max_running;
        let Some(slot) = self.running.try_take(max) else {
            return Err(Error::LimitReached(format!(
                "max_running ({max}) sessions are running; kill one first"
            )));
        };
        self.start_checked(spec, &params, slot.with_queue(queue_slot), None)
            .await
    }

    /// Starts a checked spawn holding its slots: its watch checked, its
    /// ports given, the session spawned (under `id` when its queue gave
    /// it one), then its output yielded for as long as the caller asked.
    pub(super) async fn start_checked(
        &self,
        mut spec: SessionSpec,
        params: &SpawnParams,
        slot: crate::admission::slot::RunningSlot,
        id: Option<String>,
    ) -> Result<SpawnResult, Error> {
        if let Some(plan) = &spec.on_change {
            Registry::check_watchable(plan)
                .await
                .map_err(Error::LimitReached)?;
        }
        let mut env = params.env.clone().unwrap_or_default();
        let _picked = self.give_ports(&mut spec, params.port, params.ports.as_ref(), &mut env)?;
        let port_in_use = match spec.ready.as_ref().and_then(|r| r.port.flatten()) {
            Some(port) => self.port_in_use(port).await,
            None => None,
        };
        let (mut result, session) = self.spawn_reserved(spec, &env, slot, id).await?;
        result.port_in_use = port_in_use;
        // Its ready port is another's: readiness is not waited for (it
        // would wait out its timeout), the answer names the holder.
        let await_ready = result.port_in_use.is_none();
        let wait = yield_duration(params.yield_ms);
        self.yield_into(&mut result, &session, wait, params, await_ready)
            .await?;
        Ok(result)
    }

    /// With a yield asked for: the session's output within `wait` (the
    /// yield's rules: `yields.rs`) put into the spawn's answer.
    pub(super) async fn yield_into(
        &self,
        result: &mut SpawnResult,
        session: &Arc<Session>,
        wait: Duration,
        params: &SpawnParams,
        await_ready: bool,
    ) -> Result<(), Error> {
        if wait.is_zero() {
            return Ok(());
        }
        let budget = crate::output::budget::chars_budget(
            params.max_output_chars.map(MaxOutputChars::get),
            params.max_output_tokens.map(MaxOutputTokens::get),
        );
        let y = self
            .yield_output(session, 0, wait, budget, await_ready)
            .await?;
        result.status = y.status;
        result.output = Some(y.output);
        result.cursor = Some(y.cursor);
        result.original_chars = y.original_chars;
        result.kept_error_lines = y.kept_error_lines;
        result.exit = y.exit;
        result.ready = y.ready;
        result.waiting_for_input = Some(y.waiting_for_input);
        Ok(())
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
    pub(super) fn daemon_path(&self) -> Option<&str> {
        self.inherited_env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
    }

    /// `proc_` + 12 hex digits from the OS's CSPRNG (docs/SECURITY.md), unused.
    pub(super) fn new_session_id(&self) -> std::io::Result<String> {
        loop {
            let id = format!("proc_{}", crate::random::hex(6)?);
            if !self.table().contains_key(&id) && self.queues.find(&id).is_none() {
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
        slot: crate::admission::slot::RunningSlot,
        id: Option<String>,
    ) -> Result<(SpawnResult, Arc<Session>), Error> {
        let spawn_err = |what: &str, e: std::io::Error| Error::SpawnFailed(format!("{what}: {e}"));
        let id = match id {
            Some(id) => id,
            None => self
                .new_session_id()
                .map_err(|e| spawn_err("cannot make a session id", e))?,
        };
        let output = Arc::new(
            self.new_log(&id)
                .map_err(|e| spawn_err("cannot create the session log", e))?,
        );
        let (env, argv) = match self.launch_line(&id, &spec, caller_env).await {
            Ok(line) => line,
            Err(e) => {
                output.delete_log();
                return Err(e);
            }
        };
        let restarts = match spec.restart {
            Some(plan) => match self.first_restarts(plan, &argv, &env) {
                Ok(restarts) => Some(Arc::new(restarts)),
                Err(e) => {
                    self.abandon(&id, &spec, &output);
                    return Err(e);
                }
            },
            None => None,
        };
        let mut spec = spec;
        // Held until the session is in the table (`sandbox::Launches`).
        let _launch = spec
            .sandbox
            .is_some()
            .then(|| self.sandbox_launches.begin());
        let started = match self.launch(&id, &mut spec, &env, &argv).await {
            Ok(started) => started,
            Err(e) => {
                self.abandon(&id, &spec, &output);
                return Err(e);
            }
        };

        // From here on the child exists: any failure must kill it first.
        self.injected_slow_setup().await;
        if self.injected_failure(false) {
            self.end_unsupervised(&id, &started).await;
            self.abandon(&id, &spec, &output);
            return Err(spawn_err(
                "session setup failed (the process was killed)",
                std::io::Error::other("injected failure after spawn"),
            ));
        }
        self.hold_in_keeper(&id, started.identity, &started.io, restarts.as_deref());
        if spec.is_jobs() {
            self.share_jobs_soon();
        }
        let (session, reader, exit_rx) =
            self.open_session(id.clone(), spec, output, started, slot, restarts);
        // The new session counts towards max_sessions.
        self.make_room();
        self.publish_started(&session);

        let checkpointed = self.write_running_checkpoint().await;
        self.supervise_in_background(session.clone(), reader, exit_rx, RunStart::Fresh);
        self.watch_oom(&session);

        if let Err(e) = checkpointed {
            return Err(self.refuse_unrecoverable(&session, e).await);
        }
        let result = super::present::spawn_result(&session);
        Ok((result, session))
    }

    /// The environment and the argv a session's runs start with: the
    /// caller's env over the daemon's, a `jobs` session's FIFO made and
    /// named, the command in its launch script and shell.
    async fn launch_line(
        &self,
        id: &str,
        spec: &SessionSpec,
        caller_env: &BTreeMap<String, String>,
    ) -> Result<(BTreeMap<String, String>, Vec<String>), Error> {
        let mut env = self
            .env_policy
            .build(self.inherited_env.iter().cloned(), caller_env, id);
        env.insert(INSTANCE_VAR.into(), self.instance_marker());
        let command = spec.command_to_run();
        let mut script = launch_script(&command);
        if spec.is_jobs() {
            self.open_jobs(id, &mut env).await?;
            script = self.jobs_script(script);
        }
        let argv = self
            .launch_argv(&command, &script, &mut env, caller_env)
            .await;
        Ok((env, argv))
    }

    /// Undoes a spawn that failed before its session existed: its log, and
    /// a `jobs` session's FIFO.
    fn abandon(&self, id: &str, spec: &SessionSpec, output: &OutputStore) {
        output.delete_log();
        if spec.is_jobs() {
            self.end_jobs(id);
        }
    }

    /// The `started` event of a session just opened.
    fn publish_started(&self, session: &Session) {
        self.notifications.publish(Event::Started {
            session_id: session.id.clone(),
            pid: session.pid(),
            command: session.shown_command().to_string(),
            task_id: session.spec.task_id.clone(),
            session_key: session.spec.session_key.clone(),
            pty: session.pty(),
            started_at: session.started_at_text(),
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

    /// The session of a child just started (`run_of`), with its running
    /// slot, admitted (`admit`), its ready condition watched from now on.
    /// Returns it with what its supervisor is to read and wait for.
    pub(super) fn open_session(
        &self,
        id: String,
        spec: SessionSpec,
        output: Arc<OutputStore>,
        child: StartedChild,
        slot: crate::admission::slot::RunningSlot,
        restarts: Option<Arc<session::Restarts>>,
    ) -> (Arc<Session>, OutputSource, ChildExitRx) {
        // The first run's output begins the log.
        let (child, reader, exit_rx) = self.run_of(&spec, child, spec.pty, 0);
        let readiness = first_readiness(&spec);
        let session = self.admit(session::Opening {
            id,
            spec,
            run: child.run,
            output,
            stdin: child.stdin,
            origin: Origin::Spawned,
            output_probe: child.output_probe,
            slot: Some(slot),
            restarts: restarts.map(|r| (r, session::Runs::default())),
            readiness,
            ended: None,
            adopted: None,
        });
        self.watch_ready(&session);
        (session, reader, exit_rx)
    }

    /// A restarting session's next run, of a child just started
    /// (`run_of`): it becomes the session's run (`Session::begin_run`),
    /// its ready condition watched from now on. Returns what its
    /// supervisor is to read and wait for.
    pub(super) fn renew_session(
        &self,
        session: &Arc<Session>,
        child: StartedChild,
        count: crate::stacks::restart::RunCount,
        pty: bool,
        slot: Option<crate::admission::slot::RunningSlot>,
    ) -> (OutputSource, ChildExitRx) {
        // Its output begins where the log ends now: its supervisor, which
        // stores it, starts after this.
        let from = session.output.end();
        let (child, reader, exit_rx) = self.run_of(&session.spec, child, pty, from);
        let next = session::NextRunParts {
            run: child.run,
            count,
            stdin: child.stdin,
            output_probe: child.output_probe,
            slot,
            readiness: first_readiness(&session.spec),
        };
        self.table().begin_run(session, next);
        self.watch_ready(session);
        (reader, exit_rx)
    }

    /// Watches the ready condition of `session`'s run, if it has one.
    fn watch_ready(&self, session: &Arc<Session>) {
        if let Some(check) = session.spec.ready.clone() {
            tokio::spawn(self.watch_readiness(session.clone(), check));
        }
    }

    /// What a child just started brings its session: its run (on a
    /// terminal or not, its output from `output_from` on in the log), its
    /// stdin writer and the probe for unread output; with what its
    /// supervisor is to read and wait for.
    fn run_of(
        &self,
        spec: &SessionSpec,
        child: StartedChild,
        pty: bool,
        output_from: u64,
    ) -> (ChildRun, OutputSource, ChildExitRx) {
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
        let stdin = writer.map(|sink| {
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(session::stdin_writer(sink, rx));
            tx
        });
        let input = match spec.stdin {
            StdinMode::Null => None,
            StdinMode::Pipe => {
                crate::observation::observe::InputId::of_fd(&self.procfs, identity.pid, 0)
            }
        };
        let mut run = session::Run::new(identity, started, pty, output_from);
        (run.systemd_unit, run.cgroup, run.input) = (unit, cgroup, input);
        let child = ChildRun {
            run,
            stdin,
            output_probe,
        };
        (child, reader, exit_rx)
    }

    /// Acts on what a session's supervisor reports: a timeout ends its
    /// tree as "timeout" (in a task of its own: the supervisor reads on
    /// meanwhile); a watch outcome becomes its event.
    fn take_report(self: &Arc<Self>, session: &Arc<Session>, report: session::Report) {
        match report {
            session::Report::TimedOut => {
                let (reg, s) = (self.clone(), session.clone());
                let grace = Duration::from_secs_f64(self.config.kill_grace_s);
                tokio::spawn(async move {
                    let (reason, source) = (CompletionReason::Timeout, "timeout");
                    reg.terminate(&s, libc::SIGTERM, grace, reason, source)
                        .await;
                });
            }
            session::Report::Watch(outcome) => {
                // Watching stopped at its cap: its completion is told instead.
                if let crate::observation::watch::WatchOutcome::Disabled { .. } = outcome {
                    session.enable_notify_on_complete();
                }
                self.deliver_watch(session, outcome);
            }
        }
    }

    /// Runs a session's supervisor to its end, taking its reports as they
    /// come (every one before the end is recorded), then records the end.
    async fn run_supervisor(
        me: Weak<Registry>,
        session: Arc<Session>,
        supervising: impl std::future::Future<Output = Option<Arc<session::ExitRecord>>>,
        mut reported: mpsc::UnboundedReceiver<session::Report>,
    ) {
        let take = |report| {
            if let Some(reg) = me.upgrade() {
                reg.take_report(&session, report);
            }
        };
        tokio::pin!(supervising);
        let record = loop {
            tokio::select! {
                biased;
                Some(report) = reported.recv() => take(report),
                record = &mut supervising => break record,
            }
        };
        while let Ok(report) = reported.try_recv() {
            take(report);
        }
        if let Some(record) = record {
            Registry::record_end(&me, &session, record);
        }
    }

    /// Starts the session's supervisor task (session.rs): the output
    /// reader with its noise filter and watch patterns, the exit, the
    /// timeout; when it ends, the exit is recorded (`record_end`).
    pub(super) fn supervise_in_background(
        &self,
        session: Arc<Session>,
        reader: OutputSource,
        exit_rx: oneshot::Receiver<crate::tree::reaper::ChildExit>,
        run: RunStart,
    ) {
        crate::observation::stale::watch(&session, &self.stale_watches);
        self.follow_changes(&session);
        let me = self.me.clone();
        let noise = NoiseFilter::new(&self.shell[0]);
        let final_drain = Duration::from_millis(self.config.final_drain_ms);
        let (reports, reported) = mpsc::unbounded_channel();
        let watch = Some(session::Watch::new(
            &session,
            reports.clone(),
            Duration::from_secs_f64(self.config.watch_min_interval_s),
            self.config.watch_max_deliveries,
        ));
        let tests = match run {
            RunStart::Fresh => {
                // A restart's run starts with none of the last run's counts.
                session.output.set_tests(None);
                crate::testrun::TestRun::for_command(&session.spec.command, session.output.end())
            }
            RunStart::TakenOver => None,
        };
        // Every log line of the supervisor names its session and root.
        let span = tracing::info_span!("session", session_id = %session.id, pid = session.pid());
        let supervised = session;
        let handing_over = self.handing_over.subscribe();
        let counted = self.count_supervisor();
        let supervisor = async move {
            let _counted = counted;
            let how = session::Supervision {
                noise,
                final_drain,
                reports,
                watch,
                handing_over,
                tests,
            };
            let supervising = session::supervise(supervised.clone(), reader, exit_rx, how);
            Registry::run_supervisor(me, supervised, supervising, reported).await;
        };
        tokio::spawn(tracing::Instrument::instrument(supervisor, span));
    }
}

type ChildExitRx = oneshot::Receiver<crate::tree::reaper::ChildExit>;

/// A child just started, as its session takes it (`Registry::run_of`).
struct ChildRun {
    run: session::Run,
    stdin: Option<mpsc::Sender<session::StdinOp>>,
    output_probe: Option<std::os::fd::OwnedFd>,
}

/// Where a run starts against its session's ready condition.
fn first_readiness(spec: &SessionSpec) -> Readiness {
    match spec.ready {
        Some(_) => Readiness::Pending { timed_out: false },
        None => Readiness::Unconditioned,
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

/// Where a supervisor starts reading a run's output.
pub(super) enum RunStart {
    /// At the run's first byte.
    Fresh,
    /// Where a previous daemon stopped reading.
    TakenOver,
}
