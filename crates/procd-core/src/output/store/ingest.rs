//! A session's output coming in: appended or spliced into the log, judged
//! by the noise filter, and what it drops cut out behind a redo record; a
//! log that could not be written, retried.

use super::compact::forget_head;
use super::time_index::unix_secs;
use super::{copy_out, read_full_at, Inner, Log, OutputStore, LOG_RETRY, MARK_EVERY};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

impl OutputStore {
    /// Stores `bytes` (output that came through memory: a test, or a
    /// session whose log failed). Returns true when the log has outgrown
    /// its cap and `compact` should run (the caller is the only appender).
    pub fn append(&self, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return false;
        }
        self.write_out(bytes);
        self.account(bytes)
    }

    /// Writes `bytes` at the file's end. Done before taking the lock for
    /// the bookkeeping: a write that blocks (the kernel throttling dirty
    /// pages) must not hold up polls and reads. Only this task appends or
    /// changes the file, and readers never read past `end`, so bytes in
    /// the file beyond it are harmless.
    fn write_out(&self, bytes: &[u8]) {
        let log = {
            let mut inner = self.lock();
            if Self::log_retry_due(&inner) {
                self.reopen_log(&mut inner);
            }
            let at = inner.file_end();
            self.appender(&mut inner).map(|f| (f, at))
        };
        if let Some(Err(err)) = log.map(|(file, at)| file.write_all_at(bytes, at)) {
            self.log_failed(&err);
        }
    }

    /// Keeps serving from memory; older output is reported dropped.
    fn log_failed(&self, err: &io::Error) {
        Self::lose_file(&self.path, &mut self.lock(), err);
    }

    pub(super) fn lose_file(path: &Path, inner: &mut Inner, err: &io::Error) {
        tracing::warn!(path = %path.display(), %err, "log write failed; keeping memory tail only");
        inner.log = Log::Absent;
        inner.undecided = None;
        inner.log_error = Some((err.to_string(), Instant::now()));
    }

    /// Makes `bytes`, now in the file (or only in memory, the log having
    /// failed), stored output: readers are woken for them.
    fn account(&self, bytes: &[u8]) -> bool {
        let mut inner = self.lock();
        let start = inner.end;
        inner.times.wrote(unix_secs(SystemTime::now()), start);
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
        let over = inner.log.in_file() && end - inner.kept_from > self.max_log_bytes;
        drop(inner);
        self.changed.send_replace(end);
        over
    }

    /// Moves what `from` (a pipe) holds, up to `buf.len()` bytes, into the
    /// file past its last byte, and reads it back into `buf` for the noise
    /// filter: the bytes leave the pipe only by landing in the file. They
    /// stay undecided (unseen by readers) until `settle`.
    ///
    /// `Ok(Some(0))`: the pipe's writers are gone. `Ok(None)`: nothing can
    /// be spliced now (the log failed, or the filter holds bytes that are
    /// only in memory); the caller reads `from` itself. WouldBlock: empty.
    pub fn splice_in(&self, from: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let (file, at) = {
            let mut inner = self.lock();
            if inner.undecided.is_none() {
                return Ok(None);
            }
            let at = inner.file_end();
            match self.appender(&mut inner) {
                Some(file) => (file, at),
                None => return Ok(None),
            }
        };
        let mut off = at;
        let flags = rustix::pipe::SpliceFlags::NONBLOCK | rustix::pipe::SpliceFlags::MOVE;
        let n = match rustix::pipe::splice(from, None, &*file, Some(&mut off), buf.len(), flags) {
            Ok(n) => n,
            Err(rustix::io::Errno::AGAIN) => return Err(io::ErrorKind::WouldBlock.into()),
            Err(rustix::io::Errno::INTR) => return Err(io::ErrorKind::Interrupted.into()),
            // A pipe cannot fail a read: the file failed (full, read-only).
            Err(e) => {
                self.log_failed(&e.into());
                return Ok(None);
            }
        };
        if n == 0 {
            return Ok(Some(0));
        }
        if let Some(undecided) = self.lock().undecided.as_mut() {
            *undecided += n as u64;
        }
        match read_full_at(&file, &mut buf[..n], at) {
            Ok(got) if got == n => Ok(Some(n)),
            Ok(_) => {
                self.log_failed(&io::Error::other(
                    "the log is shorter than what was spliced into it",
                ));
                Ok(Some(0))
            }
            Err(err) => {
                self.log_failed(&err);
                Ok(Some(0))
            }
        }
    }

    /// The noise filter's verdict on the undecided bytes: `decided` is
    /// output from now on, `held` (its parts in order) is what it still
    /// holds; the rest was noise. Filters only drop, so the two are the
    /// undecided bytes with the noise taken out, and the file is changed
    /// only when something was dropped. Returns true when `compact` should
    /// run.
    pub fn settle(&self, decided: &[u8], held: [&[u8]; 2]) -> bool {
        let held_len = (held[0].len() + held[1].len()) as u64;
        self.held.store(held_len, Ordering::SeqCst);
        let spliced = {
            let mut inner = self.lock();
            let at = inner.end - inner.log_base;
            match inner.undecided {
                Some(k) => self.appender(&mut inner).map(|file| (file, at, k)),
                None => None,
            }
        };
        let Some((file, at, undecided)) = spliced else {
            // Through memory: the bytes are not in the file yet.
            if !decided.is_empty() {
                self.write_out(decided);
            }
            let over = self.account(decided);
            let mut inner = self.lock();
            if held_len == 0 && inner.log.in_file() {
                inner.undecided = Some(0);
            }
            return over;
        };
        if decided.len() as u64 + held_len != undecided {
            if let Err(err) = self.cut_noise(&file, at, undecided, [decided, held[0], held[1]]) {
                self.log_failed(&err);
                return self.account(decided);
            }
        }
        if let Some(k) = self.lock().undecided.as_mut() {
            *k = held_len;
        }
        self.account(decided)
    }

    /// Replaces the `len` undecided bytes at file offset `at` with `parts`
    /// (the same bytes, some dropped). From the first byte that differs, a
    /// truncation where the rest is a prefix of what is there, else a
    /// rewrite behind a redo record, so that a kill at any point leaves
    /// the old bytes or the new ones, never a mix.
    fn cut_noise(&self, file: &File, at: u64, len: u64, parts: [&[u8]; 3]) -> io::Result<()> {
        let new = parts.concat();
        let mut old = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        read_full_at(file, &mut old, at)?;
        let same = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        let (from, rest) = (at + same as u64, &new[same..]);
        if !old[same..].starts_with(rest) {
            let redo = redo_path(&self.path);
            let mut record = Vec::with_capacity(8 + rest.len());
            record.extend_from_slice(&from.to_le_bytes());
            record.extend_from_slice(rest);
            procd_sys::atomic::write_bytes_unsynced(&redo, &record)?;
            file.write_all_at(rest, from)?;
            file.set_len(from + rest.len() as u64)?;
            return std::fs::remove_file(&redo);
        }
        file.set_len(from + rest.len() as u64)
    }

    /// Why the log cannot be written right now, if it cannot.
    pub fn log_fault(&self) -> Option<String> {
        let inner = self.lock();
        if inner.log.in_file() {
            return None;
        }
        inner.log_error.as_ref().map(|(e, _)| e.clone())
    }

    /// Tries the disk again for a finished session whose log failed: no
    /// more output comes to make the next try (`write_out`), and what
    /// memory holds should reach the file once there is room. Only a
    /// finished store: its appender is gone, so nothing is accounted
    /// between the reopen and a write. Blocking file I/O.
    pub fn retry_finished_log(&self) {
        let mut inner = self.lock();
        if inner.finished && Self::log_retry_due(&inner) {
            self.reopen_log(&mut inner);
        }
    }

    /// Whether `retry_finished_log` would try the disk now (cheap: for
    /// the caller to decide whether to leave the event loop for it).
    pub fn finished_log_retry_due(&self) -> bool {
        let inner = self.lock();
        inner.finished && Self::log_retry_due(&inner)
    }

    /// The log failed, and `LOG_RETRY` has passed since.
    fn log_retry_due(inner: &Inner) -> bool {
        !inner.log.in_file()
            && inner
                .log_error
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() >= LOG_RETRY)
    }

    /// After a failed write: a new log file holding what memory still has
    /// (the tail), so that nothing still in memory is lost once the disk
    /// works again. On failure the next try is a second later.
    fn reopen_log(&self, inner: &mut Inner) {
        let tail = copy_out(&inner.tail, 0..inner.tail.len());
        let reopened = (|| {
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .read(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.path)?;
            file.write_all(&tail)?;
            Ok::<_, io::Error>(file)
        })();
        match reopened {
            Ok(file) => {
                let start = inner.tail_start();
                let tail_newlines = memchr::memchr_iter(b'\n', &tail).count() as u64;
                inner.log = Log::Open(Arc::new(file));
                inner.log_base = start;
                let dropped = inner.total_newlines - tail_newlines;
                forget_head(inner, start, dropped);
                inner.marks.clear();
                inner.log_error = None;
                tracing::info!(path = %self.path.display(), "the log can be written again");
            }
            Err(err) => inner.log_error = Some((err.to_string(), Instant::now())),
        }
    }
}

