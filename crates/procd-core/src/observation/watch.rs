//! Watch patterns (docs/protocol.md): plain substrings matched against whole
//! output lines. A line split across reads is joined before matching. Each
//! pattern is rate-limited (matches inside `min_interval` are suppressed and
//! counted into the next delivery); after `max_deliveries` the matcher
//! disables itself and says so once.
//!
//! A match is delivered with the lines that follow it (up to 20). Those
//! usually arrive in the same read, but a line-buffered writer (bash's
//! `printf`, most loggers) writes line by line and the reader may run in
//! between; so a match lingers [`LINGER`] collecting following lines, and is
//! delivered when it has all 20, when the linger ends, or at end of output.
//! The supervisor sleeps until [`WatchMatcher::deadline`]; no polling.

use std::time::{Duration, Instant};

/// Following lines delivered with a match, and the text cap.
const FOLLOWING_LINES: usize = 20;
const OUTPUT_CHARS: usize = 2000;
/// A "line" longer than this is matched as it stands (bounds memory).
const MAX_PARTIAL: usize = 64 * 1024;
/// How long a match waits for its following lines. Short against an
/// agent's turn, long against the gap between two writes of one burst.
pub const LINGER: Duration = Duration::from_millis(100);

/// The watch breaker across all sessions, beside each pattern's own
/// limit (as hermes-agent's): more than `BREAKER_MAX` matches delivered
/// within `BREAKER_WINDOW` open it, and for `BREAKER_PAUSE` no match is
/// delivered; the first one after says how many were held.
pub const BREAKER_MAX: usize = 15;
pub const BREAKER_WINDOW: Duration = Duration::from_secs(10);
pub const BREAKER_PAUSE: Duration = Duration::from_secs(30);

/// What the breaker says of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it; `held` were held since the last delivery (to say so).
    Pass { held: u32 },
    /// This one opened the breaker: hold it (and say once that it opened).
    Trip,
    /// Held while the breaker is open.
    Hold,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    max: usize,
    window: Duration,
    pause: Duration,
    recent: std::collections::VecDeque<Instant>,
    open_until: Option<Instant>,
    held: u32,
}

impl Default for Breaker {
    /// The watch breaker's numbers.
    fn default() -> Breaker {
        Breaker::new(BREAKER_MAX, BREAKER_WINDOW, BREAKER_PAUSE)
    }
}

impl Breaker {
    /// More than `max` deliveries within `window` open it for `pause`.
    pub fn new(max: usize, window: Duration, pause: Duration) -> Breaker {
        Breaker {
            max,
            window,
            pause,
            recent: std::collections::VecDeque::new(),
            open_until: None,
            held: 0,
        }
    }

