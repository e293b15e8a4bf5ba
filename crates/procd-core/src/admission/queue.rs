//! Spawn queues (docs/queues.md): a spawn naming a queue runs at once if
//! one of the queue's slots is free and nobody waits before it, and is
//! otherwise accepted as `queued` and started, first in first out, when a
//! slot frees (and, for a queue with `max_memory_pressure`, while memory
//! pressure is low enough).
//!
//! This file is the queues' bookkeeping only: who waits where, who holds
//! a slot, what is written to disk. Starting a spawn is the registry's
//! (`registry/queue.rs`).

use procd_proto::config::{Config, QueueConfig};
use procd_proto::{QueueInfo, QueueName, SpawnParams};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{watch, Notify};

/// Where memory pressure is read (PSI, "some avg10").
const PSI_MEMORY: &str = "/proc/pressure/memory";

/// What a queued spawn will be started with: the spawn as asked, kept in
/// memory and, as a sealed memfd, by the keeper (its env may hold
/// secrets: never on disk).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct QueuedAsk {
    pub params: SpawnParams,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_file: Option<PathBuf>,
}

/// The largest queued spawn read back from the keeper (a request is at
/// most 1 MiB).
const MAX_ASK_BYTES: u64 = 4 << 20;

impl QueuedAsk {
    pub fn to_memfd(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        procd_sys::memfd::sealed("procd-queued", &bytes)
    }

    pub fn from_memfd(fd: impl std::os::fd::AsFd) -> std::io::Result<QueuedAsk> {
        let bytes = procd_sys::memfd::read_sealed(fd, MAX_ASK_BYTES)?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }
}

/// Where a queued spawn stands.
#[derive(Debug, Clone)]
pub enum QueuedState {
    /// In its queue (or being started: `Queues::starting`).
    Waiting,
    /// Started as this session id.
    Started(String),
    /// Taken out by a kill (or its owner's end) before it started.
    Removed,
    /// Its start failed: the error, in words.
    Failed(String),
}

/// One spawn waiting for a slot.
pub struct Queued {
    /// The session id it will run under, given when it was queued.
    pub id: String,
    pub queue: QueueName,
    pub ask: QueuedAsk,
    /// Its command as callers see it (redacted).
    pub shown_command: String,
    pub queued_at: SystemTime,
    pub queued_instant: Instant,
    /// Waiting until it starts, is removed or fails; waiters follow it.
    pub state: watch::Sender<QueuedState>,
}

impl Queued {
    pub fn new(id: String, queue: QueueName, ask: QueuedAsk, shown_command: String) -> Queued {
        Queued {
            id,
            queue,
            ask,
            shown_command,
            queued_at: SystemTime::now(),
            queued_instant: Instant::now(),
            state: watch::channel(QueuedState::Waiting).0,
        }
    }

    /// A spawn a previous daemon queued, waiting since `queued_at`.
    pub fn recovered(
        id: String,
        queue: QueueName,
        ask: QueuedAsk,
        shown_command: String,
        queued_at: SystemTime,
    ) -> Queued {
        let waited = SystemTime::now()
            .duration_since(queued_at)
            .unwrap_or_default();
        Queued {
            queued_at,
            queued_instant: Instant::now()
                .checked_sub(waited)
                .unwrap_or_else(Instant::now),
            ..Queued::new(id, queue, ask, shown_command)
        }
    }

    pub fn waited(&self) -> Duration {
        self.queued_instant.elapsed()
    }

    /// Owned by `owner` (a lease), a task or a session key: what a kill
    /// of many, or a lease's end, matches it by.
    pub fn params(&self) -> &SpawnParams {
        &self.ask.params
    }
}

/// The record of a queued spawn in `queue.json`: what the next daemon
/// needs to put it back in its place, the rest being the keeper's memfd.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct QueuedRecord {
    pub session_id: String,
    pub queue: String,
    pub queued_at: String,
    /// Redacted (shown only).
    pub command: String,
}

/// One queue: its sessions holding slots and its spawns waiting.
#[derive(Default)]
struct Line {
    running: usize,
    waiting: VecDeque<Arc<Queued>>,
}

#[derive(Default)]
struct State {
    lines: BTreeMap<QueueName, Line>,
    /// Every queued spawn by id, the ones being started included (they
    /// are out of their line but not yet sessions).
    by_id: HashMap<String, Arc<Queued>>,
    /// The last pressure read, and the queue it held back, for the words.
    pressure: Option<f64>,
}

struct Shared {
    state: Mutex<State>,
    /// Woken when a slot frees, a spawn is queued or the monitor ticks
    /// while pressure holds a queue: the registry's starter waits on it.
    wake: Arc<Notify>,
}

