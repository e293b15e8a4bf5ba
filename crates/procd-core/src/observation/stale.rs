//! Stale sessions (docs/stacks.md "Stale"): a running session whose cwd
//! is in a git worktree is watched (procd-sys's `TreeWatch`, inotify),
//! and a file changed under its cwd after it started makes it stale
//! until its run ends; a restart's next run starts fresh. `poll` and
//! `list` answer `stale: {since, files}`.

use crate::session::Session;
use procd_sys::tree_watch::{Ignore, TreeWatch, WatchError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Sessions watched at once: each holds an inotify instance (the user
/// has 128 here, shared with every other program), so past this a
/// session is not watched, and says so in the daemon's log.
pub const MAX_WATCHED_SESSIONS: usize = 32;
/// Directories one session's tree may have watched (each a kernel watch).
pub const MAX_WATCHED_DIRS: usize = 10_000;
/// How long a session runs before it is watched: the walk that sets the
/// watches is for servers, not for commands that end at once.
pub const WATCH_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// Files a stale session names (the newest changes are dropped beyond).
pub const MAX_STALE_FILES: usize = 20;

/// A running session's files changed after it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// The first change.
    pub since: SystemTime,
    /// What changed, relative to its cwd, first first (at most
    /// `MAX_STALE_FILES`).
    pub files: Vec<String>,
}

impl Stale {
    /// Adds `changed` to what is known (a first change starts it).
    pub fn add(now: Option<Stale>, changed: Vec<PathBuf>) -> Stale {
        let mut stale = now.unwrap_or(Stale {
            since: SystemTime::now(),
            files: Vec::new(),
        });
        note_changed(&mut stale.files, changed);
        stale
    }
}

/// Adds the paths of `changed` not in `files` yet, first first, up to
/// `MAX_STALE_FILES` (what a stale session and a watch's restart name).
pub fn note_changed(files: &mut Vec<String>, changed: Vec<PathBuf>) {
    for path in changed {
        let path = path.to_string_lossy().into_owned();
        if files.len() < MAX_STALE_FILES && !files.contains(&path) {
            files.push(path);
        }
    }
}

/// The git worktree `dir` is in, if any: the nearest directory up with a
/// `.git` (a directory, or a worktree's file).
pub fn git_worktree_of(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// Watches `session`'s cwd, if it is in a git worktree, until the
/// session's run ends. The walk that sets the watches runs off the event
/// loop; the session is held weakly. It holds one of `places` (the
/// registry's: at most `MAX_WATCHED_SESSIONS`) while it watches.
pub fn watch(session: &Arc<Session>, places: &crate::admission::slot::Slots) {
    let places = places.clone();
    // A shell runs commands that edit its files: not a server to restart.
    if session.spec.shell.is_some() {
        return;
    }
    let cwd = session.spec.cwd.clone();
    let run = session.run();
    let started = run.started_at();
    let weak = Arc::downgrade(session);
    let mut state = session.subscribe();
    let id = session.id.clone();
    let span = tracing::info_span!("session", session_id = %id);
    let watching = async move {
        // A short command (a test run, a build step) ends before this
        // and costs no walk; the walk finds what changed meanwhile.
        tokio::select! {
            _ = tokio::time::sleep(WATCH_AFTER) => {}
            _ = state.wait_for(|v| !v.is_current_run(&run)) => return,
        }
        let Some(_place) = places.try_take(MAX_WATCHED_SESSIONS) else {
            tracing::info!(session = %id, "not watched for staleness: {MAX_WATCHED_SESSIONS} sessions are");
            return;
        };
        let walked = tokio::task::spawn_blocking(move || {
            git_worktree_of(&cwd)?;
            // What changed between the start and each directory's watch
            // is found by its mtime: no edit falls in between.
            let ignore = Ignore::of_root(&cwd);
            Some(TreeWatch::walk(
                &cwd,
                ignore,
                MAX_WATCHED_DIRS,
                Some(started),
            ))
        })
        .await;
        let mut unstarted = match walked {
            Ok(Some(Ok(unstarted))) => unstarted,
            Ok(None) | Err(_) => return,
            Ok(Some(Err(e))) => return said(&id, &e),
        };
        let before = std::mem::take(&mut unstarted.changed_before);
        let mut tree = match unstarted.start() {
            Ok(tree) => tree,
            Err(e) => return said(&id, &e),
        };
        if let (false, Some(session)) = (
            before.is_empty(),
            weak.upgrade().filter(|s| s.is_current_run(&run)),
        ) {
            session.mark_stale(before);
        }
        loop {
            tokio::select! {
                changed = tree.changed() => match (changed, weak.upgrade().filter(|s| s.is_current_run(&run))) {
                    (Ok(changed), Some(session)) => session.mark_stale(changed),
                    (Err(e), _) => return said(&id, &e),
                    (_, None) => return,
                },
                _ = state.wait_for(|v| !v.is_current_run(&run)) => return,
            }
        }
    };
    tokio::spawn(tracing::Instrument::instrument(watching, span));
}

fn said(id: &str, e: &WatchError) {
    tracing::warn!(session = %id, "not watched for staleness: {e}");
}
