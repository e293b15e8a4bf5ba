//! Process-tree termination (docs/SECURITY.md).
//!
//! A `KillPlan` is the set of processes that belong to a session: the
//! processes of its cgroup where it has one (docs/containment.md);
//! otherwise its process group, every /proc descendant of its root, and
//! every process whose environment carries the session's marker
//! (descendants that left the group with setsid). Each target is named by its `ProcessIdentity` and signalled
//! through a pidfd opened under the identity guard, so a recycled pid is
//! never signalled. A plan lists the deepest descendants first and the root
//! last; the first signal of a termination goes to the root first (see
//! `root_first`), the SIGKILL rounds follow the plan's order. The root is
//! the session's subreaper, and orphans it left to the daemon when it
//! exited are roots of the plan too (`TreeSpec::adopted`).

use crate::identity::ProcessIdentity;
use crate::pidfd::PidFd;
use crate::procfs::{ProcFs, ProcStat};
use procd_sys::cgroup::SessionCgroup;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How long survivors of SIGKILL get to disappear before being reported.
pub(crate) const CONFIRM_WINDOW: Duration = Duration::from_secs(1);

/// What identifies a session's processes.
#[derive(Debug, Clone)]
pub struct TreeSpec {
    pub root: ProcessIdentity,
    /// The group the root leads (its pid, as spawned with setsid).
    pub pgid: i32,
    /// `PROCD_SESSION_ID=<id>` as it appears in /proc/<pid>/environ.
    pub marker: Vec<u8>,
    /// The root is our child and not yet reaped, so its pid cannot have been
    /// recycled: if /proc is unreadable, its pidfd alone identifies it.
    pub root_pinned: bool,
    /// Further roots whose trees belong to the session (no cgroup): its
    /// processes the daemon found among its own children after the root
    /// exited.
    pub adopted: Vec<ProcessIdentity>,
    /// The session's cgroup: then its processes are exactly what is in it.
    pub cgroup: Option<Arc<SessionCgroup>>,
}

impl TreeSpec {
    /// The identity guard, with the one exception `root_pinned` allows.
    fn open(&self, target: &ProcessIdentity, procfs: &ProcFs) -> Option<PidFd> {
        if let Some(fd) = target.open(procfs) {
            return Some(fd);
        }
        // Only the pinned root may be signalled without a readable /proc
        // (checked in this order: the /proc scan is the expensive part).
        if self.root_pinned
            && target == &self.root
            && procfs.stat(target.pid).is_err()
            && procfs.all().is_err()
        {
            return PidFd::open(target.pid).ok();
        }
        None
    }

    /// Whether process `pid` is one of the session's, as `KillPlan::collect`
    /// finds them, looking at that one process only: in the cgroup where
    /// there is one; else in the root's group, below the root or an
    /// adopted orphan (each still itself), or carrying the marker.
    pub fn holds(&self, pid: i32, procfs: &ProcFs) -> bool {
        if let Some(Ok(pids)) = self.cgroup.as_ref().map(|c| c.procs()) {
            return pids.contains(&pid);
        }
        let root_is_itself = procfs
            .stat(self.root.pid)
            .is_ok_and(|s| s.start_time == self.root.start_time);
        let roots: Vec<ProcessIdentity> = root_is_itself
            .then_some(self.root)
            .into_iter()
            .chain(self.adopted.iter().copied())
            .filter(|r| r.pid > 1)
            .collect();
        let my_pgid = nix::unistd::getpgrp().as_raw();
        let pgid_usable = root_is_itself && self.pgid > 1 && self.pgid != my_pgid;
        let mut cur = procfs.stat(pid).ok();
        if pgid_usable && cur.as_ref().is_some_and(|s| s.pgrp == self.pgid) {
            return true;
        }
        // Up the parent links (bounded, as a table's depth is).
        for _ in 0..4096 {
            let Some(s) = cur else { break };
            if roots
                .iter()
                .any(|r| r.pid == s.pid && r.start_time == s.start_time)
            {
                return true;
            }
            if s.ppid <= 1 {
                break;
            }
            cur = procfs.stat(s.ppid).ok();
        }
        !self.marker.is_empty() && procfs.environ_has(pid, &self.marker)
    }
}

