//! `search`: where a regex matches in sessions' logs, with line numbers,
//! cursors to `read` from and context lines, so an agent finds the error
//! without reading everything.
//!
//! A log is read a window (1 MiB) at a time, in order, and each window is
//! matched off the event loop; only the matches kept and a few context
//! lines are held, so memory is bounded whatever the log's size. Lines
//! are numbered from the first byte the log still keeps (after the cap
//! dropped older output, line 1 is the oldest line kept), as `grep -n` on
//! the log file numbers them.

use super::{Registry, MAX_READ_BYTES};
use crate::error::Error;
use crate::session::Session;
use procd_proto::{SearchMatch, SearchResult};
use std::collections::VecDeque;
use std::sync::Arc;

/// At most this many matches are returned (all are counted).
pub const MAX_SEARCH_MATCHES: u64 = 10_000;
const DEFAULT_MATCHES: u64 = 100;
/// At most this many context lines each side.
pub const MAX_SEARCH_CONTEXT: u32 = 20;
/// A returned line longer than this is cut (with "…").
const LINE_CHARS: usize = 500;
/// Sessions one search may cover.
const MAX_SESSIONS: usize = 256;

/// What a `search` asks, as the wire gave it.
pub struct SearchAsk {
    pub session_ids: Option<Vec<String>>,
    pub session_key: Option<String>,
    pub pattern: String,
    pub ignore_case: bool,
    pub before: u32,
    pub after: u32,
    pub from_cursor: Option<u64>,
    pub to_cursor: Option<u64>,
    pub max_matches: Option<u64>,
}

/// Where a scan of one log stands between two windows.
struct Scan {
    line: u64,
    cursor: u64,
    /// The last `before` lines, for the next match's context.
    recent: VecDeque<String>,
    /// Matches still collecting their after-context: (index, lines left).
    open: Vec<(usize, u32)>,
    found: Vec<SearchMatch>,
    total: u64,
    scanned: u64,
}

impl Registry {
    pub async fn search(&self, ask: SearchAsk) -> Result<SearchResult, Error> {
        let regex = compile(&ask.pattern, ask.ignore_case)?;
        if let (Some(from), Some(to)) = (ask.from_cursor, ask.to_cursor) {
            if from > to {
                return Err(Error::InvalidParams(format!(
                    "from_cursor: {from} is after to_cursor {to}"
                )));
            }
        }
        for (name, n) in [("before", ask.before), ("after", ask.after)] {
            if n > MAX_SEARCH_CONTEXT {
                return Err(Error::InvalidParams(format!(
                    "{name}: at most {MAX_SEARCH_CONTEXT} context lines, got {n}"
                )));
            }
        }
        let sessions = self.searched(ask.session_ids.as_deref(), ask.session_key.as_deref())?;
        let max = ask
            .max_matches
            .unwrap_or(DEFAULT_MATCHES)
            .min(MAX_SEARCH_MATCHES);
        let mut result = SearchResult {
            matches: Vec::new(),
            total: 0,
            sessions_searched: sessions.len() as u32,
            bytes_scanned: 0,
            truncated: false,
        };
        for s in sessions {
            let left = max.saturating_sub(result.matches.len() as u64);
            let scan = self.scan_log(&s, &regex, &ask, left).await?;
            result.bytes_scanned += scan.scanned;
            result.total += scan.total;
            result.matches.extend(scan.found);
        }
        result.truncated = result.total > result.matches.len() as u64;
        Ok(result)
    }

    /// The sessions a search covers: its ids, else every session of its
    /// key, else every session.
    fn searched(
        &self,
        ids: Option<&[String]>,
        key: Option<&str>,
    ) -> Result<Vec<Arc<Session>>, Error> {
        let sessions: Vec<Arc<Session>> = match (ids, key) {
            (Some(ids), _) => ids
                .iter()
                .map(|id| self.find(id).map(|s| s.current()))
                .collect::<Result<_, _>>()?,
            (None, Some(key)) => self
                .all_sessions()
                .into_iter()
                .filter(|s| s.spec.session_key.as_deref() == Some(key))
                .collect(),
            (None, None) => self.all_sessions(),
        };
        if sessions.len() > MAX_SESSIONS {
            return Err(Error::LimitReached(format!(
                "search covers at most {MAX_SESSIONS} sessions, asked for {}",
                sessions.len()
            )));
        }
        Ok(sessions)
    }

