//! Restarts (docs/stacks.md): a restarting session's run ended, and the
//! policy (`stacks/restart.rs`) wants another. The session stays running, with
//! its id, name, log and running slot, while the next run waits out its
//! backoff; then the next run starts in the same cgroup and log and becomes
//! the session's run (`Session::begin_run`): one session from its first
//! run to its end, so whoever holds it or waits on it holds the session,
//! never a run. A kill during the backoff ends it.
//!
//! A backoff is state of its own (`Session::next_run`, in its view), in procs.json
//! before the wait begins: the next daemon starts the owed run from that
//! record, or, with the keeper dead too and the launch gone with it, ends
//! the session as that run ended. A run the keeper holds but the checkpoint
//! does not name yet (the daemon died in between) is taken back as that
//! owed run (`CheckpointEntry::as_next_run`), not ended.

use super::Registry;
use crate::error::Error;
use crate::session::{ExitRecord, Launch, NextRun, Restarts, Runs, Session};
use crate::stacks::restart::{Next, RunCount};
use crate::tree::kill;
use procd_proto::{CompletionReason, Event};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

impl Registry {
    /// What follows a run of `run` that ended with `record`: Ok when a
    /// restart is on its way (nothing ends), else the record the session
    /// ends with (`crash_loop` once the policy gives up).
    pub(super) fn after_run(
        &self,
        run: &Session,
        record: Arc<ExitRecord>,
    ) -> Result<(), Arc<ExitRecord>> {
        let Some(restarts) = &run.restarts else {
            return Err(record);
        };
        let lived = record
            .exited_instant
            .saturating_duration_since(run.started_instant());
        let (count, _) = run.run_history();
        let (next, next_count) = next_after(run, restarts, count, lived, &record);
        let delay = match next {
            Next::End => return Err(record),
            Next::CrashLoop => {
                run.output.mark_restart(&format!(
                    "[procd] {}; {} restarts in a row: not restarting (crash_loop)",
                    how_it_ended(&record),
                    count.streak
                ));
                return Err(Arc::new(ExitRecord {
                    reason: CompletionReason::CrashLoop,
                    source: Some("restart".into()),
                    ..(*record).clone()
                }));
            }
            Next::RestartIn(delay) => delay,
        };
        let current = self
            .table()
            .get(&run.id)
            .filter(|s| std::ptr::eq(s.as_ref(), run))
            .cloned();
        let (Some(current), Some(launch), false) = (
            current,
            restarts.launch.clone(),
            self.closing.load(std::sync::atomic::Ordering::SeqCst),
        ) else {
            if restarts.launch.is_none() {
                run.output.mark_restart(&format!(
                    "[procd] {}; not restarting: this daemon does not know how the command was started (see docs/stacks.md)",
                    how_it_ended(&record)
                ));
            }
            return Err(record);
        };
        run.output.mark_restart(&format!(
            "[procd] {}; run {} starts in {:.1} s",
            how_it_ended(&record),
            next_count.run,
            delay.as_secs_f64()
        ));
        run.run_ended(
            Some(record),
            NextRun {
                count: next_count,
                at: SystemTime::now() + delay,
            },
        );
        let Some(me) = self.me.upgrade() else {
            return Ok(());
        };
        tokio::spawn(async move { me.restart_after(current, launch, delay, next_count).await });
        Ok(())
    }

    /// Queues the `restarted` event of `next`, the run going now, once
    /// across daemons (a daemon that took back a run the one before had
    /// no time to announce announces it).
    pub(super) fn announce_restart(&self, next: &Session) {
        let (count, last) = next.run_history();
        let Some(last) = last else {
            return;
        };
        let changed = next.take_changed();
        let text = match changed.is_empty() {
            false => format!(
                "was started again because its files changed: {} (run {})",
                changed.join(", "),
                count.run
            ),
            true => format!(
                "was started again by its restart policy (run {}); its last run {}",
                count.run,
                super::present::ending(&last)
            ),
        };
        self.notifications.push_once(
            Some(format!("restarted {} {}", next.id, count.run)),
            Event::Restarted {
                about: self.about_event(next, &text),
                run: count.run,
                last_exit: super::present::exit_info_of(&last),
            },
        );
    }

