//! A cgroup per session (docs/containment.md).
//!
//! procd finds a cgroup v2 subtree it may manage — the daemon's own cgroup
//! on a writable cgroup2 mount (under systemd with `Delegate=yes`, the
//! service's) — and makes `<own>/procd-<tag>/<session id>` for each session,
//! where `tag` names the instance. The session's root is in it before exec
//! (born in it, or joining it: `spawn.rs`), so nothing it starts can leave
//! it. The v2 cgroup gives the
//! tree (`cgroup.procs`), its end (`cgroup.events` populated 0, woken by
//! inotify), the kill that no fork loop outruns (`cgroup.kill`) and the CPU
//! time (`cpu.stat`). Limits go where their controller is: the v2 files
//! when the controller is enabled there, else a cgroup of the same name in
//! that controller's v1 hierarchy (hybrid hosts: memory, cpu, pids and
//! blkio are v1), which the root joins too.
//!
//! All of it is small sysfs reads and writes; nothing here blocks for long.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::file_watch::FileWatch;

/// Limits for one session, as the kernel takes them (and the checkpoint
/// keeps them, for a restart's new cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// CPU time per 100 ms period, in µs (1.5 cores = 150 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// `cpu.weight` (1 to 10000; v1: `cpu.shares` = weight × 1024 / 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
    /// `io.weight` (1 to 10000), in the file the disks' scheduler reads
    /// (`Controller::IO_WEIGHT_FILES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_weight: Option<u64>,
}

impl Limits {
    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }
}

/// The period `cpu_quota_us` is per.
pub const CPU_PERIOD_US: u64 = 100_000;

/// Why a limit cannot be set.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("the {} controller is not available: {why}", controller.name())]
    Unavailable { controller: Controller, why: String },
    #[error("cannot make the session's cgroup: {0}")]
    Io(#[from] io::Error),
}

/// procd's systemd unit, as its cgroup path names it.
pub const PROCD_UNIT: &str = "procd.service";

/// Whether process `pid` (`"self"` for this one) runs in procd's systemd
/// unit: a cgroup path with a `procd.service` part. The environment alone
/// proves nothing (a shell started from the unit inherits it).
pub fn in_procd_unit(pid: &str) -> bool {
    in_unit(pid, PROCD_UNIT)
}

/// Whether process `pid` runs in systemd unit `unit` (its full name, such
/// as `procd.service`): a cgroup path with that part.
pub fn in_unit(pid: &str, unit: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| {
        text.lines()
            .filter_map(|l| l.rsplit(':').next())
            .any(|path| path.split('/').any(|part| part == unit))
    })
}

/// This process's own cgroup2 directory (on a hybrid host, below the
/// cgroup2 mount `/sys/fs/cgroup/unified`, not `/sys/fs/cgroup`).
pub fn own_v2_dir() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let v2 = hierarchies(&mounts, &own).0?;
    Some(v2.mount.join(v2.own.strip_prefix("/").unwrap_or(&v2.own)))
}

