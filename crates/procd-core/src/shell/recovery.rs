//! Shells a previous daemon left: their directories read back (the
//! shell file, the journal replayed) and their sessions, which the
//! registry recovered, taken back.

use super::journal::{self, Entry};
use super::{remove_dir, Command, End, Shells, State, KEPT_COMMANDS};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

impl Shells {
    /// Takes back the shells a previous daemon left, once the registry
    /// has recovered their sessions; removes the directories of the rest.
    pub async fn recover(self: &Arc<Self>) {
        let dir = self.dir.clone();
        let found = tokio::task::spawn_blocking(move || recorded_shells(&dir)).await;
        for (dir, file) in found.unwrap_or_default() {
            let session = file
                .as_ref()
                .and_then(|f| self.registry.find(&f.session_id).ok())
                .filter(|s| s.is_running());
            let (Some(session), Some(file)) = (session, file) else {
                remove_dir(dir).await;
                continue;
            };
            let state = {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || replay(&journal::read(&dir)))
                    .await
                    .unwrap_or_default()
            };
            let id = session.id.clone();
            match self.adopt(session, dir, file, state) {
                Ok(shell) => shell.retake_turn(),
                Err(e) => tracing::warn!(shell = %id, %e, "cannot take the shell back"),
            }
        }
    }
}

/// The commands and state a journal describes.
fn replay(entries: &[Entry]) -> State {
    let mut state = State::default();
    for entry in entries {
        match entry {
            Entry::Started(s) => {
                state.last = state.last.max(s.n);
                state.commands.push_back(Command {
                    n: s.n,
                    nonce: s.nonce.clone(),
                    text: s.command.clone(),
                    started_at: procd_sys::clock::parse_rfc3339(&s.started_at)
                        .unwrap_or_else(SystemTime::now),
                    started: started_instant(&s.started_at),
                    from: s.from,
                    // What it said of its start went with the last daemon.
                    begun: true,
                    end: None,
                    stop: None,
                    turn: None,
                });
                if state.commands.len() > KEPT_COMMANDS {
                    state.commands.pop_front();
                }
            }
            Entry::Ended(e) => {
                if let Some(c) = state.commands.iter_mut().find(|c| c.n == e.ended) {
                    c.end = Some(End {
                        status: e.status,
                        exit_code: e.exit_code,
                        to: e.to,
                        cwd: e.cwd.clone(),
                        duration: Duration::from_millis(e.duration_ms),
                        ended_by: e.ended_by.clone(),
                    });
                }
            }
        }
    }
    state
}

/// The instant a previous daemon's recorded time stands for.
fn started_instant(at: &str) -> Instant {
    procd_sys::clock::parse_rfc3339(at)
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .and_then(|ago| Instant::now().checked_sub(ago))
        .unwrap_or_else(Instant::now)
}

/// The shells' directories and what each says of itself.
fn recorded_shells(root: &Path) -> Vec<(PathBuf, Option<journal::ShellFile>)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .map(|dir| {
            let file = journal::read_shell_file(&dir);
            (dir, file)
        })
        .collect()
}