    /// Takes up the backoff of a session a previous daemon left in one
    /// (its checkpoint said which run is next, and when): that run starts
    /// when it would have. Without the launch it cannot, and ends.
    pub(super) fn resume_backoff(&self, session: Arc<Session>, restarts: &Restarts, next: NextRun) {
        let (Some(me), Some(launch)) = (self.me.upgrade(), restarts.launch.clone()) else {
            session.output.mark_restart(
                "[procd] not restarting: this daemon does not know how the command was started (see docs/stacks.md)",
            );
            session.next_run_abandoned();
            // It ends as its last run did (the checkpoint kept that exit).
            let (_, last) = session.run_history();
            let record = last.unwrap_or_else(|| {
                Arc::new(ExitRecord {
                    exit_code: None,
                    signal: None,
                    reason: CompletionReason::Lost,
                    source: Some("recovery".into()),
                    exited_at: SystemTime::now(),
                    exited_instant: Instant::now(),
                })
            });
            Registry::record_end(&self.me, &session, record);
            return;
        };
        let delay = next
            .at
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        tokio::spawn(async move { me.restart_after(session, launch, delay, next.count).await });
    }

    /// Waits out the backoff, then starts the next run; or ends the
    /// session when it is killed meanwhile or the run cannot start. A
    /// daemon handing over leaves it as it is: procs.json holds the
    /// backoff, and the next daemon takes it up (`resume_backoff`).
    async fn restart_after(
        self: Arc<Self>,
        run: Arc<Session>,
        launch: Arc<Launch>,
        delay: Duration,
        count: RunCount,
    ) {
        let Some(restarts) = run.restarts.clone() else {
            return;
        };
        // What the run left behind goes first: a restarted server must
        // find its port free, as under systemd's `Restart=`. The backoff
        // is recorded meanwhile, before the wait: a daemon that dies in it
        // leaves the next one to start this run (no keeper saw the last
        // one end: it was this daemon's child).
        let tree = run.tree();
        let leftovers = kill::terminate(&tree, &self.procfs, false, libc::SIGKILL, Duration::ZERO);
        let (recorded, _) = tokio::join!(self.write_running_checkpoint(), leftovers);
        if let Err(e) = recorded {
            tracing::warn!(session = %run.id, %e, "the checkpoint does not hold the backoff yet");
        }
        let mut handing_over = self.handing_over.subscribe();
        if *handing_over.borrow() {
            return;
        }
        // (A timer, even of zero, waits for the next tick of tokio's wheel.)
        if !delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = run.termination_requested() => {}
                _ = handing_over.wait_for(|h| *h) => return,
            }
        }
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) && run.termination().is_none() {
            return; // stopping: no new run, and no end to record here
        }
        if run.termination().is_none() {
            match self.start_next_run(&run, &restarts, &launch, count).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(session = %run.id, %e, "cannot restart");
                    run.output
                        .mark_restart(&format!("[procd] run {} could not start: {e}", count.run));
                }
            }
        }
        run.next_run_abandoned();
        let (_, last) = run.run_history();
        let termination = run.termination();
        let record = Arc::new(ExitRecord {
            exit_code: last.as_ref().and_then(|l| l.exit_code),
            signal: last.as_ref().and_then(|l| l.signal),
            reason: termination
                .as_ref()
                .map_or(CompletionReason::FailedStart, |t| t.reason),
            source: Some(termination.map_or("restart".into(), |t| t.source)),
            exited_at: SystemTime::now(),
            exited_instant: Instant::now(),
        });
        Registry::record_end(&self.me, &run, record);
    }

    /// Makes way for `run`'s next run: the last one's signalling done
    /// (a watch's restart), and its cgroup removed, or kept as it is where
    /// it may hold the next run.
    async fn clear_for_next_run(&self, run: &Session) -> Result<(), Error> {
        // Whoever ends the last run (a watch's restart) is done first: it
        // must not take the next run for the last one's leftovers.
        run.change_signalled().await;
        // A new cgroup of the same name (with the same limits): the kernel
        // (6.18 here) kills every child cloned into a cgroup that was once
        // `cgroup.kill`ed (docs/decisions.md). One that never was, and is
        // empty, may hold the next run as it is where it cannot be removed
        // yet (an exited process the kernel still counts in it).
        let last = run.run();
        let reusable = last.systemd_unit.is_none()
            && last.cgroup.as_ref().is_some_and(|c| c.holds_a_new_run());
        if let (false, Some(cgroup)) = (reusable, &last.cgroup) {
            // A killed one must go: the kernel lets it go once it counts
            // none of the last run's processes.
            cgroup.wait_removable(kill::CONFIRM_WINDOW).await;
        }
        if self.stop_containment(run).await || reusable {
            return Ok(());
        }
        Err(Error::SpawnFailed(
            "what its last run left cannot be ended (its scope or cgroup is still busy)".into(),
        ))
    }

    /// Starts the next run of `session`: the same argv and environment,
    /// in the same cgroup (emptied; its limits stay) and log, with its
    /// running slot. The session's run changes in place
    /// (`Session::begin_run`); it stays running throughout. A kill that
    /// came while the run started is passed on to it.
    async fn start_next_run(
        &self,
        session: &Arc<Session>,
        restarts: &Arc<Restarts>,
        launch: &Launch,
        count: RunCount,
    ) -> Result<(), Error> {
        let id = session.id.clone();
        self.clear_for_next_run(session).await?;
        if session.spec.is_jobs() {
            self.renew_jobs(&id).await;
        }
        // (A PTY that cannot be had falls back to pipes: the launch says
        // so in `spec`, the run keeps it, and its log says so here.)
        let mut spec = session.spec.clone();
        let started = self
            .launch(&id, &mut spec, &launch.env, &launch.argv)
            .await?;
        if spec.pty != session.spec.pty {
            session.output.mark_restart(&format!(
                "[procd] run {} has no terminal (a PTY could not be had): it reads a pipe",
                count.run
            ));
        }
        if spec.is_jobs() {
            self.share_jobs_soon();
        }
        self.hold_in_keeper(&id, started.identity, &started.io, Some(restarts));
        crate::persist::crash::at(crate::persist::crash::Point::AfterRestartHold);
        let slot = (!session.holds_slot()).then(|| self.running.take());
        let (reader, exit_rx) = self.renew_session(session, started, count, spec.pty, slot);
        self.notifications.publish(Event::Started {
            session_id: id.clone(),
            pid: session.pid(),
            command: session.shown_command().to_string(),
            task_id: session.spec.task_id.clone(),
            session_key: session.spec.session_key.clone(),
            pty: spec.pty,
            started_at: session.started_at_text(),
            meta: session.meta(),
        });
        self.announce_restart(session);
        // Recorded before its output can be read (the supervisor stores
        // it): whoever sees the new run can count on a daemon that dies
        // next finding it in procs.json, not the run before.
        if let Err(e) = self.write_running_checkpoint().await {
            tracing::warn!(session = %id, %e, "the checkpoint does not hold the restarted run yet");
        }
        let fresh = super::spawn::RunStart::Fresh;
        self.supervise_in_background(session.clone(), reader, exit_rx, fresh);
        self.watch_oom(session);
        if let Some(t) = session.termination() {
            let grace = self.grace(None);
            self.terminate(session, libc::SIGTERM, grace, t.reason, &t.source)
                .await;
        }
        Ok(())
    }
}

