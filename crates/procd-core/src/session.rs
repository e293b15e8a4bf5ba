//! One supervised command: what was asked for, its run (the process and
//! what is its own), its output, and its state. What changes of it is in
//! two places, both private to this file: the `SessionView` its waiters
//! follow (state, run, its runs' count and backoff, readiness, asks,
//! adoption, a termination asked for), one watch channel; and the `Core`
//! only its own methods touch (stdin, slot, what was seen of its tree),
//! one lock. A supervisor
//! (`supervise`) owns a run's exit receiver and output pipe; the
//! registry's `record_end` moves the state to `Exited` once, after the
//! final drain, or a restart gives the session its next run
//! (`begin_run`): one session from its first run to its end.
//!
//! Beside it: `session/opening.rs` (what a session starts with, the one
//! way in), `run.rs` (a run's own, and where a restarting session's runs
//! stand), `state.rs` (how it ended, a termination asked for, what a
//! caller may change), `spec.rs` (what was asked for; the launch; a
//! restart's `Restarts`), `supervise.rs` (the supervisor task, which reports to the
//! registry and never calls it), `seen.rs` (what is known of its tree and
//! input), `stdin.rs` (the stdin writer), `watch_asks.rs` (the
//! supervisor's watch patterns, made again when `update` changes them).

use crate::identity::ProcessIdentity;
use crate::output::redact::Redactor;
use crate::output::store::OutputStore;
use crate::tree::kill::TreeSpec;
use procd_proto::CompletionReason;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

mod opening;
mod run;
mod seen;
mod spec;
mod state;
mod stdin;
mod watch_asks;
pub use stdin::{stdin_writer, StdinOp, StdinSink};
pub use watch_asks::Watch;
mod supervise;

use seen::Seen;

pub use opening::{Opening, Origin, Started};
pub use run::{NextRunParts, Run};
pub use spec::{Launch, NextRun, Restarts, Runs, SessionSpec};
pub use state::{Asks, ExitRecord, SessionState, Termination};
pub use supervise::{supervise, supervise_detached, Report, Reports, Supervision};

pub struct Session {
    pub id: String,
    pub spec: SessionSpec,
    pub output: Arc<OutputStore>,
    /// Whether its command dumps the environment, so that its output gets
    /// the `NAME=value` redaction pass; worked out once, not per poll.
    pub env_dump: bool,
    /// The command as callers see it, redacted once: neither the command
    /// nor the daemon's redaction rules change, and polls and lists would
    /// otherwise run the redaction regexes on every call.
    shown_command: String,
    /// Its restart policy's state (its runs, the last exit, the launch).
    pub restarts: Option<Arc<Restarts>>,
    /// What others wait on, in one channel: a waiter subscribes once and
    /// looks again at whatever changed (`SessionView`).
    view: watch::Sender<SessionView>,
    /// What only this session's methods read and change, behind one lock
    /// that is never held across an await or while `view` is sent.
    core: Mutex<Core>,
}

/// What a session shows its waiters: its state and everything a change
/// of which wakes someone (wait, yield, ready, stacks, the checkpoint).
#[derive(Clone)]
pub struct SessionView {
    pub state: SessionState,
    /// Its run: the process and what is its own (`Run`).
    pub run: Arc<Run>,
    /// Where its runs stand under a restart policy (None without one):
    /// the count, the last exit, the backoff it may be in.
    runs: Option<Runs>,
    /// Where it stands against its ready condition (docs/agents.md).
    pub readiness: crate::observation::readiness::Readiness,
    /// What `update` may change: its watch patterns and `meta`.
    pub asks: Asks,
    /// Moved on by each change of `asks` (the supervisor's watch renews
    /// its matcher only then, so its counts survive other changes).
    asks_version: u64,
    /// Starts as asked; switched on when watch patterns are exhausted,
    /// and set by `update`.
    pub notify_on_complete: bool,
    /// Processes that escaped the group and the marker and were still the
    /// root's children (it is their subreaper) when the root exited: they
    /// were reparented to the daemon, and this records whose they were.
    /// `None` until the scan after the root's exit has run.
    pub adopted: Option<Arc<[ProcessIdentity]>>,
    /// Why procd is ending it, while it is: the supervisor reports the
    /// exit as killed or timeout rather than exited, the noise filter
    /// knows kill reports are coming, and a restart waiting out its
    /// backoff gives up.
    pub termination: Option<Termination>,
    /// Set while a watch's restart signals its tree (`signal_for_change`):
    /// the tree names the cgroup the next run gets, so the next run starts
    /// only once this is clear (`change_signalled`).
    change_signal: bool,
    /// Moved on by every change to what the checkpoint record holds
    /// beyond the fixed spec: a write remakes the record only when this
    /// moved, without visiting those (`record_version`).
    record_version: u64,
}

