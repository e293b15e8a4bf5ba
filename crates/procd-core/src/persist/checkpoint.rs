//! `procs.json` (docs/survival.md): the running sessions, so that a daemon that died
//! (crash, SIGKILL, host restart of the daemon alone) can be succeeded by
//! one that re-adopts them. Beside it, `ended.jsonl`: the sessions that have
//! ended and are still retained, with their exits, so that the next daemon
//! lists them as they were (docs/survival.md: an id an agent holds keeps its exit
//! code across a restart). Commands are stored redacted. Never fsynced
//! (see `atomic::write_json_unsynced`), written off the event loop, one
//! write of each file at a time: `procs.json` in slots, a session's record
//! written in its own (`slots.rs`) or the file replaced atomically, the
//! journal appended to (a line a crash cuts short is skipped when read)
//! and now and then replaced atomically by what it holds. The two files have
//! writers of their own, so that a spawn's `procs.json` never waits behind
//! an exit's (larger) `ended.jsonl`; an ended session stays in `procs.json`
//! (with its exit) until `ended.jsonl` holds it, so it is always in one of
//! them, and where it is in both the exact exit wins.
//!
//! What the registry keeps of it: `spawn` answers once `procs.json` holds
//! the session (a failed write kills the child); an exit schedules a write
//! of `ended.jsonl`, then `procs.json`, after the state has flipped; a kill
//! (`kill`, `kill_all`, `kill_started_since`) answers once the checkpoint
//! holds the exits it caused; recovery rewrites both files before the
//! first request. A recovered session is detached: not the daemon's child,
//! so its exit is seen through a pidfd, its status is unknowable (`lost`),
//! and it has no stdin.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use tokio::sync::Mutex;

/// One running session as recorded on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    pub session_id: String,
    /// Redacted (recovery only displays it).
    pub command: String,
    pub pid: i32,
    /// Clock ticks since boot (field 22 of /proc/<pid>/stat).
    pub start_time: u64,
    /// "<pgid>:<starttime>" (informational: recovery checks `pid` and
    /// `start_time`).
    #[serde(default, deserialize_with = "procd_sys::identity::lenient")]
    pub identity: Option<procd_sys::identity::RecordedIdentity>,
    pub pgid: i32,
    pub cwd: String,
    pub started_at: String,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub session_key: Option<String>,
    /// Its name and project (docs/stacks.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The stack file `up` started it from (docs/stacks.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_file: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub persist: bool,
    #[serde(default)]
    pub pty: bool,
    #[serde(default)]
    pub notify_on_complete: bool,
    #[serde(default)]
    pub watch_patterns: Vec<String>,
    /// The caller's `meta` (spawn, update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    #[serde(default)]
    pub systemd_unit: Option<String>,
    /// Its cgroup (v2 directory) and the v1 ones its limits use: how the
    /// next daemon finds every process of it (docs/containment.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_v1: Vec<String>,
    pub log_path: String,
    /// What the next daemon needs to keep the session as it was asked for
    /// (beyond docs/survival.md's fields, ignored by readers that do not know
    /// them): when its timeout fires, its PTY size, its stdin, its ready
    /// condition and when that was met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<procd_proto::StdinMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<procd_proto::ReadySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_after_ms: Option<u64>,
    /// How it ended (`ended.jsonl`; in `procs.json` only until
    /// `ended.jsonl` holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<EndedExit>,
    /// Its restart policy and where its runs stand (docs/stacks.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartRecord>,
    /// The sandbox it runs in (the kernel keeps it; this is what `poll`
    /// shows of it after a daemon restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<procd_proto::SandboxInfo>,
    /// The limits its cgroup was given (a restart's cgroup gets them too).
    #[serde(default, skip_serializing_if = "procd_sys::cgroup::Limits::is_none")]
    pub limits: procd_sys::cgroup::Limits,
    /// `spawn{junit}`, resolved: the next daemon reads it at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub junit: Option<String>,
    /// The port spawn's `port` gave it: the next daemon keeps it out of
    /// other sessions' picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `spawn{ports}`, likewise.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub named_ports: std::collections::BTreeMap<String, u16>,
    /// `spawn{watch}`: the next daemon follows the changes too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<procd_proto::WatchSpec>,
    /// The queue whose slot it holds (docs/queues.md) and how long it
    /// waited there: the next daemon counts it among the queue's running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<u64>,
}

