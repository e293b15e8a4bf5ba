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
/// Keys remembered (the newest): far more than events that can be queued
/// for the sessions a daemon keeps.
const MAX_SEEN: usize = 4096;
/// A journal larger than this is not procd's (1000 events of a few KiB).
const MAX_JOURNAL: u64 = 64 << 20;

pub struct NotificationQueue {
    queued: Mutex<Queued>,
    /// Every event as it is queued, plus live-only ones (started, exited,
    /// port, close_terminal), for subscribers; never consumed.
    live: broadcast::Sender<Event>,
}

/// An event with its sequence number (its place in the journal).
type Numbered = (u64, Event);

struct Queued {
    /// Oldest first.
    events: VecDeque<Numbered>,
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
                next_seq: 0,
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
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(event.clone());
        }
        let seq = q.next_seq;
        q.next_seq += 1;
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

    /// Sends an event to live subscribers only (it is not queued).
    pub fn publish(&self, event: Event) {
        let _ = self.live.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.live.subscribe()
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
        for line in io::BufReader::new(file.take(MAX_JOURNAL)).split(b'\n') {
            match serde_json::from_slice::<Record>(&line?) {
                Ok(Record::Queued { seq, key, event }) => {
                    self.next_seq = self.next_seq.max(seq + 1);
                    if let Some(key) = key {
                        self.remember(key);
                    }
                    events.push((seq, *event));
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
        for (seq, event) in &self.events {
            line(&Record::Queued {
                seq: *seq,
                key: None,
                event: Box::new(event.clone()),
            })?;
        }
        procd_sys::atomic::write_bytes_unsynced(path, &bytes)?;
        let file = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            lines: 1 + self.events.len(),
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
        if journal.lines <= 2 * self.events.len() + 256 {
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
