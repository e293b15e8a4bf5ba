//! A session's end, in one place: the exit recorded (the only caller of
//! `Session::mark_exited`), or a restart instead (`restarts.rs`), its
//! events and bookkeeping, OOM kills as they happen, and the orphans its
//! root leaves.

use super::present::completion_event;
use super::Registry;
use crate::clock::rfc3339;
use crate::identity::ProcessIdentity;
use crate::session::{ExitRecord, Session};
use crate::tree::kill::{self, signal_name};
use procd_proto::{CompletionReason, Event};
use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How many times (10 ms apart) an OOM wake-up looks for the kill count to
/// move before it waits for the next one.
const OOM_SETTLE_LOOKS: usize = 30;

impl Registry {
    /// Ends a supervised session: its events (while the registry still
    /// exists), then the exit itself, then the checkpoint. An exit after
    /// an OOM kill in its cgroup is reported as `oom`.
    pub(super) fn record_end(me: &Weak<Registry>, session: &Session, record: Arc<ExitRecord>) {
        let reg = me.upgrade();
        if let Some(reg) = &reg {
            // A kill the watcher has not reported yet comes before the end.
            reg.report_oom(session);
        }
        let record = if record.reason == CompletionReason::Exited && session.oom_reported() > 0 {
            Arc::new(ExitRecord {
                reason: CompletionReason::Oom,
                ..(*record).clone()
            })
        } else {
            record
        };
        let record = match &reg {
            Some(reg) => match reg.after_run(session, record) {
                Ok(()) => return, // the next run is on its way
                Err(end) => end,
            },
            None => record,
        };
        if let Some(reg) = &reg {
            reg.on_exit(session, &record);
        }
        session.mark_exited(record);
        if let Some(plan) = &session.spec.sandbox {
            if let Some(reg) = &reg {
                plan.remove_tmp(&reg.tmp_dir);
            }
        }
        if let Some(reg) = reg {
            reg.release_from_keeper(&session.id);
            reg.checkpoint_soon();
            match &session.run().cgroup {
                // Its cgroup holds whatever the root left running (and is
                // removed only once that has ended).
                Some(cgroup) => {
                    session.set_adopted(Vec::new());
                    cgroup.remove();
                }
                None => reg.adopt_orphans(session),
            }
        }
    }

    /// Queues an `oom` event if its cgroup counts OOM kills not reported
    /// yet; true if it did.
    fn report_oom(&self, session: &Session) -> bool {
        let run = session.run();
        let Some(cgroup) = &run.cgroup else {
            return false;
        };
        let kills = cgroup.oom_kills();
        let before = session.count_oom_reported(kills);
        if kills <= before {
            return false;
        }
        let text = format!(
            "Background process {}: the kernel killed a process of it for exceeding its memory limit ({kills} so far).",
            session.id
        );
        self.notifications.push_once(
            Some(format!("oom {} {kills}", session.id)),
            Event::Oom {
                about: self.about(session, text),
                pid: None,
                oom_kills: kills,
            },
        );
        true
    }

    /// Reports every OOM kill in a session's cgroup as it happens (an
    /// `oom` event), until its run ends: where memory is accounted
    /// (a v1 memory cgroup, made for a memory limit; `memory.events` on
    /// v2). Also for a session taken over from a previous daemon, whose
    /// limits are only in its cgroup.
    pub(super) fn watch_oom(&self, session: &Arc<Session>) {
        let run = session.run();
        let Some(cgroup) = &run.cgroup else {
            return;
        };
        let mut watch = match cgroup.oom_watch() {
            Ok(Some(w)) => w,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = %session.id, %e, "cannot watch for OOM kills");
                return;
            }
        };
        // A kill before the watch existed is counted now.
        self.report_oom(session);
        let me = self.me.clone();
        let session = session.clone();
        let run = run.clone();
        tokio::spawn(async move {
            let mut state = session.subscribe();
            loop {
                tokio::select! {
                    signalled = watch.signalled() => if signalled.is_err() {
                        return;
                    },
                    _ = state.wait_for(|v| !v.is_current_run(&run)) => return,
                }
                // v1 signals when the OOM begins and counts the kill a
                // moment later, with no second signal: look a few times.
                for _ in 0..OOM_SETTLE_LOOKS {
                    let Some(reg) = me.upgrade() else { return };
                    if reg.report_oom(&session) {
                        break;
                    }
                    drop(reg);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
    }

    /// The daemon's children that no one waits for and that are not in
    /// `claimed` (a /proc scan, off the event loop).
    pub(super) fn unclaimed_children(
        &self,
        claimed: HashSet<i32>,
    ) -> impl std::future::Future<Output = Vec<ProcessIdentity>> + Send + 'static {
        let procfs = self.procfs.clone();
        let reaper = self.reaper.clone();
        async move {
            kill::scan_blocking(move || {
                kill::unclaimed_children(&procfs, |pid| reaper.is_waited(pid), &claimed)
            })
            .await
            .unwrap_or_default()
        }
    }

    /// Records which processes the session's root left to the daemon when
    /// it exited (it was their subreaper): the daemon's children that no
    /// one waits for and no other session has claimed. Off the event loop,
    /// after the exit is visible (a /proc scan must not delay `wait`); a
    /// kill of the exited session waits for it (`Session::adoption_known`).
    /// Two roots that exit within one scan may have their orphans recorded
    /// under the first; a stopping daemon ends them all regardless.
    fn adopt_orphans(&self, session: &Session) {
        let Some(session) = self.table().get(&session.id).cloned() else {
            return;
        };
        let claimed: HashSet<i32> = self
            .all_sessions()
            .iter()
            .flat_map(|s| s.tree().adopted)
            .map(|p| p.pid)
            .collect();
        let scan = self.unclaimed_children(claimed);
        tokio::spawn(async move {
            let orphans = scan.await;
            if !orphans.is_empty() {
                tracing::info!(session = %session.id, ?orphans, "adopted the orphans its root left");
            }
            session.set_adopted(orphans);
        });
    }

    /// Bookkeeping when a session ends, before its state flips to exited
    /// (so a `wait` that returns sees the completion event already queued).
    fn on_exit(&self, session: &Session, record: &ExitRecord) {
        session.release_slot();
        if session.spec.is_jobs() {
            self.end_jobs(&session.id);
        }
        if session.notify_on_complete() {
            // Once: a daemon that records this exit again after a crash
            // (the keeper still had it) queues no second completion.
            self.notifications.push_once(
                Some(format!("completion {}", session.id)),
                completion_event(&self.redactor, session, record),
            );
        }
        self.notifications.publish(Event::Exited {
            session_id: session.id.clone(),
            command: session.shown_command().to_string(),
            task_id: session.spec.task_id.clone(),
            session_key: session.spec.session_key.clone(),
            exit_code: record.exit_code,
            signal: record.signal.map(signal_name),
            completion_reason: record.reason,
            termination_source: record.source.clone(),
            exited_at: rfc3339(record.exited_at),
            meta: session.meta(),
        });
    }
}