    /// One session's log, window by window, matched off the event loop.
    async fn scan_log(
        &self,
        s: &Arc<Session>,
        regex: &regex::Regex,
        ask: &SearchAsk,
        keep: u64,
    ) -> Result<Scan, Error> {
        let mut scan = Scan {
            line: 0,
            cursor: 0,
            recent: VecDeque::new(),
            open: Vec::new(),
            found: Vec::new(),
            total: 0,
            scanned: 0,
        };
        let to = ask.to_cursor.unwrap_or(u64::MAX);
        let from = ask.from_cursor.unwrap_or(0);
        let mut cursor = 0;
        loop {
            let window = s
                .output
                .window(cursor, MAX_READ_BYTES)
                .await
                .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
            if window.bytes.is_empty() || window.start >= to {
                break;
            }
            cursor = window.end();
            scan.cursor = window.start;
            scan.scanned += window.bytes.len() as u64;
            let (regex, before, after) = (regex.clone(), ask.before, ask.after);
            scan = tokio::task::spawn_blocking(move || {
                scan.window(&window.bytes, &regex, (from, to), (before, after), keep);
                scan
            })
            .await
            .map_err(|e| Error::Internal(format!("search failed: {e}")))?;
        }
        // What is returned is redacted, as every output procd returns.
        let redact = |line: &str| self.redactor.output(line, s.env_dump).into_owned();
        for m in &mut scan.found {
            m.session_id = s.id.clone();
            m.text = redact(&m.text);
            m.before = m.before.iter().map(|l| redact(l)).collect();
            m.after = m.after.iter().map(|l| redact(l)).collect();
        }
        Ok(scan)
    }
}

impl Scan {
    /// Matches the lines of one window (`bytes` start at `self.cursor`).
    fn window(
        &mut self,
        bytes: &[u8],
        regex: &regex::Regex,
        (from, to): (u64, u64),
        (before, after): (u32, u32),
        keep: u64,
    ) {
        let mut at = self.cursor;
        for raw in bytes.split_inclusive(|b| *b == b'\n') {
            let start = at;
            at += raw.len() as u64;
            self.line += 1;
            let text = String::from_utf8_lossy(raw);
            let text = text.trim_end_matches(['\n', '\r']);
            let shown = cut(text);
            for (i, left) in &mut self.open {
                self.found[*i].after.push(shown.clone());
                *left -= 1;
            }
            self.open.retain(|(_, left)| *left > 0);
            let inside = start >= from && start < to;
            if inside && regex.is_match(text) {
                self.total += 1;
                if (self.found.len() as u64) < keep {
                    self.found.push(SearchMatch {
                        session_id: String::new(),
                        line: self.line,
                        cursor: start,
                        text: shown.clone(),
                        before: self.recent.iter().cloned().collect(),
                        after: Vec::new(),
                    });
                    if after > 0 {
                        self.open.push((self.found.len() - 1, after));
                    }
                }
            }
            if before > 0 {
                if self.recent.len() == before as usize {
                    self.recent.pop_front();
                }
                self.recent.push_back(shown);
            }
        }
    }
}

/// A line as returned: at most `LINE_CHARS` characters.
fn cut(line: &str) -> String {
    match line.char_indices().nth(LINE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// The pattern (`text::bounded_regex`).
fn compile(pattern: &str, ignore_case: bool) -> Result<regex::Regex, Error> {
    crate::text::bounded_regex(pattern, ignore_case)
        .map_err(|e| Error::InvalidParams(format!("pattern: {e}")))
}