impl SessionView {
    /// Whether `run` is its run, and running.
    pub fn is_current_run(&self, run: &Arc<Run>) -> bool {
        Arc::ptr_eq(&self.run, run) && matches!(self.state, SessionState::Running)
    }
}

/// What a session keeps for itself, changed together under one lock.
struct Core {
    /// Set as soon as the root has been reaped (its pid is free again).
    reaped: bool,
    /// The stdin writer; None once a pipe is closed (or stdin is null).
    stdin: Option<mpsc::Sender<StdinOp>>,
    /// Set by close_stdin (a PTY keeps its writer for resizes).
    stdin_closed: bool,
    /// The `max_running` slot this session holds while it runs.
    slot: Option<crate::admission::slot::RunningSlot>,
    /// What is known of its tree and its input (docs/agents.md).
    seen: Seen,
    /// A duplicate of the output pipe's read end (or the PTY master), to
    /// ask how much output the supervisor has not read yet; dropped at the
    /// exit, so a leftover writer is not kept from EPIPE.
    output_probe: Option<std::os::fd::OwnedFd>,
    /// OOM kills in its cgroup already reported as `oom` events.
    oom_reported: u64,
}

impl Core {
    /// Output the program wrote that the supervisor has not read yet: a
    /// prompt in flight is not silence.
    fn output_unread(&self) -> bool {
        self.output_probe
            .as_ref()
            .is_some_and(|fd| rustix::io::ioctl_fionread(fd).is_ok_and(|n| n > 0))
    }
}

/// How long a session must be quiet, blocked on its input, before it
/// counts as waiting for input (docs/agents.md).
pub const INPUT_QUIET: Duration = Duration::from_millis(250);

impl Session {
    /// Makes a session of what it starts with (`Registry::admit`).
    pub(crate) fn new(opening: Opening, redactor: &Redactor) -> Session {
        let Opening {
            id,
            spec,
            run,
            output,
            stdin,
            origin,
            output_probe,
            slot,
            restarts,
            readiness,
            ended,
            adopted,
        } = opening;
        let (restarts, runs) = restarts.unzip();
        let view = SessionView {
            state: ended.map_or(SessionState::Running, SessionState::Exited),
            run: Arc::new(run),
            runs,
            readiness,
            asks: Asks {
                watch_patterns: spec.watch_patterns.clone().into(),
                meta: spec.meta.clone(),
            },
            asks_version: 0,
            notify_on_complete: spec.notify_on_complete,
            adopted,
            termination: None,
            change_signal: false,
            record_version: 0,
        };
        let core = Core {
            // Not our child (handed over or recovered): no pid to pin.
            reaped: origin != Origin::Spawned,
            stdin_closed: stdin.is_none() && origin != Origin::Spawned,
            stdin,
            slot,
            seen: Seen::default(),
            output_probe,
            oom_reported: 0,
        };
        Session {
            id,
            output,
            env_dump: crate::output::redact::is_env_dump(&spec.command),
            shown_command: redactor.command(&spec.command).into_owned(),
            restarts,
            view: watch::channel(view).0,
            core: Mutex::new(core),
            spec,
        }
    }

    fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its run now.
    pub fn run(&self) -> Arc<Run> {
        self.view.borrow().run.clone()
    }

    /// When its run started, as RFC 3339 (`started_at` on the wire).
    pub fn started_at_text(&self) -> String {
        self.view.borrow().run.started_at_text().to_string()
    }

    /// When its run started (monotonic).
    pub fn started_instant(&self) -> Instant {
        self.view.borrow().run.started_instant()
    }

