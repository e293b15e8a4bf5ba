//! `OutputStore`: everything a session wrote (SPEC §4.3).
//!
//! Bytes are appended to `logs/<id>.log` and the newest `memory_tail_bytes`
//! are also kept in memory. A byte cursor counts from the session's first
//! byte, so cursors stay valid when the log cap drops the oldest part (the
//! file is then rewritten to its newest half; `log_base` is the cursor of
//! the file's first byte). Readers are woken through a `watch` of the end
//! cursor; most reads are of recent output and are served from memory.
//!
//! Only the session's reader task appends, so compaction never races an
//! append; readers take a consistent (file, base) snapshot under the lock.

use crate::text::complete_utf8_len;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A trailing partial line is returned only after this much quiet (a prompt).
pub const PARTIAL_LINE_QUIET: Duration = Duration::from_millis(50);

struct Inner {
    log: Option<Arc<File>>,
    /// Cursor of the first byte still in the log file.
    log_base: u64,
    /// Cursor just past the last stored byte.
    end: u64,
    tail: VecDeque<u8>,
    /// Newlines stored since the first byte, and those dropped with the
    /// log's head: the kept region holds the difference.
    total_newlines: u64,
    dropped_newlines: u64,
    /// (cursor, newlines before it) every MiB or so, so that dropping the
    /// head does not need to re-read it to keep line numbers exact.
    marks: VecDeque<(u64, u64)>,
    last_write: Option<Instant>,
    finished: bool,
}

/// How often a line-count mark is recorded.
const MARK_EVERY: u64 = 1 << 20;

impl Inner {
    fn kept_newlines(&self) -> u64 {
        self.total_newlines - self.dropped_newlines
    }

    fn tail_start(&self) -> u64 {
        self.end - self.tail.len() as u64
    }

    /// The first cursor that can still be read.
    fn first_kept(&self) -> u64 {
        if self.log.is_some() {
            self.log_base
        } else {
            self.tail_start()
        }
    }
}

pub struct OutputStore {
    path: PathBuf,
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    max_log_bytes: u64,
    tail_cap: usize,
}

/// A window of stored output, decided by the rules of SPEC §3.1 `read`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub bytes: Vec<u8>,
    /// Bytes between the requested cursor and `start` lost to the log cap.
    pub dropped: u64,
    /// A partial line is waiting for the quiet period (or more output).
    pub partial_pending: bool,
}

impl Window {
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl OutputStore {
    /// Creates (or truncates) the log file, mode 0600. Append-only: writes
    /// always land at the end, also after the head was collapsed away.
    pub fn create(path: &Path, max_log_bytes: u64, tail_cap: usize) -> io::Result<OutputStore> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(path)?;
        file.set_len(0)?;
        Ok(Self::with_file(
            path,
            Some(file),
            0,
            0,
            max_log_bytes,
            tail_cap,
        ))
    }

    /// Opens the log of a session recovered after a daemon restart: what
    /// it holds is readable; cursors count from its first kept byte.
    pub fn open_existing(
        path: &Path,
        max_log_bytes: u64,
        tail_cap: usize,
    ) -> io::Result<OutputStore> {
        let mut file = OpenOptions::new().read(true).append(true).open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let newlines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        let store = Self::with_file(path, Some(file), 0, newlines, max_log_bytes, tail_cap);
        {
            let mut inner = store.lock();
            inner.end = bytes.len() as u64;
            let skip = bytes.len().saturating_sub(tail_cap);
            inner.tail.extend(&bytes[skip..]);
        }
        store.changed.send_replace(bytes.len() as u64);
        Ok(store)
    }

