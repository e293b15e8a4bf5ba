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
    /// For each root, the glob its changes must match (the parts of a
    /// `watch.paths` entry from its first `*` or `?` on), or None: all.
    only: Vec<Option<Vec<String>>>,
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
        let (mut roots, mut only) = (Vec::new(), Vec::new());
        for path in &paths {
            let (base, glob) = split_glob(path)?;
            let root = cwd.join(base);
            if !root.is_dir() {
                return Err(format!(
                    "watch.paths: {} is not a directory",
                    root.display()
                ));
            }
            roots.push(root);
            only.push(glob);
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
            only,
            cwd: cwd.to_path_buf(),
            action,
            debounce,
        })
    }

    /// Whether a change of `relative` (below the `index`th root) counts:
    /// it matches that root's glob, if it has one.
    pub fn wanted(&self, index: usize, relative: &Path) -> bool {
        let Some(Some(glob)) = self.only.get(index) else {
            return true;
        };
        let parts: Vec<&str> = relative.iter().filter_map(|p| p.to_str()).collect();
        path_glob_matches(glob, &parts)
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

/// A `watch.paths` entry as the directory to watch and, when it holds a
/// glob (`src/**/*.ts`), the glob below it (`**`, `*.ts`): the parts
/// from the first one with `*` or `?` on.
fn split_glob(path: &str) -> Result<(PathBuf, Option<Vec<String>>), String> {
    let parts: Vec<&str> = path.split('/').collect();
    let Some(first) = parts.iter().position(|p| p.contains(['*', '?'])) else {
        return Ok((PathBuf::from(path), None));
    };
    if path.starts_with('/') || parts.contains(&"..") {
        return Err(format!(
            "watch.paths: {path:?}: a glob stays below the cwd (no leading `/`, no `..`)"
        ));
    }
    let base: PathBuf = parts[..first].iter().collect();
    let glob = parts[first..]
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| p.to_string())
        .collect();
    let base = if base.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base
    };
    Ok((base, Some(glob)))
}

/// Whether `path`'s parts match `glob`'s: `**` any number of parts
/// (none too), every other part a name glob (`*`, `?`).
fn path_glob_matches(glob: &[String], path: &[&str]) -> bool {
    match (glob.first(), path.first()) {
        (None, None) => true,
        (Some(g), _) if g == "**" => {
            path_glob_matches(&glob[1..], path)
                || (!path.is_empty() && path_glob_matches(glob, &path[1..]))
        }
        (Some(g), Some(p)) => {
            procd_sys::tree_watch::glob_matches(g, p) && path_glob_matches(&glob[1..], &path[1..])
        }
        _ => false,
    }
}

fn signal_number(name: &str) -> Option<i32> {
    crate::tree::kill::parse_signal(&procd_proto::SignalSpec::Name(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{path_glob_matches, split_glob, ChangeAction, ChangePlan};
    use procd_proto::WatchSpec;

    #[test]
    fn globs_in_paths_watch_their_base_and_match_below_it() {
        let (base, glob) = split_glob("src/**/*.ts").unwrap();
        assert_eq!(base, std::path::PathBuf::from("src"));
        let glob = glob.unwrap();
        for (path, want) in [
            (&["a.ts"][..], true),
            (&["a", "b", "c.ts"][..], true),
            (&["a.js"][..], false),
            (&["a", "b.ts", "c.js"][..], false),
        ] {
            assert_eq!(path_glob_matches(&glob, path), want, "{path:?}");
        }
        let (base, glob) = split_glob("*.toml").unwrap();
        assert_eq!(base, std::path::PathBuf::from("."));
        assert!(path_glob_matches(glob.as_ref().unwrap(), &["Cargo.toml"]));
        assert!(!path_glob_matches(
            glob.as_ref().unwrap(),
            &["a", "Cargo.toml"]
        ));
        assert_eq!(split_glob("src").unwrap().1, None);
        for bad in ["/etc/*", "../*.ts", "src/../*.ts"] {
            assert!(split_glob(bad).is_err(), "{bad}");
        }
    }

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