    /// The command as returned to callers (redacted).
    pub fn shown_command(&self) -> &str {
        &self.shown_command
    }

    /// Whether its run has a terminal (`Run::pty`).
    pub fn pty(&self) -> bool {
        self.view.borrow().run.pty
    }

    pub fn is_detached(&self) -> bool {
        self.view.borrow().run.note.is_some()
    }

    pub fn pid(&self) -> i32 {
        self.view.borrow().run.pid()
    }

    pub fn state(&self) -> SessionState {
        self.view.borrow().state.clone()
    }

    /// Its state and its run, as one look sees them.
    pub fn state_and_run(&self) -> (SessionState, Arc<Run>) {
        let view = self.view.borrow();
        (view.state.clone(), view.run.clone())
    }

    pub fn is_running(&self) -> bool {
        matches!(self.view.borrow().state, SessionState::Running)
    }

    /// Follows every change of its `SessionView` (state, run, readiness,
    /// asks, adoption).
    pub fn subscribe(&self) -> watch::Receiver<SessionView> {
        self.view.subscribe()
    }

    /// Changes its view, and its checkpoint record's version with it.
    fn change_view(&self, change: impl FnOnce(&mut SessionView)) {
        self.view.send_modify(|view| {
            change(view);
            view.record_version += 1;
        });
    }

    /// Waits until the session has exited (or `limit` passes): a
    /// restarting session's end, not a run's.
    pub async fn wait_exited(&self, limit: Duration) -> Option<Arc<ExitRecord>> {
        tokio::time::timeout(limit, self.wait_end()).await.ok()?
    }

    /// `wait_exited` without a limit.
    pub async fn wait_end(&self) -> Option<Arc<ExitRecord>> {
        let mut rx = self.view.subscribe();
        let view = rx.wait_for(|v| v.state.exit().is_some()).await.ok()?;
        view.state.exit().cloned()
    }

    /// Names this run in a once-only event's key: the id, and the run
    /// after a restart (each run is ready once).
    pub fn run_key(&self) -> String {
        match self.view.borrow().runs.as_ref().map(|r| r.count.run) {
            Some(run) if run > 1 => format!("{} run {run}", self.id),
            _ => self.id.clone(),
        }
    }

    /// Whether `run` is still its run, and running: what a task that
    /// serves one run (readiness, the OOM watch, a file watch) goes on
    /// while.
    pub fn is_current_run(&self, run: &Arc<Run>) -> bool {
        self.view.borrow().is_current_run(run)
    }

    /// What identifies this session's processes for the kill code.
    pub fn tree(&self) -> TreeSpec {
        let root_pinned = !self.core().reaped;
        let view = self.view.borrow();
        let adopted = view.adopted.as_deref().unwrap_or(&[]).to_vec();
        TreeSpec {
            root: view.run.identity,
            pgid: view.run.identity.pid,
            marker: format!("PROCD_SESSION_ID={}", self.id).into_bytes(),
            root_pinned,
            adopted,
            cgroup: view.run.cgroup.clone(),
        }
    }

