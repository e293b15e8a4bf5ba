//! One supervised process: what was asked for, its identity, its output,
//! and its state. A session's state changes in exactly one place, the
//! supervisor task (`supervise`), which owns the child's exit receiver and
//! output pipe: it moves the state to `Exited` once, after the final drain.

use crate::identity::ProcessIdentity;
use crate::ingest::OutputSource;
use crate::kill::TreeSpec;
use crate::noise::NoiseFilter;
use crate::output::OutputStore;
use crate::reaper::ChildExit;
use crate::redact::Redactor;
use crate::testrun::TestRun;
use crate::watch::{WatchMatcher, WatchOutcome};
use procd_proto::{CompletionReason, StdinMode};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};

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
    pub ready: Option<crate::readiness::ReadyCheck>,
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
    pub restart: Option<crate::restart::RestartPlan>,
    /// What its tree may touch (docs/SECURITY.md); None: no sandbox.
    pub sandbox: Option<crate::sandbox::SandboxPlan>,
    /// The JUnit XML report its command writes, read at its end for its
    /// test summary (`testrun/junit.rs`).
    pub junit: Option<PathBuf>,
    /// A shell's channel directory (`shell/`): the shell inherits its
    /// command FIFO, its file of ends and its wake FIFO as fds 3, 4, 5.
    pub shell: Option<PathBuf>,
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

/// A restarting session across its runs; each run is a `Session` of its
/// own (its process, cgroup and input), and they share this.
pub struct Restarts {
    pub plan: crate::restart::RestartPlan,
    /// None for a session a previous daemon started whose launch the
    /// keeper did not keep: it cannot be started again.
    pub launch: Option<Arc<Launch>>,
    /// The launch as a sealed memfd, for the keeper to hold with each run
    /// (made only when there is a keeper).
    pub launch_memfd: Option<std::os::fd::OwnedFd>,
    /// The run now going, and how the one before it ended.
    runs: Mutex<(crate::restart::RunCount, Option<Arc<ExitRecord>>)>,
    /// From a run's end until the next run starts (its backoff): which
    /// run is next and when it starts. A checkpoint keeps it, so that the
    /// next daemon starts that run itself: the one that ended was this
    /// daemon's child, reaped here, and no keeper will report its exit.
    next_run: Mutex<Option<NextRun>>,
    /// Woken by a termination request: a restart waiting out its backoff
    /// gives up (`notify_one` keeps the wake-up if none waits yet).
    pub stop: tokio::sync::Notify,
}

