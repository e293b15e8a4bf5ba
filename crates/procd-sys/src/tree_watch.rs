//! A directory tree watched with inotify: every directory below a root
//! (less the ignored ones) gets a watch, a directory made later gets one
//! when its creation is read, and what changed comes back as paths
//! relative to the root. Nothing is polled: the caller awaits the
//! inotify descriptor.
//!
//! What counts as a change is what an editor's save does: a file closed
//! after writing, moved in (the rename of an atomic save), made, deleted
//! or moved away. A queue overflow is a change of unknown files ("*").

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Names never watched, wherever they are: version control, dependency,
/// build and cache directories (what a running tool writes itself). What a root's `.gitignore` names is added.
pub const IGNORED_NAMES: [&str; 10] = [
    ".git",
    "node_modules",
    "target",
    "__pycache__",
    ".venv",
    ".pytest_cache",
    ".mypy_cache",
    ".next",
    ".cache",
    ".tox",
];

/// Editors' own files beside the one being edited (vim's swap and test
/// files, backups, emacs's lock links): a save is seen on the file itself.
pub const EDITOR_TEMPS: [&str; 5] = ["*.swp", "*.swx", "*~", ".#*", "4913"];

/// What a tree leaves out: exact names anywhere, and the simple patterns
/// of the root's `.gitignore` (`name`, `*.ext`, `dir/`, `/anchored`; a
/// `!` line or a pattern with an inner `/` is not understood and is
/// skipped, so such a path is watched).
#[derive(Debug, Clone, Default)]
pub struct Ignore {
    patterns: Vec<Pattern>,
}

#[derive(Debug, Clone)]
struct Pattern {
    glob: String,
    /// Only at the root (a leading `/`).
    anchored: bool,
    /// Only directories (a trailing `/`).
    dirs_only: bool,
}

impl Ignore {
    /// `IGNORED_NAMES` and `root`'s `.gitignore`, if it has one (at most
    /// 64 KiB of it is read).
    pub fn of_root(root: &Path) -> Ignore {
        let mut ignore = Ignore::default();
        for name in IGNORED_NAMES.iter().chain(&EDITOR_TEMPS) {
            ignore.add(name);
        }
        if let Ok(text) = std::fs::read(root.join(".gitignore")) {
            let text = String::from_utf8_lossy(&text[..text.len().min(64 << 10)]).into_owned();
            for line in text.lines() {
                ignore.add(line);
            }
        }
        ignore
    }

    /// Adds one `.gitignore` line (comments, blanks and what is not
    /// understood are skipped).
    pub fn add(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            return;
        }
        let anchored = line.starts_with('/');
        let dirs_only = line.ends_with('/');
        let glob = line.trim_start_matches('/').trim_end_matches('/');
        if glob.is_empty() || glob.contains('/') {
            return;
        }
        self.patterns.push(Pattern {
            glob: glob.to_string(),
            anchored,
            dirs_only,
        });
    }

    /// Whether `relative` (a path below the root) is left out: any of its
    /// parts is.
    pub fn ignores(&self, relative: &Path, is_dir: bool) -> bool {
        let parts: Vec<&std::ffi::OsStr> = relative.iter().collect();
        parts.iter().enumerate().any(|(i, part)| {
            let Some(name) = part.to_str() else {
                return false;
            };
            let dir = is_dir || i + 1 < parts.len();
            self.patterns.iter().any(|p| {
                (!p.anchored || i == 0) && (!p.dirs_only || dir) && glob_matches(&p.glob, name)
            })
        })
    }
}

/// How much before `since` an mtime still counts as after it: one tick
/// of the kernel's coarse clock, which stamps a file's mtime and can be
/// up to a tick behind the clock `since` was read from. Less, and an
/// edit made just after `since` but before its directory's watch could
/// carry an earlier mtime and be lost (the bench's watch row hung on
/// it); more, and edits made well before `since` would count.
pub fn mtime_slack() -> std::time::Duration {
    static TICK: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        let res = rustix::time::clock_getres(rustix::time::ClockId::RealtimeCoarse);
        let tick = std::time::Duration::new(
            u64::try_from(res.tv_sec).unwrap_or(0),
            u32::try_from(res.tv_nsec).unwrap_or(0),
        );
        // A resolution the kernel did not give (zero or absurd) falls
        // back to a tick at HZ=100, the coarsest Linux has.
        if tick.is_zero() || tick > std::time::Duration::from_millis(10) {
            std::time::Duration::from_millis(10)
        } else {
            tick
        }
    })
}

