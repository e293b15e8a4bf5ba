//! Restart on change (docs/stacks.md): a run of a session spawned with
//! `watch` is followed until it ends. After a burst of changes (waited
//! out: `debounce` of quiet, at most `onchange::MAX_WAIT`) the run is
//! ended with `termination_source` "watch", and `after_run` starts the
//! next at once; or, with `signal:NAME`, the run is signalled. Each run
//! has its own follower: the next one walks the tree again.

use super::Registry;
use crate::session::{Run, Session, SessionView};
use crate::stacks::onchange::{ChangeAction, ChangePlan, MAX_WAIT};
use procd_sys::timer::PreciseTimer;
use procd_sys::tree_watch::TreeWatch;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bursts of changes queued from the trees to the follower.
const QUEUED_BURSTS: usize = 64;

impl Registry {
    /// Checks that `plan`'s trees can be watched whole before a spawn
    /// starts anything: too many directories, or no inotify watch left,
    /// is the spawn's error. Off the event loop.
    pub(super) async fn check_watchable(plan: &Arc<ChangePlan>) -> Result<(), String> {
        let plan = plan.clone();
        tokio::task::spawn_blocking(move || plan.walk(None).map(drop))
            .await
            .map_err(|e| format!("watch: {e}"))?
    }

    /// Follows `run`'s watched files until it ends (nothing without
    /// `spawn{watch}`).
    pub(super) fn follow_changes(&self, run: &Arc<Session>) {
        let Some(plan) = run.spec.on_change.clone() else {
            return;
        };
        let (me, weak) = (self.me.clone(), Arc::downgrade(run));
        let mut state = run.subscribe();
        let this_run = run.run();
        let (started, cwd) = (this_run.started_at(), run.spec.cwd.clone());
        let span = tracing::info_span!("session", session_id = %run.id, pid = run.pid());
        let following = async move {
            let (tx, mut changes) = mpsc::channel(QUEUED_BURSTS);
            let Some(trees) = start_trees(&plan, started, &cwd, tx).await else {
                return;
            };
            loop {
                tokio::select! {
                    Some(first) = changes.recv() => {
                        let files = settle(&mut changes, first, plan.debounce).await;
                        if !act(&me, &weak, &this_run, &plan.action, files).await {
                            break;
                        }
                    }
                    // (The guard wait_for returns is dropped at once.)
                    () = ended(&mut state, &this_run) => break,
                }
            }
            for tree in trees {
                tree.abort();
            }
        };
        tokio::spawn(tracing::Instrument::instrument(following, span));
    }
}

/// Until `run` is no longer the session's run, running.
async fn ended(view: &mut tokio::sync::watch::Receiver<SessionView>, run: &Arc<Run>) {
    let _ = view.wait_for(|v| !v.is_current_run(run)).await;
}

/// Walks the trees (files modified since `started` count as a first
/// change) and starts a task per tree sending its changes, relative to
/// `cwd`, to `tx`. None when they cannot be watched (logged).
async fn start_trees(
    plan: &Arc<ChangePlan>,
    started: std::time::SystemTime,
    cwd: &Path,
    tx: mpsc::Sender<Vec<PathBuf>>,
) -> Option<Vec<JoinHandle<()>>> {
    let walking = plan.clone();
    let walked = tokio::task::spawn_blocking(move || walking.walk(Some(started))).await;
    let unstarted = match walked {
        Ok(Ok(unstarted)) => unstarted,
        Ok(Err(e)) => {
            tracing::warn!(cwd = %cwd.display(), "not following changes: {e}");
            return None;
        }
        Err(_) => return None,
    };
    let mut tasks = Vec::new();
    for (index, (mut unstarted, root)) in unstarted.into_iter().zip(&plan.roots).enumerate() {
        let prefix = root.strip_prefix(cwd).unwrap_or(root).to_path_buf();
        let mut before = std::mem::take(&mut unstarted.changed_before);
        before.retain(|p| plan.wanted(index, p));
        let tree = match unstarted.start() {
            Ok(tree) => tree,
            Err(e) => {
                tracing::warn!(cwd = %cwd.display(), "not following changes: {e}");
                return None;
            }
        };
        if !before.is_empty() {
            let _ = tx.try_send(before.iter().map(|p| prefix.join(p)).collect());
        }
        let plan = plan.clone();
        tasks.push(tokio::spawn(send_changes(
            tree,
            prefix,
            plan,
            index,
            tx.clone(),
        )));
    }
    Some(tasks)
}

/// Sends each batch of `tree`'s changes that the plan wants (its
/// `index`th root's glob) until the follower is gone.
async fn send_changes(
    mut tree: TreeWatch,
    prefix: PathBuf,
    plan: Arc<ChangePlan>,
    index: usize,
    tx: mpsc::Sender<Vec<PathBuf>>,
) {
    while let Ok(changed) = tree.changed().await {
        let changed: Vec<PathBuf> = changed
            .iter()
            .filter(|p| plan.wanted(index, p))
            .map(|p| prefix.join(p))
            .collect();
        if !changed.is_empty() && tx.send(changed).await.is_err() {
            return;
        }
    }
}