/// The targets of one signalling round, children before parents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillPlan {
    pub targets: Vec<ProcessIdentity>,
}

impl KillPlan {
    /// Collects the session's live processes. With `include_root` false the
    /// root is left out (a session whose root has exited). If /proc cannot be
    /// read, the plan falls back to the root pid alone.
    pub fn collect(spec: &TreeSpec, procfs: &ProcFs, include_root: bool) -> KillPlan {
        if let Some(plan) = plan_from_cgroup(spec, procfs, include_root, |_| true) {
            return plan;
        }
        match procfs.all() {
            Ok(table) => plan_from_table(spec, procfs, &table, include_root),
            Err(_) if include_root => KillPlan {
                targets: vec![spec.root],
            },
            Err(_) => KillPlan::default(),
        }
    }

    /// Like `collect`, from a process table already read (one scan serves
    /// many sessions).
    pub fn from_table(
        spec: &TreeSpec,
        procfs: &ProcFs,
        table: &[ProcStat],
        include_root: bool,
    ) -> KillPlan {
        plan_from_table(spec, procfs, table, include_root)
    }

    /// Just the group and the root: the targets of a one-off `signal`.
    pub fn group(spec: &TreeSpec, procfs: &ProcFs) -> KillPlan {
        if let Some(plan) = plan_from_cgroup(spec, procfs, true, |s| s.pgrp == spec.pgid) {
            return plan;
        }
        let Ok(table) = procfs.all() else {
            return KillPlan {
                targets: vec![spec.root],
            };
        };
        let mut plan = plan_from_table(spec, procfs, &table, true);
        let in_group: HashSet<i32> = table
            .iter()
            .filter(|s| s.pgrp == spec.pgid)
            .map(|s| s.pid)
            .collect();
        plan.targets
            .retain(|t| t.pid == spec.root.pid || in_group.contains(&t.pid));
        plan
    }
}

/// The live processes of the session's cgroup that `keep` takes, youngest
/// first (children are younger than their parents), the root last; None
/// without a readable cgroup.
fn plan_from_cgroup(
    spec: &TreeSpec,
    procfs: &ProcFs,
    include_root: bool,
    keep: impl Fn(&ProcStat) -> bool,
) -> Option<KillPlan> {
    let pids = spec.cgroup.as_ref()?.procs().ok()?;
    Some(plan_from_pids(spec, procfs, pids, include_root, keep))
}

/// The plan from the pids a cgroup listed.
fn plan_from_pids(
    spec: &TreeSpec,
    procfs: &ProcFs,
    pids: Vec<i32>,
    include_root: bool,
    keep: impl Fn(&ProcStat) -> bool,
) -> KillPlan {
    let me = std::process::id() as i32;
    let mut live: Vec<ProcStat> = pids
        .into_iter()
        .filter(|&pid| pid > 1 && pid != me && pid != spec.root.pid)
        .filter_map(|pid| procfs.stat(pid).ok())
        .filter(|s| !s.is_dead() && keep(s))
        .collect();
    live.sort_by(|a, b| b.start_time.cmp(&a.start_time).then(a.pid.cmp(&b.pid)));
    let mut targets: Vec<ProcessIdentity> = live
        .iter()
        .map(|s| ProcessIdentity {
            pid: s.pid,
            start_time: s.start_time,
        })
        .collect();
    if include_root && spec.root.pid > 1 {
        targets.push(spec.root);
    }
    KillPlan { targets }
}