/// A restarting session's policy and runs, as the checkpoint keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartRecord {
    pub policy: procd_proto::RestartSpec,
    /// The run going (1 is the first start).
    pub run: u32,
    /// Restarts in a row (docs/stacks.md: `reset_after_s`).
    pub streak: u32,
    /// How the previous run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<EndedExit>,
    /// Set while it waits out a backoff: the run that starts next, and
    /// when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<NextRunRecord>,
    /// Where the run's output begins in the log (0, the log's start, in
    /// a record that does not say).
    #[serde(default, skip_serializing_if = "procd_proto::is_zero")]
    pub output_from: u64,
}

/// A restarting session's next run, as a checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextRunRecord {
    pub run: u32,
    pub streak: u32,
    /// RFC 3339.
    pub at: String,
}

impl CheckpointEntry {
    /// Whether the id has the shape procd gives sessions ("proc_" and 12
    /// hex digits): an entry that does not is not a procd session.
    pub fn has_session_id(&self) -> bool {
        self.session_id
            .strip_prefix("proc_")
            .is_some_and(|hex| hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// The session's cgroup as recorded, if it has the shape procd makes
    /// (`procd_sys::cgroup::SessionCgroup::recorded`).
    pub fn cgroup(&self) -> Option<procd_sys::cgroup::SessionCgroup> {
        let v1: Vec<PathBuf> = self.cgroup_v1.iter().map(PathBuf::from).collect();
        procd_sys::cgroup::SessionCgroup::recorded(
            &self.session_id,
            Path::new(self.cgroup.as_deref()?),
            &v1,
        )
    }

    /// The record of a restarting session's next run, rooted at `root`,
    /// when the daemon died after starting that run (the keeper holds it)
    /// but before the checkpoint named it: this entry then still names
    /// the run before, waiting out its backoff (`next_run`). The run is in
    /// the same cgroup, scope and log (all named after the session); its
    /// root leads its own group and started after the recorded one. Its
    /// `started_at` is the recorded one's moved on by the distance between
    /// the two roots' start times (clock ticks since boot), so exact to a
    /// tick as far as the recorded one was.
    pub fn as_next_run(
        &self,
        root: procd_sys::identity::ProcessIdentity,
    ) -> Option<CheckpointEntry> {
        let record = self.restart.as_ref()?;
        let next = record.next_run.as_ref()?;
        if self.exit.is_some() || root.start_time <= self.start_time || root.pid <= 1 {
            return None;
        }
        let mut entry = self.clone();
        entry.pid = root.pid;
        entry.start_time = root.start_time;
        entry.pgid = root.pid;
        entry.identity = Some(procd_sys::identity::RecordedIdentity {
            pgid: root.pid,
            start_time: Some(root.start_time),
        });
        let later = (root.start_time - self.start_time) as f64
            / procd_sys::procfs::clock_ticks_per_second();
        entry.started_at = procd_sys::clock::rfc3339(
            self.started_at() + std::time::Duration::from_secs_f64(later),
        );
        entry.ready_after_ms = None;
        entry.restart = Some(RestartRecord {
            run: next.run,
            streak: next.streak,
            next_run: None,
            ..record.clone()
        });
        Some(entry)
    }

    /// The session's root as recorded.
    pub fn root(&self) -> procd_sys::identity::ProcessIdentity {
        procd_sys::identity::ProcessIdentity {
            pid: self.pid,
            start_time: self.start_time,
        }
    }

    /// When the session started (now, if the record does not say).
    pub fn started_at(&self) -> std::time::SystemTime {
        procd_sys::clock::parse_rfc3339(&self.started_at).unwrap_or_else(std::time::SystemTime::now)
    }
}

/// The exit of an ended session, as `ended.jsonl` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedExit {
    pub exit_code: Option<i32>,
    /// The signal number, if a signal ended it.
    pub signal: Option<i32>,
    pub completion_reason: procd_proto::CompletionReason,
    #[serde(default)]
    pub termination_source: Option<String>,
    pub exited_at: String,
}

impl EndedExit {
    pub fn of(e: &crate::session::ExitRecord) -> EndedExit {
        EndedExit {
            exit_code: e.exit_code,
            signal: e.signal,
            completion_reason: e.reason,
            termination_source: e.source.clone(),
            exited_at: procd_sys::clock::rfc3339(e.exited_at),
        }
    }

