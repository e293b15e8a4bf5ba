//! Queued spawns (docs/queues.md): a spawn whose queue has no free slot
//! is answered `queued` and started later, in order, by one starter task;
//! poll, wait, kill and list of one that has not started yet; what the
//! next daemon takes back. The queues' bookkeeping is `admission/queue.rs`.
//!
//! A queued spawn survives a daemon's death as two halves: its place in
//! `queue.json` (its id, queue, time and redacted command, in order) and
//! the spawn as asked, environment included, in a sealed memfd the keeper
//! holds under `queued-<id>` (never on disk).

use super::present::spawn_result;
use super::termination::Whose;
use super::{yields::yield_duration, Registry};
use crate::admission::queue::{Admission, QueueSlot, Queued, QueuedAsk, QueuedState, Queues};
use crate::error::Error;
use crate::session::Session;
use procd_proto::{
    Activity, Event, KillResult, KillStatus, PollResult, ProcessEntry, QueueName, SessionStatus,
    SpawnParams, SpawnResult, WaitResult, WaitStatus,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What the keeper holds a queued spawn's ask under: this and its id.
const KEEPER_KEY: &str = "queued-";

fn keeper_key(id: &str) -> String {
    format!("{KEEPER_KEY}{id}")
}

/// What `enter_queue` did with a spawn naming a queue.
pub(super) enum Entered {
    /// A slot was free: start now, holding it.
    Now(QueueSlot),
    /// Queued: the answer to give (after its yield, if it asked for one).
    Queued(Box<SpawnResult>),
}

impl Registry {
    /// Takes a slot of `queue` for a spawn, or queues the spawn: kept by
    /// the keeper and written to `queue.json` before it is answered, so
    /// a daemon killed after the answer still starts it.
    pub(super) async fn enter_queue(
        &self,
        queue: &QueueName,
        params: &SpawnParams,
        stack_file: Option<&Path>,
    ) -> Result<Entered, Error> {
        let id = self
            .new_session_id()
            .map_err(|e| Error::SpawnFailed(format!("cannot make a session id: {e}")))?;
        let ask = QueuedAsk {
            params: params.clone(),
            stack_file: stack_file.map(Path::to_path_buf),
        };
        let shown = self.redactor.command(&params.command).into_owned();
        let entry = Arc::new(Queued::new(id, queue.clone(), ask, shown));
        let made = entry.clone();
        if queue.as_str() == crate::admission::jobserver::QUEUE {
            self.reclaim_jobs().await;
        }
        match self
            .queues
            .admit(queue, move || made)
            .map_err(Error::LimitReached)?
        {
            Admission::Now(slot) => Ok(Entered::Now(slot)),
            Admission::Queued(_) => {
                self.keep_queued(&entry);
                self.ensure_starter();
                self.write_queues().await;
                let result = self.answer_queued(&entry, params).await?;
                Ok(Entered::Queued(Box::new(result)))
            }
        }
    }

    /// Gives the keeper the queued spawn's ask. The starter may have
    /// started it meanwhile and let go of the key already (it marks the
    /// start first): then it is let go of here.
    fn keep_queued(&self, entry: &Queued) {
        let Some(link) = &self.keeper else {
            return;
        };
        let kept = entry.ask.to_memfd().and_then(|fd| {
            use std::os::fd::AsFd;
            let kinds = [(procd_keeper::FdKind::Launch, fd.as_fd())];
            link.hold(&keeper_key(&entry.id), 0, 0, &kinds)
        });
        if let Err(e) = kept {
            tracing::warn!(session = %entry.id, %e, "the keeper cannot keep a queued spawn: a daemon crash would lose it");
        }
        if !matches!(*entry.state.borrow(), QueuedState::Waiting) {
            self.release_from_keeper(&keeper_key(&entry.id));
        }
    }

    /// Writes `queue.json` off the event loop; a failure is logged (the
    /// queue runs on; only a crash would lose its order).
    async fn write_queues(&self) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let written = tokio::task::spawn_blocking(move || me.queues.write()).await;
        if let Ok(Err(e)) = written {
            tracing::warn!(%e, "cannot write queue.json");
        }
    }

    /// A queued spawn's answer: at once, or, with `yield_ms`, once it has
    /// started and yielded for what is left of the time.
    async fn answer_queued(
        &self,
        entry: &Queued,
        params: &SpawnParams,
    ) -> Result<SpawnResult, Error> {
        let wait = yield_duration(params.yield_ms);
        if wait.is_zero() {
            return Ok(self.queued_result(entry));
        }
        let began = tokio::time::Instant::now();
        let Some(session) = self.until_started(entry, wait).await? else {
            return Ok(self.queued_result(entry));
        };
        let mut result = spawn_result(&session);
        let left = wait.saturating_sub(began.elapsed());
        self.yield_into(&mut result, &session, left, params, true)
            .await?;
        Ok(result)
    }

    /// Waits up to `timeout` for a queued spawn to start: its session, or
    /// None while it still waits; an error if it was removed or failed.
    pub(super) async fn until_started(
        &self,
        entry: &Queued,
        timeout: Duration,
    ) -> Result<Option<Arc<Session>>, Error> {
        let mut state = entry.state.subscribe();
        let waited = tokio::time::timeout(
            timeout,
            state.wait_for(|s| !matches!(s, QueuedState::Waiting)),
        )
        .await;
        let now = match waited {
            Ok(Ok(now)) => now.clone(),
            _ => return Ok(None),
        };
        match now {
            QueuedState::Waiting => Ok(None),
            QueuedState::Started(id) => self.find(&id).map(Some),
            QueuedState::Removed => Err(Error::NotFound(format!(
                "{} was killed while queued: it never started",
                entry.id
            ))),
            QueuedState::Failed(why) => Err(Error::SpawnFailed(why)),
        }
    }

    fn queued_result(&self, entry: &Queued) -> SpawnResult {
        SpawnResult {
            session_id: entry.id.clone(),
            pid: 0,
            pty: entry.params().pty.unwrap_or(false),
            status: SessionStatus::Queued,
            command: entry.shown_command.clone(),
            started_at: crate::clock::rfc3339(entry.queued_at),
            reused: false,
            port_in_use: None,
            port: None,
            named_ports: Default::default(),
            output: None,
            cursor: None,
            original_chars: None,
            kept_error_lines: None,
            ready: None,
            waiting_for_input: None,
            exit: None,
            queue: Some(self.queues.info(entry)),
        }
    }

    /// Starts the queue's starter task, once: it starts what can start
    /// each time a slot frees (a queue's or a running one), a spawn is
    /// queued or the monitor finds pressure holding a queue.
    fn ensure_starter(&self) {
        if self.starter.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.me.clone();
        let (queued, freed) = (self.queues.waker(), self.running.freed());
        tokio::spawn(async move {
            loop {
                let Some(registry) = me.upgrade() else {
                    return;
                };
                if registry.closing.load(Ordering::SeqCst) {
                    return;
                }
                registry.start_what_can().await;
                drop(registry);
                tokio::select! {
                    _ = queued.notified() => {}
                    _ = freed.notified() => {}
                }
            }
        });
    }

    /// Starts queued spawns, in order, while slots allow.
    async fn start_what_can(&self) {
        let max = self.config.max_running;
        // Tokens sitting unused go to a `jobs` spawn waiting for one.
        self.share_jobs().await;
        loop {
            if self.closing.load(Ordering::SeqCst) || *self.handing_over.borrow() {
                return;
            }
            // With no running slot free, what frees one wakes the starter.
            if self.running.held() >= max {
                return;
            }
            let Some((entry, queue_slot)) = self.queues.next_to_start() else {
                return;
            };
            let Some(slot) = self.running.try_take(max) else {
                self.queues.put_back(entry);
                return;
            };
            self.start_one(entry, slot.with_queue(Some(queue_slot)))
                .await;
        }
    }

    /// Starts one queued spawn under its id, as it was asked but for its
    /// yield (its caller waits through `until_started`).
    async fn start_one(&self, entry: Arc<Queued>, slot: crate::admission::slot::RunningSlot) {
        let mut params = entry.params().clone();
        params.yield_ms = None;
        let started = async {
            let mut spec = self.validate(&params)?;
            spec.stack_file = entry.ask.stack_file.clone();
            spec.queued_for = entry.waited();
            self.start_checked(spec, &params, slot, Some(entry.id.clone()))
                .await
        }
        .await;
        let state = match started {
            Ok(_) => QueuedState::Started(entry.id.clone()),
            Err(e) => {
                tracing::warn!(session = %entry.id, queue = %entry.queue, %e, "a queued spawn failed to start");
                self.publish_unstarted(&entry, procd_proto::CompletionReason::FailedStart);
                QueuedState::Failed(e.to_string())
            }
        };
        // Marked before the keeper lets go (`keep_queued` relies on it).
        self.queues.done(&entry, state);
        self.release_from_keeper(&keeper_key(&entry.id));
        self.write_queues().await;
    }

    /// The `exited` event of a queued spawn that never ran.
    fn publish_unstarted(&self, entry: &Queued, reason: procd_proto::CompletionReason) {
        let params = entry.params();
        self.notifications.publish(Event::Exited {
            session_id: entry.id.clone(),
            command: entry.shown_command.clone(),
            task_id: params.task_id.clone(),
            session_key: params.session_key.clone(),
            exit_code: None,
            signal: None,
            completion_reason: reason,
            termination_source: Some("queue".into()),
            exited_at: crate::clock::rfc3339(std::time::SystemTime::now()),
            meta: params.meta.clone(),
        });
    }

    /// A queued spawn by its id or a unique prefix of it.
    pub(super) fn find_queued(&self, id: &str) -> Option<Arc<Queued>> {
        if let Some(entry) = self.queues.find(id) {
            return Some(entry);
        }
        let hex = id.strip_prefix("proc_").unwrap_or(id).to_ascii_lowercase();
        if hex.len() < 4 {
            return None;
        }
        let mut matches = self
            .queues
            .all()
            .into_iter()
            .filter(|e| e.id[5..].starts_with(&hex));
        match (matches.next(), matches.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }

    /// `poll` of a spawn still queued.
    pub(super) fn poll_queued(&self, entry: &Queued) -> PollResult {
        let params = entry.params();
        PollResult {
            session_id: entry.id.clone(),
            name: None,
            project: params.project.as_ref().map(ToString::to_string),
            command: entry.shown_command.clone(),
            status: SessionStatus::Queued,
            pid: 0,
            started_at: crate::clock::rfc3339(entry.queued_at),
            uptime_seconds: 0.0,
            output_preview: String::new(),
            activity: Activity::default(),
            note: None,
            original_chars: None,
            kept_error_lines: None,
            exit: None,
            restart: None,
            sandbox: None,
            meta: params.meta.clone(),
            tests: None,
            queue: Some(self.queues.info(entry)),
        }
    }

    /// `wait` on a spawn still queued: its session once it starts (the
    /// wait goes on with what is left), or the answer while it waits.
    pub(super) async fn wait_queued(
        &self,
        entry: &Queued,
        timeout: Duration,
    ) -> Result<Result<Arc<Session>, WaitResult>, Error> {
        if let Some(session) = self.until_started(entry, timeout).await? {
            return Ok(Ok(session));
        }
        let poll = self.poll_queued(entry);
        Ok(Err(WaitResult {
            session_id: poll.session_id,
            command: poll.command,
            status: WaitStatus::Timeout,
            pid: 0,
            started_at: poll.started_at,
            uptime_seconds: 0.0,
            output_preview: String::new(),
            output: String::new(),
            process_running: None,
            original_chars: None,
            kept_error_lines: None,
            exit: None,
            restart: None,
            tests: None,
            queue: poll.queue,
        }))
    }

    /// `kill` of a queued spawn: out of its queue, never to start. One
    /// being started is waited for and then killed as a session (None).
    pub(super) async fn kill_queued(&self, entry: &Queued) -> Option<KillResult> {
        if self.remove_queued(&entry.id).await {
            return Some(KillResult {
                session_id: entry.id.clone(),
                status: KillStatus::Removed,
                orphans_killed: 0,
                error: None,
                survivors: Vec::new(),
                process_running: None,
                exit: None,
            });
        }
        let mut state = entry.state.subscribe();
        let _ = state.wait_for(|s| !matches!(s, QueuedState::Waiting)).await;
        None
    }

    /// Takes a waiting spawn out of its queue: true if it was there.
    async fn remove_queued(&self, id: &str) -> bool {
        let Some(entry) = self.queues.remove(id) else {
            return false;
        };
        self.release_from_keeper(&keeper_key(id));
        self.publish_unstarted(&entry, procd_proto::CompletionReason::Killed);
        self.write_queues().await;
        true
    }

    /// Removes the queued spawns of `whose` (a kill of many, an owner
    /// gone); how many.
    pub(super) async fn remove_queued_of(&self, whose: Whose<'_>, but: &[String]) -> u32 {
        let mut removed = 0;
        for entry in self.queues.all() {
            let p = entry.params();
            let theirs = whose.holds_fields(
                p.task_id.as_deref(),
                p.session_key.as_deref(),
                p.owner.as_deref(),
            );
            if theirs && !but.contains(&entry.id) && self.remove_queued(&entry.id).await {
                removed += 1;
            }
        }
        removed
    }

    /// A queued spawn as `list` shows it.
    pub(super) fn queued_entry(&self, entry: &Queued, session_scoped: bool) -> ProcessEntry {
        let p = entry.params();
        let cwd = self.cwd_of(p.cwd.as_deref()).map_or_else(
            |_| p.cwd.clone().unwrap_or_default(),
            |c| c.display().to_string(),
        );
        ProcessEntry {
            session_id: entry.id.clone(),
            name: None,
            project: p.project.as_ref().map(ToString::to_string),
            stack_file: entry
                .ask
                .stack_file
                .as_ref()
                .map(|f| f.display().to_string()),
            command: crate::output::text::first_chars(&entry.shown_command, 200).to_string(),
            cwd,
            pid: 0,
            status: SessionStatus::Queued,
            exit_code: None,
            started_at: crate::clock::rfc3339(entry.queued_at),
            uptime_seconds: 0.0,
            output_preview: String::new(),
            task_id: p.task_id.clone(),
            session_key: p.session_key.clone(),
            pty: p.pty.unwrap_or(false),
            persist: p.persist.unwrap_or(false),
            notify_on_complete: p.notify_on_complete.unwrap_or(false),
            watch_patterns: p.watch_patterns.clone().unwrap_or_default(),
            activity: Activity::default(),
            session_scoped,
            note: None,
            restart: None,
            sandbox: None,
            meta: p.meta.clone(),
            queue: Some(self.queues.info(entry)),
        }
    }

    /// A stopping daemon starts nothing more: every queued spawn is
    /// removed (and told of), and `queue.json` left empty.
    pub(super) async fn drop_queued(&self) {
        for entry in self.queues.all() {
            self.remove_queued(&entry.id).await;
        }
    }

    /// Puts back the spawns a previous daemon queued, in their order,
    /// from `queue.json` and the asks the keeper kept (`handed`, whose
    /// `queued-` entries are taken out). One whose ask was not kept (no
    /// keeper, or its death) cannot start: it is dropped and logged.
    pub(super) async fn recover_queued(
        &self,
        handed: &mut HashMap<String, procd_keeper::HandedSession>,
    ) {
        let mut kept: HashMap<String, procd_keeper::HandedSession> = HashMap::new();
        let keys: Vec<String> = handed
            .keys()
            .filter(|k| k.starts_with(KEEPER_KEY))
            .cloned()
            .collect();
        for key in keys {
            if let Some(h) = handed.remove(&key) {
                kept.insert(key[KEEPER_KEY.len()..].to_string(), h);
            }
        }
        let records = match self.queues.file().map(Path::to_path_buf) {
            Some(path) => tokio::task::spawn_blocking(move || Queues::read_records(&path))
                .await
                .unwrap_or_default(),
            None => Vec::new(),
        };
        for record in records {
            let id = record.session_id;
            let ask = kept.remove(&id).and_then(|h| h.launch);
            // Started before the crash: the session was recovered.
            if self.table().contains_key(&id) || self.queues.find(&id).is_some() {
                if ask.is_some() {
                    self.release_from_keeper(&keeper_key(&id));
                }
                continue;
            }
            let ask = ask.map(QueuedAsk::from_memfd);
            let (Some(Ok(ask)), Ok(queue)) = (ask, QueueName::parse(&record.queue)) else {
                tracing::warn!(session = %id, "a queued spawn was lost: the keeper did not keep it");
                continue;
            };
            let queued_at = crate::clock::parse_rfc3339(&record.queued_at)
                .unwrap_or_else(std::time::SystemTime::now);
            let shown = self.redactor.command(&ask.params.command).into_owned();
            self.queues.restore(Arc::new(Queued::recovered(
                id, queue, ask, shown, queued_at,
            )));
        }
        // Held for none of the records (a crash between a start and the
        // rewrite): nothing to put back.
        for id in kept.into_keys() {
            self.release_from_keeper(&keeper_key(&id));
        }
        if !self.queues.is_empty() {
            // Each ask is held again under its key by this daemon's keeper
            // already (the handover keeps what the keeper held).
            self.ensure_starter();
            self.queues.wake();
        }
        self.write_queues().await;
    }

    /// The slots a session a previous daemon started holds: a running
    /// one, and its queue's, whether or not there is room.
    pub(super) fn recovered_slot(
        &self,
        spec: &crate::session::SessionSpec,
    ) -> crate::admission::slot::RunningSlot {
        let queue_slot = spec.queue.as_ref().map(|q| self.queues.hold(q));
        self.running.take().with_queue(queue_slot)
    }

    /// Called by the monitor's tick: a queue held back by memory pressure
    /// is looked at again (pressure is read then, never polled).
    pub fn recheck_queues(&self) {
        if self.queues.held_by_pressure() {
            self.queues.wake();
        }
    }
}

impl Whose<'_> {
    /// Whether each filter given holds for these fields.
    pub fn holds_fields(
        &self,
        task_id: Option<&str>,
        session_key: Option<&str>,
        owner: Option<&str>,
    ) -> bool {
        let is = |want: Option<&str>, has: Option<&str>| want.is_none_or(|w| has == Some(w));
        is(self.task_id, task_id) && is(self.session_key, session_key) && is(self.owner, owner)
    }
}