fn plan_from_table(
    spec: &TreeSpec,
    procfs: &ProcFs,
    table: &[ProcStat],
    include_root: bool,
) -> KillPlan {
    let me = std::process::id() as i32;
    let my_pgid = nix::unistd::getpgrp().as_raw();
    let by_pid: HashMap<i32, &ProcStat> = table.iter().map(|s| (s.pid, s)).collect();

    // The root's pid and group are only ours while the pid is not a
    // stranger's: a live process with that pid and another start time means
    // the number was recycled, and its descendants or group are not ours.
    let root_recycled = by_pid
        .get(&spec.root.pid)
        .is_some_and(|s| s.start_time != spec.root.start_time);
    let pgid_usable = spec.pgid > 1 && spec.pgid != my_pgid && !root_recycled;

    let mut chosen: HashSet<i32> = HashSet::new();
    // Descendants, through parent links, of the root (unless its pid now
    // names a stranger) and of each adopted orphan that is still itself.
    // Pids 0 and 1 are never roots: every process descends from them.
    let mut stack: Vec<i32> = Vec::new();
    if !root_recycled && spec.root.pid > 1 && spec.root.pid != me {
        stack.push(spec.root.pid);
    }
    for orphan in &spec.adopted {
        if orphan.pid > 1
            && by_pid
                .get(&orphan.pid)
                .is_some_and(|s| s.start_time == orphan.start_time)
        {
            chosen.insert(orphan.pid);
            stack.push(orphan.pid);
        }
    }
    if !stack.is_empty() {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for s in table {
            children.entry(s.ppid).or_default().push(s.pid);
        }
        while let Some(pid) = stack.pop() {
            for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if chosen.insert(child) {
                    stack.push(child);
                }
            }
        }
    }
    for s in table {
        if (pgid_usable && s.pgrp == spec.pgid)
            || (!spec.marker.is_empty() && procfs.environ_has(s.pid, &spec.marker))
        {
            chosen.insert(s.pid);
        }
    }
    chosen.remove(&spec.root.pid);
    chosen.remove(&me);
    chosen.remove(&1);

    let mut targets = deepest_first(chosen, &by_pid);
    if include_root && spec.root.pid > 1 && spec.root.pid != me {
        targets.push(spec.root);
    }
    KillPlan { targets }
}

/// The live processes among `chosen`, deepest in the tree first, then by
/// pid (the plan's order, in the module doc).
fn deepest_first(chosen: HashSet<i32>, by_pid: &HashMap<i32, &ProcStat>) -> Vec<ProcessIdentity> {
    let depth = |pid: i32| {
        let mut d = 0u32;
        let mut cur = pid;
        while let Some(s) = by_pid.get(&cur) {
            if s.ppid <= 1 || d > 4096 {
                break;
            }
            d += 1;
            cur = s.ppid;
        }
        d
    };
    let mut targets: Vec<(u32, ProcessIdentity)> = chosen
        .into_iter()
        .filter_map(|pid| by_pid.get(&pid))
        .filter(|s| !s.is_dead())
        .map(|s| {
            (
                depth(s.pid),
                ProcessIdentity {
                    pid: s.pid,
                    start_time: s.start_time,
                },
            )
        })
        .collect();
    targets.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.pid.cmp(&b.1.pid)));
    targets.into_iter().map(|(_, id)| id).collect()
}

/// The result of a termination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillOutcome {
    /// Processes that received the first signal.
    pub signalled: usize,
    /// Pids still alive at the end (reported, never hidden).
    pub survivors: Vec<i32>,
}

/// Sends `signal` to each target that is still the same process; returns
/// the opened pidfds (targets that vanished or were recycled are skipped).
/// One signal to `targets` (each through the identity guard); how many
/// received it.
pub fn signal_targets(
    spec: &TreeSpec,
    targets: &[ProcessIdentity],
    procfs: &ProcFs,
    signal: i32,
) -> usize {
    signal_all(spec, targets, procfs, signal).len()
}

fn signal_all(
    spec: &TreeSpec,
    targets: &[ProcessIdentity],
    procfs: &ProcFs,
    signal: i32,
) -> Vec<PidFd> {
    let mut fds = Vec::with_capacity(targets.len());
    for target in targets {
        let Some(pidfd) = spec.open(target, procfs) else {
            continue;
        };
        match pidfd.send_signal(signal) {
            Ok(true) => fds.push(pidfd),
            Ok(false) => {}
            Err(err) => tracing::warn!(pid = target.pid, %err, "signal failed"),
        }
    }
    fds
}

async fn wait_all(fds: Vec<PidFd>, limit: Duration) -> Vec<PidFd> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut alive = Vec::new();
    for fd in fds {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !fd.wait_exit(left).await {
            alive.push(fd);
        }
    }
    alive
}

/// SIGKILL rounds after the grace: each re-collects the tree, so a child
/// forked between one collection and its parent's death is caught next.
const KILL_ROUNDS: usize = 4;

