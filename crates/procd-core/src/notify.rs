//! The notification queue (SPEC §4.4, §3.1 `drain_notifications`).
//!
//! Events wait in order until a drain consumes them. An event filed under a
//! session key is consumed only by a drain for that key (or one that owns
//! it after a key rotation); everything else stays queued, in order (fail
//! closed: an event nobody can attribute is kept, not dropped).

use procd_proto::Event;
use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::broadcast;

/// Oldest events are discarded past this many (a client that never drains).
const MAX_QUEUED: usize = 1000;

pub struct NotificationQueue {
    queue: Mutex<VecDeque<Event>>,
    /// Every event as it is queued, plus live-only ones (started, exited,
    /// port, close_terminal), for subscribers; never consumed.
    live: broadcast::Sender<Event>,
}

impl Default for NotificationQueue {
    fn default() -> Self {
        NotificationQueue {
            queue: Mutex::new(VecDeque::new()),
            live: broadcast::channel(256).0,
        }
    }
}

impl NotificationQueue {
    pub fn push(&self, event: Event) {
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(event.clone());
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.len() >= MAX_QUEUED {
            queue.pop_front();
        }
        queue.push_back(event);
    }

    /// Removes and returns, in order, the events this drain may consume.
    pub fn drain(&self, session_key: Option<&str>, owned_keys: &[String]) -> Vec<Event> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (taken, kept): (Vec<Event>, Vec<Event>) =
            queue.drain(..).partition(|e| match e.session_key() {
                None => true,
                Some(key) => session_key == Some(key) || owned_keys.iter().any(|k| k == key),
            });
        queue.extend(kept);
        taken
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
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
