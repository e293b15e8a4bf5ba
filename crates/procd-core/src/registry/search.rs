//! `search`: where a regex matches in sessions' logs, with line numbers,
//! cursors to `read` from and context lines, so an agent finds the error
//! without reading everything.
//!
//! A log is read a window (4 MiB) at a time, in order, and each window is
//! matched on a thread of the search's own, at a lower priority; only the matches kept and a few context
//! lines are held, so memory is bounded whatever the log's size. A window
//! is matched whole, as grep does, not line by line: the regex's own
//! literal search skips the lines that cannot match, and a line is looked
//! at only where a match starts. Lines are numbered from the first byte
//! the log still keeps (after the cap dropped older output, line 1 is the
//! oldest line kept), as `grep -n` on the log file numbers them.

use super::Registry;
use crate::error::Error;
use crate::output::store::OutputStore;
use crate::session::Session;
use procd_proto::{SearchMatch, SearchResult};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// At most this many matches are returned (all are counted).
pub const MAX_SEARCH_MATCHES: u64 = 10_000;
const DEFAULT_MATCHES: u64 = 100;
/// At most this many context lines each side.
pub const MAX_SEARCH_CONTEXT: u32 = 20;
/// A returned line longer than this is cut (with "…").
const LINE_CHARS: usize = 500;
/// What one step of a scan reads and matches: large enough that the
/// steps cost little beside the matching, small enough that a search
/// holds a few MiB whatever the log's size.
const SEARCH_WINDOW: u64 = 4 << 20;
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
    /// Only output written in this time range (RFC 3339 on the wire).
    pub since: Option<SystemTime>,
    pub until: Option<SystemTime>,
    pub max_matches: Option<u64>,
    /// Characters of returned lines (matches and context), all matches
    /// together; past it, no more matches are returned (all are counted).
    pub budget: Option<usize>,
}

/// Where a scan of one log stands between two windows.
struct Scan {
    /// Newlines in the log before `cursor`: a line's number is one more
    /// than the newlines before it.
    newlines: u64,
    /// Where the next window starts.
    cursor: u64,
    /// The last `before` lines of the windows so far, for the context of
    /// a match on a window's first lines.
    recent: VecDeque<String>,
    /// Matches still collecting their after-context: (index, lines left).
    open: Vec<(usize, u32)>,
    found: Vec<SearchMatch>,
    total: u64,
    scanned: u64,
}

/// What one scan looks for, the same for every window.
struct Look {
    regex: regex::bytes::Regex,
    /// Only lines that start in this cursor range.
    range: (u64, u64),
    before: u32,
    after: u32,
    /// Matches to keep (the rest are counted).
    keep: u64,
}