    /// The supervisor: its root has been reaped (its pid is free again).
    fn mark_reaped(&self) {
        self.core().reaped = true;
    }

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
        let core = self.core();
        (core.seen.observed.clone(), core.seen.stale.clone())
    }

    /// Files under its cwd changed (`observation/stale.rs`'s watch).
    pub fn mark_stale(&self, changed: Vec<std::path::PathBuf>) {
        let seen = &mut self.core().seen;
        seen.stale = Some(crate::observation::stale::Stale::add(
            seen.stale.take(),
            changed,
        ));
    }

    /// The last observation of its tree (empty once it has exited).
    pub fn observed(&self) -> crate::observation::observe::Observation {
        if !self.is_running() {
            return Default::default();
        }
        self.core().seen.observed.clone()
    }

    /// Records an observation; returns the ports that are new since the last.
    pub fn set_observed(&self, mut now: crate::observation::observe::Observation) -> Vec<u16> {
        let quiet = self.output.quiet_for();
        let seen = &mut self.core().seen;
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
        self.core()
            .seen
            .resources_read
            .is_none_or(|read| read.elapsed() > age)
    }

    /// Resources read just now, newer than the last observation's.
    pub fn set_resources(&self, resources: procd_proto::Resources) {
        let seen = &mut self.core().seen;
        seen.observed.resources = resources;
        seen.resources_read = Some(Instant::now());
    }

    /// Whether anything can be typed into it (a pipe or terminal that is
    /// still open, of a running session).
    pub fn takes_input(&self) -> bool {
        let open = !self.core().stdin_closed;
        self.takes_input_given(open)
    }

    fn takes_input_given(&self, stdin_open: bool) -> bool {
        let view = self.view.borrow();
        view.run.input.is_some() && stdin_open && matches!(view.state, SessionState::Running)
    }

    /// How long nothing has happened on its terminal or pipes: no output,
    /// and no input written (a program needs a moment to take what it was
    /// sent; until then it still looks blocked in its read).
    pub fn idle_for(&self) -> Duration {
        let quiet = self.output.quiet_for();
        self.core().seen.idle_for(quiet)
    }

    /// Whether the last observation saw a process blocked reading its
    /// input (a run that `waiting_for_input` may soon confirm).
    pub fn seen_reading_input(&self) -> bool {
        let seen = &self.core().seen;
        seen.observed.reading_input && seen.observed.reading_since.is_some()
    }

    /// Whether it is waiting for input now: observations have seen a
    /// process blocked reading its input for `INPUT_QUIET`, with no output
    /// and no input since they began. (One observation is not enough: a
    /// prompt the program wrote just before blocking may still be on its
    /// way through the kernel — a PTY's flip buffer — and show up later.)
    pub fn waiting_for_input(&self) -> bool {
        let quiet = self.output.quiet_for();
        let core = self.core();
        self.waiting_given(&core, quiet)
    }

    /// `waiting_for_input` with the core already locked.
    fn waiting_given(&self, core: &Core, output_quiet: Duration) -> bool {
        self.takes_input_given(!core.stdin_closed)
            && core.seen.blocked_reading(core.seen.idle_for(output_quiet))
            && !core.output_unread()
    }

    /// Returns once every byte written to the output before the call is
    /// in the store (`OutputStore::drained`); at once, with no round trip
    /// to the supervisor, when its last look found the pipe empty and the
    /// pipe still is.
    pub async fn output_drained(&self) {
        let empty = || {
            self.core()
                .output_probe
                .as_ref()
                .is_some_and(|fd| rustix::io::ioctl_fionread(fd) == Ok(0))
        };
        if !self.output.drained_now(empty) {
            self.output.drained().await;
        }
    }

    /// Records that input was written (a new episode may begin).
    pub fn note_input(&self) {
        let seen = &mut self.core().seen;
        seen.last_input = Some(Instant::now());
        seen.input_wanted_at = None;
    }

    /// Whether an `input_wanted` event is due: it is waiting, and no event
    /// was sent for this episode (same output end, not seen reading since).
    pub fn take_input_wanted(&self) -> bool {
        let quiet = self.output.quiet_for();
        let mut core = self.core();
        if !self.waiting_given(&core, quiet) {
            if !core.seen.observed.reading_input {
                core.seen.input_wanted_at = None;
            }
            return false;
        }
        let end = self.output.end();
        if core.seen.input_wanted_at == Some(end) {
            return false;
        }
        core.seen.input_wanted_at = Some(end);
        true
    }

    pub fn readiness(&self) -> crate::observation::readiness::Readiness {
        self.view.borrow().readiness
    }

    /// A run ended (`record`, unless a previous daemon already recorded
    /// it) and `next` is due: it is restarting until that starts.
    pub fn run_ended(&self, record: Option<Arc<ExitRecord>>, next: NextRun) {
        self.change_runs(|runs| {
            if let Some(record) = record {
                runs.last_exit = Some(record);
            }
            runs.next = Some(next);
        });
    }

    /// No next run will start (the session ends as its last run did).
    pub fn next_run_abandoned(&self) {
        self.change_runs(|runs| runs.next = None);
    }

    /// Its run is being ended because `files` changed.
    pub fn ended_by_change(&self, files: Vec<String>) {
        self.change_runs(|runs| runs.changed = files);
    }

    /// The files whose change ended the last run, once.
    pub fn take_changed(&self) -> Vec<String> {
        let mut changed = Vec::new();
        self.change_runs(|runs| changed = std::mem::take(&mut runs.changed));
        changed
    }

    /// Changes where its runs stand (nothing without a restart policy).
    fn change_runs(&self, change: impl FnOnce(&mut Runs)) {
        self.view.send_if_modified(|view| match &mut view.runs {
            Some(runs) => {
                change(runs);
                view.record_version += 1;
                true
            }
            None => false,
        });
    }

    /// Records where `run` stands against its ready condition; nothing
    /// once it is not the session's run (a restart's next run starts
    /// pending again).
    pub fn set_readiness(
        &self,
        run: &Arc<Run>,
        now: crate::observation::readiness::Readiness,
    ) -> bool {
        self.view.send_if_modified(|view| {
            let ours = view.is_current_run(run);
            if ours {
                view.readiness = now;
                view.record_version += 1;
            }
            ours
        })
    }

    /// Whether it holds a running slot (one taken over holds none until
    /// its next run).
    pub fn holds_slot(&self) -> bool {
        self.core().slot.is_some()
    }

    /// Gives the running slot back (once; later calls find none).
    pub fn release_slot(&self) {
        let slot = self.core().slot.take();
        drop(slot);
    }

    /// Records the orphans the root left to the daemon (see `adopted`).
    pub fn set_adopted(&self, orphans: Vec<ProcessIdentity>) {
        self.view
            .send_modify(|view| view.adopted = Some(orphans.into()));
    }

    /// Waits (up to `limit`) until the orphans the root left behind are
    /// known, so that a kill right after the exit still finds them.
    pub async fn adoption_known(&self, limit: Duration) {
        let mut rx = self.view.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|v| v.adopted.is_some())).await;
    }

    /// Records why the session is being ended; the first request wins.
    /// A restart waiting out its backoff gives up (`termination_requested`).
    pub fn request_termination(&self, reason: CompletionReason, source: &str) {
        self.view.send_if_modified(|view| match view.termination {
            Some(_) => false,
            None => {
                view.termination = Some(Termination {
                    reason,
                    source: source.to_string(),
                });
                true
            }
        });
    }

    /// Forgets a termination request that did not end the session.
    pub fn clear_termination(&self) {
        self.view
            .send_if_modified(|view| view.termination.take().is_some());
    }

    /// Why procd is ending it, if it is (used for reporting).
    pub fn termination(&self) -> Option<Termination> {
        self.view.borrow().termination.clone()
    }

    /// Whether a termination is requested (read per output chunk).
    fn terminating(&self) -> bool {
        self.view.borrow().termination.is_some()
    }

    /// Returns once a termination is requested (at once if one is).
    pub async fn termination_requested(&self) {
        let mut rx = self.view.subscribe();
        // (The sender lives as long as `self`: no error to see.)
        let _ = rx.wait_for(|v| v.termination.is_some()).await;
    }

    /// Marks its tree as being signalled for a change (a watch's restart)
    /// until the guard is dropped, once no other such signal is under
    /// way; None when it has ended, or `restarting` says its next run is
    /// already due (its tree may then be the next run's).
    pub async fn signal_for_change(
        &self,
        restarting: impl Fn() -> bool,
    ) -> Option<ChangeSignal<'_>> {
        let mut rx = self.view.subscribe();
        loop {
            drop(rx.wait_for(|v| !v.change_signal).await);
            if !self.is_running() || restarting() {
                return None;
            }
            let marked = self
                .view
                .send_if_modified(|view| !std::mem::replace(&mut view.change_signal, true));
            if marked {
                return Some(ChangeSignal(self));
            }
        }
    }

    /// Returns once no signal for a change is under way (the next run may
    /// then take the cgroup).
    pub async fn change_signalled(&self) {
        let mut rx = self.view.subscribe();
        let _ = rx.wait_for(|v| !v.change_signal).await;
    }

    /// OOM kills in its cgroup already reported as `oom` events.
    pub fn oom_reported(&self) -> u64 {
        self.core().oom_reported
    }

    /// Raises the count of OOM kills reported to `kills`; returns the
    /// count before.
    pub fn count_oom_reported(&self, kills: u64) -> u64 {
        let mut core = self.core();
        let before = core.oom_reported;
        core.oom_reported = before.max(kills);
        before
    }

    pub fn notify_on_complete(&self) -> bool {
        self.view.borrow().notify_on_complete
    }

    pub fn enable_notify_on_complete(&self) {
        self.set_notify_on_complete(true);
    }

    pub fn set_notify_on_complete(&self, on: bool) {
        self.change_view(|view| view.notify_on_complete = on);
    }

    /// Where its checkpoint record's changing part stands: read before
    /// the record is made, so a change that races the making moves it
    /// again and the next write remakes it.
    pub(crate) fn record_version(&self) -> u64 {
        self.view.borrow().record_version
    }

    /// Its `meta` as the wire shows it.
    pub fn meta(&self) -> Option<serde_json::Value> {
        self.view.borrow().asks.meta.as_deref().cloned()
    }

    /// Its watch patterns and `meta` as they are now.
    pub fn asks(&self) -> Asks {
        self.view.borrow().asks.clone()
    }

    /// Changes its watch patterns or `meta` (`update`); a supervisor
    /// following the view matches new patterns from its next read.
    pub fn change_asks(&self, change: impl FnOnce(&mut Asks)) {
        self.change_view(|view| {
            change(&mut view.asks);
            view.asks_version += 1;
        });
    }

    pub fn stdin_closed(&self) -> bool {
        self.core().stdin_closed
    }

    /// Marks stdin closed; false if it already was.
    pub fn mark_stdin_closed(&self) -> bool {
        !std::mem::replace(&mut self.core().stdin_closed, true)
    }

    pub fn stdin_sender(&self) -> Option<mpsc::Sender<StdinOp>> {
        self.core().stdin.clone()
    }

    /// The next run of a restarting session begins (`Registry`'s
    /// restart, after its last run ended): the run and what was its last
    /// run's own (its stdin, its readiness, what was seen of its tree,
    /// its orphans) change together; the state stays Running. The view
    /// changes first: a `tree()` in between sees the new root as not
    /// pinned (it is then found by identity), never the old root pinned.
    pub(crate) fn begin_run(&self, next: NextRunParts) {
        let NextRunParts {
            run,
            count,
            stdin,
            output_probe,
            slot,
            readiness,
        } = next;
        self.change_view(|view| {
            view.run = Arc::new(run);
            if let Some(runs) = &mut view.runs {
                runs.count = count;
                runs.next = None;
            }
            view.readiness = readiness;
            view.adopted = None;
        });
        let (stdin, probe) = {
            let mut core = self.core();
            core.reaped = false;
            core.stdin_closed = false;
            core.seen = Seen::default();
            core.oom_reported = 0;
            if core.slot.is_none() {
                core.slot = slot;
            }
            let probe = std::mem::replace(&mut core.output_probe, output_probe);
            (std::mem::replace(&mut core.stdin, stdin), probe)
        };
        // The last run's writer ends with our sender.
        drop((stdin, probe));
    }

    /// Running -> Exited, once (`Registry::record_end` alone calls it).
    pub(crate) fn mark_exited(&self, record: Arc<ExitRecord>) {
        // Stdin is useless now; dropping our sender ends the writer task.
        // The probe goes too (a leftover writer then sees EPIPE).
        let (stdin, probe) = {
            let mut core = self.core();
            (core.stdin.take(), core.output_probe.take())
        };
        drop((stdin, probe));
        self.view.send_if_modified(|view| match view.state {
            SessionState::Running => {
                view.state = SessionState::Exited(record);
                view.record_version += 1;
                true
            }
            SessionState::Exited(_) => false,
        });
    }

    /// Drops our handle to the stdin writer (closing stdin once it is idle).
    pub fn take_stdin(&self) -> Option<mpsc::Sender<StdinOp>> {
        self.core().stdin.take()
    }
}

/// A signal for a change under way (`Session::signal_for_change`); the
/// mark goes when this is dropped, however the signalling ends.
pub struct ChangeSignal<'a>(&'a Session);

impl Drop for ChangeSignal<'_> {
    fn drop(&mut self) {
        self.0
            .view
            .send_if_modified(|view| std::mem::replace(&mut view.change_signal, false));
    }
}
