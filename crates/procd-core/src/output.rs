//! `OutputStore`: everything a session wrote (docs/protocol.md).
//!
//! Bytes are appended to `logs/<id>.log` and the newest `memory_tail_bytes`
//! are also kept in memory. A byte cursor counts from the session's first
//! byte, so cursors stay valid when the log cap drops the oldest part
//! (`log_base` is the cursor of the file's first byte, `kept_from` the first
//! cursor still kept). Readers are woken through a `watch` of the end
//! cursor; most reads are of recent output and are served from memory.
//!
//! Dropping the head: the file's oldest half is collapsed away in place
//! (FALLOC_FL_COLLAPSE_RANGE; a copy where unsupported), which keeps the
//! log a plain text file. But ext4 writes the whole file back to disk
//! before collapsing, so under a flood of output (compactions less than
//! [`FLOOD_WINDOW`] apart) the head is punched out instead
//! (FALLOC_FL_PUNCH_HOLE: its dirty pages are discarded, never written),
//! and the hole is collapsed once output has been quiet for [`TIDY_QUIET`]
//! (`tidy`), at the latest when the file's apparent size reaches
//! [`MAX_SPAN_CAPS`] caps. Only the log's head can be a hole, and only
//! while output floods.
//!
//! Ingest (issue "lose nothing across a crash"): a session's raw output is
//! spliced from its pipe (or its PTY's relay pipe) straight into the file
//! past `end` ([`OutputStore::splice_in`]), read back, and only then
//! judged by the noise filter ([`OutputStore::settle`]): a byte is in the
//! pipe or in the file at every instant, never only in this process's
//! memory. What the filter drops is cut out of the file afterwards (a
//! truncation, or a rewrite behind a redo record `<id>.log.redo` that
//! `open_existing` completes), so a kill at any step neither loses nor
//! repeats a byte; at worst a noise line the filter had not yet judged
//! stays in the log.
//!
//! Only the session's reader task appends, compacts and tidies, so those
//! never race an append. Readers of the file hold `layout` for reading, so
//! no pread sees the file shift under it.

use crate::redact::KEY_CONTEXT_BYTES;
use crate::text::complete_utf8_len;
use procd_proto::TestSummary;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// A trailing partial line is returned only after this much quiet (a prompt).
pub const PARTIAL_LINE_QUIET: Duration = Duration::from_millis(50);
/// Compactions closer together than this mean output floods: punch.
const FLOOD_WINDOW: Duration = Duration::from_secs(1);
/// Quiet after a flood before the punched head is collapsed away.
pub const TIDY_QUIET: Duration = Duration::from_secs(1);
/// The file's apparent size (holes included) stays under this many caps.
const MAX_SPAN_CAPS: u64 = 16;

struct Inner {
    log: Option<Arc<File>>,
    /// Cursor of the log file's first byte.
    log_base: u64,
    /// Cursor of the first byte still kept; the file's bytes before it
    /// were punched out during a flood (zeros until `tidy`).
    kept_from: u64,
    /// When the head was last dropped (to tell a flood).
    last_compaction: Option<Instant>,
    /// A tidy failed: not retried until the head is dropped again (else
    /// the supervisor would retry at once, forever).
    tidy_failed: bool,
    /// The last drop of the head failed: the next try waits a second (a
    /// failing disk would otherwise be retried, and logged, on every read).
    compaction_failed: bool,
    /// Writing the log failed (the disk is full, read-only, failing): the
    /// store serves from memory and tries again a second later, starting
    /// a new file with what memory still holds.
    log_error: Option<(String, Instant)>,
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
    /// When output was written, for a search's time range (`cursors_between`).
    times: TimeIndex,
    last_write: Option<Instant>,
    finished: bool,
    /// Raw bytes in the file past `end`: spliced in, still held by the
    /// noise filter (a line it has not judged yet), never shown to
    /// readers. None while what the filter holds is in memory only (the
    /// log failed, or was started again from memory): nothing is spliced
    /// until the filter holds nothing.
    undecided: Option<u64>,
    /// The last text `tail_text` made, kept until the output moves.
    tail_made: Option<TailMade>,
    /// What a recognised test runner said so far (testrun.rs), as the
    /// supervisor last put it.
    tests: Option<Arc<TestSummary>>,
}

/// A text made from the tail: for the output's `end` and `max_chars` it
/// was made at.
struct TailMade {
    end: u64,
    max_chars: usize,
    text: String,
}

/// How long after a failed log write the store tries the disk again.
const LOG_RETRY: Duration = Duration::from_secs(1);

/// Time marks one store keeps; past it the older half is thinned.
const MAX_TIME_MARKS: usize = 512;

/// Which cursor was written when: a mark per second that saw output,
/// thinned (two neighbours merged into one) when there are too many, so a
/// long-running session's index stays `MAX_TIME_MARKS` long. Only the
/// session's reader writes it. In memory only: a recovered log becomes
/// one mark covering everything up to the file's last change.
#[derive(Default)]
struct TimeIndex {
    marks: VecDeque<TimeMark>,
}

/// Output from `cursor` up to the next mark's was written in the seconds
/// `first..=last` (Unix time).
#[derive(Debug, Clone, Copy)]
struct TimeMark {
    first: u64,
    last: u64,
    cursor: u64,
}

impl TimeIndex {
    /// Output starting at `cursor` is being written in second `now`.
    fn wrote(&mut self, now: u64, cursor: u64) {
        if let Some(mark) = self.marks.back_mut() {
            if mark.last >= now {
                return;
            }
        }
        self.marks.push_back(TimeMark {
            first: now,
            last: now,
            cursor,
        });
        if self.marks.len() > MAX_TIME_MARKS {
            self.thin();
        }
    }

    /// Merges the older half's marks in pairs: recent output keeps its
    /// second, old output is placed more coarsely.
    fn thin(&mut self) {
        let half = self.marks.len() / 2;
        let (old, recent) = self.marks.make_contiguous().split_at(half);
        self.marks = old
            .chunks(2)
            .map(|pair| TimeMark {
                first: pair[0].first,
                last: pair[pair.len() - 1].last,
                cursor: pair[0].cursor,
            })
            .chain(recent.iter().copied())
            .collect();
    }