    pub fn judge(&mut self, now: Instant) -> Verdict {
        if let Some(until) = self.open_until {
            if now < until {
                self.held += 1;
                return Verdict::Hold;
            }
            self.open_until = None;
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.max {
            self.open_until = Some(now + self.pause);
            self.held += 1;
            return Verdict::Trip;
        }
        self.recent.push_back(now);
        Verdict::Pass {
            held: std::mem::take(&mut self.held),
        }
    }

    /// Whether a match may be delivered now: `Some(held)` (the matches
    /// held since the last delivery, to say so), or None to hold it.
    pub fn admit(&mut self, now: Instant) -> Option<u32> {
        match self.judge(now) {
            Verdict::Pass { held } => Some(held),
            Verdict::Trip | Verdict::Hold => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchOutcome {
    Match {
        pattern: String,
        /// The matching line and up to 20 following lines.
        output: String,
        /// Matches of this pattern suppressed since its last delivery.
        suppressed: u32,
    },
    /// The delivery cap was reached; nothing more will be matched.
    Disabled { deliveries: u32 },
}

struct Pattern {
    text: String,
    last_delivery: Option<Instant>,
    suppressed: u32,
}

/// A match waiting for its following lines.
struct Pending {
    pattern: String,
    suppressed: u32,
    /// The matching line, then the following ones.
    lines: Vec<String>,
    chars: usize,
    due: Instant,
}

impl Pending {
    fn complete(&self) -> bool {
        self.lines.len() > FOLLOWING_LINES || self.chars >= OUTPUT_CHARS
    }

    fn push(&mut self, line: &str) {
        if !self.complete() {
            self.chars += line.chars().count() + usize::from(!self.lines.is_empty());
            self.lines.push(line.to_string());
        }
    }

    fn into_outcome(self) -> WatchOutcome {
        WatchOutcome::Match {
            pattern: self.pattern,
            output: crate::output::text::first_chars(&self.lines.join("\n"), OUTPUT_CHARS)
                .to_string(),
            suppressed: self.suppressed,
        }
    }
}

pub struct WatchMatcher {
    patterns: Vec<Pattern>,
    partial: Vec<u8>,
    /// Oldest first, so deadlines are in order.
    pending: Vec<Pending>,
    deliveries: u32,
    max_deliveries: u32,
    min_interval: Duration,
    /// No more matching (the cap was reached); pending matches still finish.
    disabled: bool,
    /// The `Disabled` outcome has been returned.
    announced: bool,
}

impl WatchMatcher {
    /// None when there is nothing to watch.
    pub fn new(patterns: &[String], min_interval: Duration, max_deliveries: u32) -> Option<Self> {
        if patterns.is_empty() {
            return None;
        }
        Some(WatchMatcher {
            patterns: patterns
                .iter()
                .map(|p| Pattern {
                    text: p.clone(),
                    last_delivery: None,
                    suppressed: 0,
                })
                .collect(),
            partial: Vec::new(),
            pending: Vec::new(),
            deliveries: 0,
            max_deliveries,
            min_interval,
            disabled: false,
            announced: false,
        })
    }

    /// When the oldest pending match must be delivered, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.first().map(|p| p.due)
    }

    /// Feeds stored output; returns what should be delivered now.
    pub fn feed(&mut self, chunk: &[u8], now: Instant) -> Vec<WatchOutcome> {
        if self.announced {
            return Vec::new();
        }
        self.partial.extend_from_slice(chunk);
        let complete = match self.partial.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if self.partial.len() > MAX_PARTIAL => self.partial.len(),
            None => return self.expire(now),
        };
        let text: Vec<u8> = self.partial.drain(..complete).collect();
        for raw in text.split_inclusive(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(trim_eol(raw));
            for p in &mut self.pending {
                p.push(&line);
            }
            if !self.disabled {
                self.match_line(&line, now);
            }
        }
        let mut out = self.take_pending(|p| p.complete() || p.due <= now);
        self.announce(&mut out);
        out
    }

    /// Delivers the matches whose linger has ended.
    pub fn expire(&mut self, now: Instant) -> Vec<WatchOutcome> {
        let mut out = self.take_pending(|p| p.due <= now);
        self.announce(&mut out);
        out
    }

    /// End of output: the last line without a newline still counts, and
    /// every pending match is delivered as it stands.
    pub fn finish(&mut self, now: Instant) -> Vec<WatchOutcome> {
        if self.announced {
            return Vec::new();
        }
        let mut out = if self.partial.is_empty() {
            Vec::new()
        } else {
            self.feed(b"\n", now)
        };
        out.extend(self.take_pending(|_| true));
        self.announce(&mut out);
        out
    }

    fn match_line(&mut self, line: &str, now: Instant) {
        for p in &mut self.patterns {
            if self.disabled || !contains(line, &p.text) {
                continue;
            }
            if p.last_delivery
                .is_some_and(|t| now.duration_since(t) < self.min_interval)
            {
                p.suppressed += 1;
                continue;
            }
            p.last_delivery = Some(now);
            self.pending.push(Pending {
                pattern: p.text.clone(),
                suppressed: std::mem::take(&mut p.suppressed),
                lines: vec![line.to_string()],
                chars: line.chars().count(),
                due: now + LINGER,
            });
            self.deliveries += 1;
            if self.deliveries >= self.max_deliveries {
                self.disabled = true;
            }
        }
    }

    fn take_pending(&mut self, ready: impl Fn(&Pending) -> bool) -> Vec<WatchOutcome> {
        let (done, kept): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(ready);
        self.pending = kept;
        done.into_iter().map(Pending::into_outcome).collect()
    }

    /// Once the cap is reached and its last match is out, says so once.
    fn announce(&mut self, out: &mut Vec<WatchOutcome>) {
        if self.disabled && self.pending.is_empty() && !self.announced {
            self.announced = true;
            self.partial = Vec::new();
            out.push(WatchOutcome::Disabled {
                deliveries: self.deliveries,
            });
        }
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let mut t = line;
    while let [rest @ .., b'\n' | b'\r'] = t {
        t = rest;
    }
    t
}

fn contains(haystack: &str, needle: &str) -> bool {
    !needle.is_empty() && haystack.contains(needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_holds_matches_past_its_rate_and_counts_them() {
        let mut b = Breaker::default();
        let t0 = Instant::now();
        for _ in 0..BREAKER_MAX {
            assert_eq!(b.admit(t0), Some(0));
        }
        assert_eq!(b.admit(t0), None, "the 16th within the window opens it");
        assert_eq!(b.admit(t0 + BREAKER_WINDOW * 2), None, "held while open");
        assert_eq!(
            b.admit(t0 + BREAKER_PAUSE),
            Some(2),
            "then it says how many"
        );
        assert_eq!(b.admit(t0 + BREAKER_PAUSE), Some(0));
    }

    fn matcher(max: u32) -> WatchMatcher {
        WatchMatcher::new(&["ready".to_string()], Duration::from_secs(15), max).unwrap()
    }

    fn ready(suppressed: u32, output: &str) -> WatchOutcome {
        WatchOutcome::Match {
            pattern: "ready".into(),
            output: output.into(),
            suppressed,
        }
    }

    #[test]
    fn a_line_split_across_reads_matches_once_complete() {
        let mut m = matcher(8);
        let t = Instant::now();
        assert!(m.feed(b"server re", t).is_empty());
        assert!(m.feed(b"ady on :3000\r\nnext line\n", t).is_empty());
        assert_eq!(m.deadline(), Some(t + LINGER));
        assert_eq!(
            m.expire(t + LINGER),
            vec![ready(0, "server ready on :3000\nnext line")]
        );
        assert_eq!(m.deadline(), None);
    }

    #[test]
    fn following_lines_written_separately_are_collected_until_the_linger_ends() {
        let mut m = matcher(8);
        let t = Instant::now();
        assert!(m.feed(b"listening, ready\n", t).is_empty());
        assert!(m.feed(b"pid 42\n", t + LINGER / 2).is_empty());
        assert!(m.expire(t + LINGER / 2).is_empty());
        let late = t + LINGER * 2;
        assert_eq!(
            m.feed(b"late\n", late),
            vec![ready(0, "listening, ready\npid 42\nlate")],
            "a read after the deadline still joins the match it ends"
        );
    }

    #[test]
    fn twenty_following_lines_deliver_at_once() {
        let mut m = matcher(8);
        let t = Instant::now();
        let mut text = String::from("ready\n");
        for i in 0..25 {
            text.push_str(&format!("line {i}\n"));
        }
        let got = m.feed(text.as_bytes(), t);
        let [WatchOutcome::Match { output, .. }] = &got[..] else {
            panic!("{got:?}")
        };
        assert_eq!(output.lines().count(), 21);
        assert_eq!(output.lines().last(), Some("line 19"));
        assert_eq!(m.deadline(), None);
    }

    #[test]
    fn end_of_output_delivers_the_pending_match_and_a_last_unterminated_line() {
        let mut m = matcher(8);
        let t = Instant::now();
        assert!(m.feed(b"ready\nbye", t).is_empty());
        assert_eq!(m.finish(t), vec![ready(0, "ready\nbye")]);
        let mut m = matcher(8);
        assert!(m.feed(b"almost ready", t).is_empty());
        assert_eq!(m.finish(t), vec![ready(0, "almost ready")]);
    }

    #[test]
    fn matches_inside_the_interval_are_suppressed_and_counted() {
        let mut m = matcher(8);
        let t = Instant::now();
        m.feed(b"ready\n", t);
        assert_eq!(m.expire(t + LINGER).len(), 1);
        let s = t + Duration::from_secs(1);
        assert!(m.feed(b"ready\nready\n", s).is_empty());
        assert_eq!(m.deadline(), None, "suppressed matches do not linger");
        let u = t + Duration::from_secs(16);
        m.feed(b"ready again\n", u);
        assert_eq!(m.finish(u), vec![ready(2, "ready again")]);
    }

    #[test]
    fn the_delivery_cap_disables_watching_after_the_last_match_is_out() {
        let mut m = matcher(2);
        let t = Instant::now();
        m.feed(b"ready\n", t);
        assert_eq!(m.expire(t + LINGER).len(), 1);
        let u = t + Duration::from_secs(20);
        assert!(m.feed(b"ready\n", u).is_empty());
        assert!(m.feed(b"ready, ignored\n", u).is_empty());
        assert_eq!(
            m.expire(u + LINGER),
            vec![
                ready(0, "ready\nready, ignored"),
                WatchOutcome::Disabled { deliveries: 2 }
            ]
        );
        assert!(m.feed(b"ready\n", t + Duration::from_secs(60)).is_empty());
        assert!(m.finish(t + Duration::from_secs(60)).is_empty());
    }
}
