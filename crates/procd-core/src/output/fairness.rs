//! Flood fairness (docs/SECURITY.md): sessions that write faster than the daemon
//! should store must not take the daemon.
//!
//! Output is counted per session in short windows. A session that writes
//! more than `FLOOD_BYTES` in a window is flooding. While two or more
//! sessions flood, together they may store `SHARED_BYTES` per window in
//! equal shares; a session past its share is not read until the window
//! ends, so its writer blocks on the full pipe, as on a slow terminal, and
//! nothing is lost. A lone flood is not held back (one session's ingest
//! runs at pipe speed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_millis(20);
/// More than this in one window (~25 MB/s) is a flood.
const FLOOD_BYTES: u64 = 512 * 1024;
/// What all floods together may store per window (~128 MB/s).
const SHARED_BYTES: u64 = 2560 * 1024;

#[derive(Default)]
struct Windows {
    start: Option<Instant>,
    /// Which window this is (counts up).
    epoch: u64,
    /// By session: the window its count is for, and the bytes stored in it.
    bytes: HashMap<String, (u64, u64)>,
    /// Sessions flooding in this window, and in the previous one.
    flooding: usize,
    flooded_before: usize,
}

static WINDOWS: Mutex<Option<Windows>> = Mutex::new(None);

/// Counts `n` bytes stored for `session`; returns when it may be read again
/// if it has used up its share (None: read on). Constant work per call: it
/// runs after every read of every session.
pub fn charge(session: &str, n: usize, now: Instant) -> Option<Instant> {
    WINDOWS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Windows::default)
        .charge(session, n, now)
}

impl Windows {
    fn charge(&mut self, session: &str, n: usize, now: Instant) -> Option<Instant> {
        let start = *self.start.get_or_insert(now);
        if now.duration_since(start) >= WINDOW {
            self.epoch += 1;
            self.flooded_before = self.flooding;
            self.flooding = 0;
            self.start = Some(now);
            // Forget sessions that stored nothing last window (ended ones).
            let recent = self.epoch - 1;
            self.bytes.retain(|_, (epoch, _)| *epoch >= recent);
        }
        let start = self.start.unwrap_or(now);
        let epoch = self.epoch;
        let entry = match self.bytes.get_mut(session) {
            Some(entry) => entry,
            None => self.bytes.entry(session.to_string()).or_insert((epoch, 0)),
        };
        if entry.0 != epoch {
            *entry = (epoch, 0);
        }
        let before = entry.1;
        entry.1 += n as u64;
        let used = entry.1;
        if before <= FLOOD_BYTES && used > FLOOD_BYTES {
            self.flooding += 1;
        }
        let floods = self.flooding.max(self.flooded_before);
        if floods < 2 {
            return None;
        }
        let share = SHARED_BYTES / floods as u64;
        (used > share).then_some(start + WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_flood_runs_free_and_floods_share() {
        let mut w = Windows::default();
        let t0 = Instant::now();
        for _ in 0..100 {
            assert!(w.charge("lone", 1 << 20, t0).is_none(), "alone: never held");
        }
        let t1 = t0 + WINDOW * 3;
        assert!(w.charge("a", 600 << 10, t1).is_none());
        assert!(w.charge("b", 600 << 10, t1).is_none(), "within its share");
        let resume = w.charge("a", 1 << 20, t1).expect("a is past its half");
        assert_eq!(resume, t1 + WINDOW);
        assert!(
            w.charge("quiet", 100, t1).is_none(),
            "a quiet session is never held"
        );
        assert!(
            w.charge("a", 1 << 10, t1 + WINDOW).is_none(),
            "a new window"
        );
    }
}