/// The files of a burst: what came until `debounce` passed with no
/// change, or `MAX_WAIT` since the first.
async fn settle(
    changes: &mut mpsc::Receiver<Vec<PathBuf>>,
    first: Vec<PathBuf>,
    debounce: std::time::Duration,
) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    crate::observation::stale::note_changed(&mut files, first);
    // A slow burst (a loaded machine) still acts once: the cap grows
    // with the debounce asked for.
    let last_call = std::time::Instant::now() + MAX_WAIT.max(debounce * 4);
    // The debounce is waited out to the microsecond (Tokio's timer is a
    // millisecond late or more): a restart waits no longer than asked.
    let mut timer = PreciseTimer::new().ok();
    loop {
        let quiet_until = (std::time::Instant::now() + debounce).min(last_call);
        let quiet = async {
            let precise = match &mut timer {
                Some(timer) => timer.until(quiet_until).await.is_ok(),
                None => false,
            };
            if !precise {
                tokio::time::sleep_until(quiet_until.into()).await;
            }
        };
        tokio::select! {
            batch = changes.recv() => match batch {
                Some(batch) => crate::observation::stale::note_changed(&mut files, batch),
                None => break,
            },
            () = quiet => break,
        }
    }
    files
}

/// Does what a change asks to the run; whether to go on following it.
async fn act(
    registry: &Weak<Registry>,
    session: &Weak<Session>,
    this_run: &Arc<Run>,
    action: &ChangeAction,
    files: Vec<String>,
) -> bool {
    let (Some(registry), Some(run)) = (registry.upgrade(), session.upgrade()) else {
        return false;
    };
    if !run.is_current_run(this_run) {
        return false;
    }
    let shown = files.join(", ");
    match action {
        ChangeAction::RunThenRestart(command) => {
            if !rebuilt(&registry, &run, command, &shown).await {
                return true; // the old run goes on; the next change tries again
            }
            // (Killed while it rebuilt: nothing to restart.)
            if run.is_current_run(this_run) {
                restart(&registry, &run, this_run, files).await;
            }
            false
        }
        ChangeAction::Restart => {
            run.output
                .mark_restart(&format!("[procd] {shown} changed: restarting"));
            restart(&registry, &run, this_run, files).await;
            false
        }
        ChangeAction::Signal(sig) => {
            run.output.mark_restart(&format!(
                "[procd] {shown} changed: sent {}",
                crate::tree::kill::signal_name(*sig)
            ));
            crate::tree::kill::signal_group(&run.tree(), &registry.procfs, *sig).await;
            true
        }
    }
}

/// Ends `run`'s tree (SIGTERM, SIGKILL after the grace) with the change
/// noted: not a kill of the session (that would end it), so `after_run`
/// finds the change pending and starts the next run at once.
///
/// The SIGKILL goes by identity (pidfds) to what the SIGTERM went to,
/// never through the cgroup, which the next run may hold by then. Once
/// the root has gone, the restart kills whatever else is left before the
/// next run starts.
async fn restart(
    registry: &Arc<Registry>,
    run: &Arc<Session>,
    this_run: &Arc<Run>,
    files: Vec<String>,
) {
    if run.restarts.is_none() {
        return;
    }
    let signalled = {
        // Ended meanwhile (its next run due, or started): its tree may
        // be the next run's.
        let over = || run.is_restarting() || !run.is_current_run(this_run);
        let Some(_signal) = run.signal_for_change(over).await else {
            return;
        };
        run.ended_by_change(files);
        crate::tree::kill::signal_tree(&run.tree(), &registry.procfs, libc::SIGTERM).await
    };
    crate::tree::kill::kill_survivors(signalled, registry.grace(None)).await;
}

/// Runs `command` (`run:COMMAND`) as a session of its own, in the run's
/// cwd and under its key; whether it exited 0. The run's log says which
/// session it was and how it ended.
async fn rebuilt(registry: &Arc<Registry>, run: &Arc<Session>, command: &str, shown: &str) -> bool {
    let params = procd_proto::SpawnParams {
        command: command.to_string(),
        cwd: Some(run.spec.cwd.display().to_string()),
        session_key: run.spec.session_key.clone(),
        task_id: run.spec.task_id.clone(),
        owner: run.spec.owner.clone(),
        ..Default::default()
    };
    let step = match registry.spawn(params).await {
        Ok(step) => step.session_id,
        Err(e) => {
            run.output.mark_restart(&format!(
                "[procd] {shown} changed: {command:?} could not start: {}",
                e.message()
            ));
            return false;
        }
    };
    run.output.mark_restart(&format!(
        "[procd] {shown} changed: running {command:?} ({step})"
    ));
    let ended = match registry.find(&step) {
        Ok(session) => session.wait_end().await,
        Err(_) => None,
    };
    let code = ended.as_ref().and_then(|e| e.exit_code);
    if code != Some(0) {
        run.output.mark_restart(&format!(
            "[procd] {step} ended ({}): not restarting",
            code.map_or("no exit code".to_string(), |c| format!("exit code {c}"))
        ));
    }
    code == Some(0)
}