impl Restarts {
    pub fn new(
        plan: crate::restart::RestartPlan,
        launch: Option<(Arc<Launch>, Option<std::os::fd::OwnedFd>)>,
        runs: crate::restart::RunCount,
        last_exit: Option<Arc<ExitRecord>>,
    ) -> Restarts {
        let (launch, launch_memfd) = launch.unzip();
        Restarts {
            plan,
            launch,
            launch_memfd: launch_memfd.flatten(),
            runs: Mutex::new((runs, last_exit)),
            next_run: Mutex::new(None),
            stop: tokio::sync::Notify::new(),
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, (crate::restart::RunCount, Option<Arc<ExitRecord>>)> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The run now going (or last gone) and how the one before it ended.
    pub fn runs(&self) -> (crate::restart::RunCount, Option<Arc<ExitRecord>>) {
        self.lock().clone()
    }

    pub fn is_restarting(&self) -> bool {
        self.next_run().is_some()
    }

    /// The run its backoff waits for, if it is in one.
    pub fn next_run(&self) -> Option<NextRun> {
        *self.next_run.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A run ended (`record`, unless a previous daemon already recorded
    /// it) and `next` is due: it is restarting until that starts.
    pub fn run_ended(&self, record: Option<Arc<ExitRecord>>, next: NextRun) {
        if let Some(record) = record {
            self.lock().1 = Some(record);
        }
        *self.next_run.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
    }

    /// The next run started (or none will: the session ends).
    pub fn run_started(&self, count: Option<crate::restart::RunCount>) {
        if let Some(count) = count {
            self.lock().0 = count;
        }
        *self.next_run.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The run a backoff waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRun {
    pub count: crate::restart::RunCount,
    /// When it starts (wall clock: a checkpoint carries it to the next
    /// daemon).
    pub at: SystemTime,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: CompletionReason,
    pub source: Option<String>,
    pub exited_at: SystemTime,
    pub exited_instant: Instant,
}

#[derive(Debug, Clone)]
pub enum SessionState {
    Running,
    Exited(Arc<ExitRecord>),
}

impl SessionState {
    pub fn exit(&self) -> Option<&Arc<ExitRecord>> {
        match self {
            SessionState::Running => None,
            SessionState::Exited(e) => Some(e),
        }
    }
}

/// Watch patterns of a session: the matcher (None while there are no
/// patterns), where its events go, and how to make it again when
/// `update` changes the patterns.
pub struct Watch {
    pub matcher: Option<WatchMatcher>,
    pub deliver: Box<dyn FnMut(WatchOutcome) + Send>,
    pub asks: watch::Receiver<Asks>,
    pub min_interval: Duration,
    pub max_deliveries: u32,
}

impl Watch {
    /// Resolves when the session's asks change (never once it is gone).
    async fn changed(watch: &mut Option<Watch>) {
        let gone = match watch {
            Some(w) => w.asks.changed().await.is_err(),
            None => true,
        };
        if gone {
            std::future::pending::<()>().await
        }
    }

    /// Matches the patterns asked for now (their counts start again).
    fn renew(&mut self) {
        let patterns = self.asks.borrow_and_update().watch_patterns.clone();
        self.matcher = WatchMatcher::new(&patterns, self.min_interval, self.max_deliveries);
    }
}

/// A request to the session's stdin writer.
pub enum StdinOp {
    Write(Vec<u8>, oneshot::Sender<std::io::Result<()>>),
    /// Pipe: close the pipe. PTY: type the terminal's EOF character at the
    /// start of a line. Answers with the message for the caller.
    Close(oneshot::Sender<std::io::Result<&'static str>>),
    /// PTY only: set the window size (the child gets SIGWINCH).
    Resize(u16, u16, oneshot::Sender<std::io::Result<()>>),
}

/// Where a session's input goes.
pub enum StdinSink {
    Pipe(tokio::net::unix::pipe::Sender),
    /// The master's write half, and a duplicate of the master descriptor
    /// for reading the terminal's settings (the half does not expose it).
    Pty(pty_process::OwnedWritePty, std::os::fd::OwnedFd),
}

/// Why a termination was requested (recorded before signalling, so the
/// supervisor reports the exit as killed/timeout rather than exited).
#[derive(Debug, Clone)]
pub struct Termination {
    pub reason: CompletionReason,
    pub source: String,
}

pub struct Session {
    pub id: String,
    pub spec: SessionSpec,
    pub identity: ProcessIdentity,
    pub(crate) started_at: SystemTime,
    /// `started_at` as RFC 3339, formatted once: every poll, list entry
    /// and checkpoint write shows it.
    started_at_text: String,
    pub started_instant: Instant,
    pub output: Arc<OutputStore>,
    state: watch::Sender<SessionState>,
    /// Set as soon as the root has been reaped (its pid is free again).
    reaped: AtomicBool,
    termination: Mutex<Option<Termination>>,
    /// Set while a termination is requested (read per output chunk).
    terminating: AtomicBool,
    /// The stdin writer; None once a pipe is closed (or stdin is null).
    stdin: Mutex<Option<mpsc::Sender<StdinOp>>>,
    /// Set by close_stdin (a PTY keeps its writer for resizes).
    stdin_closed: AtomicBool,
    /// Starts as asked; switched on when watch patterns are exhausted,
    /// and set by `update`.
    notify_on_complete: AtomicBool,
    /// What `update` may change besides: its watch patterns (the
    /// supervisor wakes on a change and matches the new ones) and `meta`.
    asks: watch::Sender<Asks>,
    /// Set for a session recovered after a daemon restart: procd no longer
    /// holds its output pipe, so this says what is (un)available.
    pub note: Option<String>,
    /// The systemd scope the session runs in, if any.
    pub systemd_unit: Option<String>,
    /// The cgroup its tree lives in, if any (docs/containment.md).
    pub cgroup: Option<Arc<procd_sys::cgroup::SessionCgroup>>,
    /// OOM kills in its cgroup already reported as `oom` events.
    pub oom_reported: std::sync::atomic::AtomicU64,
    /// Whether its command dumps the environment, so that its output gets
    /// the `NAME=value` redaction pass; worked out once, not per poll.
    pub env_dump: bool,
    /// The command as callers see it, redacted on first use (see
    /// `shown_command`).
    shown_command: OnceLock<String>,
    /// Processes that escaped the group and the marker and were still the
    /// root's children (it is their subreaper) when the root exited: they
    /// were reparented to the daemon, and this records whose they were.
    /// `None` until the scan after the root's exit has run.
    adopted: watch::Sender<Option<Arc<[ProcessIdentity]>>>,
    /// The `max_running` slot this session holds while it runs.
    slot: Mutex<Option<crate::slot::RunningSlot>>,
    /// What is known of its tree and its input (docs/agents.md), behind one lock.
    seen: Mutex<Seen>,
    /// Its stdin pipe or terminal (None with `stdin: "null"`, or when the
    /// root was gone before it could be looked at).
    pub input: Option<crate::observe::InputId>,
    /// Where it stands against its ready condition (docs/agents.md).
    readiness: watch::Sender<crate::readiness::Readiness>,
    /// A duplicate of the output pipe's read end (or the PTY master), to
    /// ask how much output the supervisor has not read yet; dropped at the
    /// exit, so a leftover writer is not kept from EPIPE.
    output_probe: Mutex<Option<std::os::fd::OwnedFd>>,
    /// Its restart policy's state, shared by all its runs.
    pub restarts: Option<Arc<Restarts>>,
    /// The run that replaced this one (set before this one is marked
    /// exited, so whoever waits on it follows on to the next).
    successor: OnceLock<Arc<Session>>,
}

/// What a caller may change of a running session (`update`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asks {
    pub watch_patterns: Arc<[String]>,
    pub meta: Option<Arc<serde_json::Value>>,
}

/// How long a session must be quiet, blocked on its input, before it
/// counts as waiting for input (docs/agents.md).
pub const INPUT_QUIET: Duration = Duration::from_millis(250);

/// What is known of a session's tree and input, changed together.
#[derive(Default)]
struct Seen {
    /// Ports and resources of its tree, and whether a process was blocked
    /// reading its input, as last observed (by the monitor or a yield).
    observed: crate::observe::Observation,
    /// When input was last written: an observation from before says
    /// nothing about whether it is waiting again.
    last_input: Option<Instant>,
    /// The output end when `input_wanted` was last sent: one event per
    /// episode (cleared when the session is seen not waiting).
    input_wanted_at: Option<u64>,
}

impl Seen {
    /// How long nothing has happened, given how long output has been quiet.
    fn idle_for(&self, output_quiet: Duration) -> Duration {
        match self.last_input {
            Some(at) => output_quiet.min(at.elapsed()),
            None => output_quiet,
        }
    }

    /// Observations have seen a process blocked reading its input for
    /// `INPUT_QUIET`, with nothing happening (`idle`) since they began.
    fn blocked_reading(&self, idle: Duration) -> bool {
        self.observed.reading_input
            && self
                .observed
                .reading_since
                .is_some_and(|since| since.elapsed() >= INPUT_QUIET && idle >= since.elapsed())
    }
}

/// When a session's root started, on both clocks. A spawn reads it just
/// before the fork, so that nothing the process does (a line, a port, its
/// exit) is dated before its start, whatever the setup after the fork
/// costs on a loaded machine.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub wall: SystemTime,
    pub instant: Instant,
}

impl Started {
    pub fn now() -> Started {
        Started {
            wall: SystemTime::now(),
            instant: Instant::now(),
        }
    }

    /// A start a previous daemon recorded: the monotonic instant is
    /// derived from the wall clock.
    pub fn at(wall: SystemTime) -> Started {
        Started {
            wall,
            instant: crate::clock::instant_at(wall),
        }
    }
}

impl Session {
    pub fn new(
        id: String,
        spec: SessionSpec,
        identity: ProcessIdentity,
        output: Arc<OutputStore>,
        stdin: Option<mpsc::Sender<StdinOp>>,
        started: Started,
    ) -> Session {
        Session {
            id,
            identity,
            started_at: started.wall,
            started_at_text: crate::clock::rfc3339(started.wall),
            started_instant: started.instant,
            output,
            state: watch::channel(SessionState::Running).0,
            reaped: AtomicBool::new(false),
            termination: Mutex::new(None),
            terminating: AtomicBool::new(false),
            stdin: Mutex::new(stdin),
            stdin_closed: AtomicBool::new(false),
            notify_on_complete: AtomicBool::new(spec.notify_on_complete),
            asks: watch::channel(Asks {
                watch_patterns: spec.watch_patterns.clone().into(),
                meta: spec.meta.clone(),
            })
            .0,
            note: None,
            systemd_unit: None,
            cgroup: None,
            oom_reported: std::sync::atomic::AtomicU64::new(0),
            env_dump: crate::redact::is_env_dump(&spec.command),
            shown_command: OnceLock::new(),
            adopted: watch::channel(None).0,
            slot: Mutex::new(None),
            seen: Mutex::new(Seen::default()),
            input: None,
            readiness: watch::channel(crate::readiness::Readiness::Unconditioned).0,
            output_probe: Mutex::new(None),
            restarts: None,
            successor: OnceLock::new(),
            spec,
        }
    }

    /// A session re-adopted from the checkpoint: not our child, no stdin,
    /// output only as far as its log reached.
    /// A session a previous daemon started and the keeper handed over:
    /// live (output, stdin, exit all come through), but not our child, so
    /// its root's pid is not pinned (signals go through the identity guard
    /// with its start time).
    pub fn handed_over(
        id: String,
        spec: SessionSpec,
        identity: ProcessIdentity,
        output: Arc<OutputStore>,
        stdin: Option<mpsc::Sender<StdinOp>>,
        started_at: SystemTime,
    ) -> Session {
        let mut s = Session::new(id, spec, identity, output, stdin, Started::at(started_at));
        s.reaped.store(true, Ordering::SeqCst);
        if s.stdin
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            s.stdin_closed.store(true, Ordering::SeqCst);
        }
        s
    }

    /// When it started, as RFC 3339 (`started_at` on the wire).
    pub fn started_at_text(&self) -> &str {
        &self.started_at_text
    }

    pub fn recovered(
        id: String,
        spec: SessionSpec,
        identity: ProcessIdentity,
        output: Arc<OutputStore>,
        started_at: SystemTime,
    ) -> Session {
        let mut s = Session::new(id, spec, identity, output, None, Started::at(started_at));
        s.reaped.store(true, Ordering::SeqCst); // never our child: no pin
        s.stdin_closed.store(true, Ordering::SeqCst);
        s.note = Some(
            "recovered after a procd restart: output up to the restart is in the log; live output and stdin are unavailable"
                .into(),
        );
        s
    }

    /// The command as returned to callers: redacted once, since neither the
    /// command nor the daemon's redaction rules change (polls and lists
    /// would otherwise run the redaction regexes on every call).
    pub fn shown_command(&self, redactor: &Redactor) -> &str {
        self.shown_command
            .get_or_init(|| redactor.command(&self.spec.command).into_owned())
    }

    pub fn is_detached(&self) -> bool {
        self.note.is_some()
    }

    pub fn pid(&self) -> i32 {
        self.identity.pid
    }

    pub fn state(&self) -> SessionState {
        self.state.borrow().clone()
    }

    pub fn is_running(&self) -> bool {
        matches!(*self.state.borrow(), SessionState::Running)
    }

    pub fn subscribe_state(&self) -> watch::Receiver<SessionState> {
        self.state.subscribe()
    }

    /// Waits until the session has exited (or `limit` passes), following
    /// a restarting session from run to run to its end.
    pub async fn wait_exited(&self, limit: Duration) -> Option<Arc<ExitRecord>> {
        self.wait_ended(Some(tokio::time::Instant::now() + limit))
            .await
    }

    /// `wait_exited` without a limit.
    pub async fn wait_end(&self) -> Option<Arc<ExitRecord>> {
        self.wait_ended(None).await
    }

    async fn wait_ended(&self, deadline: Option<tokio::time::Instant>) -> Option<Arc<ExitRecord>> {
        let mut record = self.wait_run_exited(deadline).await?;
        let mut next = self.successor.get().cloned();
        while let Some(run) = next {
            record = run.wait_run_exited(deadline).await?;
            next = run.successor.get().cloned();
        }
        Some(record)
    }

    /// Waits until this run has exited (or `deadline` passes).
    async fn wait_run_exited(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<Arc<ExitRecord>> {
        let mut rx = self.state.subscribe();
        let exited = rx.wait_for(|s| s.exit().is_some());
        let result = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, exited).await.ok()?,
            None => exited.await,
        };
        result.ok().and_then(|state| state.exit().cloned())
    }

    /// Names this run in a once-only event's key: the id, and the run
    /// after a restart (each run is ready once).
    pub fn run_key(&self) -> String {
        match self.restarts.as_ref().map(|r| r.runs().0.run) {
            Some(run) if run > 1 => format!("{} run {run}", self.id),
            _ => self.id.clone(),
        }
    }

    /// The run that replaced this one, if a restart did.
    pub fn successor(&self) -> Option<&Arc<Session>> {
        self.successor.get()
    }

    /// The session's run now: this one, or the last that replaced it.
    pub fn current(self: &Arc<Self>) -> Arc<Session> {
        let mut run = self.clone();
        while let Some(next) = run.successor.get().cloned() {
            run = next;
        }
        run
    }

    /// What identifies this session's processes for the kill code.
    pub fn tree(&self) -> TreeSpec {
        TreeSpec {
            root: self.identity,
            pgid: self.identity.pid,
            marker: format!("PROCD_SESSION_ID={}", self.id).into_bytes(),
            root_pinned: !self.reaped.load(Ordering::SeqCst),
            adopted: self.adopted.borrow().as_deref().unwrap_or(&[]).to_vec(),
            cgroup: self.cgroup.clone(),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last observation of its tree (empty once it has exited).
    pub fn observed(&self) -> crate::observe::Observation {
        if !self.is_running() {
            return Default::default();
        }
        self.seen().observed.clone()
    }

    /// Records an observation; returns the ports that are new since the last.
    pub fn set_observed(&self, mut now: crate::observe::Observation) -> Vec<u16> {
        let quiet = self.output.quiet_for();
        let mut seen = self.seen();
        let idle = seen.idle_for(quiet);
        // A run of "blocked reading" observations goes on only while
        // nothing happened since it began.
        let run = seen
            .observed
            .reading_since
            .filter(|since| idle >= since.elapsed());
        now.reading_since = match now.reading_input {
            true => run.or(now.taken),
            false => None,
        };
        let new = now
            .ports
            .iter()
            .filter(|p| !seen.observed.ports.contains(p))
            .copied()
            .collect();
        seen.observed = now;
        new
    }

    /// Whether anything can be typed into it (a pipe or terminal that is
    /// still open, of a running session).
    pub fn takes_input(&self) -> bool {
        self.input.is_some() && !self.stdin_closed() && self.is_running()
    }

    /// How long nothing has happened on its terminal or pipes: no output,
    /// and no input written (a program needs a moment to take what it was
    /// sent; until then it still looks blocked in its read).
    pub fn idle_for(&self) -> Duration {
        let quiet = self.output.quiet_for();
        self.seen().idle_for(quiet)
    }

    /// Whether the last observation saw a process blocked reading its
    /// input (a run that `waiting_for_input` may soon confirm).
    pub fn seen_reading_input(&self) -> bool {
        let seen = self.seen();
        seen.observed.reading_input && seen.observed.reading_since.is_some()
    }

    /// Whether it is waiting for input now: observations have seen a
    /// process blocked reading its input for `INPUT_QUIET`, with no output
    /// and no input since they began. (One observation is not enough: a
    /// prompt the program wrote just before blocking may still be on its
    /// way through the kernel — a PTY's flip buffer — and show up later.)
    pub fn waiting_for_input(&self) -> bool {
        let quiet = self.output.quiet_for();
        let seen = self.seen();
        self.waiting_given(&seen, quiet)
    }

    /// `waiting_for_input` with the state already locked.
    fn waiting_given(&self, seen: &Seen, output_quiet: Duration) -> bool {
        self.takes_input()
            && seen.blocked_reading(seen.idle_for(output_quiet))
            && !self.output_unread()
    }

    /// Keeps `fd` (a duplicate of where its output is read from) to tell
    /// unread output from quiet.
    pub fn set_output_probe(&mut self, fd: std::os::fd::OwnedFd) {
        *self
            .output_probe
            .get_mut()
            .unwrap_or_else(|e| e.into_inner()) = Some(fd);
    }

    /// Returns once every byte written to the output before the call is
    /// in the store (`OutputStore::drained`); at once, with no round trip
    /// to the supervisor, when its last look found the pipe empty and the
    /// pipe still is.
    pub async fn output_drained(&self) {
        let empty = || {
            let probe = self.output_probe.lock().unwrap_or_else(|e| e.into_inner());
            probe
                .as_ref()
                .is_some_and(|fd| rustix::io::ioctl_fionread(fd) == Ok(0))
        };
        if !self.output.drained_now(empty) {
            self.output.drained().await;
        }
    }

    /// Output the program wrote that the supervisor has not read yet: a
    /// prompt in flight is not silence.
    fn output_unread(&self) -> bool {
        let probe = self.output_probe.lock().unwrap_or_else(|e| e.into_inner());
        probe
            .as_ref()
            .is_some_and(|fd| rustix::io::ioctl_fionread(fd).is_ok_and(|n| n > 0))
    }

    /// Records that input was written (a new episode may begin).
    pub fn note_input(&self) {
        let mut seen = self.seen();
        seen.last_input = Some(Instant::now());
        seen.input_wanted_at = None;
    }

    /// Whether an `input_wanted` event is due: it is waiting, and no event
    /// was sent for this episode (same output end, not seen reading since).
    pub fn take_input_wanted(&self) -> bool {
        let quiet = self.output.quiet_for();
        let mut seen = self.seen();
        if !self.waiting_given(&seen, quiet) {
            if !seen.observed.reading_input {
                seen.input_wanted_at = None;
            }
            return false;
        }
        let end = self.output.end();
        if seen.input_wanted_at == Some(end) {
            return false;
        }
        seen.input_wanted_at = Some(end);
        true
    }

    pub fn readiness(&self) -> crate::readiness::Readiness {
        *self.readiness.borrow()
    }

    pub fn subscribe_readiness(&self) -> watch::Receiver<crate::readiness::Readiness> {
        self.readiness.subscribe()
    }

    pub fn set_readiness(&self, now: crate::readiness::Readiness) {
        self.readiness.send_replace(now);
    }

    /// Gives the session its running slot (before it is shared).
    pub fn hold_slot(&mut self, slot: crate::slot::RunningSlot) {
        *self.slot.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(slot);
    }

    /// Takes the running slot (a restart hands it to the next run).
    pub fn take_slot(&self) -> Option<crate::slot::RunningSlot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Gives the running slot back (once; later calls find none).
    pub fn release_slot(&self) {
        drop(self.slot.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Records the orphans the root left to the daemon (see `adopted`).
    pub fn set_adopted(&self, orphans: Vec<ProcessIdentity>) {
        self.adopted.send_replace(Some(orphans.into()));
    }

    /// Waits (up to `limit`) until the orphans the root left behind are
    /// known, so that a kill right after the exit still finds them.
    pub async fn adoption_known(&self, limit: Duration) {
        let mut rx = self.adopted.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(Option::is_some)).await;
    }

    /// Records why the session is being ended; the first request wins.
    /// A restart waiting out its backoff gives up.
    pub fn request_termination(&self, reason: CompletionReason, source: &str) {
        let mut t = self.termination.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_none() {
            *t = Some(Termination {
                reason,
                source: source.to_string(),
            });
        }
        self.terminating.store(true, Ordering::SeqCst);
        drop(t);
        if let Some(restarts) = &self.restarts {
            restarts.stop.notify_one();
        }
    }

    /// Forgets a termination request that did not end the session.
    pub fn clear_termination(&self) {
        *self.termination.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.terminating.store(false, Ordering::SeqCst);
    }

    pub fn notify_on_complete(&self) -> bool {
        self.notify_on_complete.load(Ordering::SeqCst)
    }

    pub fn enable_notify_on_complete(&self) {
        self.notify_on_complete.store(true, Ordering::SeqCst);
    }

    pub fn set_notify_on_complete(&self, on: bool) {
        self.notify_on_complete.store(on, Ordering::SeqCst);
    }

    /// Its `meta` as the wire shows it.
    pub fn meta(&self) -> Option<serde_json::Value> {
        self.asks.borrow().meta.as_deref().cloned()
    }

    /// Its watch patterns and `meta` as they are now.
    pub fn asks(&self) -> Asks {
        self.asks.borrow().clone()
    }

    /// Changes its watch patterns or `meta` (`update`); a supervisor
    /// following `subscribe_asks` matches new patterns from its next read.
    pub fn change_asks(&self, change: impl FnOnce(&mut Asks)) {
        self.asks.send_modify(change);
    }

    pub fn subscribe_asks(&self) -> watch::Receiver<Asks> {
        self.asks.subscribe()
    }

    pub fn stdin_closed(&self) -> bool {
        self.stdin_closed.load(Ordering::SeqCst)
    }

    /// Marks stdin closed; false if it already was.
    pub fn mark_stdin_closed(&self) -> bool {
        !self.stdin_closed.swap(true, Ordering::SeqCst)
    }

    pub fn stdin_sender(&self) -> Option<mpsc::Sender<StdinOp>> {
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Marks this run replaced by `next` (a restart), then exited.
    pub(crate) fn mark_replaced(&self, next: Arc<Session>, record: Arc<ExitRecord>) {
        let _ = self.successor.set(next);
        self.mark_exited(record);
    }

    /// The one place a session's state changes: Running -> Exited, once.
    pub(crate) fn mark_exited(&self, record: Arc<ExitRecord>) {
        // Stdin is useless now; dropping our sender ends the writer task.
        self.take_stdin();
        drop(
            self.output_probe
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        self.state.send_if_modified(|state| match state {
            SessionState::Running => {
                *state = SessionState::Exited(record);
                true
            }
            SessionState::Exited(_) => false,
        });
    }

    /// Drops our handle to the stdin writer (closing stdin once it is idle).
    pub fn take_stdin(&self) -> Option<mpsc::Sender<StdinOp>> {
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Waits for a recovered session's process to exit (through its pidfd,
/// which also guards against pid reuse). Its exit status is not knowable:
/// it was never our child.
pub async fn supervise_detached(
    session: Arc<Session>,
    pidfd: crate::pidfd::PidFd,
) -> Arc<ExitRecord> {
    while !pidfd.wait_exit(Duration::from_secs(3600)).await {}
    let termination = termination_of(&session);
    session.output.finish();
    Arc::new(ExitRecord {
        exit_code: None,
        signal: None,
        reason: termination
            .as_ref()
            .map(|t| t.reason)
            .unwrap_or(CompletionReason::Lost),
        source: termination.map(|t| t.source),
        exited_at: SystemTime::now(),
        exited_instant: Instant::now(),
    })
}

/// Reads the child's output and waits for its exit, and returns how it
/// ended; the caller records the exit (events) and then calls
/// `mark_exited`. Returns None when the daemon hands its sessions over
/// (`handing_over` turns true): it stops between two steps, so every byte
/// it took from the pipe is stored, and the next daemon reads on. Output
/// reaches the log without passing through memory first (`ingest.rs`).
/// Exit comes from the direct child, never from EOF: after
/// the exit, what is still readable is drained until `final_drain` of
/// quiet (or 1 MiB), so a descendant holding the pipe cannot keep the
/// session running. Besides output and exit, the loop wakes only for the
/// timeout, a watch match's linger and a flooded log's tidy, each armed
/// only while it applies.
pub async fn supervise(
    session: Arc<Session>,
    mut output: OutputSource,
    mut exit_rx: oneshot::Receiver<ChildExit>,
    how: Supervision<impl FnOnce(Arc<Session>) + Send + 'static>,
) -> Option<Arc<ExitRecord>> {
    let Supervision {
        noise,
        final_drain,
        on_timeout,
        watch,
        mut handing_over,
        tests,
    } = how;
    let store = session.output.clone();
    let mut reading = Reading::new(noise, watch, tests);
    let mut eof = false;
    let timer = sleep_until(timeout_at(&session));
    tokio::pin!(timer);
    let mut on_timeout = Some(on_timeout);
    // Set while this session has used up its share of a multi-flood
    // (`fairness.rs`): its pipe is not read until then.
    let mut held_until: Option<Instant> = None;
    // Nothing read yet, nothing held: what a pipe holds, it tells itself.
    if output.is_pipe() {
        store.look_found_nothing();
    }

    let exit = loop {
        let linger = reading
            .watch
            .as_ref()
            .and_then(|w| w.matcher.as_ref()?.deadline());
        let tidy = store.tidy_due();
        tokio::select! {
            biased;
            chunk = output.next(&store, &mut reading.buf), if !eof && held_until.is_none() => match chunk {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    reading.found_empty(&store, output.is_pipe()).await;
                }
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    reading.took(&session, n).await;
                    fit_read_buffers(&mut reading.buf, &mut reading.filtered, n);
                    held_until = crate::fairness::charge(&session.id, n, Instant::now());
                }
            },
            exit = &mut exit_rx => break exit.ok(),
            () = handed_over(&mut handing_over) => {
                // What the noise filter holds is output the next daemon
                // will not judge again.
                finish_noise(&store, &mut reading.noise, &mut reading.filtered);
                return None;
            }
            () = sleep_until(linger), if linger.is_some() => {
                watch_step(&mut reading.watch, WatchMatcher::expire);
            }
            () = Watch::changed(&mut reading.watch) => {
                if let Some(w) = reading.watch.as_mut() {
                    w.renew();
                }
            }
            () = sleep_until(tidy), if tidy.is_some() => store.tidy().await,
            () = sleep_until(held_until), if held_until.is_some() => held_until = None,
            _ = &mut timer, if on_timeout.is_some() => {
                if let Some(f) = on_timeout.take() {
                    f(session.clone());
                }
            }
        }
    };
    session.reaped.store(true, Ordering::SeqCst);
    if !eof {
        reading.drain(&session, &mut output, final_drain).await;
    }
    Some(reading.finish(&session, exit).await)
}

/// What a supervisor reads with: its buffers, the noise filter, the watch
/// and the test run, which every stored chunk goes through in turn.
struct Reading {
    buf: Vec<u8>,
    filtered: Vec<u8>,
    noise: NoiseFilter,
    watch: Option<Watch>,
    tests: Option<TestRun>,
}

impl Reading {
    fn new(noise: NoiseFilter, watch: Option<Watch>, tests: Option<TestRun>) -> Reading {
        Reading {
            buf: vec![0u8; MIN_READ_BUF],
            filtered: Vec::with_capacity(MIN_READ_BUF),
            noise,
            watch,
            tests,
        }
    }

    /// Stores the `n` bytes just read into `buf`, through the noise
    /// filter, and feeds what passed to the watch and the test run.
    async fn took(&mut self, session: &Session, n: usize) {
        let store = &session.output;
        self.noise
            .set_terminating(session.terminating.load(Ordering::Relaxed));
        store_chunk(store, &mut self.noise, &self.buf[..n], &mut self.filtered).await;
        watch_step(&mut self.watch, |m, now| m.feed(&self.filtered, now));
        tests_step(store, &mut self.tests, &self.filtered);
    }

    /// Asked to drain, and the source was empty: what the noise filter
    /// holds is output now (a shell command's end, `shell/`).
    async fn found_empty(&mut self, store: &Arc<OutputStore>, is_pipe: bool) {
        if finish_noise(store, &mut self.noise, &mut self.filtered) {
            store.compact().await;
        }
        watch_step(&mut self.watch, |m, now| m.feed(&self.filtered, now));
        tests_step(store, &mut self.tests, &self.filtered);
        if is_pipe {
            store.look_found_nothing();
        }
        store.mark_drained();
    }

    /// After the drain: what the noise filter held is output too (stored
    /// and watched), the watch's last matches go out, and the run's end is
    /// recorded on its store.
    async fn finish(&mut self, session: &Session, exit: Option<ChildExit>) -> Arc<ExitRecord> {
        let store = &session.output;
        if finish_noise(store, &mut self.noise, &mut self.filtered) {
            store.compact().await;
        }
        watch_step(&mut self.watch, |m, now| m.feed(&self.filtered, now));
        watch_step(&mut self.watch, WatchMatcher::finish);
        tests_step(store, &mut self.tests, &self.filtered);
        finish_tests(session, self.tests.take()).await;
        let record = exit_record(session, exit);
        if store.tidy_due().is_some() {
            store.tidy().await;
        }
        store.finish();
        record
    }

    /// The final drain: everything the child wrote is already in the
    /// pipe; a descendant may add more, but only until it has been quiet
    /// for `final_drain` (and at most 1 MiB).
    async fn drain(&mut self, session: &Session, output: &mut OutputSource, final_drain: Duration) {
        const FINAL_DRAIN_MAX: usize = 1 << 20;
        let mut drained = 0usize;
        while drained < FINAL_DRAIN_MAX {
            match tokio::time::timeout(final_drain, output.next(&session.output, &mut self.buf))
                .await
            {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => {
                    drained += n;
                    self.took(session, n).await;
                }
            }
        }
    }
}

/// How the session ended: the child's status (None when unknowable), and
/// why, from the termination procd started if it did.
fn exit_record(session: &Session, exit: Option<ChildExit>) -> Arc<ExitRecord> {
    let termination = session
        .termination
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (exit_code, signal) = match exit {
        Some(ChildExit::Code(c)) => (Some(c), None),
        Some(ChildExit::Signal(s)) => (Some(-s), Some(s)),
        None => (None, None),
    };
    let (reason, source) = match (termination, exit) {
        (Some(t), _) => (t.reason, Some(t.source)),
        (None, None) => (CompletionReason::Lost, None),
        (None, Some(_)) => (CompletionReason::Exited, None),
    };
    Arc::new(ExitRecord {
        exit_code,
        signal,
        reason,
        source,
        exited_at: SystemTime::now(),
        exited_instant: Instant::now(),
    })
}

/// How a supervisor treats its session's output and life.
pub struct Supervision<T> {
    pub noise: NoiseFilter,
    /// How long output must be quiet after the exit to end the drain.
    pub final_drain: Duration,
    /// Called once if the session's timeout passes.
    pub on_timeout: T,
    pub watch: Option<Watch>,
    /// Turns true when the daemon hands its sessions over.
    pub handing_over: watch::Receiver<bool>,
    /// The run's test runner, read from its first byte (None for a run
    /// that is no test run, and for one taken over mid-way: a count from
    /// half the output would be wrong).
    pub tests: Option<TestRun>,
}

/// Reads what was just stored into the test run, and shows its counts.
fn tests_step(store: &OutputStore, tests: &mut Option<TestRun>, stored: &[u8]) {
    let Some(run) = tests.as_mut() else { return };
    run.feed(stored, store.end());
    if run.take_changed() {
        store.set_tests(run.live());
    }
}

/// The run's end: the runner's totals, or those of the JUnit report the
/// spawn named (read off the event loop), or none.
async fn finish_tests(session: &Session, tests: Option<TestRun>) {
    let from_output = tests.and_then(|mut run| run.finish());
    let from_report = match session.spec.junit.clone() {
        Some(path) => tokio::task::spawn_blocking(move || crate::testrun::read_junit(&path))
            .await
            .ok()
            .flatten(),
        None => None,
    };
    if from_report.is_some() || from_output.is_some() || session.output.tests().is_some() {
        session.output.set_tests(from_report.or(from_output));
    }
}

/// Resolves once the daemon hands its sessions over (never if it cannot).
async fn handed_over(handing_over: &mut watch::Receiver<bool>) {
    if handing_over.wait_for(|h| *h).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// When the run's timeout fires: counted from its start, which a
/// recovered session's is too (`timeout_at` in the checkpoint is the same
/// instant).
fn timeout_at(session: &Session) -> Option<Instant> {
    session
        .spec
        .timeout
        .and_then(|t| session.started_instant.checked_add(t))
}

/// Sleeps until `due` (a watch match has waited long enough for its
/// following lines; the log's punched head is due to be collapsed);
/// forever without one.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}

/// The read buffer starts small (many sessions idle).
const MIN_READ_BUF: usize = 16 * 1024;
const MAX_READ_BUF: usize = 1 << 20;

/// Sizes the read buffers to the output's pace after a read of `n` bytes:
/// doubled while reads fill them (a flood: fewer, larger reads), shrunk
/// once reads are small again, so a session that flooded once does not
/// hold megabytes for the rest of its life.
fn fit_read_buffers(buf: &mut Vec<u8>, filtered: &mut Vec<u8>, n: usize) {
    if n == buf.len() && buf.len() < MAX_READ_BUF {
        buf.resize(buf.len() * 2, 0);
    } else if n < buf.len() / 4 && buf.len() > MIN_READ_BUF {
        let fit = (n * 2).next_power_of_two().max(MIN_READ_BUF);
        buf.truncate(fit);
        buf.shrink_to_fit();
        filtered.clear();
        filtered.shrink_to(fit);
    }
}

/// Runs one step of the session's watch matcher (feed, expire, finish),
/// if it has one, and delivers what the step yields.
fn watch_step(
    watch: &mut Option<Watch>,
    step: impl FnOnce(&mut WatchMatcher, Instant) -> Vec<WatchOutcome>,
) {
    if let Some(Watch {
        matcher: Some(matcher),
        deliver,
        ..
    }) = watch
    {
        for outcome in step(matcher, Instant::now()) {
            deliver(outcome);
        }
    }
}

/// Filters a chunk the source brought (in the log, undecided, or only in
/// memory) and settles it: what the filter passes is output from now on.
async fn store_chunk(
    store: &Arc<OutputStore>,
    noise: &mut NoiseFilter,
    chunk: &[u8],
    filtered: &mut Vec<u8>,
) {
    filtered.clear();
    noise.push(chunk, filtered);
    if store.settle(filtered, noise.held()) {
        store.compact().await;
    }
}

/// Decides what the noise filter still holds (the output ended, or is
/// handed over); returns true when the log should be compacted.
fn finish_noise(store: &OutputStore, noise: &mut NoiseFilter, filtered: &mut Vec<u8>) -> bool {
    filtered.clear();
    noise.finish(filtered);
    store.settle(filtered, noise.held())
}

/// Owns the write end of a session's stdin; one write at a time, so a full
/// pipe blocks only this session's writers, never the daemon.
pub async fn stdin_writer(mut sink: StdinSink, mut ops: mpsc::Receiver<StdinOp>) {
    use tokio::io::AsyncWriteExt;
    // Whether the cursor is at the start of a line (for the PTY EOF rule).
    let mut at_line_start = true;
    while let Some(op) = ops.recv().await {
        match op {
            StdinOp::Write(bytes, reply) => {
                let result = match &mut sink {
                    StdinSink::Pipe(p) => p.write_all(&bytes).await,
                    StdinSink::Pty(p, _) => p.write_all(&bytes).await,
                };
                if let Some(last) = bytes.last() {
                    at_line_start = matches!(last, b'\n' | b'\r');
                }
                let _ = reply.send(result);
            }
            StdinOp::Close(reply) => match sink {
                StdinSink::Pipe(pipe) => {
                    drop(pipe);
                    let _ = reply.send(Ok("stdin closed"));
                    return;
                }
                StdinSink::Pty(ref mut pty, ref master) => {
                    let eof = pty_eof_char(master);
                    // At a line start one EOF ends input; mid-line the first
                    // one only submits the pending text.
                    let bytes: &[u8] = if at_line_start { &[eof] } else { &[eof, eof] };
                    let result = pty.write_all(bytes).await.map(|()| "EOF sent");
                    at_line_start = true;
                    let _ = reply.send(result);
                }
            },
            StdinOp::Resize(rows, cols, reply) => {
                let result = match &sink {
                    StdinSink::Pty(p, _) => p
                        .resize(pty_process::Size::new(rows, cols))
                        .map_err(std::io::Error::other),
                    StdinSink::Pipe(_) => Err(std::io::Error::other("not a PTY session")),
                };
                let _ = reply.send(result);
            }
        }
    }
}

/// The terminal's EOF character (VEOF), ^D unless the child changed it.
fn pty_eof_char(master: &std::os::fd::OwnedFd) -> u8 {
    match nix::sys::termios::tcgetattr(master) {
        Ok(t) => t.control_chars[nix::sys::termios::SpecialCharacterIndices::VEOF as usize],
        Err(_) => 4,
    }
}

/// Whether termination was requested for `session` (used for reporting).
pub fn termination_of(session: &Session) -> Option<Termination> {
    session
        .termination
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::{fit_read_buffers, MAX_READ_BUF, MIN_READ_BUF};

    #[test]
    fn read_buffers_grow_in_a_flood_and_shrink_after_it() {
        let (mut buf, mut filtered) = (vec![0u8; MIN_READ_BUF], Vec::new());
        while buf.len() < MAX_READ_BUF {
            let n = buf.len();
            filtered.resize(n, 0);
            fit_read_buffers(&mut buf, &mut filtered, n);
        }
        fit_read_buffers(&mut buf, &mut filtered, MAX_READ_BUF);
        assert_eq!(buf.len(), MAX_READ_BUF, "capped");
        fit_read_buffers(&mut buf, &mut filtered, MAX_READ_BUF / 2);
        assert_eq!(buf.len(), MAX_READ_BUF, "a half-full read keeps the size");
        fit_read_buffers(&mut buf, &mut filtered, 100);
        assert_eq!(buf.len(), MIN_READ_BUF);
        assert!(buf.capacity() <= 2 * MIN_READ_BUF && filtered.capacity() <= 2 * MIN_READ_BUF);
    }
}
