//! The machine-wide jobserver (docs/jobserver.md): N tokens shared by the
//! builds of every agent. A session spawned with `jobs` holds one token
//! from its start to its end, its top-level make's or cargo's own job,
//! taken as a slot of the `jobserver` queue. The other tokens are handed
//! out as bytes in a FIFO of the session's own, named to its make, cargo
//! and rustc as a GNU make jobserver: what they read, they run.
//!
//! Because each session has its own FIFO, procd knows what each one was
//! given. At the session's end every token given to it comes back, even
//! ones its killed processes held, which GNU make's own jobserver loses.
//!
//! The sum over sessions of (1 + tokens given) never exceeds N: the
//! queue's slots are N less the tokens given (`Queues::slots`), and
//! tokens are given only from what no slot holds. While a spawn waits
//! for a slot, tokens sitting unused in FIFOs are taken back.
//!
//! What was given is written to `jobs.json` before the bytes are, and
//! taken out after they are read back, so a daemon killed in between
//! thinks more is given than is: a next daemon gives out too few, never
//! too many, until those sessions end.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// The queue whose slots are the sessions' own tokens (refused as a name
/// of a user's queue).
pub const QUEUE: &str = procd_proto::config::JOBSERVER_QUEUE;

/// The descriptor a session's processes find their FIFO on (the first
/// after stdio; a shell's channels are never given to a `jobs` spawn).
pub const CHILD_FD: i32 = 3;

/// The `make` first on a `jobs` session's PATH: GNU make leaves an
/// inherited jobserver when `-j` is on its command line ("-jN forced in
/// submake: resetting jobserver mode"), so this drops `-j` and its count
/// and runs the next make on PATH.
const MAKE_SHIM: &str = r#"#!/bin/sh
# procd's make for sessions spawned with `jobs` (docs/jobserver.md): GNU
# make ignores an inherited jobserver when -j is given, so -j and its
# count are dropped; make then runs as many jobs as procd gives tokens.
skip=
for a do
  shift
  if [ -n "$skip" ]; then
    skip=
    case $a in [0-9]*) continue ;; esac
  fi
  case $a in
    -j|--jobs) skip=1; continue ;;
    -j[0-9]*|--jobs=*) continue ;;
  esac
  set -- "$@" "$a"
done
here=$(dirname "$0")
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$here" | paste -sd: -)
export PATH
exec make "$@"
"#;

/// One session's share: its FIFO (the daemon's non-blocking end) and how
/// many tokens it was given beyond its own.
struct Holder {
    fifo: Arc<AsyncFd<OwnedFd>>,
    given: usize,
    /// Told when the holder is let go of, to end its watch.
    released: Arc<Notify>,
}

/// What the jobserver says of itself (`status.jobserver`).
pub struct Usage {
    pub tokens: usize,
    /// Per session: the tokens its processes hold now (its own included).
    pub sessions: Vec<(String, usize)>,
}

pub struct JobServer {
    tokens: usize,
    /// The sessions' FIFOs, `jobs.json` and the make shim.
    dir: PathBuf,
    holders: std::sync::Mutex<BTreeMap<String, Holder>>,
    /// One change of shares at a time, from its look at the FIFOs to its
    /// record written and bytes put (the record is written off the event
    /// loop, between the two).
    changing: tokio::sync::Mutex<()>,
}