    fn with_file(
        path: &Path,
        file: Option<File>,
        base: u64,
        kept_newlines: u64,
        max_log_bytes: u64,
        tail_cap: usize,
    ) -> OutputStore {
        let (changed, _) = watch::channel(0);
        OutputStore {
            path: path.to_path_buf(),
            inner: Mutex::new(Inner {
                log: file.map(Arc::new),
                log_base: base,
                end: base,
                tail: VecDeque::new(),
                total_newlines: kept_newlines,
                dropped_newlines: 0,
                marks: VecDeque::new(),
                last_write: None,
                finished: false,
            }),
            changed,
            max_log_bytes,
            tail_cap,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores `bytes`. Returns true when the log has outgrown its cap and
    /// `compact` should run (the caller is the only appender).
    pub fn append(&self, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return false;
        }
        let mut inner = self.lock();
        if let Some(file) = &inner.log {
            if let Err(err) = (&**file).write_all(bytes) {
                // Keep serving from memory; older output is reported dropped.
                tracing::warn!(path = %self.path.display(), %err, "log write failed; keeping memory tail only");
                inner.log = None;
            }
        }
        inner.end += bytes.len() as u64;
        inner.total_newlines += memchr::memchr_iter(b'\n', bytes).count() as u64;
        let end = inner.end;
        if inner
            .marks
            .back()
            .is_none_or(|(at, _)| end - at >= MARK_EVERY)
        {
            let mark = (end, inner.total_newlines);
            inner.marks.push_back(mark);
        }
        let overflow = (inner.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        let drop_now = overflow.min(inner.tail.len());
        inner.tail.drain(..drop_now);
        let skip = bytes.len().saturating_sub(self.tail_cap);
        inner.tail.extend(&bytes[skip..]);
        inner.last_write = Some(Instant::now());
        let end = inner.end;
        let over = inner.log.is_some() && end - inner.log_base > self.max_log_bytes;
        drop(inner);
        self.changed.send_replace(end);
        over
    }

    /// Drops the oldest half of the log (off the event loop).
    pub async fn compact(self: &Arc<Self>) {
        let store = self.clone();
        let result = tokio::task::spawn_blocking(move || store.compact_blocking()).await;
        if let Ok(Err(err)) = result {
            tracing::warn!(path = %self.path.display(), %err, "log compaction failed");
        }
    }

    fn compact_blocking(&self) -> io::Result<()> {
        let (file, base, end) = {
            let inner = self.lock();
            match &inner.log {
                Some(f) => (f.clone(), inner.log_base, inner.end),
                None => return Ok(()),
            }
        };
        let keep = (self.max_log_bytes / 2).min(end - base);
        match self.collapse_head(&file, base, end - keep) {
            Ok(()) => Ok(()),
            // Filesystems without FALLOC_FL_COLLAPSE_RANGE (tmpfs, …): copy.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
                ) =>
            {
                self.copy_tail(&file, base, end, keep)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops the file's head in place (no copy, and the dropped pages never
    /// need writing back): the cut is rounded down to the block size.
    fn collapse_head(&self, file: &File, base: u64, new_base: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let block = nix::sys::statvfs::fstatvfs(file)
            .map(|s| s.block_size())
            .unwrap_or(4096)
            .max(512);
        let drop = (new_base - base) / block * block;
        if drop == 0 {
            return Ok(());
        }
        // Newlines before the cut, for `log`'s line numbers: from the last
        // mark at or before it, counting only the stretch after that mark.
        let cut = base + drop;
        let (from, mut before_cut) = {
            let inner = self.lock();
            inner
                .marks
                .iter()
                .rev()
                .find(|(at, _)| *at <= cut && *at >= base)
                .copied()
                .unwrap_or((base, inner.dropped_newlines))
        };
        let mut buf = vec![0u8; 1 << 20];
        let mut at = from;
        while at < cut {
            let want = (cut - at).min(buf.len() as u64) as usize;
            let n = file.read_at(&mut buf[..want], at - base)?;
            if n == 0 {
                break;
            }
            before_cut += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
            at += n as u64;
        }
        // SAFETY: fallocate(2) on a descriptor we own, with plain integer
        // arguments; it touches no memory of ours.
        let r = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_COLLAPSE_RANGE,
                0,
                drop as libc::off_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut inner = self.lock();
        inner.log_base = cut;
        inner.dropped_newlines = before_cut;
        while inner.marks.front().is_some_and(|(at, _)| *at < cut) {
            inner.marks.pop_front();
        }
        Ok(())
    }

    /// Rewrites the file to its newest `keep` bytes (from a line start when
    /// one is near) and swaps it in.
    fn copy_tail(&self, file: &Arc<File>, base: u64, end: u64, keep: u64) -> io::Result<()> {
        let mut new_base = end - keep;
        let tmp_path = self.path.with_extension("log.compact");
        let mut tmp = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .read(true)
            .mode(0o600)
            .open(&tmp_path)?;
        let mut src = &**file;
        src.seek(SeekFrom::Start(new_base - base))?;
        let mut newlines = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let mut first = true;
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            let mut chunk = &buf[..n];
            if first {
                first = false;
                if let Some(i) = memchr::memchr(b'\n', chunk) {
                    if i + 1 < chunk.len() {
                        chunk = &chunk[i + 1..];
                        new_base += i as u64 + 1;
                    }
                }
            }
            newlines += memchr::memchr_iter(b'\n', chunk).count() as u64;
            tmp.write_all(chunk)?;
        }
        std::fs::rename(&tmp_path, &self.path)?;
        let appender = OpenOptions::new()
            .append(true)
            .read(true)
            .open(&self.path)?;
        let mut inner = self.lock();
        inner.log = Some(Arc::new(appender));
        inner.log_base = new_base;
        inner.dropped_newlines = inner.total_newlines - newlines;
        while inner.marks.front().is_some_and(|(at, _)| *at < new_base) {
            inner.marks.pop_front();
        }
        Ok(())
    }

    /// No more output will come (the session exited).
    pub fn finish(&self) {
        let mut inner = self.lock();
        inner.finished = true;
        let end = inner.end;
        drop(inner);
        self.changed.send_replace(end);
    }

    pub fn end(&self) -> u64 {
        self.lock().end
    }

    /// A receiver that changes whenever output is appended or finished.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// How long no output has arrived (since the start if none has).
    pub fn quiet_for(&self) -> Duration {
        self.lock()
            .last_write
            .map(|t| t.elapsed())
            .unwrap_or(Duration::MAX)
    }

    /// Time until a trailing partial line becomes readable (zero if it is).
    pub fn partial_line_ready_in(&self) -> Duration {
        let inner = self.lock();
        match inner.last_write {
            Some(t) => PARTIAL_LINE_QUIET.saturating_sub(t.elapsed()),
            None => Duration::ZERO,
        }
    }

    /// The newest output as text (for previews), at most `max_chars` chars.
    pub fn tail_text(&self, max_chars: usize) -> String {
        let inner = self.lock();
        let want = (max_chars * 4).min(inner.tail.len());
        let (a, b) = inner.tail.as_slices();
        let mut bytes = Vec::with_capacity(want);
        let skip = inner.tail.len() - want;
        if skip < a.len() {
            bytes.extend_from_slice(&a[skip..]);
            bytes.extend_from_slice(b);
        } else {
            bytes.extend_from_slice(&b[skip - a.len()..]);
        }
        drop(inner);
        let start = crate::text::leading_continuations(&bytes);
        let text = String::from_utf8_lossy(&bytes[start..]);
        crate::text::last_chars(&text, max_chars).to_string()
    }

    /// The readable window at `cursor`, at most `max_bytes` long.
    pub async fn window(&self, cursor: u64, max_bytes: u64) -> io::Result<Window> {
        let max_bytes = max_bytes.max(1);
        let (start, stop, end, dropped, source, finished, quiet) = {
            let inner = self.lock();
            let first = inner.first_kept();
            let start = cursor.clamp(first, inner.end);
            let dropped = first.saturating_sub(cursor);
            let stop = inner.end.min(start.saturating_add(max_bytes));
            let source = if start >= inner.tail_start() {
                let from = (start - inner.tail_start()) as usize;
                let to = (stop - inner.tail_start()) as usize;
                Source::Memory(inner.tail.range(from..to).copied().collect())
            } else {
                match &inner.log {
                    Some(f) => Source::File(f.clone(), inner.log_base),
                    None => Source::Memory(Vec::new()),
                }
            };
            let quiet = inner
                .last_write
                .is_none_or(|t| t.elapsed() >= PARTIAL_LINE_QUIET);
            (
                start,
                stop,
                inner.end,
                dropped,
                source,
                inner.finished,
                quiet,
            )
        };
        let mut bytes = match source {
            Source::Memory(bytes) => bytes,
            Source::File(file, base) => {
                let len = (stop - start) as usize;
                tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; len];
                    let n = read_full_at(&file, &mut buf, start - base)?;
                    buf.truncate(n);
                    Ok::<_, io::Error>(buf)
                })
                .await
                .map_err(io::Error::other)??
            }
        };
        let at_end = stop == end || bytes.len() as u64 != stop - start;
        let mut partial_pending = false;
        if !(finished && at_end) {
            let complete = complete_utf8_len(&bytes);
            let ends_line = bytes.last() == Some(&b'\n');
            let line_may_grow = at_end && !finished && !quiet;
            if !ends_line && (line_may_grow || !at_end) {
                // Never end inside a line while more of it may still come:
                // cut after the last newline if the window has one.
                match bytes.iter().rposition(|b| *b == b'\n') {
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
        Ok(Window {
            start,
            bytes,
            dropped,
            partial_pending,
        })
    }

    /// Lines of the kept output: `offset` None gives the last `limit` lines.
    /// Returns (lines, index of the first, total lines).
    pub async fn lines(
        &self,
        offset: Option<u64>,
        limit: u64,
    ) -> io::Result<(Vec<String>, u64, u64)> {
        let (first, end, total, file, base, tail) = {
            let inner = self.lock();
            let first = inner.first_kept();
            let partial = u64::from(inner.end > first && inner.tail.back() != Some(&b'\n'));
            let newlines = if inner.log.is_some() {
                inner.kept_newlines()
            } else {
                inner.tail.iter().filter(|b| **b == b'\n').count() as u64
            };
            // After a drop, text before the first kept newline is a fragment.
            let fragment = u64::from(first > 0 && newlines > 0);
            let total = newlines + partial - fragment;
            let tail_covers = inner.tail_start() <= first;
            let tail = tail_covers.then(|| inner.tail.iter().copied().collect::<Vec<u8>>());
            (
                first,
                inner.end,
                total,
                inner.log.clone(),
                inner.log_base,
                tail,
            )
        };
        let start_line = match offset {
            Some(n) => n,
            None => total.saturating_sub(limit),
        };
        if start_line >= total || limit == 0 {
            return Ok((Vec::new(), start_line, total));
        }
        let bytes = match (tail, file) {
            (Some(tail), _) => tail,
            (None, Some(file)) => tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; (end - first) as usize];
                let n = read_full_at(&file, &mut buf, first - base)?;
                buf.truncate(n);
                Ok::<_, io::Error>(buf)
            })
            .await
            .map_err(io::Error::other)??,
            (None, None) => Vec::new(),
        };
        // When the head was dropped mid-line, the first kept "line" is a
        // fragment: it is not counted (see `total` above) nor shown.
        let bytes = if first > 0 {
            match memchr::memchr(b'\n', &bytes) {
                Some(i) => bytes[i + 1..].to_vec(),
                None => bytes, // one long line, all of it kept
            }
        } else {
            bytes
        };
        let text = String::from_utf8_lossy(&bytes);
        let lines = text
            .split_inclusive('\n')
            .skip(start_line as usize)
            .take(limit as usize)
            .map(|l| l.trim_end_matches(['\n', '\r']).to_string())
            .collect();
        Ok((lines, start_line, total))
    }