    /// The exit as the session records it (ended now, if the record does
    /// not say when).
    pub fn record(&self) -> crate::session::ExitRecord {
        let exited_at = procd_sys::clock::parse_rfc3339(&self.exited_at)
            .unwrap_or_else(std::time::SystemTime::now);
        crate::session::ExitRecord {
            exit_code: self.exit_code,
            signal: self.signal,
            reason: self.completion_reason,
            source: self.termination_source.clone(),
            exited_at,
            exited_instant: crate::clock::instant_at(exited_at),
        }
    }
}

/// One record of `procs.json`: a `CheckpointEntry` as JSON.
pub type Serialized = Arc<str>;

mod slots;
pub use slots::Record;
use slots::Slots;

/// Each session's `procs.json` record, serialized, kept while what can
/// change of it (`M`) has not: every spawn and exit asks for every
/// running session's record, and only those that changed are serialized
/// again. A record is its session's alone: it is found by
/// the session's address, which the `Weak` it holds keeps from being
/// reused (a restart's next run, under the same id, is another session).
pub struct RecordCache<S, M> {
    /// Keyed by address with FxHash: the keys are the daemon's own
    /// allocations, nothing a client chooses, so no keyed hash is needed.
    by_owner: rustc_hash::FxHashMap<usize, Cached<S, M>>,
    /// Bumped by each write's pass; a record not visited in the last
    /// pass is dropped once there are many (`trim`).
    pass: u64,
}

struct Cached<S, M> {
    /// Holds the address, so that no other session is made at it.
    _owner: Weak<S>,
    moving: M,
    record: Record,
    pass: u64,
}

impl<S, M: PartialEq> Default for RecordCache<S, M> {
    fn default() -> Self {
        RecordCache {
            by_owner: HashMap::default(),
            pass: 0,
        }
    }
}

impl<S, M: PartialEq> RecordCache<S, M> {
    /// Starts a write's pass over the records.
    pub fn begin(&mut self) {
        self.pass += 1;
    }

    /// The record of `owner`, made by `make` only when it is new or
    /// `moving` differs from when it was made.
    pub fn record(
        &mut self,
        owner: &Arc<S>,
        moving: M,
        make: impl FnOnce() -> CheckpointEntry,
    ) -> std::io::Result<Record> {
        let pass = self.pass;
        let address = Arc::as_ptr(owner) as usize;
        if let Some(c) = self.by_owner.get_mut(&address) {
            if c.moving == moving {
                c.pass = pass;
                return Ok(c.record.clone());
            }
        }
        let record = Record::of(&make())?;
        self.by_owner.insert(
            address,
            Cached {
                _owner: Arc::downgrade(owner),
                moving,
                record: record.clone(),
                pass,
            },
        );
        Ok(record)
    }

