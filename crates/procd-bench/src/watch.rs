//! The row of restart on change (docs/stacks.md): an edit to a watched
//! file until the restarted server is up, under procd's `watch` beside
//! watchexec (crates.io, pinned; installed by install-peers.sh) restarting
//! the same server, in the same run, with the same debounce.
//!
//! The server is a shell that marks its start with a file named by its
//! pid, then sleeps: "up" is that file appearing for a new pid. Each
//! tool watches a tree of its own, so an edit for one never wakes the
//! other.

use crate::{in_turn, median, Daemon, Row};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The debounce both tools are given.
const DEBOUNCE_MS: u64 = 50;
/// How long one restart may take before the round fails.
const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) fn watch_rows(d: &Daemon, rounds: usize, idle: Duration) -> Vec<Row> {
    let mut rows = vec![edit_to_restart(d, rounds)];
    rows.push(idle_watching(idle));
    rows
}

/// The files the idle row's session watches (in directories of 100).
const WATCHED_FILES: usize = 10_000;

/// An idle daemon (its monitor slowed to once an hour) with a session
/// watching 10 000 files, for changes (`watch`) and staleness (the tree
/// is a git worktree): what wakes it besides the monitor (nothing should).
fn idle_watching(idle: Duration) -> Row {
    let tree = tempfile::tempdir().expect("a temp dir");
    std::fs::create_dir(tree.path().join(".git")).expect(".git");
    for i in 0..WATCHED_FILES {
        let dir = tree.path().join(format!("src/d{}", i / 100));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(format!("f{i}.ts")), "x").expect("file");
    }
    let quiet = Daemon::with_config("monitor_interval_s = 3600\n");
    let mut c = quiet.connect();
    let r = c.call(
        "spawn",
        json!({"command": "exec sleep 3600", "cwd": tree.path(),
               "watch": {"paths": ["src"]}}),
    );
    assert!(r["session_id"].is_string(), "{r}");
    // Both watches are set by then (the stale one after a second).
    std::thread::sleep(Duration::from_millis(3000));
    let before = crate::context_switches(quiet.pid());
    std::thread::sleep(idle);
    let after = crate::context_switches(quiet.pid());
    let switches = crate::switches_between(&before, &after);
    let per_second = switches as f64 / idle.as_secs_f64();
    c.call("kill", json!({"session_id": r["session_id"]}));
    let mut row = Row::at_most(
        format!("idle daemon watching {WATCHED_FILES} files, wakeups besides the monitor ({} s)", idle.as_secs()),
        per_second,
        "switches/s",
        0.5,
        format!(
            "context switches of all daemon threads with the monitor at 1/hour and one session watching {WATCHED_FILES} files in {} directories (`watch` and the stale watch of a git worktree): {switches} in {} s",
            WATCHED_FILES / 100 + 1,
            idle.as_secs()
        ),
    );
    row.target = "none".into();
    row
}

fn edit_to_restart(d: &Daemon, rounds: usize) -> Row {
    let watchexec = crate::peers::installed("watchexec/bin/watchexec");
    let root = tempfile::tempdir().expect("a temp dir");
    let procd_tree = Tree::new(&root.path().join("procd"));
    let ours_tree = Tree::new(&root.path().join("watchexec"));
    let mut c = d.connect();
    let r = c.call(
        "spawn",
        json!({"command": procd_tree.server(), "cwd": procd_tree.dir,
               "watch": {"paths": ["src"], "debounce_ms": DEBOUNCE_MS}}),
    );
    let id = r["session_id"].clone();
    assert!(id.is_string(), "{r}");
    procd_tree.wait_up(0);
    let mut peer = WatchexecServer::start(&watchexec, &ours_tree);
    ours_tree.wait_up(0);
    let rounds = rounds.max(10);
    let (ours, theirs) = in_turn(
        rounds,
        || procd_tree.edit_until_up(),
        || ours_tree.edit_until_up(),
    );
    c.call("kill", json!({"session_id": id}));
    peer.stop();
    let mut row = Row::beside(
        "an edit → the restarted server is up".into(),
        median(&ours),
        median(&theirs),
        "watchexec 2.3.2".into(),
        "ms",
        false,
        format!(
            "median of {rounds} rounds, in turn: a file written under the watched directory until the server (a shell that marks its start, then sleeps) has started again, procd's `watch` beside `watchexec --restart`, both with a {DEBOUNCE_MS} ms debounce"
        ),
    );
    row.target = "<= 1.0x watchexec".into();
    row.met = row.ratio.is_some_and(|r| r <= 1.0);
    row
}

/// A watched tree: `src/` (watched) and `up/` (the server's start marks).
struct Tree {
    dir: PathBuf,
    edits: std::cell::Cell<u64>,
}

impl Tree {
    fn new(dir: &Path) -> Tree {
        std::fs::create_dir_all(dir.join("src")).expect("src");
        std::fs::create_dir_all(dir.join("up")).expect("up");
        Tree {
            dir: dir.to_path_buf(),
            edits: std::cell::Cell::new(0),
        }
    }

    /// The server: marks its start (a file named by its pid), then sleeps.
    fn server(&self) -> String {
        "touch up/$$; exec sleep 3600".into()
    }

    fn starts(&self) -> usize {
        std::fs::read_dir(self.dir.join("up"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Waits until more than `seen` starts are marked.
    fn wait_up(&self, seen: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.starts() <= seen {
            assert!(
                Instant::now() < deadline,
                "the server did not start again in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Writes a file under `src/` and times until the server is up again.
    fn edit_until_up(&self) -> f64 {
        let seen = self.starts();
        let n = self.edits.get() + 1;
        self.edits.set(n);
        let t = Instant::now();
        std::fs::write(self.dir.join(format!("src/file{n}.ts")), "edit").expect("edit");
        self.wait_up(seen);
        t.elapsed().as_secs_f64() * 1e3
    }
}

/// watchexec restarting the same server.
struct WatchexecServer(Child);

impl WatchexecServer {
    fn start(program: &Path, tree: &Tree) -> WatchexecServer {
        use std::os::unix::process::CommandExt;
        let child = Command::new(program)
            // Its own group: whatever it leaves is ended with it.
            .process_group(0)
            .args(["--restart", "--debounce", &format!("{DEBOUNCE_MS}ms")])
            // One string: watchexec runs it with its shell (`sh -c`).
            .args(["--watch", "src", "--quiet", "--", &tree.server()])
            .current_dir(&tree.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("watchexec");
        WatchexecServer(child)
    }

    /// SIGTERM (watchexec ends its child), then SIGKILL if it lingers.
    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

impl Drop for WatchexecServer {
    fn drop(&mut self) {
        self.stop();
    }
}