/// Every queue of the daemon.
pub struct Queues {
    config: BTreeMap<String, QueueConfig>,
    default_slots: usize,
    max_queued: usize,
    pressure_file: PathBuf,
    /// Where the queue's order is kept for the next daemon.
    file: Option<PathBuf>,
    /// Whose tokens, less those it has given out, are the `jobserver`
    /// queue's slots (`admission/jobserver.rs`).
    jobserver: Option<Arc<crate::admission::jobserver::JobServer>>,
    /// One write of the file at a time, each of the state as it is then.
    writing: Mutex<()>,
    shared: Arc<Shared>,
}

/// A queue slot, held by a session from its start to its end (through
/// its restarts); given back on drop, exactly once, waking the starter.
pub struct QueueSlot {
    shared: Arc<Shared>,
    queue: QueueName,
}

impl std::fmt::Debug for QueueSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueueSlot({})", self.queue)
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(line) = state.lines.get_mut(&self.queue) {
            line.running = line.running.saturating_sub(1);
        }
        drop(state);
        self.shared.wake.notify_one();
    }
}

/// What `Queues::admit` decided.
pub enum Admission {
    /// A slot was free and nobody waited: start now, holding it.
    Now(QueueSlot),
    /// Queued, at this place (1 first).
    Queued(u64),
}

