//! Restart on change (docs/stacks.md): `spawn{watch}` checked once into a
//! `ChangePlan`: the directories to watch, what to leave out, what to do
//! and how long a burst of changes is waited out. The registry follows
//! the changes (`registry/onchange.rs`).

use procd_proto::WatchSpec;
use procd_sys::tree_watch::{Ignore, TreeWatch, Unstarted};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most directories one `watch` may name.
pub const MAX_PATHS: usize = 16;
/// The most ignore patterns it may add.
pub const MAX_IGNORES: usize = 64;
/// Directories one session's watch may hold (each a kernel watch).
pub const MAX_DIRS: usize = 10_000;
const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
/// However long changes go on, an action waits at most this long (or
/// four debounces, when that is longer).
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// What a change does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeAction {
    /// The run is ended and the next one starts at once (same id, log).
    Restart,
    /// This signal goes to the run's process group.
    Signal(i32),
    /// This command runs first, as a session of its own in the same cwd
    /// (a rebuild: its log is its own); the run restarts if it exits 0.
    RunThenRestart(String),
}

/// A checked `watch`.
#[derive(Debug, Clone)]
pub struct ChangePlan {
    /// As the caller gave it (the checkpoint keeps it).
    pub spec: WatchSpec,
    /// Absolute directories.
    pub roots: Vec<PathBuf>,
    /// Whose `.gitignore` is read (at the walk: off the event loop).
    cwd: PathBuf,
    pub action: ChangeAction,
    pub debounce: Duration,
}

impl ChangePlan {
    /// Checks `spec` against the session's `cwd`; the error names the key
    /// at fault. Looks at the file system (the paths must be directories).
    pub fn check(spec: &WatchSpec, cwd: &Path) -> Result<ChangePlan, String> {
        let paths = spec.paths.clone().unwrap_or_else(|| vec![".".into()]);
        if paths.is_empty() || paths.len() > MAX_PATHS {
            return Err(format!("watch.paths: 1 to {MAX_PATHS} directories"));
        }
        let mut roots = Vec::new();
        for path in &paths {
            let root = cwd.join(path);
            if !root.is_dir() {
                return Err(format!(
                    "watch.paths: {} is not a directory",
                    root.display()
                ));
            }
            roots.push(root);
        }
        let extra = spec.ignore.as_deref().unwrap_or_default();
        if extra.len() > MAX_IGNORES || extra.iter().any(|p| p.len() > 1024) {
            return Err(format!(
                "watch.ignore: at most {MAX_IGNORES} patterns of at most 1024 bytes"
            ));
        }
        let action = match spec.action.as_deref() {
            None | Some("restart") => ChangeAction::Restart,
            Some(other) => match (
                other.strip_prefix("signal:").map(signal_number),
                other.strip_prefix("run:"),
            ) {
                (Some(Some(sig)), _) => ChangeAction::Signal(sig),
                (_, Some(command)) if !command.trim().is_empty() && command.len() <= 65536 => {
                    ChangeAction::RunThenRestart(command.to_string())
                }
                _ => {
                    return Err(format!(
                        "watch.action: \"restart\", \"signal:NAME\" (e.g. \"signal:HUP\") or \"run:COMMAND\", got {other:?}"
                    ))
                }
            },
        };
        let debounce = match spec.debounce_ms {
            None => DEFAULT_DEBOUNCE,
            Some(ms @ 10..=10_000) => Duration::from_millis(ms),
            Some(ms) => return Err(format!("watch.debounce_ms: 10 to 10000, got {ms}")),
        };
        Ok(ChangePlan {
            spec: spec.clone(),
            roots,
            cwd: cwd.to_path_buf(),
            action,
            debounce,
        })
    }

    /// Sets the watches, one tree per directory: a walk, so off the event
    /// loop. Too many directories, or no inotify watch left, is an error
    /// (never a watch of part of the tree).
    /// With `since`, each tree also lists the files modified after it
    /// (a change between a run's start and its watch is not lost).
    pub fn walk(&self, since: Option<std::time::SystemTime>) -> Result<Vec<Unstarted>, String> {
        let mut ignore = Ignore::of_root(&self.cwd);
        for pattern in self.spec.ignore.iter().flatten() {
            ignore.add(pattern);
        }
        self.roots
            .iter()
            .map(|root| {
                TreeWatch::walk(root, ignore.clone(), MAX_DIRS, since)
                    .map_err(|e| format!("watch: {e}"))
            })
            .collect()
    }
}

fn signal_number(name: &str) -> Option<i32> {
    crate::kill::parse_signal(&procd_proto::SignalSpec::Name(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{ChangeAction, ChangePlan};
    use procd_proto::WatchSpec;

    #[test]
    fn a_watch_is_checked_and_each_fault_named() {
        let cwd = tempfile::tempdir().unwrap();
        std::fs::create_dir(cwd.path().join("src")).unwrap();
        let spec = |paths: &[&str], action: Option<&str>, debounce: Option<u64>| WatchSpec {
            paths: Some(paths.iter().map(|p| p.to_string()).collect()),
            ignore: None,
            action: action.map(String::from),
            debounce_ms: debounce,
        };
        let plan = ChangePlan::check(&spec(&["src"], Some("signal:HUP"), None), cwd.path());
        assert_eq!(plan.unwrap().action, ChangeAction::Signal(libc::SIGHUP));
        for (bad, names) in [
            (spec(&["nope"], None, None), "watch.paths"),
            (spec(&[], None, None), "watch.paths"),
            (spec(&["src"], Some("reboot"), None), "watch.action"),
            (spec(&["src"], Some("signal:NOPE"), None), "watch.action"),
            (spec(&["src"], Some("run: "), None), "watch.action"),
            (spec(&["src"], None, Some(5)), "watch.debounce_ms"),
        ] {
            let err = ChangePlan::check(&bad, cwd.path()).unwrap_err();
            assert!(err.starts_with(names), "{err}");
        }
    }
}