/// 16 hex digits naming an instance by its state dir: FNV-1a of the
/// path, so that a daemon started again for the same instance finds the
/// same tree, and two instances never share one.
pub fn instance_tag(state_dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in state_dir.as_os_str().as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The instance's cgroup subtree, found once when the daemon starts.
#[derive(Debug, Clone)]
pub struct CgroupTree {
    /// `<cgroup2 mount><own cgroup>/procd-<tag>`: made, with `cgroup.kill`.
    base: PathBuf,
    /// Controllers enabled for the sessions in the v2 tree.
    v2_controllers: Vec<Controller>,
    /// The v1 hierarchies of the controllers that are not on v2, each with
    /// this instance's base there (made when a session first needs it).
    v1_bases: BTreeMap<Controller, PathBuf>,
    /// Why each controller that is in neither is not there, for `status`.
    unavailable: BTreeMap<Controller, String>,
}

impl CgroupTree {
    /// Finds and makes the instance's subtree, or says why there is none.
    pub fn find(tag: &str) -> Result<CgroupTree, String> {
        let mut tree = CgroupTree::locate(tag)?;
        let base = &tree.base;
        make_dir(base).map_err(|e| format!("cannot make {}: {e}", base.display()))?;
        if !base.join("cgroup.kill").exists() {
            let _ = std::fs::remove_dir(base);
            return Err(format!(
                "{} has no cgroup.kill (kernel older than 5.14)",
                base.display()
            ));
        }
        tree.v2_controllers = enable_v2_controllers(base);
        let on_v2 = tree.v2_controllers.clone();
        tree.v1_bases.retain(|c, _| !on_v2.contains(c));
        tree.drop_io_without_weights();
        for c in Controller::ALL {
            if !tree.has(c) && !tree.unavailable.contains_key(&c) {
                let why = "enabled in neither the cgroup v2 tree nor a v1 hierarchy";
                tree.unavailable.insert(c, why.into());
            }
        }
        Ok(tree)
    }

    /// The io controller weighs nothing where the disks' scheduler reads
    /// no weight file (v1 blkio without CFQ or BFQ; v2 without blk-iocost
    /// or BFQ): it is not offered for a weight that would do nothing.
    fn drop_io_without_weights(&mut self) {
        let dir = match self.v1_bases.get(&Controller::Io) {
            // The instance's base is made later: its parent holds the
            // same files.
            Some(base) => base.parent().map(Path::to_path_buf),
            None if self.v2_controllers.contains(&Controller::Io) => Some(self.base.clone()),
            None => return,
        };
        if dir
            .as_deref()
            .and_then(|d| io_weight_file(d, 100))
            .is_some()
        {
            return;
        }
        self.v1_bases.remove(&Controller::Io);
        self.v2_controllers.retain(|c| *c != Controller::Io);
        let why = "no I/O weight file (io.weight, blkio.weight or their BFQ forms): \
                   the disks' scheduler reads no weights";
        self.unavailable.insert(Controller::Io, why.into());
    }

    /// Whether sessions' cgroups can carry `controller`'s limits.
    pub fn has(&self, controller: Controller) -> bool {
        self.v2_controllers.contains(&controller) || self.v1_bases.contains_key(&controller)
    }

    /// Why each controller sessions cannot use is not there, for `status`.
    pub fn unavailable(&self) -> impl Iterator<Item = (Controller, &str)> {
        self.unavailable.iter().map(|(c, why)| (*c, why.as_str()))
    }

    /// Where the subtree of the instance whose state dir is `state_dir` is
    /// (or would be), making nothing.
    pub fn locate_instance(state_dir: &Path) -> Result<CgroupTree, String> {
        CgroupTree::locate(&instance_tag(state_dir))
    }

    /// Where the instance's subtree is (or would be), making nothing: for
    /// looking at what a daemon made (and cleaning up after a crashed one).
    pub fn locate(tag: &str) -> Result<CgroupTree, String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let (v2, v1) = hierarchies(&mounts, &own);
        let v2 = v2.ok_or("no cgroup2 filesystem is mounted")?;
        Ok(CgroupTree {
            base: v2.base(tag),
            v2_controllers: Vec::new(),
            v1_bases: v1.into_iter().map(|(c, h)| (c, h.base(tag))).collect(),
            unavailable: BTreeMap::new(),
        })
    }

    /// The v2 directory under which every session's cgroup is made.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Where each controller is available, for `status`.
    pub fn controllers(&self) -> Vec<(Controller, &'static str)> {
        let mut all: Vec<(Controller, &'static str)> =
            self.v2_controllers.iter().map(|c| (*c, "v2")).collect();
        all.extend(self.v1_bases.keys().map(|c| (*c, "v1")));
        all.sort();
        all
    }

    /// Every session cgroup in the tree (a stopping daemon ends them all,
    /// listed or not).
    pub fn sessions(&self) -> Vec<SessionCgroup> {
        let Ok(dir) = std::fs::read_dir(&self.base) else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| {
                let name = e.file_name();
                let v1 = self
                    .v1_bases
                    .values()
                    .map(|b| b.join(&name))
                    .filter(|p| p.is_dir())
                    .collect();
                SessionCgroup::at(e.path(), v1)
            })
            .collect()
    }

    /// Removes the instance's base directories, if no session cgroup is
    /// left in them. Whether the v2 base is gone.
    pub fn remove(&self) -> bool {
        for dir in self.v1_bases.values() {
            let _ = std::fs::remove_dir(dir);
        }
        match std::fs::remove_dir(&self.base) {
            Ok(()) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Makes the cgroup of session `id` with `limits` written. A limit
    /// whose controller is nowhere to be had is an error naming it, and
    /// nothing is left behind.
    pub fn create(&self, id: &str, limits: &Limits) -> Result<SessionCgroup, LimitError> {
        let wanted = [
            (Controller::Memory, limits.memory_bytes.is_some()),
            (
                Controller::Cpu,
                limits.cpu_quota_us.is_some() || limits.cpu_weight.is_some(),
            ),
            (Controller::Pids, limits.pids.is_some()),
            (Controller::Io, limits.io_weight.is_some()),
        ];
        let mut v1 = Vec::new();
        for (controller, _) in wanted.iter().filter(|(_, on)| *on) {
            if self.v2_controllers.contains(controller) {
                continue;
            }
            let Some(base) = self.v1_bases.get(controller) else {
                return Err(LimitError::Unavailable {
                    controller: *controller,
                    why: "enabled in neither the cgroup v2 tree nor a v1 hierarchy".into(),
                });
            };
            v1.push((*controller, base.join(id)));
        }
        let mut cgroup = SessionCgroup::new(self.base.join(id), Vec::new());
        // Made here, or left by a run before (its history unknown here).
        let made = match std::fs::create_dir(&cgroup.path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e.into()),
        };
        cgroup.unkilled = std::sync::atomic::AtomicBool::new(made);
        for (controller, dir) in v1 {
            if let Some(parent) = dir.parent() {
                if let Err(e) = make_dir(parent) {
                    cgroup.remove();
                    return Err(unavailable(controller, &e));
                }
            }
            if let Err(e) = make_dir(&dir) {
                cgroup.remove();
                return Err(unavailable(controller, &e));
            }
            cgroup.v1.push((controller, dir));
        }
        if let Err(e) = cgroup.write_limits(limits) {
            cgroup.remove();
            return Err(e);
        }
        Ok(cgroup)
    }
}

fn unavailable(controller: Controller, e: &io::Error) -> LimitError {
    LimitError::Unavailable {
        controller,
        why: e.to_string(),
    }
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Enables memory, cpu, pids and io for the sessions where the v2 tree
/// offers them; returns those that are on.
fn enable_v2_controllers(base: &Path) -> Vec<Controller> {
    let offered = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    let mut on = Vec::new();
    for c in Controller::ALL {
        if offered.split_whitespace().any(|name| name == c.name())
            && write_file(
                &base.join("cgroup.subtree_control"),
                &format!("+{}", c.name()),
            )
            .is_ok()
        {
            on.push(c);
        }
    }
    on
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// `<key> <number>` lines (cgroup.events, memory.events, cpu.stat,
/// memory.oom_control): the number of `key`.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// A session's cgroup opened for a child to enter.
pub struct Entry {
    dir: File,
    procs: File,
    v1: Vec<File>,
}

impl Entry {
    /// What `spawn::Launch` takes.
    pub fn join(&self) -> crate::spawn::Join<'_> {
        crate::spawn::Join {
            dir: self.dir.as_fd(),
            procs: self.procs.as_fd(),
            v1: self.v1.iter().map(AsFd::as_fd).collect(),
        }
    }
}

/// One session's cgroup: its v2 directory, and the v1 ones its limits need.
#[derive(Debug)]
pub struct SessionCgroup {
    path: PathBuf,
    v1: Vec<(Controller, PathBuf)>,
    /// Waits for it to empty under way. The kernel sends no inotify event
    /// for a cgroup removed right after it emptied (its `cgroup.events`
    /// notification is deferred, then dropped with the directory), so it is
    /// never removed while someone waits on it: the waiter removes it after.
    waiters: Mutex<usize>,
    /// This daemon made it and never wrote its `cgroup.kill`: a process
    /// cloned into it lives (into one that was killed, the kernel kills it
    /// at once, 6.18 here), so a restart may start the next run in it.
    unkilled: std::sync::atomic::AtomicBool,
}

/// A wait on a cgroup, holding off its removal while it lasts.
struct Waiting<'a>(&'a SessionCgroup);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        *self.0.waiters() -= 1;
    }
}