/// Terminates the session's tree: `signal` to every target (children first,
/// root last), up to `grace` for them to exit, then SIGKILL to survivors and
/// to anything forked meanwhile — re-collecting until a round finds nothing
/// new — then up to 1 s to confirm. With a zero grace (and a signal other
/// than SIGKILL) there is no escalation: survivors of the signal are
/// reported.
pub async fn terminate(
    spec: &TreeSpec,
    procfs: &ProcFs,
    include_root: bool,
    signal: i32,
    grace: Duration,
) -> KillOutcome {
    let plan = collect_blocking(spec, procfs, include_root).await;
    let fds = signal_all(spec, &root_first(&plan.targets, &spec.root), procfs, signal);
    let signalled = fds.len();
    let escalate = signal == libc::SIGKILL || !grace.is_zero();
    let first_wait = if signal == libc::SIGKILL || !escalate {
        CONFIRM_WINDOW
    } else {
        grace
    };
    if let (Some(cgroup), true) = (&spec.cgroup, escalate) {
        return finish_in_cgroup(spec, cgroup, procfs, include_root, fds, signal, grace).await;
    }
    let mut alive = wait_all(fds, first_wait).await;
    if escalate {
        for _ in 0..KILL_ROUNDS {
            let again = collect_blocking(spec, procfs, include_root).await;
            let known: HashSet<i32> = alive.iter().map(PidFd::pid).collect();
            let fresh: Vec<ProcessIdentity> = again
                .targets
                .into_iter()
                .filter(|t| !known.contains(&t.pid))
                .collect();
            if alive.is_empty() && fresh.is_empty() {
                break;
            }
            for fd in &alive {
                let _ = fd.send_signal(libc::SIGKILL);
            }
            alive.extend(signal_all(spec, &fresh, procfs, libc::SIGKILL));
            alive = wait_all(alive, CONFIRM_WINDOW).await;
        }
    }
    KillOutcome {
        signalled,
        survivors: alive.iter().map(PidFd::pid).collect(),
    }
}

/// The rest of a termination in a cgroup: up to `grace` for the tree to
/// empty (woken by `cgroup.events`, and by the exits of what was
/// signalled: then whatever was forked after the plan gets the signal too,
/// so a tree that honours it is gone at once, forks and all), then
/// `cgroup.kill` for whatever is left, and up to 1 s to confirm.
async fn finish_in_cgroup(
    spec: &TreeSpec,
    cgroup: &SessionCgroup,
    procfs: &ProcFs,
    include_root: bool,
    mut signalled: Vec<PidFd>,
    signal: i32,
    grace: Duration,
) -> KillOutcome {
    let count = signalled.len();
    let deadline = tokio::time::Instant::now()
        + if signal == libc::SIGKILL {
            Duration::ZERO
        } else {
            grace
        };
    // Nothing left (the signal ended it, or it had ended): no wait, and no
    // `cgroup.kill`, which would keep the cgroup from holding a next run.
    let mut empty = cgroup.is_empty();
    let mut newcomers = true;
    while !empty && tokio::time::Instant::now() < deadline {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // Only while there may be newcomers to signal: else the cgroup alone.
        let all_gone = async {
            if !newcomers {
                return std::future::pending().await;
            }
            futures::future::join_all(signalled.iter().map(|fd| fd.wait_exit(left))).await;
        };
        empty = cgroup.wait_empty_or(left, all_gone).await;
        if empty {
            break;
        }
        let known: HashSet<i32> = signalled.iter().map(PidFd::pid).collect();
        let plan = collect_blocking(spec, procfs, include_root).await;
        let fresh: Vec<ProcessIdentity> = plan
            .targets
            .into_iter()
            .filter(|t| !known.contains(&t.pid))
            .collect();
        let before = signalled.len();
        signalled.extend(signal_all(spec, &fresh, procfs, signal));
        newcomers = signalled.len() > before;
    }
    if !empty {
        if let Err(e) = cgroup.kill() {
            tracing::warn!(cgroup = %cgroup.path().display(), %e, "cgroup.kill failed");
            for fd in &signalled {
                let _ = fd.send_signal(libc::SIGKILL);
            }
        }
        cgroup.wait_empty(CONFIRM_WINDOW).await;
    }
    // The signalled processes are gone from the cgroup; wait for each to be
    // dead too (a zombie counts), so the caller sees what really happened.
    let mut survivors: Vec<i32> = wait_all(signalled, CONFIRM_WINDOW)
        .await
        .iter()
        .map(PidFd::pid)
        .collect();
    if let Ok(left) = cgroup.procs() {
        survivors.extend(
            left.into_iter()
                .filter(|p| !survivors.contains(p))
                .collect::<Vec<_>>(),
        );
    }
    KillOutcome {
        signalled: count,
        survivors,
    }
}

