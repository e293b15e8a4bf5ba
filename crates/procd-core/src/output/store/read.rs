//! Reading output back: a window of bytes from a cursor, or a page of
//! lines, from memory when it is there and from the file otherwise.
//!
//! A window never ends inside a UTF-8 character or inside a line that may
//! still grow: a trailing partial line is returned after 50 ms of quiet
//! (`PARTIAL_LINE_QUIET`) or at the exit. Every piece is redacted together
//! with the 8 KiB before it (`Redactor::excerpt`), so a piece that starts
//! inside a private key block is masked too. `log` seeks from per-MiB line
//! marks and reads one page of at most `max_response_bytes`.

use super::{copy_out, read_at, read_full_at, LineView, Lines, LogReader, OutputStore, Window};
use super::{KEY_CONTEXT_BYTES, PARTIAL_LINE_QUIET};
use crate::output::text::complete_utf8_len;
use std::fs::File;
use std::io;

impl OutputStore {
    /// The readable window at `cursor`, at most `max_bytes` long.
    pub async fn window(&self, cursor: u64, max_bytes: u64) -> io::Result<Window> {
        self.window_as(cursor, max_bytes, false).await
    }

    /// The bytes from `start` to `stop` as they are, no line held back:
    /// a shell command's output, whose end is known (`shell/`).
    pub async fn range(&self, start: u64, stop: u64) -> io::Result<Window> {
        self.window_as(start, stop.saturating_sub(start), true)
            .await
    }

    async fn window_as(&self, cursor: u64, max_bytes: u64, whole: bool) -> io::Result<Window> {
        let _layout = self.layout.read().await;
        let (mut plan, source) = self.plan_window(cursor, max_bytes);
        if whole {
            // As if the output ended at the window's end.
            (plan.finished, plan.end) = (true, plan.stop);
        }
        let (before, bytes) = match source {
            Source::Memory(before, bytes) => (before, bytes),
            Source::File(log, base) => {
                let range = (plan.context, plan.start, plan.stop);
                tokio::task::spawn_blocking(move || read_window(&*log.file()?, base, range))
                    .await
                    .map_err(io::Error::other)??
            }
        };
        Ok(plan.finish(before, bytes))
    }

    /// `window`, for a thread outside the runtime that may block (a
    /// search's scan): the same window, read on the calling thread.
    pub fn window_blocking(&self, cursor: u64, max_bytes: u64) -> io::Result<Window> {
        let _layout = self.layout.blocking_read();
        let (plan, source) = self.plan_window(cursor, max_bytes);
        let (before, bytes) = match source {
            Source::Memory(before, bytes) => (before, bytes),
            Source::File(log, base) => {
                read_window(&*log.file()?, base, (plan.context, plan.start, plan.stop))?
            }
        };
        Ok(plan.finish(before, bytes))
    }

    /// What a window at `cursor` covers, decided under the lock; the
    /// caller holds `layout` until it has read it.
    fn plan_window(&self, cursor: u64, max_bytes: u64) -> (WindowPlan, Source) {
        let inner = self.lock();
        let first = inner.first_kept();
        let start = cursor.clamp(first, inner.end);
        let stop = inner.end.min(start.saturating_add(max_bytes.max(1)));
        // The window comes with the output just before it (redaction
        // needs it to tell whether the window starts inside a key).
        let context = start.saturating_sub(KEY_CONTEXT_BYTES as u64).max(first);
        let source = if context >= inner.tail_start() {
            let at = |cursor: u64| (cursor - inner.tail_start()) as usize;
            Source::Memory(
                copy_out(&inner.tail, at(context)..at(start)),
                copy_out(&inner.tail, at(start)..at(stop)),
            )
        } else {
            match inner.log.reader(&self.path) {
                Some(log) => Source::File(log, inner.log_base),
                None => Source::Memory(Vec::new(), Vec::new()),
            }
        };
        let plan = WindowPlan {
            context,
            start,
            stop,
            end: inner.end,
            dropped: first.saturating_sub(cursor),
            finished: inner.finished,
            quiet: inner
                .last_write
                .is_none_or(|t| t.elapsed() >= PARTIAL_LINE_QUIET),
        };
        (plan, source)
    }