impl Queues {
    /// `file`: `queue.json` in the state dir (None: nothing survives).
    pub fn new(config: &Config, file: Option<PathBuf>) -> Queues {
        let pressure_file = match &config.test_memory_pressure_file {
            Some(path) if cfg!(debug_assertions) => path.clone(),
            _ => PathBuf::from(PSI_MEMORY),
        };
        Queues {
            config: config.queue.clone(),
            default_slots: config.queue_slots,
            max_queued: config.max_queued,
            pressure_file,
            file,
            jobserver: None,
            writing: Mutex::new(()),
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                wake: Arc::new(Notify::new()),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the `jobserver` queue's slots the jobserver's tokens less
    /// those it has given out.
    pub fn with_jobserver(mut self, js: Arc<crate::admission::jobserver::JobServer>) -> Queues {
        self.jobserver = Some(js);
        self
    }

    fn slots(&self, queue: &QueueName) -> usize {
        if let (Some(js), true) = (
            &self.jobserver,
            queue.as_str() == crate::admission::jobserver::QUEUE,
        ) {
            return js.tokens().saturating_sub(js.given());
        }
        self.config
            .get(queue.as_str())
            .map_or(self.default_slots, |c| c.slots)
    }

    fn max_pressure(&self, queue: &QueueName) -> Option<f64> {
        self.config
            .get(queue.as_str())
            .and_then(|c| c.max_memory_pressure)
    }

    /// What the registry's starter waits on (a permit is kept if none
    /// waits, so no wake-up falls between its look and its wait).
    pub fn waker(&self) -> Arc<Notify> {
        self.shared.wake.clone()
    }

    /// Wakes the starter (a slot it does not see freed: a running slot).
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Takes a slot now if one is free, no one waits before it and
    /// pressure allows; else queues `make()`'s spawn at the end. The
    /// check and the queueing are one step, so two spawns cannot both
    /// take the last slot or pass one that waits.
    pub fn admit(
        &self,
        queue: &QueueName,
        make: impl FnOnce() -> Arc<Queued>,
    ) -> Result<Admission, String> {
        let pressure = self.pressure_over(queue);
        let mut state = self.state();
        // Read under the lock: the jobserver gives tokens out under it
        // too (`under_line`), so a slot and a token are never one.
        let slots = self.slots(queue);
        let queued = state.by_id.len();
        let line = state.lines.entry(queue.clone()).or_default();
        if line.waiting.is_empty() && line.running < slots && pressure.is_none() {
            line.running += 1;
            return Ok(Admission::Now(QueueSlot {
                shared: self.shared.clone(),
                queue: queue.clone(),
            }));
        }
        if queued >= self.max_queued {
            return Err(format!(
                "max_queued ({}) spawns are queued already; kill one first",
                self.max_queued
            ));
        }
        let entry = make();
        line.waiting.push_back(entry.clone());
        let place = line.waiting.len() as u64;
        state.by_id.insert(entry.id.clone(), entry);
        Ok(Admission::Queued(place))
    }

    /// A slot regardless of the limit: a session a previous daemon started
    /// from this queue holds one whether or not there is room.
    pub fn hold(&self, queue: &QueueName) -> QueueSlot {
        self.state().lines.entry(queue.clone()).or_default().running += 1;
        QueueSlot {
            shared: self.shared.clone(),
            queue: queue.clone(),
        }
    }

    /// Puts back a spawn a previous daemon queued, at the end of its line
    /// (records are read in their order).
    pub fn restore(&self, entry: Arc<Queued>) {
        let mut state = self.state();
        state
            .lines
            .entry(entry.queue.clone())
            .or_default()
            .waiting
            .push_back(entry.clone());
        state.by_id.insert(entry.id.clone(), entry);
    }

    /// The next spawn to start, with the slot it takes, if a queue has
    /// both. It stays findable by id until `done`.
    pub fn next_to_start(&self) -> Option<(Arc<Queued>, QueueSlot)> {
        let names: Vec<QueueName> = self.state().lines.keys().cloned().collect();
        for queue in names {
            let pressure = self.pressure_over(&queue);
            let mut state = self.state();
            let slots = self.slots(&queue);
            let Some(line) = state.lines.get_mut(&queue) else {
                continue;
            };
            if line.running < slots && pressure.is_none() {
                if let Some(entry) = line.waiting.pop_front() {
                    line.running += 1;
                    return Some((
                        entry,
                        QueueSlot {
                            shared: self.shared.clone(),
                            queue,
                        },
                    ));
                }
            }
        }
        None
    }

    /// Puts a spawn that could not start yet back first in its line.
    pub fn put_back(&self, entry: Arc<Queued>) {
        let mut state = self.state();
        let line = state.lines.entry(entry.queue.clone()).or_default();
        line.waiting.push_front(entry);
    }

    /// A spawn's start is over (`state` says how): no longer queued.
    pub fn done(&self, entry: &Queued, state: QueuedState) {
        self.state().by_id.remove(&entry.id);
        entry.state.send_replace(state);
    }

    /// Takes a waiting spawn out of its line (a kill): true if it was
    /// there; one being started is not (its kill waits for the session).
    pub fn remove(&self, id: &str) -> Option<Arc<Queued>> {
        let mut state = self.state();
        let entry = state.by_id.get(id)?.clone();
        let line = state.lines.get_mut(&entry.queue)?;
        let at = line.waiting.iter().position(|e| e.id == id)?;
        line.waiting.remove(at);
        state.by_id.remove(id);
        drop(state);
        entry.state.send_replace(QueuedState::Removed);
        Some(entry)
    }

    pub fn find(&self, id: &str) -> Option<Arc<Queued>> {
        self.state().by_id.get(id).cloned()
    }

    /// Every queued spawn, in each queue's order, queue by queue.
    pub fn all(&self) -> Vec<Arc<Queued>> {
        let state = self.state();
        let mut all: Vec<Arc<Queued>> = state
            .lines
            .values()
            .flat_map(|l| l.waiting.iter().cloned())
            .collect();
        // Ones being started are out of their lines but still queued.
        let starting = state
            .by_id
            .values()
            .filter(|e| !all.iter().any(|a| a.id == e.id));
        let starting: Vec<Arc<Queued>> = starting.cloned().collect();
        all.extend(starting);
        all
    }

    /// Runs `f` with a queue's sessions holding slots and its spawns
    /// waiting, under the lock that admits spawns: what `f` decides from
    /// them holds until it returns.
    pub fn under_line<R>(&self, queue: &str, f: impl FnOnce(usize, usize) -> R) -> R {
        let state = self.state();
        let line = state.lines.iter().find(|(name, _)| name.as_str() == queue);
        let (running, waiting) = line.map_or((0, 0), |(_, l)| (l.running, l.waiting.len()));
        f(running, waiting)
    }

    pub fn is_empty(&self) -> bool {
        self.state().by_id.is_empty()
    }

    /// A queued spawn's place and why it waits, as callers see it.
    pub fn info(&self, entry: &Queued) -> QueueInfo {
        let slots = self.slots(&entry.queue);
        let limit = self.max_pressure(&entry.queue);
        let state = self.state();
        let line = state.lines.get(&entry.queue);
        let position = line
            .and_then(|l| l.waiting.iter().position(|e| e.id == entry.id))
            .map(|at| at as u64 + 1);
        let waiting = match (position, line) {
            (None, _) => "starting".to_string(),
            (Some(_), Some(l)) if l.running >= slots => {
                format!("{} of {slots} slots taken", l.running)
            }
            (Some(1), _) => match (state.pressure, limit) {
                (Some(p), Some(max)) if p > max => {
                    format!("memory pressure {p:.1}% > {max}%: waiting")
                }
                _ => "about to start".to_string(),
            },
            (Some(_), _) => "behind the ones before it".to_string(),
        };
        QueueInfo {
            name: entry.queue.to_string(),
            position,
            queued_ms: entry.waited().as_millis() as u64,
            waiting: Some(waiting),
        }
    }

    /// Memory pressure, if `queue` has a limit and pressure is above it.
    fn pressure_over(&self, queue: &QueueName) -> Option<f64> {
        let max = self.max_pressure(queue)?;
        let now = read_pressure(&self.pressure_file)?;
        let mut state = self.state();
        state.pressure = Some(now);
        (now > max).then_some(now)
    }

    /// Whether a queue waits on pressure (the monitor's tick then wakes
    /// the starter, which reads it again).
    pub fn held_by_pressure(&self) -> bool {
        let state = self.state();
        state
            .lines
            .iter()
            .any(|(name, line)| !line.waiting.is_empty() && self.max_pressure(name).is_some())
    }

    /// Writes `queue.json` as the queues are now (blocking: call it off
    /// the event loop). Each write is of the state at its own time, so
    /// the last one to finish holds the latest.
    pub fn write(&self) -> std::io::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let _one = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let records: Vec<QueuedRecord> = self
            .all()
            .iter()
            .map(|e| QueuedRecord {
                session_id: e.id.clone(),
                queue: e.queue.to_string(),
                queued_at: procd_sys::clock::rfc3339(e.queued_at),
                command: e.shown_command.clone(),
            })
            .collect();
        procd_sys::atomic::write_json(path, &records)
    }

    /// The records a previous daemon left, in order (a corrupt file is
    /// moved aside and read as none).
    pub fn read_records(path: &Path) -> Vec<QueuedRecord> {
        use procd_sys::atomic::{move_aside, read_json_checked, Read};
        match read_json_checked::<Vec<QueuedRecord>>(path) {
            Read::Parsed(records) => records,
            Read::Missing => Vec::new(),
            Read::Corrupt => {
                let _ = move_aside(path);
                Vec::new()
            }
        }
    }

    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

/// PSI's "some avg10" from `path`, a percentage.
fn read_pressure(path: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_pressure(&text)
}

fn parse_pressure(text: &str) -> Option<f64> {
    let some = text.lines().find(|l| l.starts_with("some "))?;
    let avg10 = some
        .split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?;
    avg10.parse().ok().filter(|p: &f64| p.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> QueueName {
        QueueName::parse(s).unwrap()
    }

    fn entry(id: &str, queue: &str) -> Arc<Queued> {
        Arc::new(Queued::new(
            id.into(),
            name(queue),
            QueuedAsk {
                params: SpawnParams::default(),
                stack_file: None,
            },
            "true".into(),
        ))
    }

    #[test]
    fn psi_lines_are_read() {
        let text = "some avg10=34.50 avg60=1.00 avg300=0.00 total=1\nfull avg10=2.00 avg60=0 avg300=0 total=0\n";
        assert_eq!(parse_pressure(text), Some(34.5));
        assert_eq!(parse_pressure("full avg10=1.0"), None);
        assert_eq!(parse_pressure("some avg10=nan"), None);
    }

    #[test]
    fn a_queue_runs_its_slots_and_then_in_order() {
        let mut config = Config::default();
        config.queue.insert(
            "build".into(),
            QueueConfig {
                slots: 2,
                max_memory_pressure: None,
                cpu_weight: None,
                io_weight: None,
            },
        );
        let q = Queues::new(&config, None);
        let build = name("build");
        let mut held = Vec::new();
        let mut places = Vec::new();
        for i in 0..5 {
            match q
                .admit(&build, || entry(&format!("proc_{i}"), "build"))
                .unwrap()
            {
                Admission::Now(slot) => held.push(slot),
                Admission::Queued(place) => places.push(place),
            }
        }
        assert_eq!(held.len(), 2);
        assert_eq!(places, [1, 2, 3]);
        assert!(q.next_to_start().is_none(), "both slots are held");
        assert_eq!(
            q.remove("proc_3").map(|e| e.id.clone()),
            Some("proc_3".into())
        );
        drop(held.pop());
        let (next, slot) = q.next_to_start().expect("a slot freed");
        assert_eq!(next.id, "proc_2");
        q.done(&next, QueuedState::Started(next.id.clone()));
        assert!(q.next_to_start().is_none());
        drop(slot);
        let (next, _slot) = q.next_to_start().expect("a slot freed");
        assert_eq!(next.id, "proc_4", "the removed one never starts");
    }

    #[test]
    fn queues_made_on_first_use_have_the_default_slots() {
        let q = Queues::new(&Config::default(), None);
        let test = name("test");
        let first = q.admit(&test, || entry("proc_a", "test")).unwrap();
        assert!(matches!(first, Admission::Now(_)));
        let second = q.admit(&test, || entry("proc_b", "test")).unwrap();
        assert!(matches!(second, Admission::Queued(1)));
        let other = q.admit(&name("lint"), || entry("proc_c", "lint")).unwrap();
        assert!(matches!(other, Admission::Now(_)), "queues are separate");
    }
}