/// The first signal goes to the root before its descendants. The root is
/// the session's shell: with the signal already pending when the step it
/// runs dies, it leaves through its trap at once. Signalled after that
/// step (children first), it could see the step end, start the next one
/// and only then take the signal — the race that let `echo AFTER` run
/// (docs/SECURITY.md's "descendants first" is kept for everything else: the
/// plan's order, and the SIGKILL rounds).
fn root_first(targets: &[ProcessIdentity], root: &ProcessIdentity) -> Vec<ProcessIdentity> {
    let mut order = Vec::with_capacity(targets.len());
    order.extend(targets.iter().filter(|t| *t == root));
    order.extend(targets.iter().filter(|t| *t != root));
    order
}

/// Sends `signal` to the whole tree, root first, as `terminate` plans it;
/// the pidfds of what it went to, for `kill_survivors`.
pub async fn signal_tree(spec: &TreeSpec, procfs: &ProcFs, signal: i32) -> Vec<PidFd> {
    let plan = collect_blocking(spec, procfs, true).await;
    signal_all(spec, &root_first(&plan.targets, &spec.root), procfs, signal)
}

/// SIGKILL, by identity alone, to those of `signalled` still alive after
/// `grace`.
pub async fn kill_survivors(signalled: Vec<PidFd>, grace: Duration) {
    for fd in wait_all(signalled, grace).await {
        let _ = fd.send_signal(libc::SIGKILL);
    }
}

/// Sends one signal to the session's group (and root), no escalation;
/// the root first, for the race `root_first` says (a shell's SIGINT from
/// `shell_interrupt` would otherwise end the step and let the next run).
pub async fn signal_group(spec: &TreeSpec, procfs: &ProcFs, signal: i32) -> usize {
    let spec2 = spec.clone();
    let procfs2 = procfs.clone();
    let plan = scan_blocking(move || KillPlan::group(&spec2, &procfs2))
        .await
        .unwrap_or_else(|_| KillPlan {
            targets: vec![spec.root],
        });
    signal_all(spec, &root_first(&plan.targets, &spec.root), procfs, signal).len()
}

/// At most this many /proc scans run at once: a bulk kill of hundreds of
/// sessions must not take a blocking thread per session (they would all
/// scan the same /proc at the same time anyway).
static SCANS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Runs a /proc scan on a blocking thread, at most two at a time.
pub async fn scan_blocking<T: Send + 'static>(
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let _permit = SCANS.acquire().await;
    tokio::task::spawn_blocking(scan).await
}

/// Members of a cgroup looked at on the event loop: their small /proc
/// reads (about 4 us each) cost less than the round trip to the blocking
/// pool (about 0.2 ms), which lies on a kill's and a restart's path. 32
/// holds a dev server's or a test run's tree (a 20-process tree's kill
/// answered 0.3 ms sooner) and keeps the loop's pause near 0.1 ms.
const SCANNED_HERE: usize = 32;

async fn collect_blocking(spec: &TreeSpec, procfs: &ProcFs, include_root: bool) -> KillPlan {
    if let Some(pids) = spec.cgroup.as_ref().and_then(|c| c.procs().ok()) {
        if pids.len() <= SCANNED_HERE {
            return plan_from_pids(spec, procfs, pids, include_root, |_| true);
        }
    }
    let spec2 = spec.clone();
    let procfs2 = procfs.clone();
    scan_blocking(move || KillPlan::collect(&spec2, &procfs2, include_root))
        .await
        .unwrap_or_else(|_| KillPlan {
            targets: if include_root {
                vec![spec.root]
            } else {
                vec![]
            },
        })
}