    /// Lines of the kept output: `offset` None gives the last `limit` lines.
    /// Reads only what it returns (docs/SECURITY.md): the first line is found from
    /// the nearest line-count mark (one every MiB), and at most
    /// `max_bytes` of lines are read; a page cut short by that says so in
    /// `truncated` (continue from `first + lines.len()`).
    pub async fn lines(
        &self,
        offset: Option<u64>,
        limit: u64,
        max_bytes: usize,
    ) -> io::Result<Lines> {
        let _layout = self.layout.read().await;
        let LineView {
            first,
            end,
            total,
            fragment,
            file,
            base,
            tail,
            seek,
        } = self.lock().line_view(&self.path);
        let start_line = match offset {
            Some(n) => n,
            None => total.saturating_sub(limit),
        };
        if start_line >= total || limit == 0 {
            return Ok(Lines {
                lines: Vec::new(),
                first: start_line,
                total,
                before: Vec::new(),
                truncated: false,
            });
        }
        let want = limit.min(total - start_line);
        let page = match (tail, file) {
            (Some(tail), _) => page_in_memory(&tail, first, fragment, start_line, want, max_bytes),
            (None, Some(log)) => {
                // Newlines (counted from the first byte ever) before the
                // first byte of the wanted line.
                let target = seek[0].1 + fragment + start_line;
                let (from, counted) = seek
                    .iter()
                    .rev()
                    .find(|(_, nl)| *nl < target || (*nl == 0 && target == 0))
                    .copied()
                    .unwrap_or(seek[0]);
                tokio::task::spawn_blocking(move || {
                    page_in_file(
                        &*log.file()?,
                        base,
                        end,
                        from,
                        counted,
                        target,
                        want,
                        max_bytes,
                    )
                })
                .await
                .map_err(io::Error::other)??
            }
            (None, None) => Page::default(),
        };
        Ok(Lines {
            lines: page.lines,
            first: start_line,
            total,
            before: page.before,
            truncated: page.truncated,
        })
    }
}

/// A window decided, not yet read (`OutputStore::plan_window`).
struct WindowPlan {
    context: u64,
    start: u64,
    stop: u64,
    end: u64,
    dropped: u64,
    finished: bool,
    quiet: bool,
}

impl WindowPlan {
    /// The window from what was read: never ending inside a line while
    /// more of it may still come.
    fn finish(self, before: Vec<u8>, mut bytes: Vec<u8>) -> Window {
        let (start, stop) = (self.start, self.stop);
        let at_end = stop == self.end || bytes.len() as u64 != stop - start;
        let mut partial_pending = false;
        if !(self.finished && at_end) {
            let complete = complete_utf8_len(&bytes);
            let ends_line = bytes.last() == Some(&b'\n');
            let line_may_grow = at_end && !self.finished && !self.quiet;
            if !ends_line && (line_may_grow || !at_end) {
                // Cut after the last line end if the window has one.
                match last_line_end(&bytes) {
                    Some(i) => bytes.truncate(i + 1),
                    None if line_may_grow => {
                        bytes.clear();
                        partial_pending = true;
                    }
                    None => bytes.truncate(complete),
                }
            } else {
                bytes.truncate(complete);
            }
        }
        Window {
            start,
            bytes,
            before,
            dropped: self.dropped,
            partial_pending,
        }
    }
}

/// A window's context and the window, from the log file: read apart, as
/// splitting one buffer would copy the window (a search's 4 MiB) again.
fn read_window(
    file: &File,
    base: u64,
    (context, start, stop): (u64, u64, u64),
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let read = |from: u64, to: u64| read_at(file, from - base, (to - from) as usize);
    Ok((read(context, start)?, read(start, stop)?))
}

enum Source {
    /// The context before the window, and the window.
    Memory(Vec<u8>, Vec<u8>),
    File(LogReader, u64),
}