    /// Ends a pass that visited `visited` records: those it did not visit
    /// are dropped once they outnumber the visited, so the cache holds at
    /// most about twice what `procs.json` does, at a cost shared by many
    /// writes.
    pub fn trim(&mut self, visited: usize) {
        if self.by_owner.len() > 2 * visited + RECORD_SLACK {
            let pass = self.pass;
            self.by_owner.retain(|_, c| c.pass == pass);
        }
    }
}

/// What the checkpoint asks of the sessions it records (the registry).
/// Each call visits only what it names, never every session retained.
pub trait Recorded {
    /// The records `procs.json` carries: every running session, and each
    /// ended one `ended.jsonl` does not hold yet.
    fn unsettled(&self) -> std::io::Result<Vec<Record>>;
    /// Of those, the ended ones alone: what an exit appends (no record of
    /// a running session is made for it).
    fn unsettled_ended(&self) -> Vec<CheckpointEntry>;
    /// Every retained ended session's record, in the order they ended:
    /// what a rewrite of `ended.jsonl` holds.
    fn ended(&self) -> Vec<CheckpointEntry>;
    /// The ended sessions taken out (or replaced by a next run) since
    /// last asked.
    fn take_gone(&self) -> Vec<String>;
    /// `ended.jsonl` holds these exits now (id, `exited_at`).
    fn settle(&self, held: &[(String, String)]);
}

/// Writes the checkpoint, one write of each file at a time, latest state
/// last.
pub struct Checkpoint {
    path: PathBuf,
    /// `procs.json`, rewritten in place of a spare of its own.
    running_file: crate::atomic::SwapFile,
    /// `ended.jsonl`'s spare, for the rewrite that compacts it.
    ended_file: crate::atomic::SwapFile,
    /// Held for an `ended.jsonl` write; what the file has, or None before
    /// this daemon first wrote it whole (what an earlier one appended is
    /// not counted) and after a failed append (which may have left part
    /// of a line): the next write rewrites it.
    writing_ended: Mutex<Option<Journal>>,
    /// Held for a `procs.json` write; what this daemon last wrote there,
    /// slot by slot, and the file it is: None before its first write and
    /// after a failed one (the next is whole). Only the slots that
    /// changed are written, and none when nothing did: a kill answers once
    /// its exit is on disk, and the write its exit scheduled has usually
    /// put it there already.
    writing_running: Mutex<Option<(Slots, std::fs::File)>>,
}

/// What `ended.jsonl` has.
#[derive(Clone, Copy)]
struct Journal {
    lines: usize,
    /// The sessions it holds (less where a `gone` line named one it did
    /// not hold): what a rewrite would bring its lines down to.
    held: usize,
}

/// A line of `ended.jsonl` that takes a session back out: it is no longer
/// retained, or its id has a next run.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gone {
    gone: String,
}

/// Records `RecordCache` may keep beyond twice those a write visits.
const RECORD_SLACK: usize = 64;

/// Lines `ended.jsonl` may carry beyond twice the sessions it holds before
/// it is rewritten whole: appends are the rule, a rewrite the exception
/// whose cost is shared by as many appends as the file holds.
const JOURNAL_SLACK: usize = 64;