/// `*` any run of characters, `?` one; everything else itself.
pub fn glob_matches(glob: &str, name: &str) -> bool {
    fn go(g: &[char], n: &[char]) -> bool {
        match (g.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&g[1..], n) || (!n.is_empty() && go(g, &n[1..])),
            (Some('?'), Some(_)) => go(&g[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&g[1..], &n[1..]),
            _ => false,
        }
    }
    let (g, n): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    go(&g, &n)
}

/// Why a tree cannot be watched whole.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{0} has more than {1} directories to watch")]
    TooManyDirs(PathBuf, usize),
    #[error("out of inotify watches (fs.inotify.max_user_watches) watching {0}")]
    OutOfWatches(PathBuf),
    #[error("cannot watch {0}: {1}")]
    Io(PathBuf, io::Error),
}

/// A watched tree.
pub struct TreeWatch {
    fd: crate::inotify::Inotify,
    root: PathBuf,
    ignore: Ignore,
    /// Watch descriptor → its directory, relative to the root.
    dirs: HashMap<i32, PathBuf>,
    /// The most directories watched (bounds the kernel memory held).
    max_dirs: usize,
}

const DIR_EVENTS: WatchFlags = WatchFlags::CLOSE_WRITE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW);

impl TreeWatch {
    /// Watches every directory below `root` but the ignored ones: a walk
    /// of the tree, so call it off the event loop. Registering with the
    /// event loop is `start`'s.
    /// With `since`, the walk also lists the files modified after it
    /// (`Unstarted::changed_before`): a change made before its directory
    /// was watched is not lost. After it, give or take `mtime_slack()`.
    pub fn walk(
        root: &Path,
        ignore: Ignore,
        max_dirs: usize,
        since: Option<std::time::SystemTime>,
    ) -> Result<Unstarted, WatchError> {
        let io_err = |e: io::Error| WatchError::Io(root.to_path_buf(), e);
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map(crate::inotify::ClosedOffTheLoop::new)
            .map_err(|e| io_err(e.into()))?;
        let mut dirs = HashMap::new();
        let mut changed_before = Vec::new();
        let walk = Walk {
            fd: fd.as_fd(),
            root,
            ignore: &ignore,
            max_dirs,
            since,
        };
        walk.add_below(Path::new(""), &mut dirs, &mut changed_before)?;
        Ok(Unstarted {
            fd,
            root: root.to_path_buf(),
            ignore,
            dirs,
            max_dirs,
            changed_before,
        })
    }

    /// How many directories are watched.
    pub fn watched(&self) -> usize {
        self.dirs.len()
    }

    /// Waits for changes and returns the files that changed (relative to
    /// the root; `*` after a queue overflow), at least one. Directories
    /// made meanwhile are watched before this returns.
    pub async fn changed(&mut self) -> Result<Vec<PathBuf>, WatchError> {
        loop {
            let mut ready = self
                .fd
                .readable()
                .await
                .map_err(|e| WatchError::Io(self.root.clone(), e))?;
            let events = read_events(ready.get_inner().as_fd());
            ready.clear_ready();
            let mut changed = Vec::new();
            for (wd, flags, name) in events {
                self.take(wd, flags, name, &mut changed)?;
            }
            if !changed.is_empty() {
                return Ok(changed);
            }
        }
    }

    fn take(
        &mut self,
        wd: i32,
        flags: ReadFlags,
        name: Option<String>,
        changed: &mut Vec<PathBuf>,
    ) -> Result<(), WatchError> {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            changed.push(PathBuf::from("*"));
            return Ok(());
        }
        if flags.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            return Ok(());
        }
        let (Some(dir), Some(name)) = (self.dirs.get(&wd), name) else {
            return Ok(());
        };
        let path = dir.join(name);
        let is_dir = flags.contains(ReadFlags::ISDIR);
        if self.ignore.ignores(&path, is_dir) {
            return Ok(());
        }
        if is_dir {
            // A directory made (or moved in): watch it and what it holds
            // already (made before its watch existed).
            if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                let walk = Walk {
                    fd: self.fd.get_ref().as_fd(),
                    root: &self.root,
                    ignore: &self.ignore,
                    max_dirs: self.max_dirs,
                    since: None,
                };
                walk.add_below(&path, &mut self.dirs, &mut Vec::new())?;
            }
            changed.push(path);
        } else if !flags.contains(ReadFlags::CREATE) {
            // A file made is reported when it is closed after writing.
            changed.push(path);
        }
        Ok(())
    }
}