impl Registry {
    pub async fn search(&self, ask: SearchAsk) -> Result<SearchResult, Error> {
        let regex = crate::output::text::bounded_lines_regex(&ask.pattern, ask.ignore_case)
            .map_err(|e| Error::InvalidParams(format!("pattern: {e}")))?;
        if let (Some(from), Some(to)) = (ask.from_cursor, ask.to_cursor) {
            if from > to {
                return Err(Error::InvalidParams(format!(
                    "from_cursor: {from} is after to_cursor {to}"
                )));
            }
        }
        if let (Some(since), Some(until)) = (ask.since, ask.until) {
            if since > until {
                return Err(Error::InvalidParams("since: it is after until".to_string()));
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
        let mut chars_left = ask.budget.unwrap_or(usize::MAX);
        for s in sessions {
            let (since, until) = s.output.cursors_between(ask.since, ask.until);
            let look = Look {
                regex: regex.clone(),
                range: (
                    ask.from_cursor.unwrap_or(0).max(since),
                    ask.to_cursor.unwrap_or(u64::MAX).min(until),
                ),
                before: ask.before,
                after: ask.after,
                keep: max.saturating_sub(result.matches.len() as u64),
            };
            let scan = self.scan_log(&s, Arc::new(look)).await?;
            result.bytes_scanned += scan.scanned;
            result.total += scan.total;
            for m in scan.found {
                let chars = [&m.text]
                    .into_iter()
                    .chain(&m.before)
                    .chain(&m.after)
                    .map(|l| l.chars().count() + 1)
                    .sum::<usize>();
                if chars > chars_left {
                    chars_left = 0;
                    break;
                }
                chars_left -= chars;
                result.matches.push(m);
            }
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
                .map(|id| self.find(id))
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

    /// One session's log, window by window, on a thread of its own (see
    /// `scan_in_background`).
    async fn scan_log(&self, s: &Arc<Session>, look: Arc<Look>) -> Result<Scan, Error> {
        let mut scan = scan_in_background(s.output.clone(), look).await?;
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

/// Scans running at once; a further search waits for one to end.
static SCANS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Scans `log` on a thread of its own at a lower priority (nice + 10):
/// reading and matching a log of a GiB takes a core for a third of a
/// second, and the event loop's answers to other clients must not queue
/// behind it. The thread ends early when the search is given up (the
/// client went away), so a client cannot leave scans running.
async fn scan_in_background(log: Arc<OutputStore>, look: Arc<Look>) -> Result<Scan, Error> {
    // Held by the thread, so that a search given up still counts until
    // its thread has stopped.
    let permit = SCANS
        .acquire()
        .await
        .map_err(|e| Error::Internal(format!("search failed: {e}")))?;
    let given_up = Arc::new(AtomicBool::new(false));
    // Set when this future is dropped before the scan ends.
    struct GiveUp(Arc<AtomicBool>);
    impl Drop for GiveUp {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _give_up = GiveUp(given_up.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("procd-search".into())
        .spawn(move || {
            if let Ok(nice) = rustix::process::getpriority_process(None) {
                let _ = rustix::process::setpriority_process(None, (nice + 10).min(19));
            }
            let _ = tx.send(scan_now(&log, &look, &given_up));
            drop(permit);
        })
        .map_err(|e| Error::Internal(format!("search failed: no thread: {e}")))?;
    rx.await
        .map_err(|_| Error::Internal("search failed: its thread ended".into()))?
}

/// The scan itself, blocking, window after window.
fn scan_now(log: &OutputStore, look: &Look, given_up: &AtomicBool) -> Result<Scan, Error> {
    // From the line-count mark nearest the range's start: a search of
    // the last minutes of a large log does not read all of it.
    let (cursor, newlines) = log.scan_start(look.range.0);
    let mut scan = Scan {
        newlines,
        cursor,
        recent: VecDeque::new(),
        open: Vec::new(),
        found: Vec::new(),
        total: 0,
        scanned: 0,
    };
    while !given_up.load(Ordering::Relaxed) {
        let window = log
            .window_blocking(scan.cursor, SEARCH_WINDOW)
            .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
        if window.bytes.is_empty() || window.start >= look.range.1 {
            break;
        }
        // Output the cap dropped is not counted in line numbers.
        scan.cursor = window.start;
        scan.scanned += window.bytes.len() as u64;
        let starts_line = window.before.last().is_none_or(|b| *b == b'\n');
        scan.window(&window.bytes, starts_line, look);
    }
    Ok(scan)
}

impl Scan {
    /// Matches one window (`bytes` start at `self.cursor`, a line's start
    /// if `starts_line`, and end at a line's end unless a line is longer
    /// than a window).
    fn window(&mut self, bytes: &[u8], starts_line: bool, look: &Look) {
        self.give_after_context(bytes);
        let (from, to) = look.range;
        // Where matching starts: the first line that starts at `from` or
        // later in the window.
        let skip = from.saturating_sub(self.cursor).min(bytes.len() as u64) as usize;
        let mut at = first_line_start(bytes, skip, starts_line);
        // Bytes whose newlines `self.newlines` has counted.
        let mut counted = 0;
        while at < bytes.len() {
            let Some(m) = look.regex.find_at(bytes, at) else {
                break;
            };
            let start = memchr::memrchr(b'\n', &bytes[..m.start()]).map_or(0, |i| i + 1);
            let end =
                memchr::memchr(b'\n', &bytes[m.start()..]).map_or(bytes.len(), |i| m.start() + i);
            if self.cursor + start as u64 >= to {
                break;
            }
            let line = trim_cr(&bytes[start..end]);
            // A match that runs past its line (`\s` takes the newline) is
            // a match only if the line alone has one.
            if m.end() <= start + line.len() || look.regex.is_match(line) {
                self.newlines += count_newlines(&bytes[counted..start]);
                counted = start;
                self.total += 1;
                if (self.found.len() as u64) < look.keep {
                    self.keep_match(bytes, (start, end), look);
                }
            }
            at = end + 1;
        }
        self.newlines += count_newlines(&bytes[counted..]);
        self.remember_last_lines(bytes, look.before);
        self.cursor += bytes.len() as u64;
    }

    /// Keeps the match on the line at `start..end` of the window, with its
    /// context: before it from this window (and the last ones), after it
    /// from this window (and the next ones).
    fn keep_match(&mut self, bytes: &[u8], (start, end): (usize, usize), look: &Look) {
        let mut before = Vec::new();
        let mut line_start = start;
        while before.len() < look.before as usize && line_start > 0 {
            let prev_end = line_start - 1;
            let prev_start = memchr::memrchr(b'\n', &bytes[..prev_end]).map_or(0, |i| i + 1);
            before.push(shown(&bytes[prev_start..prev_end]));
            line_start = prev_start;
        }
        let from_recent = (look.before as usize - before.len()).min(self.recent.len());
        before.extend(self.recent.iter().rev().take(from_recent).cloned());
        before.reverse();
        let mut after = Vec::new();
        let mut next = end + 1;
        while after.len() < look.after as usize && next < bytes.len() {
            let next_end = memchr::memchr(b'\n', &bytes[next..]).map_or(bytes.len(), |i| next + i);
            after.push(shown(&bytes[next..next_end]));
            next = next_end + 1;
        }
        self.found.push(SearchMatch {
            session_id: String::new(),
            line: self.newlines + 1,
            cursor: self.cursor + start as u64,
            text: shown(&bytes[start..end]),
            before,
            after: after.clone(),
        });
        let left = look.after - after.len() as u32;
        if left > 0 {
            self.open.push((self.found.len() - 1, left));
        }
    }

    /// The first lines of a window finish the after-context of matches
    /// near the end of the last one.
    fn give_after_context(&mut self, bytes: &[u8]) {
        let Some(most) = self.open.iter().map(|(_, left)| *left).max() else {
            return;
        };
        let lines: Vec<String> = bytes
            .split_inclusive(|b| *b == b'\n')
            .take(most as usize)
            .map(shown)
            .collect();
        for (i, left) in &mut self.open {
            let take = (*left as usize).min(lines.len());
            self.found[*i].after.extend(lines[..take].iter().cloned());
            *left -= take as u32;
        }
        self.open.retain(|(_, left)| *left > 0);
    }

    /// Keeps the window's last `n` lines (with the earlier ones, if the
    /// window has fewer) for the before-context of the next window's.
    fn remember_last_lines(&mut self, bytes: &[u8], n: u32) {
        if n == 0 {
            return;
        }
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let last: Vec<String> = body
            .rsplit(|b| *b == b'\n')
            .take(n as usize)
            .map(shown)
            .collect();
        for line in last.into_iter().rev() {
            if self.recent.len() == n as usize {
                self.recent.pop_front();
            }
            self.recent.push_back(line);
        }
    }
}

/// Newlines in `bytes` (memchr's count runs at memory speed).
fn count_newlines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

/// The first line start at or after `at` in `bytes` (whose first byte
/// starts a line if `starts_line`).
fn first_line_start(bytes: &[u8], at: usize, starts_line: bool) -> usize {
    let at_start = match at {
        0 => starts_line,
        _ => bytes.get(at - 1) == Some(&b'\n'),
    };
    if at_start || at >= bytes.len() {
        return at;
    }
    memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i + 1)
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A line as returned: without its line end, at most `LINE_CHARS`
/// characters.
fn shown(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let text = String::from_utf8_lossy(trim_cr(line));
    match text.char_indices().nth(LINE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.into_owned(),
    }
}
