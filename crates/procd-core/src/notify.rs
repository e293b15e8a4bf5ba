//! The notification queue (docs/protocol.md `drain_notifications`).
//!
//! Events wait in order until a drain consumes them. An event filed under a
//! session key is consumed only by a drain for that key (or one that owns
//! it after a key rotation); everything else stays queued, in order (fail
//! closed: an event nobody can attribute is kept, not dropped).
//!
//! The queue outlives the daemon (issue "lose nothing across a crash"):
//! every event queued and every drain is a line appended to a journal in
//! the state dir before the push returns or the drain answers, and the
//! next daemon replays it, so what was queued and not drained is drained
//! once. What a new daemon would queue again for the same thing (the
//! completion of a session whose exit it records anew, the same prompt)
//! carries a key, and a key already queued once is not queued twice.
//!
//! Every event a subscriber sees (queued or live-only: started, exited,
//! port) has a sequence number, daemon after daemon, and the last
//! `MAX_HISTORY` are kept in the journal too, so a subscriber that lost
//! its daemon asks for what came after the last number it saw
//! (`follow`) and misses nothing that is still kept.

use procd_proto::Event;
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::broadcast;

/// Oldest events are discarded past this many (a client that never drains).
const MAX_QUEUED: usize = 1000;
/// Numbered events kept for subscribers that resume (`follow`).
pub const MAX_HISTORY: usize = 1000;
/// Keys remembered (the newest): far more than events that can be queued
/// for the sessions a daemon keeps.
const MAX_SEEN: usize = 4096;
/// A journal larger than this is not procd's (1000 events of a few KiB).
const MAX_JOURNAL: u64 = 64 << 20;

pub struct NotificationQueue {
    queued: Mutex<Queued>,
    /// Every event as it is queued, plus live-only ones (started, exited,
    /// port, close_terminal), for subscribers; never consumed. The
    /// number is None only for close_terminal (a UI's, never replayed).
    live: broadcast::Sender<(Option<u64>, Event)>,
}

/// An event with its sequence number (its place in the journal).
pub type Numbered = (u64, Event);

/// What subscribers receive: an event and its number (None: a UI's
/// close_terminal, never kept).
pub type Live = broadcast::Receiver<(Option<u64>, Event)>;

/// A resumed subscription (`follow`): the kept events after the number
/// asked for, how many after it are no longer kept, and what comes next.
pub struct Resumed {
    pub kept: Vec<Numbered>,
    pub missed: u64,
    pub live: Live,
}

struct Queued {
    /// Oldest first.
    events: VecDeque<Numbered>,
    /// The last `MAX_HISTORY` numbered events, queued or live, drained or
    /// not, oldest first: what `follow` replays.
    history: VecDeque<Numbered>,
    next_seq: u64,
    /// Keys of events queued once, newest last, with a set to look them up.
    seen: VecDeque<String>,
    seen_set: HashSet<String>,
    journal: Option<Journal>,
}

/// The queue's journal file: one `Record` per line.
struct Journal {
    path: PathBuf,
    file: File,
    /// Lines in the file (compacted when far more than the queue needs).
    lines: usize,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    Queued {
        seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        event: Box<Event>,
    },
    Drained {
        seqs: Vec<u64>,
    },
    /// A live-only event (started, exited, port), kept for `follow`.
    Live {
        seq: u64,
        event: Box<Event>,
    },
    /// At the head of a compacted journal: keys of events drained already.
    Seen {
        keys: Vec<String>,
    },
}

impl Default for NotificationQueue {
    fn default() -> Self {
        NotificationQueue {
            queued: Mutex::new(Queued {
                events: VecDeque::new(),
                history: VecDeque::new(),
                // From 1, so `follow(0)` (and `procd events --since 0`)
                // means "everything kept".
                next_seq: 1,
                seen: VecDeque::new(),
                seen_set: HashSet::new(),
                journal: None,
            }),
            live: broadcast::channel(256).0,
        }
    }
}