/// A tree whose watches are added, not yet registered with the event
/// loop.
pub struct Unstarted {
    /// A walk never started (an error beside it) may be dropped on the
    /// event loop: its descriptor is closed off it.
    fd: crate::inotify::ClosedOffTheLoop,
    root: PathBuf,
    ignore: Ignore,
    dirs: HashMap<i32, PathBuf>,
    max_dirs: usize,
    /// Files modified after `new`'s `since`, found by the walk.
    pub changed_before: Vec<PathBuf>,
}

impl Unstarted {
    /// Registers the tree with the event loop (within a runtime).
    pub fn start(self) -> Result<TreeWatch, WatchError> {
        let Unstarted {
            fd,
            root,
            ignore,
            dirs,
            max_dirs,
            changed_before: _,
        } = self;
        let fd =
            crate::inotify::Inotify::register(fd).map_err(|e| WatchError::Io(root.clone(), e))?;
        Ok(TreeWatch {
            fd,
            root,
            ignore,
            dirs,
            max_dirs,
        })
    }
}

/// What a walk adding watches needs.
struct Walk<'a> {
    fd: std::os::fd::BorrowedFd<'a>,
    root: &'a Path,
    ignore: &'a Ignore,
    max_dirs: usize,
    /// List the files modified after this (each looked at once its
    /// directory is watched).
    since: Option<std::time::SystemTime>,
}

impl Walk<'_> {
    /// Watches `relative` and every directory below it (depth first, an
    /// explicit stack: no recursion to overflow).
    fn add_below(
        &self,
        relative: &Path,
        dirs: &mut HashMap<i32, PathBuf>,
        modified: &mut Vec<PathBuf>,
    ) -> Result<(), WatchError> {
        let mut stack = vec![relative.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let full = self.root.join(&dir);
            if dirs.len() >= self.max_dirs {
                return Err(WatchError::TooManyDirs(
                    self.root.to_path_buf(),
                    self.max_dirs,
                ));
            }
            match inotify::add_watch(self.fd, &full, DIR_EVENTS) {
                Ok(wd) => {
                    dirs.insert(wd, dir.clone());
                }
                Err(rustix::io::Errno::NOSPC) => {
                    return Err(WatchError::OutOfWatches(self.root.to_path_buf()))
                }
                // Gone (or not a directory) since it was listed: nothing
                // to watch there.
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => continue,
                Err(e) => return Err(WatchError::Io(full, e.into())),
            }
            let Ok(entries) = std::fs::read_dir(&full) else {
                continue;
            };
            for entry in entries.flatten() {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let path = dir.join(entry.file_name());
                if self.ignore.ignores(&path, is_dir) {
                    continue;
                }
                if is_dir {
                    stack.push(path);
                } else if self.since.is_some_and(|since| {
                    let since = since.checked_sub(mtime_slack()).unwrap_or(since);
                    entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|m| m >= since)
                }) {
                    modified.push(path);
                }
            }
        }
        Ok(())
    }
}