impl Registry {
    /// A new restarting session's state: its first run's launch, kept in
    /// memory and (when a keeper holds sessions) in a sealed memfd.
    pub(super) fn first_restarts(
        &self,
        plan: crate::stacks::restart::RestartPlan,
        argv: &[String],
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Restarts, Error> {
        let launch = Launch {
            argv: argv.to_vec(),
            env: env.clone(),
        };
        let memfd = match &self.keeper {
            Some(_) => Some(launch.to_memfd().map_err(|e| {
                Error::SpawnFailed(format!("cannot keep how to restart it (memfd): {e}"))
            })?),
            None => None,
        };
        Ok(Restarts::new(plan, Some((Arc::new(launch), memfd))))
    }

    /// The restart state of a session a previous daemon started, from its
    /// checkpoint entry and the launch the keeper kept (`memfd`). Without
    /// one it cannot start again: its command's argv is not on disk (its
    /// environment may hold secrets), and its root may have exec'd
    /// another program since.
    pub(super) fn recovered_restarts(
        &self,
        e: &crate::persist::checkpoint::CheckpointEntry,
        memfd: Option<std::os::fd::OwnedFd>,
    ) -> Option<(Arc<Restarts>, Runs)> {
        let record = e.restart.as_ref()?;
        // A watch's session restarts on change with the policy "no".
        let plan = crate::stacks::restart::RestartPlan::new(&record.policy).or(e
            .watch
            .as_ref()
            .map(|_| crate::stacks::restart::RestartPlan::on_change_only()))?;
        let launch = memfd.and_then(|fd| match Launch::from_memfd(&fd) {
            Ok(launch) => Some((Arc::new(launch), Some(fd))),
            Err(err) => {
                tracing::warn!(session = %e.session_id, %err, "the kept launch is unusable");
                None
            }
        });
        let count = RunCount {
            run: record.run.max(1),
            streak: record.streak,
        };
        let last = record.last_exit.as_ref().map(|l| Arc::new(l.record()));
        let next = record.next_run.as_ref().map(|next| {
            let at = crate::clock::parse_rfc3339(&next.at).unwrap_or_else(SystemTime::now);
            // A planted time far ahead waits no longer than the longest
            // backoff a policy can ask for.
            let at = at.min(SystemTime::now() + crate::stacks::restart::MAX_BACKOFF);
            NextRun {
                count: RunCount {
                    run: next.run.max(1),
                    streak: next.streak,
                },
                at,
            }
        });
        let runs = Runs::recorded(count, last, next);
        Some((Arc::new(Restarts::new(plan, launch)), runs))
    }
}

/// What follows a run that lived `lived` and ended with `record`. A run
/// procd ended because its files changed (`registry/onchange.rs`) is
/// followed at once, and does not count towards a crash loop.
fn next_after(
    run: &Session,
    restarts: &Restarts,
    count: crate::stacks::restart::RunCount,
    lived: Duration,
    record: &ExitRecord,
) -> (Next, crate::stacks::restart::RunCount) {
    match run.change_pending() {
        true => (
            Next::RestartIn(Duration::ZERO),
            crate::stacks::restart::RunCount {
                run: count.run.saturating_add(1),
                streak: count.streak,
            },
        ),
        false => restarts
            .plan
            .next(count, lived, record.reason, record.exit_code),
    }
}

/// "it exited with code 1", as procd's lines and events say it.
fn how_it_ended(e: &ExitRecord) -> String {
    match (e.reason, e.exit_code, e.signal) {
        (CompletionReason::Oom, _, _) => "the OOM killer ended it".into(),
        (CompletionReason::Lost, _, _) => "it ended while no procd watched".into(),
        (_, _, Some(sig)) => format!("it was killed by {}", kill::signal_name(sig)),
        (_, Some(code), None) => format!("it exited with code {code}"),
        (_, None, None) => "it ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use crate::identity::ProcessIdentity;
    use crate::output::redact::Redactor;
    use crate::output::store::OutputStore;
    use crate::persist::checkpoint::CheckpointEntry;
    use crate::session::Session;
    use futures::FutureExt;
    use procd_proto::CompletionReason;
    use std::sync::Arc;

    /// A running session of no process (its pid is never signalled here).
    fn running(dir: &std::path::Path) -> Arc<Session> {
        let entry: CheckpointEntry = serde_json::from_value(serde_json::json!({
            "session_id": "s1", "command": "sleep 100", "pid": i32::MAX,
            "start_time": 0, "pgid": i32::MAX, "cwd": "/",
            "started_at": "2026-12-07T00:00:00Z", "log_path": "log",
        }))
        .expect("entry");
        let output = OutputStore::create(&dir.join("log"), 1 << 20, 4096).expect("log");
        let identity = ProcessIdentity {
            pid: i32::MAX,
            start_time: 0,
        };
        let opening = super::super::recovery::recovered_opening(&entry, identity, output);
        Arc::new(Session::new(opening, &Redactor { enabled: true }))
    }

    /// The next run (`change_signalled`) and a second signal wait until a
    /// change's signal is over; none starts once the next run is due.
    #[tokio::test]
    async fn a_next_run_waits_until_a_change_signal_is_over() {
        let dir = tempfile::tempdir().expect("dir");
        let run = running(dir.path());
        let signal = run.signal_for_change(|| false).await.expect("running");
        let mut next = Box::pin(run.change_signalled());
        let mut second = Box::pin(run.signal_for_change(|| false));
        assert!(
            (&mut next).now_or_never().is_none(),
            "the next run went first"
        );
        assert!(
            (&mut second).now_or_never().is_none(),
            "two signals at once"
        );
        drop(signal);
        let deadline = std::time::Duration::from_secs(10);
        tokio::time::timeout(deadline, next)
            .await
            .expect("the next run waits on");
        let second = tokio::time::timeout(deadline, second)
            .await
            .expect("the second waits on");
        assert!(
            second.is_some(),
            "the second signal did not follow the first"
        );
        drop(second);
        assert!(
            run.signal_for_change(|| true).await.is_none(),
            "signalled a due run"
        );
    }

    /// A backoff sees a termination asked before it waits, and one asked
    /// while it waits; a cleared one no longer counts.
    #[tokio::test]
    async fn a_termination_ends_a_backoff_whenever_it_was_asked() {
        let dir = tempfile::tempdir().expect("dir");
        let run = running(dir.path());
        let mut waiting = Box::pin(run.termination_requested());
        assert!((&mut waiting).now_or_never().is_none(), "ended unasked");
        run.request_termination(CompletionReason::Killed, "kill");
        let deadline = std::time::Duration::from_secs(10);
        tokio::time::timeout(deadline, waiting)
            .await
            .expect("not woken");
        assert!(
            run.termination_requested().now_or_never().is_some(),
            "asked before"
        );
        run.request_termination(CompletionReason::Timeout, "timeout");
        let first = run.termination().expect("asked");
        assert_eq!(
            (first.reason, first.source.as_str()),
            (CompletionReason::Killed, "kill")
        );
        run.clear_termination();
        assert!(
            run.termination_requested().now_or_never().is_none(),
            "cleared yet counted"
        );
    }
}