impl Checkpoint {
    pub fn new(path: PathBuf) -> std::io::Result<Checkpoint> {
        Ok(Checkpoint {
            running_file: crate::atomic::SwapFile::new(&path)?,
            ended_file: crate::atomic::SwapFile::new(&Self::ended_path(&path))?,
            path,
            writing_ended: Mutex::new(None),
            writing_running: Mutex::new(None),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the ended sessions go: `ended.jsonl` beside `procs.json`, a
    /// journal: a line per session as it ended (an ended session's record
    /// never changes), a `{"gone": id}` line when one is no longer
    /// retained, and now and then a rewrite to what is retained. So an exit
    /// costs one append, whatever the number of sessions.
    pub fn ended_path(path: &Path) -> PathBuf {
        path.with_file_name("ended.jsonl")
    }

    /// Where daemons before the journal kept the ended sessions, as one
    /// JSON array: read once, removed by the first rewrite of the journal.
    fn legacy_ended_path(path: &Path) -> PathBuf {
        path.with_file_name("ended.json")
    }

    /// Writes the exits `ended.jsonl` does not hold yet, then `procs.json`
    /// (`write_running`). Each write asks `sessions` once the previous
    /// write of its file finished, so the files end at the newest state.
    pub async fn write(&self, sessions: &impl Recorded) -> std::io::Result<()> {
        self.write_ended(sessions).await?;
        self.write_running(sessions).await
    }

    async fn write_ended(&self, sessions: &impl Recorded) -> std::io::Result<()> {
        let mut journal = self.writing_ended.lock().await;
        // Gone first: a line for an id taken out, then its next run's.
        let gone = sessions.take_gone();
        let fresh = sessions.unsettled_ended();
        let Some(now) = *journal else {
            return self.rewrite_ended(&mut journal, sessions).await;
        };
        let held = (now.held + fresh.len()).saturating_sub(gone.len());
        let lines = now.lines + gone.len() + fresh.len();
        if lines > 2 * held + JOURNAL_SLACK {
            return self.rewrite_ended(&mut journal, sessions).await;
        }
        if fresh.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        for id in gone {
            push_line(&mut bytes, &Gone { gone: id })?;
        }
        for e in &fresh {
            push_line(&mut bytes, e)?;
        }
        let path = self.ended_file.path().to_path_buf();
        let written = tokio::task::spawn_blocking(move || append(&path, &bytes))
            .await
            .map_err(std::io::Error::other)?;
        *journal = written.is_ok().then_some(Journal { lines, held });
        if written.is_ok() {
            sessions.settle(&exits(&fresh));
        }
        written
    }

    /// Rewrites `ended.jsonl` to the retained ended sessions, a line each.
    async fn rewrite_ended(
        &self,
        journal: &mut Option<Journal>,
        sessions: &impl Recorded,
    ) -> std::io::Result<()> {
        let all = sessions.ended();
        let mut bytes = Vec::new();
        for e in &all {
            push_line(&mut bytes, e)?;
        }
        let file = self.ended_file.clone();
        let legacy = Self::legacy_ended_path(&self.path);
        let written = tokio::task::spawn_blocking(move || {
            file.write_bytes(&bytes)?;
            // Held in the journal now.
            match std::fs::remove_file(&legacy) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .map_err(std::io::Error::other)?;
        *journal = written.is_ok().then_some(Journal {
            lines: all.len(),
            held: all.len(),
        });
        if written.is_ok() {
            sessions.settle(&exits(&all));
        }
        written
    }

    /// Writes `procs.json`: the running sessions, and the ended ones
    /// `ended.jsonl` does not hold yet: what a spawn must have on disk
    /// before it answers, without waiting for `ended.jsonl`.
    pub async fn write_running(&self, sessions: &impl Recorded) -> std::io::Result<()> {
        let mut on_disk = self.writing_running.lock().await;
        let running = sessions.unsettled()?;
        let swap = self.running_file.clone();
        let before = on_disk.take();
        let (written, now) = tokio::task::spawn_blocking(move || {
            if let Some((mut slots, file)) = before {
                if let Some(writes) = slots.plan(&running) {
                    if writes.is_empty() {
                        return (Ok(()), Some((slots, file)));
                    }
                    match write_slots(&file, &slots, &writes) {
                        Ok(true) => return (Ok(()), Some((slots, file))),
                        // Not procs.json any more: written whole below.
                        Ok(false) => {}
                        Err(e) => return (Err(e), None),
                    }
                }
            }
            let (bytes, slots) = Slots::whole(&running);
            match swap.write_bytes_kept(&bytes) {
                Ok(file) => (Ok(()), Some((slots, file))),
                Err(e) => (Err(e), None),
            }
        })
        .await
        .map_err(std::io::Error::other)?;
        *on_disk = now;
        written
    }

    /// The ended sessions the journal (and a file from before it) holds,
    /// in the order they ended; a line that is not a record (one a crash
    /// cut short) is skipped.
    pub fn read_ended(path: &Path) -> Vec<CheckpointEntry> {
        /// The records in the order first seen, the last of each id kept.
        #[derive(Default)]
        struct Held {
            order: Vec<String>,
            by_id: std::collections::HashMap<String, CheckpointEntry>,
        }
        impl Held {
            fn take(&mut self, e: CheckpointEntry) {
                if !self.by_id.contains_key(&e.session_id) {
                    self.order.push(e.session_id.clone());
                }
                self.by_id.insert(e.session_id.clone(), e);
            }
        }
        let mut held = Held::default();
        let (legacy, _) = Self::read(&Self::legacy_ended_path(path));
        legacy.into_iter().for_each(|e| held.take(e));
        let journal = crate::atomic::read_private(&Self::ended_path(path)).unwrap_or_default();
        for line in journal.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let Ok(g) = serde_json::from_slice::<Gone>(line) {
                held.by_id.remove(&g.gone);
                continue;
            }
            match serde_json::from_slice::<CheckpointEntry>(line) {
                Ok(e) if e.exit.is_some() => held.take(e),
                _ => tracing::warn!("skipping a line of ended.jsonl that is not a record"),
            }
        }
        let Held { order, mut by_id } = held;
        order
            .into_iter()
            .filter_map(|id| by_id.remove(&id))
            .collect()
    }

    /// The recorded entries; a missing or corrupt file is empty, and
    /// entries that do not have the shape of a procd session are skipped
    /// (returned separately so the caller can drop them from the file).
    /// A file that is not a JSON array is the only record of what ran:
    /// it is moved aside (`procs.json.corrupt-<unix time>`), never
    /// overwritten by the next write.
    pub fn read(path: &Path) -> (Vec<CheckpointEntry>, usize) {
        use crate::atomic::Read;
        let values = match crate::atomic::read_json_checked::<Vec<serde_json::Value>>(path) {
            Read::Parsed(values) => values,
            Read::Missing => return (Vec::new(), 0),
            Read::Corrupt => {
                if let Err(err) = crate::atomic::move_aside(path) {
                    tracing::warn!(%err, "cannot move the corrupt checkpoint aside");
                }
                return (Vec::new(), 0);
            }
        };
        let total = values.len();
        let entries: Vec<CheckpointEntry> = values
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let skipped = total - entries.len();
        (entries, skipped)
    }
}

/// `records` as a JSON array on a line, as `write_json` makes one.
/// Writes `writes` into `file` in place, in order; false, writing
/// nothing, when `file` is not what `slots` say it is: no longer linked
/// (something replaced or removed `procs.json`) or of another length
/// (something wrote it). It is then written whole.
fn write_slots(
    file: &std::fs::File,
    slots: &Slots,
    writes: &[slots::SlotWrite],
) -> std::io::Result<bool> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let meta = file.metadata()?;
    if meta.nlink() == 0 || meta.len() != slots.file_len() {
        return Ok(false);
    }
    for (offset, bytes) in writes {
        file.write_all_at(bytes, *offset)?;
    }
    Ok(true)
}

/// The (id, `exited_at`) of each ended entry.
fn exits(entries: &[CheckpointEntry]) -> Vec<(String, String)> {
    entries
        .iter()
        .filter_map(|e| Some((e.session_id.clone(), e.exit.as_ref()?.exited_at.clone())))
        .collect()
}

/// `value` as a line of JSON at the end of `bytes`.
fn push_line<T: Serialize>(bytes: &mut Vec<u8>, value: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *bytes, value).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    Ok(())
}

/// Appends `bytes` (whole lines) to the journal at `path`, never through a
/// symlink or into anything but a regular file; if the file does not end
/// a line (a write cut short), the first line starts on a line of its own.
fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let mut last = [b'\n'];
    if meta.len() > 0 {
        file.read_exact_at(&mut last, meta.len() - 1)?;
    }
    if last[0] != b'\n' {
        file.write_all(b"\n")?;
    }
    file.write_all(bytes)
}

#[cfg(test)]
mod tests;