impl NotificationQueue {
    /// A queue kept in the journal at `path`: what a previous daemon
    /// queued and nobody drained is queued again, in order. A journal that
    /// cannot be read or written leaves the queue in memory only (said in
    /// the daemon's log); a line that is not a record (torn by a kill, or
    /// planted) is skipped.
    pub fn persistent(path: &Path) -> NotificationQueue {
        let queue = NotificationQueue::default();
        {
            let mut q = queue.lock();
            if let Err(err) = q.replay(path) {
                tracing::warn!(path = %path.display(), %err, "cannot read the notification journal");
            }
            match q.compact(path) {
                Ok(journal) => q.journal = Some(journal),
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "cannot keep notifications on disk; they will not survive a crash")
                }
            }
        }
        queue
    }

    fn lock(&self) -> MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, event: Event) {
        self.push_once(None, event);
    }

    /// Queues `event` unless an event with the same `key` was queued
    /// before (by this daemon or one before it).
    pub fn push_once(&self, key: Option<String>, event: Event) {
        let mut q = self.lock();
        if key.as_ref().is_some_and(|k| q.seen_set.contains(k)) {
            return;
        }
        let seq = q.number();
        if self.live.receiver_count() > 0 {
            let _ = self.live.send((Some(seq), event.clone()));
        }
        let record = Record::Queued {
            seq,
            key,
            event: Box::new(event),
        };
        q.write(&record);
        let Record::Queued { key, event, .. } = record else {
            return;
        };
        if let Some(key) = key {
            q.remember(key);
        }
        if q.events.len() >= MAX_QUEUED {
            q.events.pop_front();
        }
        q.keep(seq, &event);
        q.events.push_back((seq, *event));
        q.tidy();
    }

    /// Removes and returns, in order, the events this drain may consume
    /// (recorded as drained before they are returned).
    pub fn drain(&self, session_key: Option<&str>, owned_keys: &[String]) -> Vec<Event> {
        let mut q = self.lock();
        let (taken, kept): (Vec<Numbered>, Vec<Numbered>) =
            q.events
                .drain(..)
                .partition(|(_, e)| match e.session_key() {
                    None => true,
                    Some(key) => session_key == Some(key) || owned_keys.iter().any(|k| k == key),
                });
        q.events.extend(kept);
        if !taken.is_empty() {
            let seqs = taken.iter().map(|(seq, _)| *seq).collect();
            q.write(&Record::Drained { seqs });
            q.tidy();
        }
        taken.into_iter().map(|(_, e)| e).collect()
    }

    /// Sends an event to live subscribers only (it is not queued, but it
    /// is numbered and kept for `follow`).
    pub fn publish(&self, event: Event) {
        let mut q = self.lock();
        let seq = q.number();
        let record = Record::Live {
            seq,
            event: Box::new(event),
        };
        q.write(&record);
        let Record::Live { event, .. } = record else {
            return;
        };
        q.keep(seq, &event);
        q.tidy();
        if self.live.receiver_count() > 0 {
            let _ = self.live.send((Some(seq), *event));
        }
    }

    /// Sends an event to the subscribers connected now, and to no one
    /// else ever (a UI's `close_terminal`).
    pub fn publish_now(&self, event: Event) {
        let _ = self.live.send((None, event));
    }

    pub fn subscribe(&self) -> Live {
        self.live.subscribe()
    }

    /// A subscription that resumes after `since`: the kept events numbered
    /// after it, then every new one (taken together, so none falls in
    /// between), and how many numbered after `since` are no longer kept.
    pub fn follow(&self, since: u64) -> Resumed {
        let q = self.lock();
        let live = self.live.subscribe();
        let kept: Vec<Numbered> = q
            .history
            .iter()
            .filter(|(seq, _)| *seq > since)
            .cloned()
            .collect();
        let first = kept.first().map_or(q.next_seq, |(seq, _)| *seq);
        let missed = first.saturating_sub(since.saturating_add(1));
        Resumed { kept, missed, live }
    }

    /// The number the next event will have.
    #[cfg(test)]
    fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    /// How many event subscribers are connected.
    pub fn subscribers(&self) -> usize {
        self.live.receiver_count()
    }

    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Queued {
    /// The next event's number.
    fn number(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Keeps a numbered event for `follow`, the newest `MAX_HISTORY`.
    fn keep(&mut self, seq: u64, event: &Event) {
        if self.history.len() >= MAX_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((seq, event.clone()));
    }

    fn remember(&mut self, key: String) {
        if self.seen_set.insert(key.clone()) {
            self.seen.push_back(key);
        }
        while self.seen.len() > MAX_SEEN {
            if let Some(old) = self.seen.pop_front() {
                self.seen_set.remove(&old);
            }
        }
    }

    /// Rebuilds the queue from the journal at `path` (absent: empty).
    fn replay(&mut self, path: &Path) -> io::Result<()> {
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        let mut drained = HashSet::new();
        let mut events = Vec::new();
        let mut history = Vec::new();
        for line in io::BufReader::new(file.take(MAX_JOURNAL)).split(b'\n') {
            match serde_json::from_slice::<Record>(&line?) {
                Ok(Record::Queued { seq, key, event }) => {
                    self.next_seq = self.next_seq.max(seq.saturating_add(1));
                    if let Some(key) = key {
                        self.remember(key);
                    }
                    history.push((seq, (*event).clone()));
                    events.push((seq, *event));
                }
                Ok(Record::Live { seq, event }) => {
                    self.next_seq = self.next_seq.max(seq.saturating_add(1));
                    history.push((seq, *event));
                }
                Ok(Record::Drained { seqs }) => drained.extend(seqs),
                Ok(Record::Seen { keys }) => keys.into_iter().for_each(|k| self.remember(k)),
                Err(_) => {} // torn by a kill mid-write, or not procd's
            }
        }
        events.retain(|(seq, _)| !drained.contains(seq));
        events.sort_by_key(|(seq, _)| *seq);
        let skip = events.len().saturating_sub(MAX_QUEUED);
        self.events = events.into_iter().skip(skip).collect();
        history.sort_by_key(|(seq, _)| *seq);
        history.dedup_by_key(|(seq, _)| *seq);
        let skip = history.len().saturating_sub(MAX_HISTORY);
        self.history = history.into_iter().skip(skip).collect();
        Ok(())
    }

    /// Writes what the queue holds as a new journal, swapped in whole, and
    /// opens it for appending.
    fn compact(&self, path: &Path) -> io::Result<Journal> {
        let mut bytes = Vec::new();
        let mut line = |record: &Record| {
            serde_json::to_writer(&mut bytes, record).map_err(io::Error::other)?;
            bytes.push(b'\n');
            Ok::<_, io::Error>(())
        };
        line(&Record::Seen {
            keys: self.seen.iter().cloned().collect(),
        })?;
        // The kept history, each event as it came (queued or live); what
        // of it was drained, after it; then queued events older than the
        // history (a queue longer than the history, nobody draining).
        let queued: HashSet<u64> = self.events.iter().map(|(seq, _)| *seq).collect();
        let oldest_kept = self.history.front().map_or(u64::MAX, |(seq, _)| *seq);
        for (seq, event) in self.events.iter().filter(|(seq, _)| *seq < oldest_kept) {
            line(&Record::Queued {
                seq: *seq,
                key: None,
                event: Box::new(event.clone()),
            })?;
        }
        let mut drained = Vec::new();
        for (seq, event) in &self.history {
            let event = Box::new(event.clone());
            if event.about().is_some() {
                if !queued.contains(seq) {
                    drained.push(*seq);
                }
                line(&Record::Queued {
                    seq: *seq,
                    key: None,
                    event,
                })?;
            } else {
                line(&Record::Live { seq: *seq, event })?;
            }
        }
        if !drained.is_empty() {
            line(&Record::Drained { seqs: drained })?;
        }
        procd_sys::atomic::write_bytes_unsynced(path, &bytes)?;
        let file = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            lines: 2 + self.events.len() + self.history.len(),
        })
    }

    /// Appends `record` to the journal (one write: a kill leaves it whole
    /// or torn, and a torn line is skipped).
    fn write(&mut self, record: &Record) {
        let Some(journal) = self.journal.as_mut() else {
            return;
        };
        let mut bytes = serde_json::to_vec(record).unwrap_or_default();
        bytes.push(b'\n');
        if let Err(err) = journal.file.write_all(&bytes) {
            tracing::warn!(path = %journal.path.display(), %err, "cannot write the notification journal; notifications will not survive a crash");
            self.journal = None;
            return;
        }
        journal.lines += 1;
    }

    /// Compacts a journal that has grown well past what the queue holds
    /// (after the queue has taken in what was just written).
    fn tidy(&mut self) {
        let Some(journal) = &self.journal else {
            return;
        };
        if journal.lines <= 2 * (self.events.len() + self.history.len()) + 256 {
            return;
        }
        let path = journal.path.clone();
        match self.compact(&path) {
            Ok(compacted) => self.journal = Some(compacted),
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "cannot compact the notification journal")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str, key: Option<&str>) -> Event {
        Event::InputWanted {
            about: procd_proto::About {
                session_id: id.into(),
                session_key: key.map(String::from),
                task_id: None,
                command: "x".into(),
                text: String::new(),
                meta: None,
            },
            prompt: String::new(),
        }
    }

    fn ids(events: Vec<Event>) -> Vec<String> {
        events
            .into_iter()
            .map(|e| e.session_id().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn the_journal_brings_back_what_was_not_drained_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifications.jsonl");
        let q = NotificationQueue::persistent(&path);
        q.push(ev("a", Some("k1")));
        q.push_once(Some("completion b".into()), ev("b", None));
        q.push(ev("c", Some("k1")));
        assert_eq!(ids(q.drain(None, &[])), ["b"]);
        drop(q);
        // A kill mid-write leaves a torn line; a planted one is no record.
        use std::io::Write;
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"queued\":{\"seq\":9,\"ev").unwrap();
        f.write_all(b"\nnot json at all\n").unwrap();
        drop(f);

        let q = NotificationQueue::persistent(&path);
        assert_eq!(q.len(), 2, "a and c, not the drained b");
        // The same cause is not queued twice, also by a later daemon.
        q.push_once(Some("completion b".into()), ev("b", None));
        assert_eq!(q.len(), 2);
        q.push(ev("d", None));
        drop(q);
        let q = NotificationQueue::persistent(&path);
        assert_eq!(ids(q.drain(Some("k1"), &[])), ["a", "c", "d"]);
        assert!(q.is_empty());
        drop(q);
        assert!(NotificationQueue::persistent(&path).is_empty());
    }

    fn port(id: &str) -> Event {
        Event::Port {
            session_id: id.into(),
            port: 1,
        }
    }

    fn followed(q: &NotificationQueue, since: u64) -> (Vec<(u64, String)>, u64) {
        let resumed = q.follow(since);
        let kept = resumed
            .kept
            .into_iter()
            .map(|(seq, e)| (seq, e.session_id().unwrap_or_default().to_string()))
            .collect();
        (kept, resumed.missed)
    }

    #[test]
    fn a_reader_resumes_after_a_number_across_daemons_and_compactions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifications.jsonl");
        let q = NotificationQueue::persistent(&path);
        q.push(ev("a", None)); // 1, queued
        q.publish(port("b")); // 2, live only
        q.push(ev("c", Some("k"))); // 3, queued for k
        q.publish_now(port("ui")); // not numbered, not kept
        assert_eq!(ids(q.drain(None, &[])), ["a"]);
        let (kept, missed) = followed(&q, 1);
        assert_eq!(kept, [(2, "b".into()), (3, "c".into())]);
        assert_eq!(missed, 0);
        assert_eq!(followed(&q, 0).0.len(), 3, "from 0: all that is kept");
        drop(q);
        // The next daemon: the same history, drained or not; numbers go on.
        let q = NotificationQueue::persistent(&path);
        assert_eq!(followed(&q, 1).0, [(2, "b".into()), (3, "c".into())]);
        assert_eq!(q.next_seq(), 4);
        assert_eq!(q.len(), 1, "only c is still queued");
        // Far more events than are kept: compactions keep the newest, the
        // queued c survives them, and a reader that asks for older ones
        // is told how many it missed.
        for _ in 0..3 * MAX_HISTORY {
            q.publish(port("p"));
        }
        drop(q);
        let q = NotificationQueue::persistent(&path);
        let (kept, missed) = followed(&q, 0);
        assert_eq!(kept.len(), MAX_HISTORY);
        assert_eq!(kept[0].0, missed + 1);
        assert_eq!(kept.last().unwrap().0, 3 + 3 * MAX_HISTORY as u64);
        assert_eq!(ids(q.drain(Some("k"), &[])), ["c"]);
        assert!(
            std::fs::metadata(&path).unwrap().len() < 4 * MAX_HISTORY as u64 * 200,
            "the journal stays bounded"
        );
    }

    #[test]
    fn a_journal_that_is_not_a_file_leaves_the_queue_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifications.jsonl");
        std::fs::create_dir(&path).unwrap();
        let q = NotificationQueue::persistent(&path);
        q.push(ev("a", None));
        assert_eq!(ids(q.drain(None, &[])), ["a"]);
        assert!(path.is_dir(), "left as it was");
    }

    #[test]
    fn keyed_events_wait_for_their_owner_in_order() {
        let q = NotificationQueue::default();
        q.push(ev("a", Some("k1")));
        q.push(ev("b", Some("k2")));
        q.push(ev("c", None));
        q.push(ev("d", Some("k1")));
        q.push(ev("e", Some("old")));
        let got: Vec<String> = q
            .drain(Some("k1"), &[])
            .into_iter()
            .map(|e| e.session_id().unwrap_or_default().to_string())
            .collect();
        assert_eq!(got, ["a", "c", "d"]);
        let got: Vec<String> = q
            .drain(Some("k3"), &["old".to_string()])
            .into_iter()
            .map(|e| e.session_id().unwrap_or_default().to_string())
            .collect();
        assert_eq!(got, ["e"]);
        assert_eq!(q.len(), 1);
        assert_eq!(
            q.drain(None, &[])[..].len(),
            0,
            "a keyless drain takes no keyed event"
        );
        assert_eq!(q.drain(Some("k2"), &[])[0].session_id(), Some("b"));
    }
}