impl SessionCgroup {
    fn new(path: PathBuf, v1: Vec<(Controller, PathBuf)>) -> SessionCgroup {
        SessionCgroup {
            path,
            v1,
            waiters: Mutex::new(0),
            unkilled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a new run may start in it as it is: this daemon made it,
    /// never wrote its `cgroup.kill`, and no live process is left in it.
    pub fn holds_a_new_run(&self) -> bool {
        self.unkilled.load(std::sync::atomic::Ordering::SeqCst) && self.is_empty()
    }

    /// A session cgroup procd made (its v2 directory and the v1 ones
    /// beside it, each controller told by its files).
    pub fn at(path: PathBuf, v1: Vec<PathBuf>) -> SessionCgroup {
        let v1 = v1
            .into_iter()
            .filter_map(|dir| {
                let c = Controller::ALL
                    .into_iter()
                    .find(|c| dir.join(v1_limit_file(*c)).exists())?;
                Some((c, dir))
            })
            .collect();
        SessionCgroup::new(path, v1)
    }

    /// Session `id`'s cgroup as a checkpoint recorded it, trusted only in
    /// the shape procd makes: `…/procd-<tag>/<id>`, a directory on a cgroup
    /// filesystem (v2 for `v2`, v1 for the others). Anything else is not
    /// taken for one.
    pub fn recorded(id: &str, v2: &Path, v1: &[PathBuf]) -> Option<SessionCgroup> {
        let shaped = |dir: &Path, magic: libc::c_long| {
            dir.is_absolute()
                && dir.components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::RootDir | std::path::Component::Normal(_)
                    )
                })
                && dir.file_name().is_some_and(|n| n == id)
                && dir
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n.to_string_lossy().starts_with("procd-"))
                && rustix::fs::statfs(dir).is_ok_and(|fs| fs.f_type == magic)
        };
        // statfs(2)'s f_type of cgroup2 and of cgroup v1 filesystems.
        if !shaped(v2, libc::CGROUP2_SUPER_MAGIC) {
            return None;
        }
        let v1 = v1
            .iter()
            .filter(|d| shaped(d, libc::CGROUP_SUPER_MAGIC))
            .cloned()
            .collect();
        Some(SessionCgroup::at(v2.to_path_buf(), v1))
    }

    /// The v2 directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The v1 directories.
    pub fn v1_paths(&self) -> Vec<PathBuf> {
        self.v1.iter().map(|(_, p)| p.clone()).collect()
    }

    /// Its directory in `controller`'s v1 hierarchy, if it has one.
    fn v1_dir(&self, controller: Controller) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p.as_path())
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, usize> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its directory and `cgroup.procs` files, opened for a child to
    /// enter (`spawn::Join`).
    pub fn entry(&self) -> io::Result<Entry> {
        use std::os::unix::fs::OpenOptionsExt;
        let procs = |dir: &Path| {
            OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
        };
        Ok(Entry {
            dir: OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(&self.path)?,
            procs: procs(&self.path)?,
            v1: self
                .v1
                .iter()
                .map(|(_, p)| procs(p))
                .collect::<io::Result<_>>()?,
        })
    }

    fn write_limits(&self, limits: &Limits) -> Result<(), LimitError> {
        let fail = |c: Controller| move |e: io::Error| unavailable(c, &e);
        if let Some(bytes) = limits.memory_bytes {
            let c = Controller::Memory;
            match self.v1_dir(c) {
                Some(dir) => {
                    write_file(&dir.join("memory.limit_in_bytes"), &bytes.to_string())
                        .map_err(fail(c))?;
                    // No escape into swap where swap is accounted.
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write_file(&memsw, &bytes.to_string()).map_err(fail(c))?;
                    }
                }
                None => {
                    // memory.high a little below the hard limit: the kernel
                    // reclaims and throttles before it OOM-kills.
                    let high = bytes - bytes / 16;
                    write_file(&self.path.join("memory.high"), &high.to_string())
                        .map_err(fail(c))?;
                    write_file(&self.path.join("memory.max"), &bytes.to_string())
                        .map_err(fail(c))?;
                }
            }
        }
        if let Some(quota) = limits.cpu_quota_us {
            let c = Controller::Cpu;
            match self.v1_dir(c) {
                Some(dir) => {
                    write_file(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())
                        .map_err(fail(c))?;
                    write_file(&dir.join("cpu.cfs_quota_us"), &quota.to_string())
                        .map_err(fail(c))?;
                }
                None => write_file(
                    &self.path.join("cpu.max"),
                    &format!("{quota} {CPU_PERIOD_US}"),
                )
                .map_err(fail(c))?,
            }
        }
        if let Some(weight) = limits.cpu_weight {
            let (file, value) = match self.v1_dir(Controller::Cpu) {
                Some(dir) => (dir.join("cpu.shares"), (weight * 1024 / 100).max(2)),
                None => (self.path.join("cpu.weight"), weight),
            };
            write_file(&file, &value.to_string()).map_err(fail(Controller::Cpu))?;
        }
        if let Some(weight) = limits.io_weight {
            let c = Controller::Io;
            let dir = self.v1_dir(c).unwrap_or(&self.path);
            let (file, value) = io_weight_file(dir, weight).ok_or_else(|| {
                fail(c)(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no I/O weight file in the session's cgroup",
                ))
            })?;
            write_file(&file, &value.to_string()).map_err(fail(c))?;
        }
        if let Some(pids) = limits.pids {
            let c = Controller::Pids;
            let dir = self.v1_dir(c).unwrap_or(&self.path);
            write_file(&dir.join("pids.max"), &pids.to_string()).map_err(fail(c))?;
        }
        Ok(())
    }

    /// The live processes in it.
    pub fn procs(&self) -> io::Result<Vec<i32>> {
        Ok(crate::procfs::read_small(&self.path.join("cgroup.procs"))?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// Whether a live process is in it (zombies do not count).
    pub fn populated(&self) -> io::Result<bool> {
        let events = crate::procfs::read_small(&self.path.join("cgroup.events"))?;
        Ok(keyed(&events, "populated") != Some(0))
    }

    /// No live process is in it (a removed cgroup counts as empty). The
    /// kernel (6.18 here) may still count a process that has exited as in
    /// it for a while, and tell of its going only later still (the
    /// `cgroup.events` notification is deferred): `cgroup.procs` lists
    /// only processes that can still run, and with none listed nothing is
    /// left that could fork or hold a file.
    pub fn is_empty(&self) -> bool {
        !self.populated().unwrap_or(false) || self.procs().is_ok_and(|p| p.is_empty())
    }

    /// SIGKILL to every process in it, atomically with respect to forks.
    pub fn kill(&self) -> io::Result<()> {
        self.unkilled
            .store(false, std::sync::atomic::Ordering::SeqCst);
        write_file(&self.path.join("cgroup.kill"), "1")
    }

    /// Waits (woken by inotify on `cgroup.events`) until no live process
    /// is in it, for up to `limit`; true when it is empty.
    pub async fn wait_empty(&self, limit: Duration) -> bool {
        self.wait_empty_or(limit, std::future::pending()).await
    }

    /// Like `wait_empty`, but also ends when `wake` does (then: whether it
    /// is empty at that moment).
    pub async fn wait_empty_or(
        &self,
        limit: Duration,
        wake: impl std::future::Future<Output = ()>,
    ) -> bool {
        self.wait_until(limit, wake, SessionCgroup::is_empty).await
    }

    /// Waits (woken by inotify on `cgroup.events`) until the kernel counts
    /// no process in it any more, so that it can be removed, for up to
    /// `limit`; whether it can. (Later than `wait_empty`: the kernel counts
    /// an exited process for a while.)
    pub async fn wait_removable(&self, limit: Duration) -> bool {
        self.wait_until(limit, std::future::pending(), |c| {
            !c.populated().unwrap_or(false)
        })
        .await
    }

    /// Until `done` holds (looked at each time `cgroup.events` changes),
    /// `wake` ends (then: whether it holds) or `limit` passes.
    async fn wait_until(
        &self,
        limit: Duration,
        wake: impl std::future::Future<Output = ()>,
        done: impl Fn(&SessionCgroup) -> bool,
    ) -> bool {
        *self.waiters() += 1;
        let _waiting = Waiting(self);
        let deadline = tokio::time::Instant::now() + limit;
        let mut watch = FileWatch::new(&self.path.join("cgroup.events")).ok();
        tokio::pin!(wake);
        loop {
            // Checked after the watch exists: no change can fall between.
            if done(self) {
                return true;
            }
            let changed = async {
                match &mut watch {
                    Some(watch) => watch.changed().await.is_ok(),
                    // No inotify (out of watches): look again in a while.
                    None => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        true
                    }
                }
            };
            let watching = tokio::select! {
                watching = changed => watching,
                _ = &mut wake => return done(self),
                _ = tokio::time::sleep_until(deadline) => return done(self),
            };
            if !watching {
                watch = None;
            }
        }
    }

    /// How many processes the kernel's OOM killer ended in it.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.v1_dir(Controller::Memory) {
            Some(dir) => dir.join("memory.oom_control"),
            None => self.path.join("memory.events"),
        };
        crate::procfs::read_small(&file)
            .ok()
            .and_then(|t| keyed(&t, "oom_kill"))
            .unwrap_or(0)
    }

    /// What wakes when an OOM kill may have happened: a v1
    /// `memory.oom_control` eventfd, or a watch on v2's `memory.events`.
    /// None without a memory account.
    pub fn oom_watch(&self) -> io::Result<Option<OomWatch>> {
        use std::os::fd::AsRawFd;
        if let Some(dir) = self.v1_dir(Controller::Memory) {
            let efd = rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )?;
            let control = File::open(dir.join("memory.oom_control"))?;
            write_file(
                &dir.join("cgroup.event_control"),
                &format!("{} {}", efd.as_raw_fd(), control.as_raw_fd()),
            )?;
            return Ok(Some(OomWatch::EventFd(watch_async(efd)?)));
        }
        let events = self.path.join("memory.events");
        if !events.exists() {
            return Ok(None);
        }
        FileWatch::new(&events).map(|w| Some(OomWatch::File(w)))
    }

    /// Its cgroup2 id: the directory's inode, what the kernel tags the
    /// sockets made in it with (sock_diag's INET_DIAG_CGROUP_ID).
    pub fn inode(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).ok().map(|m| m.ino())
    }

    /// CPU time of everything that ran in it (v2 `cpu.stat`, which the
    /// kernel keeps without the cpu controller).
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = crate::procfs::read_small(&self.path.join("cpu.stat")).ok()?;
        keyed(&stat, "usage_usec").map(|us| us as f64 / 1e6)
    }

    /// Removes its directories (deepest first) if nothing lives in them
    /// (the kernel refuses to remove a populated cgroup) and no one waits
    /// on it; true when none is left.
    pub fn remove(&self) -> bool {
        // Held across the rmdirs: a wait begun meanwhile would watch a
        // directory going away, and no event would end it. (A waiter's
        // end waits the rmdirs out, tens of microseconds.)
        let waiters = self.waiters();
        if *waiters > 0 {
            return false;
        }
        let mut gone = true;
        for dir in self
            .v1
            .iter()
            .map(|(_, p)| p)
            .chain(std::iter::once(&self.path))
        {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(_) => gone = false,
            }
        }
        gone
    }
}