/// Where a log's pending rewrite is recorded (see `cut_noise`).
pub(super) fn redo_path(log: &Path) -> PathBuf {
    log.with_extension("log.redo")
}

/// The largest redo record accepted: a rewrite covers at most one read
/// (1 MiB) and a held line; anything larger was not written by procd.
const MAX_REDO: u64 = 4 << 20;

/// Completes a rewrite a killed daemon left half done (its redo record:
/// the file offset, then the bytes from there to the end). A record that
/// is not one procd wrote (too large, pointing past the file) is removed
/// and the file left as it is.
pub(super) fn complete_rewrite(file: &File, redo: &Path) -> io::Result<()> {
    let record = match File::open(redo) {
        Ok(f) => {
            let mut record = Vec::new();
            f.take(MAX_REDO + 1).read_to_end(&mut record)?;
            record
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    match record.split_first_chunk::<8>() {
        Some((at, rest)) if (record.len() as u64) <= MAX_REDO && u64::from_le_bytes(*at) <= len => {
            let at = u64::from_le_bytes(*at);
            file.write_all_at(rest, at)?;
            file.set_len(at + rest.len() as u64)?;
        }
        _ => {
            tracing::warn!(path = %redo.display(), "ignoring a log redo record procd did not write")
        }
    }
    std::fs::remove_file(redo)
}
