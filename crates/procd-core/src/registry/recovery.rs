//! The checkpoint (`procs.json`) and re-adopting a previous daemon's sessions.

use super::{Registry, INSTANCE_VAR};
use crate::clock::rfc3339;
use crate::identity::ProcessIdentity;
use crate::observation::readiness::Readiness;
use crate::output::store::OutputStore;
use crate::persist::checkpoint::{Checkpoint, CheckpointEntry, EndedExit, Record, Recorded};
use crate::session::{self, ExitRecord, Opening, Origin, Run, Session, SessionSpec, Started};
use crate::tree::kill;
use crate::tree::scope::Scopes;
use procd_proto::{CompletionReason, ProjectName, QueueName, SessionName, StdinMode};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Registry {
    /// Records an exit (or a session now ready) in the checkpoint, called
    /// after the state changed. Coalesced: while a write is scheduled and
    /// has not yet begun, more changes ride on it (256 sessions ending at
    /// once are a few writes, not 256 of a growing `ended.jsonl`).
    pub(super) fn checkpoint_soon(&self) {
        if self.checkpoint_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(me) = self.me.upgrade() {
            tokio::spawn(async move {
                // Cleared before the write takes its snapshot: a change
                // after this point schedules a write of its own.
                me.checkpoint_pending.store(false, Ordering::SeqCst);
                let _ = me.write_checkpoint().await;
            });
        } else {
            self.checkpoint_pending.store(false, Ordering::SeqCst);
        }
    }

    /// Writes `procs.json`: every running session (command redacted), plus
    /// retained entries whose scope still needs stopping. A failure is a
    /// fault (`status.faults`) until a later write succeeds; the monitor
    /// retries (`retry_faults`).
    pub async fn write_checkpoint(&self) -> std::io::Result<()> {
        let Some(checkpoint) = &self.checkpoint else {
            return Ok(());
        };
        let written = checkpoint.write(self).await;
        self.checkpoint_written(written, true)
    }

    /// Writes `procs.json` alone (a spawn's record; an exit's `ended.jsonl`
    /// is not waited for).
    pub(super) async fn write_running_checkpoint(&self) -> std::io::Result<()> {
        let Some(checkpoint) = &self.checkpoint else {
            return Ok(());
        };
        let written = checkpoint.write_running(self).await;
        self.checkpoint_written(written, false)
    }

    /// Reports a failed write as a fault; a whole write (`whole`: both
    /// files) that succeeded clears it.
    fn checkpoint_written(&self, written: std::io::Result<()>, whole: bool) -> std::io::Result<()> {
        match &written {
            Ok(()) if whole => self.faults.clear("checkpoint"),
            Ok(()) => {}
            Err(err) => self.faults.set("checkpoint", &err.to_string()),
        }
        written
    }

    /// Called by the monitor: retries what failed (the checkpoint, the log
    /// of a session that ended while it could not be written), and reports
    /// sessions whose log cannot be written.
    pub async fn retry_faults(&self) {
        if self.faults.has("checkpoint") {
            let _ = self.write_checkpoint().await;
        }
        for s in self.all_sessions() {
            let what = format!("log {}", s.id);
            if s.output.finished_log_retry_due() {
                let output = s.output.clone();
                let _ = tokio::task::spawn_blocking(move || output.retry_finished_log()).await;
            }
            match s.output.log_fault() {
                Some(err) => self.faults.set(&what, &err),
                None => self.faults.clear(&what),
            }
        }
    }

    /// A session as the checkpoint records it (`Moving` is what of it can
    /// change; the rest is fixed when it starts).
    fn checkpoint_entry(&self, s: &Session) -> CheckpointEntry {
        let run = s.run();
        CheckpointEntry {
            exit: s.state().exit().map(|e| EndedExit::of(e)),
            limits: s.spec.limits,
            junit: s.spec.junit.as_ref().map(|p| p.display().to_string()),
            port: s.spec.port,
            named_ports: s.spec.named_ports.clone(),
            watch: s.spec.on_change.as_ref().map(|p| p.spec.clone()),
            queue: s.spec.queue.as_ref().map(ToString::to_string),
            queued_ms: s
                .spec
                .queue
                .as_ref()
                .map(|_| s.spec.queued_for.as_millis() as u64),
            sandbox: s.spec.sandbox.as_ref().map(|p| p.info.clone()),
            restart: s.restarts.as_deref().map(|r| restart_record(s, r)),
            session_id: s.id.clone(),
            command: s.shown_command().to_string(),
            pid: run.pid(),
            start_time: run.identity.start_time,
            identity: Some(crate::identity::RecordedIdentity {
                pgid: run.pid(),
                start_time: Some(run.identity.start_time),
            }),
            pgid: run.pid(),
            cwd: s.spec.cwd.display().to_string(),
            started_at: run.started_at_text().to_string(),
            task_id: s.spec.task_id.clone(),
            session_key: s.spec.session_key.clone(),
            name: s.spec.name.as_ref().map(|n| n.to_string()),
            project: s.spec.project.as_ref().map(|p| p.to_string()),
            stack_file: s.spec.stack_file.as_ref().map(|f| f.display().to_string()),
            owner: s.spec.owner.clone(),
            persist: s.spec.persist,
            pty: run.pty,
            notify_on_complete: s.notify_on_complete(),
            watch_patterns: s.asks().watch_patterns.to_vec(),
            meta: s.meta(),
            systemd_unit: run.systemd_unit.clone(),
            cgroup: run.cgroup.as_ref().map(|c| c.path().display().to_string()),
            cgroup_v1: run.cgroup.as_ref().map_or(vec![], |c| {
                c.v1_paths()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect()
            }),
            log_path: s.output.path().display().to_string(),
            timeout_at: s.spec.timeout.map(|t| rfc3339(run.started_at() + t)),
            rows: run.pty.then_some(s.spec.rows),
            cols: run.pty.then_some(s.spec.cols),
            stdin: Some(s.spec.stdin),
            ready: s.spec.ready.as_ref().map(|c| c.spec.clone()),
            ready_after_ms: match s.readiness() {
                Readiness::Ready { after_ms } => Some(after_ms),
                _ => None,
            },
        }
    }

    /// Re-adopts the sessions of a previous daemon from the checkpoint:
    /// one the keeper kept (`handed`) comes back fully live, with its exit
    /// from the keeper even if it ended meanwhile (docs/survival.md); else a pid
    /// still alive with the recorded start time (and, where readable,
    /// this session's marker) becomes a detached session; a session whose
    /// process is gone (dead, or its pid recycled) stays listed as exited
    /// with reason "lost", so an id an agent holds never turns into -32001;
    /// entries that are not procd sessions are dropped. Then the checkpoint
    /// is rewritten to exactly what is tracked.
    /// Returns (recovered, dropped).
    pub async fn recover(
        &self,
        handed: Vec<procd_keeper::HandedSession>,
    ) -> std::io::Result<(usize, usize)> {
        let mut handed: HashMap<String, procd_keeper::HandedSession> = handed
            .into_iter()
            .map(|h| (h.session_id.clone(), h))
            .collect();
        let Some(checkpoint) = &self.checkpoint else {
            return Ok((0, 0));
        };
        let path = checkpoint.path().to_path_buf();
        let spare_log = self.logs_dir.join(super::spawn::SPARE_LOG);
        let ((entries, skipped), ended) = tokio::task::spawn_blocking(move || {
            // A write a crash cut short left its temp file (never read),
            // and a daemon its spare log (no session's).
            if let Some(dir) = path.parent() {
                crate::atomic::sweep_temps(dir);
            }
            let _ = std::fs::remove_file(&spare_log);
            (Checkpoint::read(&path), Checkpoint::read_ended(&path))
        })
        .await
        .map_err(std::io::Error::other)?;
        // Ended first: a session that ended just before a crash may still
        // be in procs.json too; its recorded exit wins. One that ended
        // before ended.jsonl held it is in procs.json with its exit.
        for entry in ended
            .iter()
            .chain(entries.iter().filter(|e| e.exit.is_some()))
        {
            if !self.table().contains_key(&entry.session_id) {
                self.list_ended(entry).await;
            }
        }
        let mut recovered = 0;
        let mut dropped = skipped;
        for entry in entries {
            if self.table().contains_key(&entry.session_id) {
                self.release_from_keeper(&entry.session_id);
                handed.remove(&entry.session_id);
                continue;
            }
            if let Some(kept) = handed.remove(&entry.session_id) {
                if self.adopt_handed(&entry, kept).await.is_some() {
                    recovered += 1;
                    continue;
                }
                self.release_from_keeper(&entry.session_id);
            }
            match self.adopt(&entry).await {
                Some(()) => recovered += 1,
                None => {
                    if !self.end_not_taken_back(entry).await {
                        dropped += 1;
                    }
                }
            }
        }
        self.recover_queued(&mut handed).await;
        self.recover_jobs().await;
        // Kept by the keeper but never recorded (the daemon died between
        // the fork and the checkpoint): nobody was told of them;
        // `end_unrecorded` ends their processes.
        for id in handed.into_keys() {
            self.release_from_keeper(&id);
        }
        self.end_unrecorded().await;
        self.sweep_sandbox_tmp().await;
        // A checkpoint that cannot be written now is a fault to live with
        // (retried by the monitor), not a reason to refuse to serve.
        let _ = self.write_checkpoint().await;
        Ok((recovered, dropped))
    }

    /// Ends a session that could not be taken back: as its last run did
    /// (true), like an entry with its exit, else lost (false). Its scope is
    /// stopped; if that fails the entry stays in the checkpoint to be
    /// retried next start.
    async fn end_not_taken_back(&self, entry: CheckpointEntry) -> bool {
        let ended_as_run = self.end_backoff(&entry).await;
        if !ended_as_run {
            self.list_lost(&entry).await;
        }
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
        ended_as_run
    }

    /// Removes the temp dirs of sandboxed sessions that no running session
    /// uses: theirs ended while no daemon saw it, or were lost.
    async fn sweep_sandbox_tmp(&self) {
        let keep: Vec<PathBuf> = self
            .all_sessions()
            .iter()
            .filter(|s| s.is_running())
            .filter_map(|s| s.spec.sandbox.as_ref())
            .map(|plan| plan.tmp.clone())
            .collect();
        let root = self.tmp_dir.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let Ok(dir) = std::fs::read_dir(&root) else {
                return;
            };
            for entry in dir.flatten() {
                let name = entry.file_name();
                let ours = name
                    .to_str()
                    .is_some_and(|n| n.starts_with(crate::child::sandbox::TMP_PREFIX));
                if ours && !keep.contains(&entry.path()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        })
        .await;
    }

    /// The value of `PROCD_INSTANCE` in this daemon's children: its logs
    /// dir, which no other instance shares.
    pub(super) fn instance_marker(&self) -> String {
        self.logs_dir.display().to_string()
    }

    /// Ends processes a previous daemon of this instance started but did not
    /// record (it died between the fork and the checkpoint write, or before
    /// it could end what an exited session left behind): they carry this
    /// instance's marker and belong to no running session. Nobody was told
    /// about them and nobody would ever end them.
    async fn end_unrecorded(&self) {
        let running: HashSet<String> = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .map(|s| s.id.clone())
            .collect();
        let procfs = self.procfs.clone();
        let instance = self.instance_marker().into_bytes();
        let me = std::process::id() as i32;
        let strays = kill::scan_blocking(move || {
            let Ok(table) = procfs.all() else {
                return Vec::new();
            };
            table
                .iter()
                .filter(|p| !p.is_dead() && p.pid != me)
                .filter(|p| {
                    procfs.environ_value(p.pid, INSTANCE_VAR).as_deref() == Some(&instance[..])
                })
                .filter(|p| {
                    procfs
                        .environ_value(p.pid, "PROCD_SESSION_ID")
                        .is_none_or(|id| !running.contains(&*String::from_utf8_lossy(&id)))
                })
                .map(|p| ProcessIdentity {
                    pid: p.pid,
                    start_time: p.start_time,
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        if strays.is_empty() {
            return;
        }
        tracing::warn!(
            count = strays.len(),
            "ending processes a previous daemon started but did not record"
        );
        for target in strays {
            if let Some(fd) = target.open(&self.procfs) {
                let _ = fd.send_signal(libc::SIGKILL);
            }
        }
    }

    /// Lists a session a previous daemon recorded as ended, with the exit
    /// it recorded (no events: they were sent then); its log (if still
    /// there) is readable. Kept as long as retention keeps ended sessions,
    /// counted from when it ended.
    pub(super) async fn list_ended(&self, e: &CheckpointEntry) {
        let Some(exit) = &e.exit else {
            return;
        };
        let ended = Some(Arc::new(exit.record()));
        self.listed_exited(e, None, None, ended).await;
    }

    /// A session that waited out a restart backoff when the daemon and its
    /// keeper died: its last run is over (the daemon reaped and recorded
    /// it), and how its runs start (a memfd only the keeper held) is gone.
    /// It ends as that run did and says why (`resume_backoff`); false for
    /// an entry that is not in a backoff.
    async fn end_backoff(&self, e: &CheckpointEntry) -> bool {
        let Some((restarts, runs)) = self.recovered_restarts(e, None) else {
            return false;
        };
        let Some(next) = runs.next else {
            return false;
        };
        let restarting = Some((restarts.clone(), runs));
        let Some(session) = self.listed_exited(e, None, restarting, None).await else {
            return false;
        };
        self.resume_backoff(session, &restarts, next);
        true
    }

    /// Lists a session whose process ended while no daemon watched it:
    /// exited, reason "lost", exit code unknown; its log (if still there)
    /// is readable. A completion is queued if it was asked for.
    pub(super) async fn list_lost(&self, e: &CheckpointEntry) {
        let note = "its process ended while no procd was running: the exit code is unknown; output up to then is in the log";
        let Some(session) = self.listed_exited(e, Some(note.into()), None, None).await else {
            return;
        };
        let now = std::time::SystemTime::now();
        let record = Arc::new(ExitRecord {
            exit_code: None,
            signal: None,
            reason: CompletionReason::Lost,
            source: Some("recovery".into()),
            exited_at: now,
            exited_instant: Instant::now(),
        });
        Registry::record_end(&self.me, &session, record);
    }

    /// A session of a previous daemon whose process is gone, listed with
    /// its log, `note` and `restarts`: exited as `ended` says, or running
    /// until its caller records its end; None when the entry is not a
    /// procd session or is listed already.
    async fn listed_exited(
        &self,
        e: &CheckpointEntry,
        note: Option<String>,
        restarts: Option<(Arc<crate::session::Restarts>, crate::session::Runs)>,
        ended: Option<Arc<ExitRecord>>,
    ) -> Option<Arc<Session>> {
        if !e.has_session_id() || self.table().contains_key(&e.session_id) {
            return None;
        }
        let log_path = self.logs_dir.join(format!("{}.log", e.session_id));
        let (max, tail) = (self.config.max_log_bytes, self.config.memory_tail_bytes);
        // The recorded log path is only trusted inside our logs dir.
        let output = tokio::task::spawn_blocking(move || {
            match OutputStore::open_existing(&log_path, max, tail) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    OutputStore::create(&log_path, max, tail)
                }
                other => other,
            }
        })
        .await
        .ok()?
        .ok()?;
        // Ended: no output comes (a restart's opens it again).
        output.close_log();
        let mut opening = recovered_opening(e, e.root(), output);
        opening.run.note = note;
        let session = self.admit(Opening {
            restarts,
            ended,
            adopted: Some(Arc::new([])),
            ..opening
        });
        Some(session)
    }

    /// Adopts one checkpoint entry if its process is still the same one.
    pub(super) async fn adopt(&self, e: &CheckpointEntry) -> Option<()> {
        if !e.has_session_id() {
            return None;
        }
        let identity = e.root();
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
        let mut opening = recovered_opening(e, identity, output);
        let slot = Some(self.recovered_slot(&opening.spec));
        let run = &mut opening.run;
        run.note = Some(RECOVERED_NOTE.to_string());
        (run.systemd_unit, run.cgroup) = (e.systemd_unit.clone(), e.cgroup().map(Arc::new));
        let session = self.admit(Opening {
            restarts: self.recovered_restarts(e, None),
            slot,
            ..opening
        });
        crate::observation::stale::watch(&session, &self.stale_watches);
        self.follow_changes(&session);
        let me = self.me.clone();
        let span = tracing::info_span!("session", session_id = %session.id, pid = session.pid());
        let supervisor = async move {
            let record = session::supervise_detached(session.clone(), pidfd).await;
            Registry::record_end(&me, &session, record);
        };
        tokio::spawn(tracing::Instrument::instrument(supervisor, span));
        Some(())
    }
}

/// A restarting session's policy and runs, as the checkpoint keeps them.
fn restart_record(
    s: &Session,
    r: &crate::session::Restarts,
) -> crate::persist::checkpoint::RestartRecord {
    let (count, last_exit) = s.run_history();
    crate::persist::checkpoint::RestartRecord {
        policy: r.plan.spec(),
        output_from: s.run().output_from,
        run: count.run,
        streak: count.streak,
        last_exit: last_exit.as_deref().map(EndedExit::of),
        next_run: s
            .next_run()
            .map(|n| crate::persist::checkpoint::NextRunRecord {
                run: n.count.run,
                streak: n.count.streak,
                at: crate::clock::rfc3339(n.at),
            }),
    }
}

/// What a session re-adopted from the checkpoint says of itself.
const RECOVERED_NOTE: &str = "recovered after a procd restart: output up to the restart is in the log; live output and stdin are unavailable";

/// A session a previous daemon started, as far as its checkpoint entry
/// and its log tell: no stdin, no probe, no slot, no restarts, no note;
/// the caller adds what it knows beyond.
pub(super) fn recovered_opening(
    e: &CheckpointEntry,
    identity: ProcessIdentity,
    output: OutputStore,
) -> Opening {
    let spec = recovered_spec(e);
    let output_from = e.restart.as_ref().map_or(0, |r| r.output_from);
    Opening {
        id: e.session_id.clone(),
        run: Run::new(identity, Started::at(e.started_at()), spec.pty, output_from),
        spec,
        output: Arc::new(output),
        stdin: None,
        origin: Origin::Recovered,
        output_probe: None,
        slot: None,
        restarts: None,
        readiness: Readiness::Unconditioned,
        ended: None,
        adopted: None,
    }
}

/// What a checkpoint entry says about how its session was started.
pub(super) fn recovered_spec(e: &CheckpointEntry) -> SessionSpec {
    SessionSpec {
        command: e.command.clone(),
        cwd: PathBuf::from(&e.cwd),
        task_id: e.task_id.clone(),
        session_key: e.session_key.clone(),
        owner: e.owner.clone(),
        persist: e.persist,
        pty: e.pty,
        rows: e.rows.unwrap_or(30),
        cols: e.cols.unwrap_or(120),
        notify_on_complete: e.notify_on_complete,
        watch_patterns: e.watch_patterns.clone(),
        // A meta that is not what spawn takes (planted) is dropped.
        meta: e
            .meta
            .clone()
            .and_then(|m| super::checks::check_meta(m).ok()),
        // Each run's whole timeout (`timeout_at` is the run's start plus
        // it): the next run gets all of it, and this one's deadline is
        // counted from its start, as the first daemon counted it.
        timeout: e
            .timeout_at
            .as_deref()
            .and_then(crate::clock::parse_rfc3339)
            .map(|at| at.duration_since(e.started_at()).unwrap_or_default()),
        stdin: e.stdin.unwrap_or(StdinMode::Null),
        ready: e
            .ready
            .as_ref()
            .and_then(|r| crate::observation::readiness::ReadyCheck::parse(r).ok()),
        // Already written to its cgroup; kept for a restart's new one.
        limits: e.limits,
        // A corrupt name is dropped, not trusted.
        name: e.name.as_deref().and_then(|n| SessionName::parse(n).ok()),
        project: e
            .project
            .as_deref()
            .and_then(|p| ProjectName::parse(p).ok()),
        stack_file: e.stack_file.as_ref().map(PathBuf::from),
        env_digest: None,
        restart: e
            .restart
            .as_ref()
            .and_then(|r| crate::stacks::restart::RestartPlan::new(&r.policy)),
        sandbox: e
            .sandbox
            .clone()
            .and_then(crate::child::sandbox::SandboxPlan::recovered),
        // Only a path spawn would have taken (absolute, as it resolved it).
        junit: e
            .junit
            .as_deref()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute()),
        // A recovered shell's channels are the shell layer's (`shell/`).
        shell: None,
        port: e.port.filter(|&p| p > 0),
        named_ports: e
            .named_ports
            .iter()
            .filter(|(name, &port)| port > 0 && super::ports::is_port_var(name))
            .map(|(name, &port)| (name.clone(), port))
            .collect(),
        on_change: e
            .watch
            .as_ref()
            .and_then(|w| {
                crate::stacks::onchange::ChangePlan::check(w, std::path::Path::new(&e.cwd)).ok()
            })
            .map(Arc::new),
        // A corrupt queue name is dropped: the session then holds no slot.
        queue: e.queue.as_deref().and_then(|q| QueueName::parse(q).ok()),
        queued_for: std::time::Duration::from_millis(e.queued_ms.unwrap_or(0)),
    }
}

/// The checkpoint's view of the table: what changed, never every session.
impl Recorded for Registry {
    fn unsettled(&self) -> std::io::Result<Vec<Record>> {
        // Copied out of the table first: the pass over them (a view read
        // and a cache lookup each, about 0.3 ms at 3800 sessions) would
        // otherwise hold the table's lock, which every poll takes.
        let sessions: Vec<Arc<Session>> = self.table().unsettled().cloned().collect();
        let mut records = Vec::with_capacity(sessions.len());
        {
            let mut cache = self.records.lock().unwrap_or_else(|e| e.into_inner());
            cache.begin();
            for s in &sessions {
                let moving = Moving::of(s);
                records.push(cache.record(s, moving, || self.checkpoint_entry(s))?);
            }
            cache.trim(records.len());
        }
        let retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
        for e in retained.iter() {
            records.push(Record::of(e)?);
        }
        Ok(records)
    }

    fn unsettled_ended(&self) -> Vec<CheckpointEntry> {
        // Their records are made outside the table's lock, as above.
        let ended: Vec<Arc<Session>> = self
            .table()
            .unsettled()
            .filter(|s| s.state().exit().is_some())
            .cloned()
            .collect();
        ended.iter().map(|s| self.checkpoint_entry(s)).collect()
    }

    fn ended(&self) -> Vec<CheckpointEntry> {
        let mut ended: Vec<(Instant, Arc<Session>)> = self
            .table()
            .values()
            .filter_map(|s| Some((s.state().exit()?.exited_instant, s.clone())))
            .collect();
        ended.sort_unstable_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        ended
            .iter()
            .map(|(_, s)| self.checkpoint_entry(s))
            .collect()
    }

    fn take_gone(&self) -> Vec<String> {
        self.table().take_gone()
    }

    fn settle(&self, held: &[(String, String)]) {
        self.table().settle(held);
    }
}

/// What of a session's checkpoint record can change while it lives: its
/// record is made again when this differs (`RecordCache`). The rest comes
/// from its spec and its id, fixed. Its view's version moves with every
/// change of the rest, its run and where its runs stand included.
#[derive(PartialEq)]
pub(super) struct Moving {
    version: u64,
}

impl Moving {
    fn of(s: &Session) -> Moving {
        Moving {
            version: s.record_version(),
        }
    }
}