fn v1_limit_file(c: Controller) -> &'static str {
    match c {
        Controller::Memory => "memory.limit_in_bytes",
        Controller::Cpu => "cpu.cfs_quota_us",
        Controller::Pids => "pids.max",
        // In every blkio cgroup, whatever the disks' scheduler.
        Controller::Io => "blkio.throttle.io_serviced",
    }
}

/// Registers a descriptor this process owns with the event loop.
pub fn watch_async(
    fd: std::os::fd::OwnedFd,
) -> io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    watch_async_or_give_back(fd).map_err(|(_, e)| e)
}

/// Like `watch_async`, giving the descriptor back with the error (for a
/// caller that must close it somewhere else).
pub fn watch_async_or_give_back(
    fd: std::os::fd::OwnedFd,
) -> Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>, (std::os::fd::OwnedFd, io::Error)> {
    // SAFETY: the AsyncFd owns the descriptor, so it stays open and names
    // the same file until the AsyncFd is dropped, which deregisters it.
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(|e| e.into_parts())
}

/// Empties an inotify or eventfd descriptor that woke us.
pub fn drain(fd: std::os::fd::BorrowedFd<'_>) {
    let mut buf = [0u8; 1024];
    while matches!(rustix::io::read(fd, &mut buf), Ok(n) if n > 0) {}
}

mod controller;
mod mounts;
mod oom;
use controller::io_weight_file;
pub use controller::Controller;
use mounts::hierarchies;
pub use oom::OomWatch;

#[cfg(test)]
mod tests;
