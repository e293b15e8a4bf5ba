//! Client leases (docs/operations.md): `gateway.clients.json`.
//!
//! A long-lived client (an agent) records itself here by pid and identity
//! and gets a token it passes as `owner` when spawning. When its lease ends
//! (released, or its process died or was recycled) the daemon kills its
//! non-persistent sessions. `auto_stop` is the on-demand lifetime: with it
//! set, the daemon stops once no live lease and no running session remain,
//! marking `stopping` first so that a client arriving meanwhile waits for
//! the old daemon to exit instead of talking to a dying one.
//!
//! Every read-modify-write holds the clients lock; transitions (acquire,
//! release-with-stop, start, stop) also hold the transition lock, taken
//! first. All of it blocks: async callers use `spawn_blocking`.

use crate::atomic;
use crate::lock::FileLock;
use crate::paths::Paths;
use crate::state;
use procd_sys::identity::RecordedIdentity;
use procd_sys::procfs::ProcFs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFile {
    #[serde(default)]
    pub auto_stop: bool,
    #[serde(default)]
    pub clients: BTreeMap<String, ClientEntry>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
}

/// One lease. Read leniently like gateway.json (docs/operations.md, docs/SECURITY.md): only the
/// pid is required; the identity may be a string or a legacy integer pgid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEntry {
    pub pid: i32,
    /// "<pgid>:<starttime>"; None when it could not be read at acquire.
    #[serde(default, deserialize_with = "procd_sys::identity::lenient")]
    pub identity: Option<RecordedIdentity>,
    #[serde(default)]
    pub kind: String,
}

/// What the lease file says right now (after pruning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseSnapshot {
    pub auto_stop: bool,
    pub clients: usize,
    pub stopping: bool,
    pub tokens: Vec<String>,
}

/// Whether a recorded client is still the same live process. An identity
/// that cannot be read now keeps the entry (fail safe: never drop a live
/// client's lease because /proc was briefly unreadable).
fn entry_is_live(procfs: &ProcFs, entry: &ClientEntry) -> bool {
    match RecordedIdentity::of(procfs, entry.pid) {
        Ok(None) => false,
        Err(_) => true,
        Ok(Some(actual)) => entry
            .identity
            .is_none_or(|recorded| recorded.matches(&actual)),
    }
}

/// Reads, prunes dead or recycled clients, lets `f` change the file, and
/// writes it back (removing it when it says nothing), all under the clients
/// lock.
pub fn with_clients<T>(paths: &Paths, f: impl FnOnce(&mut LeaseFile) -> T) -> io::Result<T> {
    paths.create_dirs()?;
    let _lock = FileLock::acquire(&paths.clients_lock())?;
    let path = paths.clients_json();
    let before: LeaseFile = match atomic::read_json_checked(&path) {
        atomic::Read::Parsed(file) => file,
        atomic::Read::Missing => LeaseFile::default(),
        atomic::Read::Corrupt => {
            // Kept for a human, never overwritten by what is written next.
            let _ = atomic::move_aside(&path);
            LeaseFile::default()
        }
    };
    let mut file = before.clone();
    let procfs = ProcFs::default();
    file.clients
        .retain(|_, entry| entry_is_live(&procfs, entry));
    let result = f(&mut file);
    if file != before || !path.exists() {
        if file == LeaseFile::default() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        } else {
            atomic::write_json(&path, &file)?;
        }
    }
    Ok(result)
}

/// The pruned state of the lease file.
pub fn snapshot(paths: &Paths) -> io::Result<LeaseSnapshot> {
    with_clients(paths, |f| LeaseSnapshot {
        auto_stop: f.auto_stop,
        clients: f.clients.len(),
        stopping: f.stopping,
        tokens: f.clients.keys().cloned().collect(),
    })
}

/// Held across a lifecycle transition (start, stop, acquire, release).
pub struct Transition {
    _lock: FileLock,
}

impl Transition {
    pub fn begin(paths: &Paths) -> io::Result<Transition> {
        paths.create_dirs()?;
        Ok(Transition {
            _lock: FileLock::acquire(&paths.transition_lock())?,
        })
    }
}

/// How long a client waits for a stopping daemon to exit.
const STOPPING_WAIT: Duration = Duration::from_secs(30);

/// If a daemon is shutting down because it was idle, waits until it has
/// exited, then clears the flag. Needs the transition held.
pub fn wait_out_stopping(paths: &Paths, _t: &Transition) -> io::Result<()> {
    let deadline = Instant::now() + STOPPING_WAIT;
    let procfs = ProcFs::default();
    loop {
        let stopping = with_clients(paths, |f| f.stopping)?;
        if !stopping {
            return Ok(());
        }
        let daemon = state::inspect(paths, &procfs);
        if !daemon.is_running() {
            return with_clients(paths, |f| f.stopping = false);
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the previous procd is still stopping; try again",
            ));
        }
        // The daemon is not our child: watch its pidfd for the exit.
        if let Liveness::Running(s) | Liveness::IdentityUnavailable(s) = daemon {
            if let Ok(fd) = procd_sys::pidfd::PidFd::open(s.pid) {
                fd.wait_exit_blocking(Duration::from_millis(200));
                continue;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

use crate::state::Liveness;

/// A lease token from the OS's CSPRNG (docs/SECURITY.md): holding one lets a
/// client spawn sessions in its name and end them by releasing it.
fn new_token() -> io::Result<String> {
    Ok(format!("lease_{}", procd_sys::random::hex(16)?))
}

/// Records a lease for process `pid`; waits out a stopping daemon first.
pub fn acquire(paths: &Paths, kind: &str, pid: i32) -> io::Result<String> {
    let t = Transition::begin(paths)?;
    acquire_in(paths, &t, kind, pid)
}

/// `acquire` within a transition the caller already holds.
pub fn acquire_in(paths: &Paths, t: &Transition, kind: &str, pid: i32) -> io::Result<String> {
    wait_out_stopping(paths, t)?;
    let identity = RecordedIdentity::of(&ProcFs::default(), pid)?;
    if identity.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no live process {pid} to hold a lease"),
        ));
    }
    let token = new_token()?;
    with_clients(paths, |f| {
        f.clients.insert(
            token.clone(),
            ClientEntry {
                pid,
                identity,
                kind: kind.to_string(),
            },
        );
    })?;
    Ok(token)
}

/// Sets the on-demand lifetime (the daemon may stop when idle).
pub fn mark_ephemeral(paths: &Paths) -> io::Result<()> {
    with_clients(paths, |f| f.auto_stop = true)
}

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// Other clients remain, or the daemon is explicit.
    Kept,
    /// This was the last client of an on-demand daemon, which was stopped.
    Stopped,
    /// Last client; the stop is left to the daemon's monitor.
    LeftToMonitor,
    /// Last client; the stop failed. `auto_stop` stays set (retryable).
    StopFailed(String),
}
