//! Watch patterns (SPEC §4.4): plain substrings matched against whole
//! output lines. A line split across reads is joined before matching. Each
//! pattern is rate-limited (matches inside `min_interval` are suppressed and
//! counted into the next delivery); after `max_deliveries` the matcher
//! disables itself and says so once.

use std::time::{Duration, Instant};

/// Following lines delivered with a match, and the text cap.
const FOLLOWING_LINES: usize = 20;
const OUTPUT_CHARS: usize = 2000;
/// A "line" longer than this is matched as it stands (bounds memory).
const MAX_PARTIAL: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchOutcome {
    Match {
        pattern: String,
        /// The matching line and up to 20 following lines already read.
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

pub struct WatchMatcher {
    patterns: Vec<Pattern>,
    partial: Vec<u8>,
    deliveries: u32,
    max_deliveries: u32,
    min_interval: Duration,
    disabled: bool,
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
            deliveries: 0,
            max_deliveries,
            min_interval,
            disabled: false,
        })
    }

    /// Feeds stored output; returns what should be delivered.
    pub fn feed(&mut self, chunk: &[u8], now: Instant) -> Vec<WatchOutcome> {
        let mut out = Vec::new();
        if self.disabled {
            return out;
        }
        self.partial.extend_from_slice(chunk);
        let complete = match self.partial.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if self.partial.len() > MAX_PARTIAL => self.partial.len(),
            None => return out,
        };
        let text: Vec<u8> = self.partial.drain(..complete).collect();
        let lines: Vec<&[u8]> = text
            .split_inclusive(|b| *b == b'\n')
            .map(trim_eol)
            .collect();
        for (i, line) in lines.iter().enumerate() {
            for p in &mut self.patterns {
                if !contains(line, p.text.as_bytes()) {
                    continue;
                }
                if p.last_delivery
                    .is_some_and(|t| now.duration_since(t) < self.min_interval)
                {
                    p.suppressed += 1;
                    continue;
                }
                let shown = &lines[i..lines.len().min(i + 1 + FOLLOWING_LINES)];
                let joined: Vec<u8> = shown.join(&b'\n');
                let output =
                    crate::text::first_chars(&String::from_utf8_lossy(&joined), OUTPUT_CHARS)
                        .to_string();
                out.push(WatchOutcome::Match {
                    pattern: p.text.clone(),
                    output,
                    suppressed: std::mem::take(&mut p.suppressed),
                });
                p.last_delivery = Some(now);
                self.deliveries += 1;
                if self.deliveries >= self.max_deliveries {
                    self.disabled = true;
                    self.partial.clear();
                    out.push(WatchOutcome::Disabled {
                        deliveries: self.deliveries,
                    });
                    return out;
                }
            }
        }
        out
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let mut t = line;
    while let [rest @ .., b'\n' | b'\r'] = t {
        t = rest;
    }
    t
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(max: u32) -> WatchMatcher {
        WatchMatcher::new(&["ready".to_string()], Duration::from_secs(15), max).unwrap()
    }

    #[test]
    fn a_line_split_across_reads_matches_once_complete() {
        let mut m = matcher(8);
        let t = Instant::now();
        assert!(m.feed(b"server re", t).is_empty());
        let got = m.feed(b"ady on :3000\r\nnext line\n", t);
        assert_eq!(
            got,
            vec![WatchOutcome::Match {
                pattern: "ready".into(),
                output: "server ready on :3000\nnext line".into(),
                suppressed: 0
            }]
        );
    }

    #[test]
    fn matches_inside_the_interval_are_suppressed_and_counted() {
        let mut m = matcher(8);
        let t = Instant::now();
        assert_eq!(m.feed(b"ready\n", t).len(), 1);
        assert!(m
            .feed(b"ready\nready\n", t + Duration::from_secs(1))
            .is_empty());
        let got = m.feed(b"ready again\n", t + Duration::from_secs(16));
        assert!(
            matches!(&got[..], [WatchOutcome::Match { suppressed: 2, .. }]),
            "{got:?}"
        );
    }

    #[test]
    fn the_delivery_cap_disables_watching() {
        let mut m = matcher(2);
        let t = Instant::now();
        m.feed(b"ready\n", t);
        let got = m.feed(b"ready\n", t + Duration::from_secs(20));
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], WatchOutcome::Disabled { deliveries: 2 });
        assert!(m.feed(b"ready\n", t + Duration::from_secs(60)).is_empty());
    }
}