/// Where the last line in `bytes` ends (the index of its terminator): a
/// newline, or a carriage return that something follows. A progress bar
/// that redraws its line with "\r" ends a line each time, so readers see
/// it move instead of waiting for it to pause; a final "\r" may be the
/// first half of "\r\n" and does not count yet.
pub(super) fn last_line_end(bytes: &[u8]) -> Option<usize> {
    let mut upto = bytes.len();
    loop {
        let i = memchr::memrchr2(b'\n', b'\r', &bytes[..upto])?;
        if bytes[i] == b'\n' || i + 1 < bytes.len() {
            return Some(i);
        }
        upto = i;
    }
}

/// A page of lines as read (see `OutputStore::lines`).
#[derive(Default)]
struct Page {
    lines: Vec<String>,
    before: Vec<u8>,
    truncated: bool,
}

/// Splits `bytes` (starting at a line start) into at most `want` lines and
/// at most `max_bytes` of them; a first line longer than that is cut.
fn split_page(bytes: &[u8], want: u64, max_bytes: usize) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut used = 0usize;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        if lines.len() as u64 == want {
            return (lines, false);
        }
        if used + line.len() > max_bytes {
            if lines.is_empty() {
                let cut = String::from_utf8_lossy(&line[..max_bytes.min(line.len())]);
                lines.push(cut.trim_end_matches(['\n', '\r']).to_string());
            }
            return (lines, true);
        }
        used += line.len();
        let text = String::from_utf8_lossy(line);
        lines.push(text.trim_end_matches(['\n', '\r']).to_string());
    }
    (lines, false)
}

/// A page from the memory tail, which holds the whole kept output (it is
/// at most `memory_tail_bytes`).
fn page_in_memory(
    kept: &[u8],
    first: u64,
    fragment: u64,
    start_line: u64,
    want: u64,
    max_bytes: usize,
) -> Page {
    // Skip the fragment (when the head was dropped mid-line), then lines.
    let mut at = 0usize;
    let mut skip = fragment + start_line;
    let _ = first;
    while skip > 0 {
        match memchr::memchr(b'\n', &kept[at..]) {
            Some(i) => at += i + 1,
            None => {
                at = kept.len();
                break;
            }
        }
        skip -= 1;
    }
    let (lines, truncated) = split_page(&kept[at..], want, max_bytes);
    Page {
        lines,
        before: kept[at.saturating_sub(KEY_CONTEXT_BYTES)..at].to_vec(),
        truncated,
    }
}

/// A page from the log file: from cursor `from` (with `counted` newlines
/// before it) scan to just after newline number `target`, then read at
/// most `max_bytes` of lines. Memory stays bounded by the chunk and the
/// page, whatever the size of the log.
#[allow(clippy::too_many_arguments)]
fn page_in_file(
    file: &File,
    base: u64,
    end: u64,
    from: u64,
    counted: u64,
    target: u64,
    want: u64,
    max_bytes: usize,
) -> io::Result<Page> {
    const CHUNK: usize = 64 * 1024;
    let mut buf = vec![0u8; CHUNK];
    let (mut at, mut newlines) = (from, counted);
    // Find the start of the wanted line.
    let mut start = if newlines == target { Some(from) } else { None };
    while start.is_none() && at < end {
        let len = (end - at).min(CHUNK as u64) as usize;
        let n = read_full_at(file, &mut buf[..len], at - base)?;
        if n == 0 {
            break;
        }
        for i in memchr::memchr_iter(b'\n', &buf[..n]) {
            newlines += 1;
            if newlines == target {
                start = Some(at + i as u64 + 1);
                break;
            }
        }
        at += n as u64;
    }
    let Some(start) = start else {
        return Ok(Page::default());
    };
    // The lines themselves: no more than the page may hold (+ one byte to
    // tell a line cut by the cap from one that ends there).
    let len = (end - start).min(max_bytes as u64 + 1) as usize;
    let mut bytes = vec![0u8; len];
    let n = read_full_at(file, &mut bytes, start - base)?;
    bytes.truncate(n);
    let (lines, truncated) = split_page(&bytes, want, max_bytes);
    let context = (start - base).min(KEY_CONTEXT_BYTES as u64);
    let mut before = vec![0u8; context as usize];
    let got = read_full_at(file, &mut before, start - base - context)?;
    before.truncate(got);
    Ok(Page {
        lines,
        before,
        truncated,
    })
}
