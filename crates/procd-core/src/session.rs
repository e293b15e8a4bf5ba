//! One supervised process: what was asked for, its identity, its output,
//! and its state. A session's state changes in exactly one place, the
//! supervisor task (`supervise`), which owns the child's exit receiver and
//! output pipe: it moves the state to `Exited` once, after the final drain.

use crate::identity::ProcessIdentity;
use crate::observation::watch::{WatchMatcher, WatchOutcome};
use crate::output::redact::Redactor;
use crate::output::store::OutputStore;
use crate::tree::kill::TreeSpec;
use procd_proto::CompletionReason;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, watch};

mod seen;
mod spec;
mod stdin;
pub use stdin::{stdin_writer, StdinOp, StdinSink};
mod supervise;

use seen::Seen;

pub use spec::{Launch, NextRun, Restarts, SessionSpec};
pub use supervise::{supervise, supervise_detached, Supervision};

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
    slot: Mutex<Option<crate::admission::slot::RunningSlot>>,
    /// What is known of its tree and its input (docs/agents.md), behind one lock.
    seen: Mutex<Seen>,
    /// Its stdin pipe or terminal (None with `stdin: "null"`, or when the
    /// root was gone before it could be looked at).
    pub input: Option<crate::observation::observe::InputId>,
    /// Where it stands against its ready condition (docs/agents.md).
    readiness: watch::Sender<crate::observation::readiness::Readiness>,
    /// A duplicate of the output pipe's read end (or the PTY master), to
    /// ask how much output the supervisor has not read yet; dropped at the
    /// exit, so a leftover writer is not kept from EPIPE.
    output_probe: Mutex<Option<std::os::fd::OwnedFd>>,
    /// Its restart policy's state, shared by all its runs.
    pub restarts: Option<Arc<Restarts>>,
    /// The run that replaced this one (set before this one is marked
    /// exited, so whoever waits on it follows on to the next).
    successor: OnceLock<Arc<Session>>,
    /// Moved on after each change to what its checkpoint record holds
    /// beyond the fixed spec (its exit, readiness, `notify_on_complete`,
    /// asks): a write remakes the record only when this moved, without
    /// visiting those (`record_version`).
    record_version: std::sync::atomic::AtomicU64,
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
            env_dump: crate::output::redact::is_env_dump(&spec.command),
            shown_command: OnceLock::new(),
            adopted: watch::channel(None).0,
            slot: Mutex::new(None),
            seen: Mutex::new(Seen::default()),
            input: None,
            readiness: watch::channel(crate::observation::readiness::Readiness::Unconditioned).0,
            output_probe: Mutex::new(None),
            restarts: None,
            successor: OnceLock::new(),
            record_version: std::sync::atomic::AtomicU64::new(0),
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
    /// What the last observation saw of its tree, and whether files
    /// under its cwd changed since it started: one look (a running
    /// session only; poll and list ask both).
    pub fn observed_and_stale(
        &self,
    ) -> (
        crate::observation::observe::Observation,
        Option<crate::observation::stale::Stale>,
    ) {
        if !self.is_running() {
            return Default::default();
        }
        let seen = self.seen();
        (seen.observed.clone(), seen.stale.clone())
    }

    /// Files under its cwd changed (`observation/stale.rs`'s watch).
    pub fn mark_stale(&self, changed: Vec<std::path::PathBuf>) {
        let mut seen = self.seen();
        seen.stale = Some(crate::observation::stale::Stale::add(
            seen.stale.take(),
            changed,
        ));
    }

    pub fn observed(&self) -> crate::observation::observe::Observation {
        if !self.is_running() {
            return Default::default();
        }
        self.seen().observed.clone()
    }

    /// Records an observation; returns the ports that are new since the last.
    pub fn set_observed(&self, mut now: crate::observation::observe::Observation) -> Vec<u16> {
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
        seen.resources_read = now.taken;
        seen.observed = now;
        new
    }

    /// Whether its resources were last read longer than `age` ago (or
    /// never).
    pub fn resources_older_than(&self, age: Duration) -> bool {
        self.seen()
            .resources_read
            .is_none_or(|read| read.elapsed() > age)
    }

    /// Resources read just now, newer than the last observation's.
    pub fn set_resources(&self, resources: procd_proto::Resources) {
        let mut seen = self.seen();
        seen.observed.resources = resources;
        seen.resources_read = Some(Instant::now());
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

    pub fn readiness(&self) -> crate::observation::readiness::Readiness {
        *self.readiness.borrow()
    }

    pub fn subscribe_readiness(&self) -> watch::Receiver<crate::observation::readiness::Readiness> {
        self.readiness.subscribe()
    }

    pub fn set_readiness(&self, now: crate::observation::readiness::Readiness) {
        self.readiness.send_replace(now);
        self.record_moved();
    }

    /// Gives the session its running slot (before it is shared).
    pub fn hold_slot(&mut self, slot: crate::admission::slot::RunningSlot) {
        *self.slot.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(slot);
    }

    /// Takes the running slot (a restart hands it to the next run).
    pub fn take_slot(&self) -> Option<crate::admission::slot::RunningSlot> {
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
        self.record_moved();
    }

    pub fn set_notify_on_complete(&self, on: bool) {
        self.notify_on_complete.store(on, Ordering::SeqCst);
        self.record_moved();
    }

    /// Where its checkpoint record's changing part stands: read before
    /// the record is made, so a change that races the making moves it
    /// again and the next write remakes it.
    pub(crate) fn record_version(&self) -> u64 {
        self.record_version.load(Ordering::Acquire)
    }

    /// After a change to what `record_version` covers.
    fn record_moved(&self) {
        self.record_version.fetch_add(1, Ordering::Release);
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
        self.record_moved();
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
        self.record_moved();
    }

    /// Drops our handle to the stdin writer (closing stdin once it is idle).
    pub fn take_stdin(&self) -> Option<mpsc::Sender<StdinOp>> {
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take()
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