/// The daemon's own children that no one waits for (`is_waited` says who
/// is: session roots and helpers) and that are not in `claimed`: processes
/// reparented to the daemon when a session's root exited before them.
/// Blocking (a /proc scan).
pub fn unclaimed_children(
    procfs: &ProcFs,
    is_waited: impl Fn(i32) -> bool,
    claimed: &HashSet<i32>,
) -> Vec<ProcessIdentity> {
    let me = std::process::id() as i32;
    let Ok(table) = procfs.all() else {
        return Vec::new();
    };
    table
        .iter()
        .filter(|s| s.ppid == me && !s.is_dead())
        .filter(|s| !is_waited(s.pid) && !claimed.contains(&s.pid))
        .map(|s| ProcessIdentity {
            pid: s.pid,
            start_time: s.start_time,
        })
        .collect()
}

/// Parses "SIGINT", "INT", "sigint" or a number into a signal number.
pub fn parse_signal(spec: &procd_proto::SignalSpec) -> Option<i32> {
    use nix::sys::signal::Signal;
    use std::str::FromStr;
    match spec {
        procd_proto::SignalSpec::Number(n) => Signal::try_from(*n).ok().map(|s| s as i32),
        procd_proto::SignalSpec::Name(name) => {
            let upper = name.trim().to_ascii_uppercase();
            if let Ok(n) = upper.parse::<i32>() {
                return Signal::try_from(n).ok().map(|s| s as i32);
            }
            let full = if upper.starts_with("SIG") {
                upper
            } else {
                format!("SIG{upper}")
            };
            Signal::from_str(&full).ok().map(|s| s as i32)
        }
    }
}