    /// Where output written at or after second `t` starts: the first mark
    /// that reaches `t` (all before it was written earlier).
    fn first_written_at_or_after(&self, t: u64, end: u64) -> u64 {
        self.marks
            .iter()
            .find(|m| m.last >= t)
            .map_or(end, |m| m.cursor)
    }

    /// Where output written after second `t` starts: the first mark that
    /// began after it (all before it was written at or before `t`, or in a
    /// mark that straddles `t`, which is kept).
    fn first_written_after(&self, t: u64, end: u64) -> u64 {
        self.marks
            .iter()
            .find(|m| m.first > t)
            .map_or(end, |m| m.cursor)
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How often a line-count mark is recorded.
const MARK_EVERY: u64 = 1 << 20;

impl Inner {
    /// The last line-count mark at or before `cursor` in the kept
    /// output: (its cursor, newlines from the first byte ever before it).
    fn line_mark(&self, cursor: u64) -> (u64, u64) {
        self.marks
            .iter()
            .rev()
            .find(|(at, _)| *at <= cursor && *at >= self.kept_from)
            .copied()
            .unwrap_or((self.kept_from, self.dropped_newlines))
    }

    fn kept_newlines(&self) -> u64 {
        self.total_newlines - self.dropped_newlines
    }

    fn tail_start(&self) -> u64 {
        self.end - self.tail.len() as u64
    }

    /// The file offset just past its last byte (decided or not).
    fn file_end(&self) -> u64 {
        self.end - self.log_base + self.undecided.unwrap_or(0)
    }

    /// The first cursor that can still be read.
    fn first_kept(&self) -> u64 {
        if self.log.is_some() {
            self.kept_from
        } else {
            self.tail_start()
        }
    }
}

/// What a page of lines is read from, taken under the lock.
struct LineView {
    /// The first byte kept, and the end.
    first: u64,
    end: u64,
    /// Lines kept (a fragment left by a drop not counted).
    total: u64,
    /// 1 when the kept output starts with a fragment of a dropped line.
    fragment: u64,
    file: Option<Arc<File>>,
    base: u64,
    /// The kept output, when the in-memory tail covers it all.
    tail: Option<Vec<u8>>,
    /// Where to start looking for a line: (cursor, newlines before it).
    seek: Vec<(u64, u64)>,
}

impl Inner {
    fn line_view(&self) -> LineView {
        let first = self.first_kept();
        let partial = u64::from(self.end > first && self.tail.back() != Some(&b'\n'));
        let newlines = if self.log.is_some() {
            self.kept_newlines()
        } else {
            self.tail.iter().filter(|b| **b == b'\n').count() as u64
        };
        // After a drop, text before the first kept newline is a fragment.
        let fragment = u64::from(first > 0 && newlines > 0);
        let total = newlines + partial - fragment;
        // The tail may reach back past what the log keeps (a tail
        // larger than half the cap): take only the kept part.
        let tail_covers = self.tail_start() <= first;
        let skip = first.saturating_sub(self.tail_start()) as usize;
        let tail = tail_covers.then(|| self.tail.iter().skip(skip).copied().collect::<Vec<u8>>());
        // Where to start looking for a line: (cursor, newlines before it).
        let seek: Vec<(u64, u64)> = std::iter::once((self.kept_from, self.dropped_newlines))
            .chain(
                self.marks
                    .iter()
                    .copied()
                    .filter(|(at, _)| *at >= self.kept_from),
            )
            .collect();
        LineView {
            first,
            end: self.end,
            total,
            fragment,
            file: self.log.clone(),
            base: self.log_base,
            tail,
            seek,
        }
    }
}

pub struct OutputStore {
    path: PathBuf,
    inner: Mutex<Inner>,
    /// Held for writing while the file's layout changes (collapse, punch,
    /// swap), for reading while a reader snapshots offsets and preads.
    layout: tokio::sync::RwLock<()>,
    changed: watch::Sender<u64>,
    /// A drain asked of the supervisor (`drained`): look at the source
    /// now, readiness or not.
    drain_asked: tokio::sync::Notify,
    /// Bumped each time the supervisor, asked, found its source empty and
    /// everything before in the store (decided).
    drains: watch::Sender<u64>,
    /// The supervisor's looks at a pipe, for a drain with no round trip
    /// (`drained_now`): odd while it reads or what it read is not all
    /// decided, even once a look found the pipe empty and the noise
    /// filter held nothing. Only the supervisor writes it.
    looks: AtomicU64,
    /// Bytes the noise filter held at the last `settle`.
    held: AtomicU64,
    max_log_bytes: u64,
    tail_cap: usize,
}

/// A window of stored output, decided by the rules of docs/protocol.md `read`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub bytes: Vec<u8>,
    /// Up to `KEY_CONTEXT_BYTES` of kept output just before `start`.
    pub before: Vec<u8>,
    /// Bytes between the requested cursor and `start` lost to the log cap.
    pub dropped: u64,
    /// A partial line is waiting for the quiet period (or more output).
    pub partial_pending: bool,
}

/// A page of lines of the kept output (see `OutputStore::lines`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    pub lines: Vec<String>,
    /// Index of the first line returned, and how many lines are kept.
    pub first: u64,
    pub total: u64,
    /// Up to `KEY_CONTEXT_BYTES` of output just before the first line.
    pub before: Vec<u8>,
    /// The page was cut by the byte cap before `limit` lines.
    pub truncated: bool,
}

/// The newest output as text, and up to `KEY_CONTEXT_BYTES` before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub text: String,
    pub before: Vec<u8>,
}