/// Every event the descriptor has now: (watch, flags, name).
fn read_events(fd: std::os::fd::BorrowedFd<'_>) -> Vec<(i32, ReadFlags, Option<String>)> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    let mut out = Vec::new();
    // Ends with EAGAIN once the queue is empty (the descriptor is
    // non-blocking).
    while let Ok(event) = reader.next() {
        let name = event
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty());
        out.push((event.wd(), event.events(), name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{glob_matches, Ignore, TreeWatch};
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    /// The next batch of changes, or none within a second and a half
    /// (what a burst that makes no change looks like).
    async fn next(tree: &mut TreeWatch) -> Option<Vec<PathBuf>> {
        tokio::time::timeout(Duration::from_millis(1500), tree.changed())
            .await
            .ok()
            .map(|r| r.expect("changes"))
    }

    /// Saves, editors' atomic saves, deletions and new directories are
    /// seen; ignored directories and .gitignore's patterns are not.
    #[tokio::test]
    async fn a_tree_sees_saves_renames_and_new_dirs_but_not_ignored_ones() {
        let root = tempfile::tempdir().unwrap();
        let at = |p: &str| root.path().join(p);
        std::fs::create_dir_all(at("src/deep")).unwrap();
        std::fs::create_dir_all(at("node_modules/pkg")).unwrap();
        std::fs::write(at(".gitignore"), "*.log\n").unwrap();
        let ignore = Ignore::of_root(root.path());
        let mut tree = TreeWatch::walk(root.path(), ignore, 100, None)
            .unwrap()
            .start()
            .unwrap();
        assert_eq!(tree.watched(), 2 + 1, "root, src, src/deep");

        std::fs::write(at("src/deep/app.ts"), "x").unwrap();
        assert_eq!(
            next(&mut tree).await,
            Some(vec![PathBuf::from("src/deep/app.ts")])
        );
        // An atomic save: written elsewhere, renamed over.
        std::fs::write(at("src/.app.ts.swp"), "y").unwrap();
        let _ = next(&mut tree).await;
        std::fs::rename(at("src/.app.ts.swp"), at("src/deep/app.ts")).unwrap();
        let renamed = next(&mut tree).await.unwrap();
        assert!(
            renamed.contains(&PathBuf::from("src/deep/app.ts")),
            "{renamed:?}"
        );
        // Ignored: a dependency dir, a pattern of .gitignore.
        std::fs::write(at("node_modules/pkg/index.js"), "z").unwrap();
        std::fs::write(at("src/run.log"), "z").unwrap();
        assert_eq!(next(&mut tree).await, None);
        // A directory made (and removed and made again) is watched.
        for _ in 0..2 {
            std::fs::create_dir_all(at("src/new/inner")).unwrap();
            let made = next(&mut tree).await.unwrap();
            assert!(made.contains(&PathBuf::from("src/new")), "{made:?}");
            std::fs::write(at("src/new/inner/b.ts"), "b").unwrap();
            let mut seen = Vec::new();
            while !seen.contains(&PathBuf::from("src/new/inner/b.ts")) {
                seen.extend(next(&mut tree).await.expect("the new file"));
            }
            std::fs::remove_dir_all(at("src/new")).unwrap();
            while next(&mut tree).await.is_some() {}
        }
        std::fs::remove_file(at("src/deep/app.ts")).unwrap();
        assert_eq!(
            next(&mut tree).await,
            Some(vec![PathBuf::from("src/deep/app.ts")])
        );
    }

    #[test]
    fn the_walk_lists_what_changed_since_a_time() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/node_modules")).unwrap();
        let before = std::time::SystemTime::now() - Duration::from_secs(60);
        std::fs::write(root.path().join("a/x.ts"), "x").unwrap();
        std::fs::write(root.path().join("a/node_modules/y.js"), "y").unwrap();
        let walked = TreeWatch::walk(root.path(), Ignore::of_root(root.path()), 10, Some(before));
        assert_eq!(walked.unwrap().changed_before, [PathBuf::from("a/x.ts")]);
        let after = std::time::SystemTime::now() + Duration::from_secs(60);
        let walked = TreeWatch::walk(root.path(), Ignore::of_root(root.path()), 10, Some(after));
        assert!(walked.unwrap().changed_before.is_empty());
    }

    #[test]
    fn a_tree_over_its_bound_is_refused_not_watched_in_part() {
        let root = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::create_dir(root.path().join(format!("d{i}"))).unwrap();
        }
        let err = TreeWatch::walk(root.path(), Ignore::default(), 3, None)
            .err()
            .expect("refused");
        assert!(err.to_string().contains("more than 3 directories"), "{err}");
    }

    #[test]
    fn gitignore_lines_are_matched_by_name_anchor_and_kind() {
        let mut ignore = Ignore::default();
        for line in ["*.log", "dist/", "/build", "# no", "!keep.log", "a/b"] {
            ignore.add(line);
        }
        assert!(ignore.ignores(Path::new("x.log"), false));
        assert!(ignore.ignores(Path::new("src/deep/x.log"), false));
        assert!(ignore.ignores(Path::new("dist/app.js"), false));
        assert!(
            !ignore.ignores(Path::new("dist"), false),
            "a file named dist"
        );
        assert!(ignore.ignores(Path::new("build/out"), false));
        assert!(
            !ignore.ignores(Path::new("src/build/out"), false),
            "anchored"
        );
        assert!(!ignore.ignores(Path::new("src/app.ts"), false));
        assert!(glob_matches("a?c*", "abcdef") && !glob_matches("a?c", "ac"));
    }
}