    /// Removes the log file (the session was pruned).
    pub fn delete_log(&self) {
        let mut inner = self.lock();
        inner.log = None;
        drop(inner);
        let _ = std::fs::remove_file(&self.path);
    }
}

enum Source {
    Memory(Vec<u8>),
    File(Arc<File>, u64),
}

fn read_full_at(file: &File, buf: &mut [u8], mut offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read_at(&mut buf[filled..], offset)?;
        if n == 0 {
            break;
        }
        filled += n;
        offset += n as u64;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &tempfile::TempDir, cap: u64, tail: usize) -> Arc<OutputStore> {
        Arc::new(OutputStore::create(&dir.path().join("s.log"), cap, tail).unwrap())
    }

    #[tokio::test]
    async fn windows_never_split_characters_or_growing_lines() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, 1 << 20, 1024);
        s.append("done\nhé".as_bytes());
        s.append(&"€".as_bytes()[..1]);
        // Running, not quiet: only the complete line is readable.
        let w = s.window(0, 1000).await.unwrap();
        assert_eq!(w.bytes, b"done\n");
        s.append(&"€".as_bytes()[1..]);
        s.finish();
        let w = s.window(5, 1000).await.unwrap();
        assert_eq!(String::from_utf8(w.bytes).unwrap(), "hé€");
    }

    #[tokio::test]
    async fn cap_drops_oldest_and_cursors_stay_valid() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, 4096, 100);
        for i in 0..100u32 {
            let line = format!("{i:099}\n");
            if s.append(line.as_bytes()) {
                s.compact().await;
            }
        }
        s.finish();
        assert_eq!(s.end(), 10_000);
        let w = s.window(0, 200).await.unwrap();
        assert!(w.dropped > 0 && w.start == w.dropped);
        let (lines, first, total) = s.lines(None, 2).await.unwrap();
        assert_eq!(lines, vec![format!("{:099}", 98), format!("{:099}", 99)]);
        assert_eq!(first + 2, total);
        // Capped (the in-place drop works in whole filesystem blocks, so
        // the file may exceed the cap by less than one block).
        let size = std::fs::metadata(s.path()).unwrap().len();
        assert!(size <= 4096 + 4096, "log capped, is {size}");
    }
}