/// "SIGTERM" for 15.
pub fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("SIG{signal}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, ppid: i32, pgrp: i32, start: u64) -> ProcStat {
        ProcStat {
            pid,
            cpu_ticks: 0,
            state: 'S',
            ppid,
            pgrp,
            session: pgrp,
            flags: 0,
            start_time: start,
            rss_pages: 0,
        }
    }

    fn spec(pid: i32, start: u64) -> TreeSpec {
        TreeSpec {
            root: ProcessIdentity {
                pid,
                start_time: start,
            },
            pgid: pid,
            marker: Vec::new(),
            root_pinned: false,
            adopted: Vec::new(),
            cgroup: None,
        }
    }

    #[test]
    fn children_come_before_their_parent_and_root_is_last() {
        // 100 (root) -> 101 -> 102 -> 103 ; 100 -> 104 ; 200 unrelated
        let table = vec![
            stat(100, 50, 100, 1),
            stat(101, 100, 100, 2),
            stat(102, 101, 100, 3),
            stat(103, 102, 777, 4), // left the group, still a descendant
            stat(104, 100, 100, 5),
            stat(200, 50, 200, 6),
            stat(50, 1, 50, 0),
        ];
        let plan = plan_from_table(&spec(100, 1), &ProcFs::at("/nonexistent"), &table, true);
        let order: Vec<i32> = plan.targets.iter().map(|t| t.pid).collect();
        assert_eq!(order.last(), Some(&100));
        let pos = |p| order.iter().position(|&x| x == p).unwrap();
        assert!(pos(103) < pos(102) && pos(102) < pos(101) && pos(101) < pos(100));
        assert!(pos(104) < pos(100));
        assert!(!order.contains(&200) && !order.contains(&50));
    }

    /// A /proc of made-up processes: (pid, ppid, pgrp, start, environ).
    fn fake_proc(procs: &[(i32, i32, i32, u64, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("dir");
        for (pid, ppid, pgrp, start, environ) in procs {
            let at = dir.path().join(pid.to_string());
            std::fs::create_dir(&at).expect("pid dir");
            let stat = format!(
                "{pid} (x) S {ppid} {pgrp} {pgrp} 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"
            );
            std::fs::write(at.join("stat"), stat).expect("stat");
            std::fs::write(at.join("environ"), environ).expect("environ");
        }
        dir
    }

    /// One process is looked at as the kill's scan would take it: by
    /// group, by descent (also of an adopted orphan), by marker; not a
    /// stranger, and nothing through a recycled root.
    #[test]
    fn one_process_is_held_as_the_kill_finds_it() {
        let marker = "PROCD_SESSION_ID=proc_1";
        let dir = fake_proc(&[
            (50, 1, 50, 0, ""),
            (100, 50, 100, 1, ""),
            (101, 100, 100, 2, ""),
            (102, 101, 102, 3, ""),
            (103, 102, 777, 4, ""),
            (200, 50, 200, 6, ""),
            (300, 1, 300, 8, "A=1\0PROCD_SESSION_ID=proc_1\0"),
            (400, 1, 400, 7, ""),
            (401, 400, 400, 9, ""),
        ]);
        let procfs = ProcFs::at(dir.path());
        let mut tree = spec(100, 1);
        tree.marker = marker.as_bytes().to_vec();
        tree.adopted = vec![ProcessIdentity {
            pid: 400,
            start_time: 7,
        }];
        for (pid, held) in [
            (100, true),
            (101, true),
            (103, true),
            (401, true),
            (300, true),
            (200, false),
            (50, false),
            (999, false),
        ] {
            assert_eq!(tree.holds(pid, &procfs), held, "{pid}");
        }
        // Pid 100 is a stranger now: its group and children are not ours.
        let recycled = spec(100, 5);
        assert!(!recycled.holds(101, &procfs));
        assert!(!recycled.holds(103, &procfs));
    }

    #[test]
    fn a_recycled_root_pid_disowns_its_tree_and_group() {
        let table = vec![
            stat(100, 1, 100, 99), // pid 100 now belongs to a stranger
            stat(101, 100, 100, 2),
        ];
        let plan = plan_from_table(&spec(100, 1), &ProcFs::at("/nonexistent"), &table, false);
        assert!(plan.targets.is_empty());
    }

    #[test]
    fn zombies_are_not_targets() {
        let mut z = stat(101, 100, 100, 2);
        z.state = 'Z';
        let table = vec![stat(100, 1, 100, 1), z];
        let plan = plan_from_table(&spec(100, 1), &ProcFs::at("/nonexistent"), &table, false);
        assert!(plan.targets.is_empty());
    }

    #[test]
    fn unreadable_proc_falls_back_to_the_root() {
        let s = spec(4242, 7);
        let plan = KillPlan::collect(&s, &ProcFs::at("/nonexistent-proc"), true);
        assert_eq!(plan.targets, vec![s.root]);
    }

    #[tokio::test]
    async fn unreadable_proc_still_terminates_a_pinned_root() {
        // R25: the tree cannot be walked, the root still gets SIGTERM.
        // (Spawned through the reaper, which owns wait(2) in this process.)
        let (child, (), exit) = crate::tree::reaper::Reaper::global()
            .spawn(std::process::Command::new("sleep").arg("30"), |_| ())
            .expect("sleep");
        let pid = child.id() as i32;
        let spec = TreeSpec {
            root: ProcessIdentity::of(&ProcFs::default(), pid).expect("identity"),
            pgid: pid,
            marker: Vec::new(),
            root_pinned: true,
            adopted: Vec::new(),
            cgroup: None,
        };
        let bogus = ProcFs::at("/nonexistent-proc");
        let outcome = terminate(&spec, &bogus, true, libc::SIGTERM, Duration::from_secs(2)).await;
        assert_eq!(outcome.signalled, 1);
        let status = exit.await.expect("exit");
        assert_eq!(
            status,
            crate::tree::reaper::ChildExit::Signal(libc::SIGTERM)
        );
    }

    #[test]
    fn signal_names_parse() {
        use procd_proto::SignalSpec::{Name, Number};
        assert_eq!(parse_signal(&Name("SIGINT".into())), Some(2));
        assert_eq!(parse_signal(&Name("int".into())), Some(2));
        assert_eq!(parse_signal(&Number(15)), Some(15));
        assert_eq!(parse_signal(&Name("9".into())), Some(9));
        assert_eq!(parse_signal(&Name("NOPE".into())), None);
        assert_eq!(parse_signal(&Number(999)), None);
        assert_eq!(signal_name(15), "SIGTERM");
    }
}