impl Window {
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl OutputStore {
    /// Creates (or truncates) the log file, mode 0600. Writes are
    /// positional (splice refuses O_APPEND files), always at `file_end`.
    pub fn create(path: &Path, max_log_bytes: u64, tail_cap: usize) -> io::Result<OutputStore> {
        let file = Self::new_file(path, false)?;
        Ok(Self::on_new_file(path, file, max_log_bytes, tail_cap))
    }

    /// A log file as every log is opened: read and write, mode 0600, no
    /// symlink followed; made only if absent (`exclusive`, a spare made
    /// ahead of a session), else made or truncated (O_TRUNC in the open,
    /// not a truncate after it: a new log costs one system call).
    pub fn new_file(path: &Path, exclusive: bool) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        if exclusive {
            options.create_new(true);
        } else {
            options.create(true).truncate(true);
        }
        options
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    /// A store on a log file made just now (empty), already at `path`.
    pub fn on_new_file(
        path: &Path,
        file: File,
        max_log_bytes: u64,
        tail_cap: usize,
    ) -> OutputStore {
        Self::with_file(path, Some(file), 0, 0, max_log_bytes, tail_cap)
    }

    /// Opens the log of a session recovered after a daemon restart: what
    /// it holds is readable; cursors count from its first kept byte.
    pub fn open_existing(
        path: &Path,
        max_log_bytes: u64,
        tail_cap: usize,
    ) -> io::Result<OutputStore> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        complete_rewrite(&file, &redo_path(path))?;
        // A daemon that died during a flood may have left the head punched
        // out: what is kept starts at the first data.
        let data_start = match nix::unistd::lseek(&file, 0, nix::unistd::Whence::SeekData) {
            Ok(at) => u64::try_from(at).unwrap_or(0),
            Err(nix::errno::Errno::ENXIO) => file.metadata()?.len(), // all hole
            Err(_) => 0,
        };
        // Read in chunks, counting lines and keeping only the tail: a
        // recovered log may be 64 MiB, and every session's is read at once.
        file.seek(SeekFrom::Start(data_start))?;
        let (mut newlines, mut len) = (0u64, 0u64);
        let mut tail: VecDeque<u8> = VecDeque::new();
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            let n = match file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let got = &chunk[..n];
            newlines += memchr::memchr_iter(b'\n', got).count() as u64;
            len += n as u64;
            let keep = &got[n - n.min(tail_cap)..];
            let overflow = (tail.len() + keep.len()).saturating_sub(tail_cap);
            tail.drain(..overflow.min(tail.len()));
            tail.extend(keep);
        }
        // What the log held was written before its last change; when
        // exactly is not known, so a time range that reaches back to that
        // change takes all of it.
        let written = file.metadata()?.modified().map_or(0, unix_secs);
        let store = Self::with_file(path, Some(file), 0, newlines, max_log_bytes, tail_cap);
        {
            let mut inner = store.lock();
            inner.kept_from = data_start;
            inner.end = data_start + len;
            inner.tail = tail;
            if len > 0 {
                inner.times.marks.push_back(TimeMark {
                    first: 0,
                    last: written,
                    cursor: data_start,
                });
            }
        }
        store.changed.send_replace(data_start + len);
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
                kept_from: base,
                last_compaction: None,
                tidy_failed: false,
                compaction_failed: false,
                log_error: None,
                end: base,
                tail: VecDeque::new(),
                total_newlines: kept_newlines,
                dropped_newlines: 0,
                marks: VecDeque::new(),
                times: TimeIndex::default(),
                last_write: None,
                finished: false,
                undecided: Some(0),
                tail_made: None,
                tests: None,
            }),
            layout: tokio::sync::RwLock::new(()),
            changed,
            drain_asked: tokio::sync::Notify::new(),
            drains: watch::channel(0).0,
            looks: AtomicU64::new(1),
            held: AtomicU64::new(0),
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
            inner.log.clone().map(|f| (f, inner.file_end()))
        };
        if let Some(Err(err)) = log.map(|(file, at)| file.write_all_at(bytes, at)) {
            self.log_failed(&err);
        }
    }

    /// Keeps serving from memory; older output is reported dropped.
    fn log_failed(&self, err: &io::Error) {
        tracing::warn!(path = %self.path.display(), %err, "log write failed; keeping memory tail only");
        let mut inner = self.lock();
        inner.log = None;
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
        let over = inner.log.is_some() && end - inner.kept_from > self.max_log_bytes;
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
            let inner = self.lock();
            match (&inner.log, inner.undecided) {
                (Some(file), Some(_)) => (file.clone(), inner.file_end()),
                _ => return Ok(None),
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
            let inner = self.lock();
            match (&inner.log, inner.undecided) {
                (Some(file), Some(k)) => Some((file.clone(), inner.end - inner.log_base, k)),
                _ => None,
            }
        };
        let Some((file, at, undecided)) = spliced else {
            // Through memory: the bytes are not in the file yet.
            if !decided.is_empty() {
                self.write_out(decided);
            }
            let over = self.account(decided);
            let mut inner = self.lock();
            if held_len == 0 && inner.log.is_some() {
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
        inner
            .log
            .is_none()
            .then(|| inner.log_error.as_ref().map(|(e, _)| e.clone()))
            .flatten()
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
        inner.log.is_none()
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
                inner.log = Some(Arc::new(file));
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

    /// Drops the oldest half of the log (off the event loop).
    pub async fn compact(self: &Arc<Self>) {
        self.off_loop("log compaction", |store| store.compact_blocking())
            .await;
    }

    /// When a punched head should be collapsed away: after `TIDY_QUIET` of
    /// quiet. None when the log has no hole.
    pub fn tidy_due(&self) -> Option<Instant> {
        let inner = self.lock();
        let holed = inner.log.is_some() && inner.kept_from > inner.log_base && !inner.tidy_failed;
        holed.then(|| inner.last_write.unwrap_or_else(Instant::now) + TIDY_QUIET)
    }

    /// Collapses a punched head away (output went quiet after a flood).
    pub async fn tidy(self: &Arc<Self>) {
        self.off_loop("log tidy", |store| {
            let cut = store.lock().kept_from;
            let result = store.drop_head(cut);
            store.lock().tidy_failed = result.is_err();
            result
        })
        .await;
    }

    async fn off_loop(
        self: &Arc<Self>,
        what: &'static str,
        work: impl FnOnce(&OutputStore) -> io::Result<()> + Send + 'static,
    ) {
        let store = self.clone();
        let result = tokio::task::spawn_blocking(move || {
            let _layout = store.layout.blocking_write();
            work(&store)
        })
        .await;
        if let Ok(Err(err)) = result {
            tracing::warn!(path = %self.path.display(), %err, "{what} failed");
        }
    }

    fn compact_blocking(&self) -> io::Result<()> {
        let (end, span, flooding) = {
            let mut inner = self.lock();
            if inner.log.is_none() {
                return Ok(());
            }
            let flooding = inner
                .last_compaction
                .is_some_and(|t| t.elapsed() < FLOOD_WINDOW);
            if flooding && inner.compaction_failed {
                return Ok(()); // tried and failed less than a second ago
            }
            inner.last_compaction = Some(Instant::now());
            inner.tidy_failed = false;
            (inner.end, inner.end - inner.log_base, flooding)
        };
        let cut = end - self.max_log_bytes / 2;
        let punched = if flooding && span < self.max_log_bytes.saturating_mul(MAX_SPAN_CAPS) {
            match self.punch_head(cut) {
                Err(e) if unsupported(&e) => None,
                done => Some(done),
            }
        } else {
            None
        };
        let result = punched.unwrap_or_else(|| self.drop_head(cut));
        self.lock().compaction_failed = result.is_err();
        result
    }

    /// Makes `cut` (rounded down to a block) the first kept cursor by
    /// collapsing the file's head away, or by rewriting the file where the
    /// filesystem cannot collapse.
    fn drop_head(&self, cut: u64) -> io::Result<()> {
        let Some((file, base, drop)) = self.aligned_cut(cut) else {
            return Ok(());
        };
        let newlines = self.newlines_before(&file, base + drop)?;
        match fallocate(&file, rustix::fs::FallocateFlags::COLLAPSE_RANGE, 0, drop) {
            Ok(()) => {
                let mut inner = self.lock();
                inner.log_base = base + drop;
                forget_head(&mut inner, base + drop, newlines);
                Ok(())
            }
            // Filesystems without FALLOC_FL_COLLAPSE_RANGE (tmpfs, …): copy.
            Err(e) if unsupported(&e) => self.copy_tail(&file, base, cut),
            Err(e) => Err(e),
        }
    }

    /// Makes `cut` (rounded down to a block) the first kept cursor by
    /// punching the kept head out: the file keeps its size, its dropped
    /// pages are discarded without being written back.
    fn punch_head(&self, cut: u64) -> io::Result<()> {
        let Some((file, base, drop)) = self.aligned_cut(cut) else {
            return Ok(());
        };
        let from = self.lock().kept_from - base;
        if drop <= from {
            return Ok(());
        }
        let newlines = self.newlines_before(&file, base + drop)?;
        fallocate(
            &file,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            from,
            drop - from,
        )?;
        forget_head(&mut self.lock(), base + drop, newlines);
        Ok(())
    }

    /// The file, its base, and the file offset of `cut` rounded down to the
    /// block size; None when that drops nothing new.
    fn aligned_cut(&self, cut: u64) -> Option<(Arc<File>, u64, u64)> {
        let (file, base, kept_from) = {
            let inner = self.lock();
            (inner.log.clone()?, inner.log_base, inner.kept_from)
        };
        let block = nix::sys::statvfs::fstatvfs(&*file)
            .map(|s| s.block_size())
            .unwrap_or(4096)
            .max(512);
        let drop = cut.saturating_sub(base) / block * block;
        // A tidy drops exactly the hole (`kept_from` is block-aligned).
        (drop > 0 && base + drop >= kept_from).then_some((file, base, drop))
    }

    /// Newlines before cursor `cut` (for `log`'s line numbers): from the
    /// last mark at or before it, counting only the stretch after it.
    fn newlines_before(&self, file: &File, cut: u64) -> io::Result<u64> {
        let (base, from, mut newlines) = {
            let inner = self.lock();
            let (from, newlines) = inner.line_mark(cut);
            (inner.log_base, from, newlines)
        };
        let mut buf = vec![0u8; (cut - from).min(1 << 20) as usize];
        let mut at = from;
        while at < cut {
            let want = (cut - at).min(buf.len() as u64) as usize;
            let n = file.read_at(&mut buf[..want], at - base)?;
            if n == 0 {
                break;
            }
            newlines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
            at += n as u64;
        }
        Ok(newlines)
    }

    /// Rewrites the file from cursor `cut` and swaps it in (where the
    /// filesystem cannot collapse a range). Like a collapse, the first kept
    /// line may be a fragment.
    fn copy_tail(&self, file: &File, base: u64, cut: u64) -> io::Result<()> {
        let tmp_path = self.path.with_extension("log.compact");
        let copied = (|| {
            let mut tmp = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp_path)?;
            let mut newlines = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            let mut at = cut - base;
            // Undecided bytes past `end` are copied too, but not counted.
            let decided_end = self.lock().end - base;
            loop {
                let n = file.read_at(&mut buf, at)?;
                if n == 0 {
                    break;
                }
                let counted = n.min(usize::try_from(decided_end.saturating_sub(at)).unwrap_or(n));
                newlines += memchr::memchr_iter(b'\n', &buf[..counted]).count() as u64;
                tmp.write_all(&buf[..n])?;
                at += n as u64;
            }
            std::fs::rename(&tmp_path, &self.path)?;
            Ok::<_, io::Error>(newlines)
        })();
        // A half-written copy must not be left beside the log.
        let newlines = copied.inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp_path);
        })?;
        let appender = OpenOptions::new()
            .write(true)
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)?;
        let mut inner = self.lock();
        inner.log = Some(Arc::new(appender));
        inner.log_base = cut;
        let dropped = inner.total_newlines - newlines;
        forget_head(&mut inner, cut, dropped);
        Ok(())
    }

    /// procd's line between two runs of a restarting session, on a line of
    /// its own; output comes again (the next run's). Called between two
    /// supervisors, so it is the only appender.
    pub fn mark_restart(&self, line: &str) {
        let mut text = Vec::with_capacity(line.len() + 2);
        {
            let mut inner = self.lock();
            inner.finished = false;
            if inner.tail.back().is_some_and(|b| *b != b'\n') {
                text.push(b'\n');
            }
        }
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        self.append(&text);
    }

    /// The session's test run as its supervisor reads it (None: no
    /// runner recognised, or a run it could not follow to its totals).
    pub fn set_tests(&self, tests: Option<TestSummary>) {
        self.lock().tests = tests.map(Arc::new);
    }

    pub fn tests(&self) -> Option<Arc<TestSummary>> {
        self.lock().tests.clone()
    }

    /// No more output will come (the session exited).
    pub fn finish(&self) {
        let mut inner = self.lock();
        inner.finished = true;
        let end = inner.end;
        drop(inner);
        self.changed.send_replace(end);
    }

    /// The cursor range written between `since` and `until` (either
    /// open), to the second, and wider, never narrower, where the index
    /// has been thinned or the log was recovered (`TimeIndex`).
    pub fn cursors_between(
        &self,
        since: Option<SystemTime>,
        until: Option<SystemTime>,
    ) -> (u64, u64) {
        let inner = self.lock();
        let from = since.map_or(0, |t| {
            inner
                .times
                .first_written_at_or_after(unix_secs(t), inner.end)
        });
        let to = until.map_or(u64::MAX, |t| {
            inner.times.first_written_after(unix_secs(t), inner.end)
        });
        (from, to)
    }

    /// Where a scan of the kept output that wants to start at `cursor`
    /// may start without losing line numbers: the last line-count mark at
    /// or before it, as (cursor, kept newlines before it); the first kept
    /// byte when the output is only in memory.
    pub fn scan_start(&self, cursor: u64) -> (u64, u64) {
        let inner = self.lock();
        if inner.log.is_none() {
            return (inner.first_kept(), 0);
        }
        let (at, newlines) = inner.line_mark(cursor);
        (at, newlines - inner.dropped_newlines)
    }

    pub fn end(&self) -> u64 {
        self.lock().end
    }

    /// A receiver that changes whenever output is appended or finished.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Returns once every byte written to the session's output before the
    /// call is in the store, decided, so that `end` covers it: a shell
    /// command's end (`shell/`). Its writer has finished writing, so the
    /// supervisor, asked, reads until the source is empty. Returns at
    /// once when no supervisor reads (the session's output ended); the
    /// caller bounds the wait for one held by a flood hold.
    pub async fn drained(&self) {
        let mut drains = self.drains.subscribe();
        let before = *drains.borrow_and_update();
        self.drain_asked.notify_one();
        let finished = || self.lock().finished;
        while *drains.borrow_and_update() == before && !finished() {
            let mut changed = self.changed.subscribe();
            tokio::select! {
                r = drains.changed() => if r.is_err() { return },
                _ = changed.changed() => {}
            }
        }
    }

    /// `drained` without asking the supervisor, when it can be told from
    /// here: true if the supervisor's last look found its pipe empty with
    /// nothing held, and `empty` (the pipe looked at now) says it still
    /// is, with no look of the supervisor's in between. Then every byte
    /// written before this call was read by a look that ended before it,
    /// and is decided. False says nothing: ask with `drained`.
    pub fn drained_now(&self, empty: impl FnOnce() -> bool) -> bool {
        let before = self.looks.load(Ordering::SeqCst);
        before.is_multiple_of(2) && empty() && self.looks.load(Ordering::SeqCst) == before
    }

    /// For the supervisor: it is about to read its pipe.
    pub(crate) fn look_begins(&self) {
        let looks = self.looks.load(Ordering::SeqCst);
        if looks.is_multiple_of(2) {
            self.looks.store(looks + 1, Ordering::SeqCst);
        }
    }

    /// For the supervisor: its pipe was empty, and all it read before is
    /// settled.
    pub(crate) fn look_found_nothing(&self) {
        let looks = self.looks.load(Ordering::SeqCst);
        if !looks.is_multiple_of(2) && self.held.load(Ordering::SeqCst) == 0 {
            self.looks.store(looks + 1, Ordering::SeqCst);
        }
    }

    /// For the supervisor: a drain is asked.
    pub(crate) async fn drain_asked(&self) {
        self.drain_asked.notified().await
    }

    /// For the supervisor, in the middle of a drain: go on draining at
    /// the next look.
    pub(crate) fn drain_on(&self) {
        self.drain_asked.notify_one();
    }

    /// For the supervisor: asked, it found the source empty and stored
    /// everything before.
    pub(crate) fn mark_drained(&self) {
        self.drains.send_modify(|n| *n += 1);
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

    /// `make` of the newest output as text (at most `max_chars` chars, and
    /// the output just before it), kept until the output moves: polls of
    /// a session whose output has not moved are answered with the text
    /// made for the first (a redacted 1000-char preview costs ~40 k
    /// instructions, the rest of a poll ~25 k). `make` must depend on the
    /// tail alone, the same way on every call: a store's tail is only
    /// ever redacted as its session's output.
    pub fn tail_text(&self, max_chars: usize, make: impl FnOnce(Tail) -> String) -> String {
        let inner = self.lock();
        if let Some(made) = &inner.tail_made {
            if made.end == inner.end && made.max_chars == max_chars {
                return made.text.clone();
            }
        }
        let end = inner.end;
        let len = inner.tail.len();
        let shown = (max_chars * 4).min(len);
        let context = KEY_CONTEXT_BYTES.min(len - shown);
        let bytes = copy_out(&inner.tail, len - shown - context..len);
        drop(inner);
        // Only the part that may be shown is decoded (polls come here).
        let (context, region) = bytes.split_at(context);
        let start = crate::text::leading_continuations(region);
        let decoded = crate::text::lossy(&region[start..]);
        let text = crate::text::last_chars(&decoded, max_chars);
        let skipped = &decoded.as_bytes()[..decoded.len() - text.len()];
        let mut before = [context, &region[..start], skipped].concat();
        before.drain(..before.len().saturating_sub(KEY_CONTEXT_BYTES));
        let text = make(Tail {
            before,
            text: text.to_string(),
        });
        // Made outside the lock, for `end`: output may have come since,
        // and then the next call makes its own.
        self.lock().tail_made = Some(TailMade {
            end,
            max_chars,
            text: text.clone(),
        });
        text
    }

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
            Source::File(file, base) => {
                let range = (plan.context, plan.start, plan.stop);
                tokio::task::spawn_blocking(move || read_window(&file, base, range))
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
            Source::File(file, base) => {
                read_window(&file, base, (plan.context, plan.start, plan.stop))?
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
            match &inner.log {
                Some(f) => Source::File(f.clone(), inner.log_base),
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
        } = self.lock().line_view();
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
            (None, Some(file)) => {
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
                    page_in_file(&file, base, end, from, counted, target, want, max_bytes)
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

    /// Removes the log file (the session was pruned).
    pub fn delete_log(&self) {
        let mut inner = self.lock();
        inner.log = None;
        drop(inner);
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(redo_path(&self.path));
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
    File(Arc<File>, u64),
}

/// Where the last line in `bytes` ends (the index of its terminator): a
/// newline, or a carriage return that something follows. A progress bar
/// that redraws its line with "\r" ends a line each time, so readers see
/// it move instead of waiting for it to pause; a final "\r" may be the
/// first half of "\r\n" and does not count yet.
fn last_line_end(bytes: &[u8]) -> Option<usize> {
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

/// Records that output before cursor `cut` (holding `newlines`) is gone.
fn forget_head(inner: &mut Inner, cut: u64, newlines: u64) {
    inner.kept_from = cut;
    inner.dropped_newlines = newlines;
    while inner.marks.front().is_some_and(|(at, _)| *at < cut) {
        inner.marks.pop_front();
    }
}

fn fallocate(
    file: &File,
    mode: rustix::fs::FallocateFlags,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    Ok(rustix::fs::fallocate(file, mode, offset, len)?)
}

/// The filesystem cannot do this fallocate mode.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
    )
}

/// Where a log's pending rewrite is recorded (see `cut_noise`).
fn redo_path(log: &Path) -> PathBuf {
    log.with_extension("log.redo")
}

/// The largest redo record accepted: a rewrite covers at most one read
/// (1 MiB) and a held line; anything larger was not written by procd.
const MAX_REDO: u64 = 4 << 20;

/// Completes a rewrite a killed daemon left half done (its redo record:
/// the file offset, then the bytes from there to the end). A record that
/// is not one procd wrote (too large, pointing past the file) is removed
/// and the file left as it is.
fn complete_rewrite(file: &File, redo: &Path) -> io::Result<()> {
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

/// Up to `len` bytes of `file` at `offset` (fewer at its end), read into
/// memory not zeroed first: a search reads a log's every byte this way,
/// and zeroing its windows cost a tenth of its time.
fn read_at(file: &File, mut offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), offset) {
            Ok(0) => break,
            Ok(n) => offset += n as u64,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    // The spare capacity may have been larger than asked for.
    buf.truncate(len);
    Ok(buf)
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

/// `tail[range]`, copied a slice at a time: collected byte by byte out
/// of the deque it costs a few instructions a byte, and a poll copies
/// 12 KiB of it (its preview's 4 KiB and the 8 KiB before, for redaction).
fn copy_out(tail: &VecDeque<u8>, range: std::ops::Range<usize>) -> Vec<u8> {
    let (front, back) = tail.as_slices();
    let split = front.len();
    let mut out = Vec::with_capacity(range.len());
    if range.start < split {
        out.extend_from_slice(&front[range.start..range.end.min(split)]);
    }
    if range.end > split {
        out.extend_from_slice(&back[range.start.max(split) - split..range.end - split]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A week of output, a write a second: the index stays bounded, a
    /// range found in it never leaves out what was written in it, and
    /// the newest output keeps its second.
    #[test]
    fn the_time_index_stays_bounded_and_never_narrows_a_range() {
        let mut times = TimeIndex::default();
        let (t0, writes) = (1_000_000, 7 * 86_400u64);
        for s in 0..writes {
            times.wrote(t0 + s, s * 10);
            times.wrote(t0 + s, s * 10 + 5);
        }
        assert!(times.marks.len() <= MAX_TIME_MARKS, "{}", times.marks.len());
        let end = writes * 10;
        for s in (0..writes).step_by(997) {
            assert!(times.first_written_at_or_after(t0 + s, end) <= s * 10);
            assert!(times.first_written_after(t0 + s, end) >= (s + 1) * 10);
        }
        let last = writes - 3;
        assert_eq!(times.first_written_at_or_after(t0 + last, end), last * 10);
        assert_eq!(times.first_written_after(t0 + last, end), (last + 1) * 10);
        assert_eq!(times.first_written_at_or_after(t0 + writes, end), end);
        assert_eq!(times.first_written_after(t0 - 1, end), 0);
    }

    #[test]
    fn copy_out_is_the_deques_bytes_wherever_it_wraps() {
        let mut wrapped = 0;
        for wrap in 0..12u8 {
            // Bytes pushed at the back as others leave the front, as the
            // tail is kept: past the buffer's end they wrap to its start.
            let mut tail: VecDeque<u8> = VecDeque::with_capacity(12);
            tail.extend(0..12);
            for b in 12..12 + wrap {
                tail.pop_front();
                tail.push_back(b);
            }
            wrapped += usize::from(!tail.as_slices().1.is_empty());
            for start in 0..=tail.len() {
                for end in start..=tail.len() {
                    let byte_by_byte: Vec<u8> = tail.range(start..end).copied().collect();
                    assert_eq!(
                        copy_out(&tail, start..end),
                        byte_by_byte,
                        "{wrap} {start}..{end}"
                    );
                }
            }
        }
        assert!(wrapped > 0, "no deque wrapped");
    }

    #[test]
    fn a_tail_text_is_made_again_only_when_the_output_moved() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, 1 << 20, 1 << 16);
        let made = std::cell::Cell::new(0);
        let text = |chars| {
            s.tail_text(chars, |tail| {
                made.set(made.get() + 1);
                format!("{}|{}", tail.text, tail.before.len())
            })
        };
        s.append(b"one\ntwo\n");
        assert_eq!(text(4), "two\n|4");
        assert_eq!(text(4), "two\n|4");
        assert_eq!(made.get(), 1, "the same output made twice");
        assert_eq!(text(100), "one\ntwo\n|0", "another length is made anew");
        assert_eq!(made.get(), 2);
        s.append(b"three\n");
        assert_eq!(text(100), "one\ntwo\nthree\n|0", "new output is shown");
        assert_eq!(made.get(), 3);
        // Finishing moves no output: the text stays.
        s.finish();
        assert_eq!(text(100), "one\ntwo\nthree\n|0");
        assert_eq!(made.get(), 3);
    }

    fn store(dir: &tempfile::TempDir, cap: u64, tail: usize) -> Arc<OutputStore> {
        Arc::new(OutputStore::create(&dir.path().join("s.log"), cap, tail).unwrap())
    }

    use std::os::fd::AsFd;

    /// A pipe holding `bytes`, its read end non-blocking.
    fn pipe_with(bytes: &[u8]) -> std::os::fd::OwnedFd {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
        rustix::io::write(&w, bytes).unwrap();
        r
    }

    #[tokio::test]
    async fn spliced_bytes_are_output_once_settled_and_noise_is_cut_out() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, 1 << 20, 1 << 16);
        let mut buf = vec![0u8; 64];
        let r = pipe_with(b"one\nbash: noise\ntw");
        assert_eq!(s.splice_in(r.as_fd(), &mut buf).unwrap(), Some(18));
        assert_eq!(&buf[..18], b"one\nbash: noise\ntw");
        assert_eq!(s.end(), 0, "undecided bytes are not output yet");
        // The filter passed "one\n", dropped the notice, holds "tw".
        assert!(!s.settle(b"one\n", [b"", b"tw"]));
        assert_eq!(s.end(), 4);
        assert_eq!(std::fs::read(s.path()).unwrap(), b"one\ntw");
        assert!(!redo_path(s.path()).exists());
        let w = s.window(0, 100).await.unwrap();
        assert_eq!(w.bytes, b"one\n", "the held bytes are not served");
        // More comes; the filter passes the held line with it.
        let r = pipe_with(b"o\n");
        assert_eq!(s.splice_in(r.as_fd(), &mut buf).unwrap(), Some(2));
        assert!(!s.settle(b"two\n", [b"", b""]));
        assert_eq!(std::fs::read(s.path()).unwrap(), b"one\ntwo\n");
        assert_eq!(s.end(), 8);
        // A notice at the end is truncated away.
        let r = pipe_with(b"logout\n");
        s.splice_in(r.as_fd(), &mut buf).unwrap();
        assert!(!s.settle(b"", [b"", b""]));
        assert_eq!(std::fs::read(s.path()).unwrap(), b"one\ntwo\n");
        // An empty pipe with a writer is WouldBlock; without one, the end.
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
        let e = s.splice_in(r.as_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(w);
        assert_eq!(s.splice_in(r.as_fd(), &mut buf).unwrap(), Some(0));
    }

    #[test]
    fn a_rewrite_a_kill_left_half_done_is_completed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.log");
        // Killed after the new bytes were written, before the truncation.
        std::fs::write(&path, b"keep\nreal\nnoise\nreal\n").unwrap();
        let mut record = 5u64.to_le_bytes().to_vec();
        record.extend_from_slice(b"real\n");
        std::fs::write(redo_path(&path), &record).unwrap();
        let s = OutputStore::open_existing(&path, 1 << 20, 1 << 16).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"keep\nreal\n");
        assert_eq!(s.end(), 10);
        assert!(!redo_path(&path).exists());
        // A record no procd wrote (pointing past the file) changes nothing.
        std::fs::write(redo_path(&path), 1000u64.to_le_bytes()).unwrap();
        OutputStore::open_existing(&path, 1 << 20, 1 << 16).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"keep\nreal\n");
        assert!(!redo_path(&path).exists());
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

    #[test]
    fn carriage_returns_end_lines_unless_they_may_start_a_crlf() {
        assert_eq!(last_line_end(b"50%\r60%\r7"), Some(7));
        assert_eq!(last_line_end(b"50%\r60%\r"), Some(3));
        assert_eq!(last_line_end(b"a\r\nb"), Some(2));
        assert_eq!(last_line_end(b"a\n\r"), Some(1));
        assert_eq!(last_line_end(b"\r"), None);
        assert_eq!(last_line_end(b"no end"), None);
    }

    #[tokio::test]
    async fn a_redrawn_progress_line_is_readable_while_it_keeps_changing() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, 1 << 20, 1024);
        s.append(b"building 1/3\rbuilding 2/3\rbuil");
        // Not quiet (just written) and running: up to the last redraw.
        let w = s.window(0, 1000).await.unwrap();
        assert_eq!(w.bytes, b"building 1/3\rbuilding 2/3\r");
        assert!(!w.partial_pending);
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
        // Compactions came in a burst, so the head was punched; the
        // session's reader tidies when output stops.
        s.tidy().await;
        s.finish();
        assert_eq!(s.end(), 10_000);
        let w = s.window(0, 200).await.unwrap();
        assert!(w.dropped > 0 && w.start == w.dropped);
        let Lines {
            lines,
            first,
            total,
            ..
        } = s.lines(None, 2, usize::MAX / 2).await.unwrap();
        assert_eq!(lines, vec![format!("{:099}", 98), format!("{:099}", 99)]);
        assert_eq!(first + 2, total);
        // Capped (the in-place drop works in whole filesystem blocks, so
        // the file may exceed the cap by less than one block).
        let size = std::fs::metadata(s.path()).unwrap().len();
        assert!(size <= 4096 + 4096, "log capped, is {size}");
    }

    /// Appends numbered 100-byte lines `from..to`, compacting as told.
    async fn lines_of_100(s: &Arc<OutputStore>, from: u32, to: u32) {
        for i in from..to {
            if s.append(format!("{i:099}\n").as_bytes()) {
                s.compact().await;
            }
        }
    }

    fn allocated(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[tokio::test]
    async fn a_flood_punches_the_head_and_quiet_collapses_it() {
        flood_then_tidy(tempfile::tempdir().unwrap()).await;
    }

    /// tmpfs can punch but not collapse: the tidy rewrites the file.
    #[tokio::test]
    async fn on_tmpfs_the_punched_head_is_tidied_by_a_rewrite() {
        let shm = tempfile::tempdir_in("/dev/shm").expect("this machine has a tmpfs at /dev/shm");
        let fs = nix::sys::statfs::statfs(shm.path()).unwrap();
        assert_eq!(fs.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC);
        flood_then_tidy(shm).await;
    }

    /// A tidy that fails (here: tmpfs rewrites the file, and its directory
    /// is gone) is not retried at once, which would spin the supervisor.
    #[tokio::test]
    async fn a_failed_tidy_waits_for_the_next_drop() {
        let shm = tempfile::tempdir_in("/dev/shm").expect("this machine has a tmpfs at /dev/shm");
        let s = store(&shm, 64 * 1024, 100);
        lines_of_100(&s, 0, 3_000).await;
        assert!(s.tidy_due().is_some(), "the flood left a hole");
        std::fs::remove_dir_all(shm.path()).unwrap();
        s.tidy().await;
        assert_eq!(s.tidy_due(), None, "not due again right away");
        let w = s.window(0, 1 << 20).await.unwrap();
        assert!(w.dropped > 0 && !w.bytes.is_empty() && !w.bytes.contains(&0));
        // Dropping the head again re-arms it (and still works: it punches).
        lines_of_100(&s, 3_000, 4_000).await;
        assert!(s.tidy_due().is_some());
    }

    /// When the head cannot be dropped (tmpfs rewrites the file, and its
    /// directory is gone), output is still stored and served.
    #[tokio::test]
    async fn a_log_whose_head_cannot_be_dropped_still_serves_everything() {
        let shm = tempfile::tempdir_in("/dev/shm").expect("this machine has a tmpfs at /dev/shm");
        let s = store(&shm, 8 * 1024, 100);
        std::fs::remove_dir_all(shm.path()).unwrap();
        lines_of_100(&s, 0, 1_000).await;
        s.finish();
        let w = s.window(0, 1 << 20).await.unwrap();
        assert!(!w.bytes.contains(&0));
        assert!(w.bytes.ends_with(format!("{:099}\n", 999).as_bytes()));
        let last = s.lines(None, 1, usize::MAX / 2).await.unwrap();
        assert_eq!(last.lines, vec![format!("{:099}", 999)]);
    }

    /// A rewrite that fails (tmpfs cannot collapse; here the log's path has
    /// become a directory, so the rename fails) leaves no copy behind.
    #[tokio::test]
    async fn a_failed_rewrite_leaves_no_partial_copy() {
        let shm = tempfile::tempdir_in("/dev/shm").expect("this machine has a tmpfs at /dev/shm");
        let s = store(&shm, 8 * 1024, 100);
        std::fs::remove_file(s.path()).unwrap();
        std::fs::create_dir(s.path()).unwrap();
        lines_of_100(&s, 0, 200).await;
        assert!(!s.path().with_extension("log.compact").exists());
        s.finish();
        let last = s.lines(None, 1, usize::MAX / 2).await.unwrap();
        assert_eq!(last.lines, vec![format!("{:099}", 199)]);
    }

    async fn flood_then_tidy(dir: tempfile::TempDir) {
        let s = store(&dir, 64 * 1024, 100);
        // 1 MiB in quick succession: compactions less than a second apart.
        lines_of_100(&s, 0, 10_000).await;
        let size = std::fs::metadata(s.path()).unwrap().len();
        // The first drop collapses; those that follow at once punch.
        assert!(size > 900_000, "punched, not collapsed: the size stays");
        assert!(
            allocated(s.path()) <= 64 * 1024 + 8192,
            "but the disk use is capped"
        );
        assert!(s.tidy_due().is_some());
        let before = s.window(0, 1 << 20).await.unwrap();
        assert!(before.dropped > 900_000, "{}", before.dropped);
        assert!(!before.bytes.contains(&0), "the hole is never served");
        let Lines {
            lines,
            first,
            total,
            ..
        } = s.lines(Some(0), 1_000_000, usize::MAX / 2).await.unwrap();
        assert_eq!(lines.last().unwrap(), &format!("{:099}", 9999));
        assert_eq!(first, 0);
        assert_eq!(total as usize, lines.len());
        assert!(lines.iter().all(|l| l.len() == 99 && !l.contains('\0')));

        s.tidy().await;
        assert_eq!(s.tidy_due(), None);
        let size = std::fs::metadata(s.path()).unwrap().len();
        assert!(size <= 64 * 1024 + 4096, "collapsed to the cap, is {size}");
        let text = std::fs::read(s.path()).unwrap();
        assert!(!text.contains(&0), "no hole left in the file");
        // Cursors still mean the same bytes.
        let after = s.window(0, 1 << 20).await.unwrap();
        assert_eq!((after.start, &after.bytes), (before.start, &before.bytes));
        assert_eq!(
            s.lines(Some(0), 1_000_000, usize::MAX / 2)
                .await
                .unwrap()
                .lines,
            lines
        );
        // And the next output appends after it.
        lines_of_100(&s, 10_000, 10_001).await;
        s.finish();
        let Lines {
            lines: last,
            total: total_after,
            ..
        } = s.lines(None, 1, usize::MAX / 2).await.unwrap();
        assert_eq!(last, vec![format!("{:099}", 10_000)]);
        assert_eq!(total_after, total + 1);
    }

    #[tokio::test]
    async fn a_log_left_with_a_punched_head_is_recovered_from_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, 64 * 1024, 100);
        lines_of_100(&s, 0, 3_000).await;
        assert!(s.tidy_due().is_some(), "the flood left a hole");
        let kept = s.window(0, 1 << 20).await.unwrap();
        drop(s);
        let r = OutputStore::open_existing(&dir.path().join("s.log"), 64 * 1024, 100).unwrap();
        r.finish();
        let w = r.window(0, 1 << 20).await.unwrap();
        assert!(w.dropped > 0 && !w.bytes.contains(&0));
        assert!(kept.bytes.ends_with(&w.bytes) && w.bytes.len() + 4096 >= kept.bytes.len());
    }
}