impl JobServer {
    /// A jobserver of `tokens` in `dir` (made, the owner's only), with its
    /// make shim written. Blocking: call it before serving.
    pub fn new(tokens: usize, dir: &Path) -> io::Result<JobServer> {
        crate::registry::create_private_dir(dir)?;
        let bin = dir.join("bin");
        crate::registry::create_private_dir(&bin)?;
        let shim = bin.join("make");
        procd_sys::atomic::write_bytes(&shim, MAKE_SHIM.as_bytes())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o700))?;
        Ok(JobServer {
            tokens,
            dir: dir.to_path_buf(),
            holders: std::sync::Mutex::new(BTreeMap::new()),
            changing: tokio::sync::Mutex::new(()),
        })
    }

    fn holders(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Holder>> {
        self.holders.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What each session was given, as `jobs.json` holds it.
    fn given_now(&self) -> BTreeMap<String, usize> {
        self.holders()
            .iter()
            .map(|(id, h)| (id.clone(), h.given))
            .collect()
    }

    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The tokens given out beyond the sessions' own: the queue's slots
    /// are `tokens` less these (read under the queue's lock).
    pub fn given(&self) -> usize {
        self.holders().values().map(|h| h.given).sum()
    }

    /// Session `id`'s FIFO.
    pub fn fifo(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.fifo"))
    }

    fn record(&self) -> PathBuf {
        self.dir.join("jobs.json")
    }

    /// What a `jobs` session's environment gets: its FIFO named to GNU
    /// make (4.3's descriptor form, which make 4.4 and cargo's jobserver
    /// crate read too).
    pub fn env(&self, id: &str) -> Vec<(String, String)> {
        let auth = format!(" -j --jobserver-auth={CHILD_FD},{CHILD_FD}");
        vec![
            ("MAKEFLAGS".into(), auth.clone()),
            ("CARGO_MAKEFLAGS".into(), auth),
            (
                "PROCD_JOBSERVER".into(),
                self.fifo(id).display().to_string(),
            ),
        ]
    }

    /// A `jobs` session's script: the make shim put first on its PATH
    /// in the script itself, since a login shell's profile sets PATH
    /// anew (Debian's /etc/profile does).
    pub fn script(&self, script: &str) -> String {
        let bin = self.dir.join("bin").display().to_string();
        format!(
            "PATH={}:\"$PATH\"; {script}",
            crate::child::snapshot::quote(&bin)
        )
    }

    /// Makes session `id`'s FIFO, given nothing yet; `watch` follows it.
    pub async fn open(&self, id: &str) -> io::Result<Arc<Notify>> {
        let path = self.fifo(id);
        let fd = tokio::task::spawn_blocking(move || {
            procd_sys::fifo::make(&path)?;
            procd_sys::fifo::open(&path, true)
        })
        .await
        .map_err(io::Error::other)??;
        self.hold(id, fd, 0)
    }

    fn hold(&self, id: &str, fd: OwnedFd, given: usize) -> io::Result<Arc<Notify>> {
        let fifo = Arc::new(procd_sys::cgroup::watch_async(fd)?);
        let released = Arc::new(Notify::new());
        let holder = Holder {
            fifo,
            given,
            released: released.clone(),
        };
        if let Some(old) = self.holders().insert(id.to_string(), holder) {
            old.released.notify_one();
        }
        Ok(released)
    }

    /// The session's processes' end of its FIFO (blocking, as make 4.3
    /// wants it), opened anew for each run.
    pub fn child_end(fifo: &Path) -> io::Result<OwnedFd> {
        procd_sys::fifo::open(fifo, false)
    }

    /// Waits until session `id`'s FIFO has tokens returned to it (or it is
    /// let go of: false).
    pub async fn returned(&self, id: &str, released: &Notify) -> bool {
        let Some(fifo) = self.holders().get(id).map(|h| h.fifo.clone()) else {
            return false;
        };
        tokio::select! {
            ready = fifo.readable() => {
                // Edge-triggered: cleared, the next token written back
                // wakes the watch again; the ones sitting are counted
                // from the pipe itself when they are taken back.
                if let Ok(mut guard) = ready {
                    guard.clear_ready();
                }
                true
            }
            _ = released.notified() => false,
        }
    }

    /// Held across one change of shares (`take_back`, or `reserve` then
    /// `give`), from its look at the FIFOs to its bytes put.
    pub async fn changing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changing.lock().await
    }

    /// Takes back every token sitting unused in a FIFO, so a slot frees
    /// for a spawn waiting: true when any came back.
    pub async fn take_back(&self) -> bool {
        let mut back = 0;
        for holder in self.holders().values_mut() {
            let taken =
                procd_sys::fifo::take(holder.fifo.get_ref(), holder.given).unwrap_or_default();
            holder.given -= taken;
            back += taken;
        }
        if back > 0 {
            self.persist().await;
        }
        back > 0
    }

    /// Gives out, in the books only, what no slot (`running` of them
    /// held) and no session holds, one token at a time to whoever has
    /// least: the tokens `give` then puts in each FIFO. Called under the
    /// queue's lock (`Queues::under_line`), so no slot is taken between
    /// the count and the books.
    pub fn reserve(&self, running: usize) -> BTreeMap<String, usize> {
        let mut holders = self.holders();
        let given: usize = holders.values().map(|h| h.given).sum();
        let spare = self.tokens.saturating_sub(running).saturating_sub(given);
        let mut gift: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..spare {
            let Some((id, holder)) = holders.iter_mut().min_by_key(|(_, h)| h.given) else {
                break;
            };
            holder.given += 1;
            *gift.entry(id.clone()).or_default() += 1;
        }
        gift
    }

    /// Puts what `reserve` gave in each session's FIFO, once the books
    /// are written: a crash in between gives too few, never too many.
    pub async fn give(&self, gift: BTreeMap<String, usize>) {
        if gift.is_empty() {
            return;
        }
        self.persist().await;
        let mut holders = self.holders();
        for (id, n) in gift {
            let Some(holder) = holders.get_mut(&id) else {
                continue;
            };
            if let Err(e) = procd_sys::fifo::put(holder.fifo.get_ref(), n) {
                tracing::warn!(session = %id, %e, "cannot give jobserver tokens");
                holder.given -= n;
            }
        }
    }

    /// Session `id`'s last run ended, its processes all gone, and another
    /// is to start: whatever it was given is back, the tokens sitting in
    /// its FIFO and those its run's processes died holding.
    pub async fn renew(&self, id: &str) {
        let _changing = self.changing.lock().await;
        let back = match self.holders().get_mut(id) {
            Some(holder) => {
                let _ = procd_sys::fifo::take(holder.fifo.get_ref(), holder.given);
                std::mem::take(&mut holder.given)
            }
            None => 0,
        };
        if back > 0 {
            self.persist().await;
        }
    }

    /// Session `id` ended: every token given to it is back, however many
    /// its processes held; its FIFO is removed. At once, before its exit
    /// shows, so that whoever saw it end sees its tokens back (an unlink,
    /// as small as the cgroup's rmdir beside it); `record_shares` writes it down.
    pub fn let_go(&self, id: &str) {
        // The file first: once `usage` no longer lists it, it is gone.
        let _ = std::fs::remove_file(self.fifo(id));
        let removed = self.holders().remove(id);
        if let Some(holder) = removed {
            holder.released.notify_one();
        }
    }

    /// Writes down what is given now (after `let_go`), off the event loop.
    pub async fn record_shares(&self) {
        let _changing = self.changing.lock().await;
        self.persist().await;
    }

    /// Takes back what a previous daemon gave the sessions still `live`
    /// (their FIFOs opened again; each one's watch to be started from
    /// the notifiers returned); the rest of the directory's FIFOs are
    /// removed. A session whose FIFO is gone is given nothing more.
    pub async fn recover(&self, live: &HashSet<String>) -> Vec<(String, Arc<Notify>)> {
        let (dir, record) = (self.dir.clone(), self.record());
        let live_ids = live.clone();
        let opened = tokio::task::spawn_blocking(move || {
            // A corrupt record: what sits in each FIFO is all that is
            // known given (tokens its processes hold then go uncounted
            // until it ends; logged).
            let given: Option<BTreeMap<String, usize>> =
                match procd_sys::atomic::read_json_checked(&record) {
                    procd_sys::atomic::Read::Parsed(map) => Some(map),
                    procd_sys::atomic::Read::Missing => Some(BTreeMap::new()),
                    procd_sys::atomic::Read::Corrupt => {
                        tracing::warn!(path = %record.display(), "jobs.json is corrupt: counting the tokens in the FIFOs only");
                        None
                    }
                };
            let mut opened = Vec::new();
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_suffix(".fifo") else {
                    continue;
                };
                let fd = match live_ids.contains(id) {
                    true => procd_sys::fifo::open(&entry.path(), true).ok(),
                    false => None,
                };
                match fd {
                    Some(fd) => {
                        let n = match &given {
                            Some(map) => map.get(id).copied().unwrap_or(0),
                            None => procd_sys::fifo::available(&fd).unwrap_or(0),
                        };
                        opened.push((id.to_string(), fd, n));
                    }
                    None => {
                        let _ = std::fs::remove_file(entry.path());
                    }
                }
            }
            opened
        })
        .await
        .unwrap_or_default();
        let _changing = self.changing.lock().await;
        let mut watches = Vec::new();
        for (id, fd, given) in opened {
            if let Ok(released) = self.hold(&id, fd, given) {
                watches.push((id, released));
            }
        }
        self.persist().await;
        watches
    }

    /// Tokens each session's processes hold now: its own, and those it
    /// was given that are not sitting in its FIFO.
    pub fn usage(&self) -> Usage {
        let sessions = self
            .holders()
            .iter()
            .map(|(id, h)| {
                let sitting = procd_sys::fifo::available(h.fifo.get_ref().as_fd()).unwrap_or(0);
                (id.clone(), 1 + h.given.saturating_sub(sitting))
            })
            .collect();
        Usage {
            tokens: self.tokens,
            sessions,
        }
    }

    /// Writes what each session was given, off the event loop; a failure
    /// is logged (only a crash would then give out too many).
    /// Unsynced, as procs.json: the order of the write and the bytes is
    /// what a daemon SIGKILL needs, and the sessions die with the machine.
    async fn persist(&self) {
        let given = self.given_now();
        let record = self.record();
        let written = tokio::task::spawn_blocking(move || {
            procd_sys::atomic::write_json_unsynced(&record, &given)
        })
        .await;
        if let Ok(Err(e)) = written {
            tracing::warn!(%e, "cannot write jobs.json");
        }
    }
}
