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
//!
//! The store is here; coming in is `ingest`, keeping under the cap
//! `compact`, reading back `read`, and the time marks `time_index`.

mod compact;
mod ingest;
mod read;
mod time_index;

use ingest::{complete_rewrite, redo_path};
use time_index::{unix_secs, TimeIndex};

use crate::output::redact::KEY_CONTEXT_BYTES;
use procd_proto::TestSummary;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// A trailing partial line is returned only after this much quiet (a prompt).
pub const PARTIAL_LINE_QUIET: Duration = Duration::from_millis(50);
/// Compactions closer together than this mean output floods: punch.
const FLOOD_WINDOW: Duration = Duration::from_secs(1);
/// Quiet after a flood before the punched head is collapsed away.
pub const TIDY_QUIET: Duration = Duration::from_secs(1);
/// The file's apparent size (holes included) stays under this many caps.
const MAX_SPAN_CAPS: u64 = 16;

/// The log file, as the store holds it.
enum Log {
    /// Open, for output coming and for reads.
    Open(Arc<File>),
    /// Whole on disk, no output coming (the session finished): opened for
    /// each read, and again should output come (a restart's). So a
    /// retained session holds no descriptor: 10 000 ended sessions would
    /// otherwise hold 10 000.
    Closed,
    /// No file: writing it failed (`log_error` says why; memory serves),
    /// or it was deleted.
    Absent,
}

impl Log {
    /// Whether the output is in a file (open or not).
    fn in_file(&self) -> bool {
        !matches!(self, Log::Absent)
    }

    /// The file for a reader: the open one, or the path to open it at.
    fn reader(&self, path: &Path) -> Option<LogReader> {
        match self {
            Log::Open(file) => Some(LogReader::Open(file.clone())),
            Log::Closed => Some(LogReader::Closed(path.to_path_buf())),
            Log::Absent => None,
        }
    }
}

/// A log file as a reader takes it under the lock, to read outside it.
enum LogReader {
    Open(Arc<File>),
    Closed(PathBuf),
}

impl LogReader {
    /// The file itself (a closed log is opened: blocking, briefly).
    fn file(self) -> io::Result<Arc<File>> {
        match self {
            LogReader::Open(file) => Ok(file),
            LogReader::Closed(path) => OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map(Arc::new),
        }
    }
}

struct Inner {
    log: Log,
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
        if self.log.in_file() {
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
    file: Option<LogReader>,
    base: u64,
    /// The kept output, when the in-memory tail covers it all.
    tail: Option<Vec<u8>>,
    /// Where to start looking for a line: (cursor, newlines before it).
    seek: Vec<(u64, u64)>,
}

impl Inner {
    fn line_view(&self, path: &Path) -> LineView {
        let first = self.first_kept();
        let partial = u64::from(self.end > first && self.tail.back() != Some(&b'\n'));
        let newlines = if self.log.in_file() {
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
            file: self.log.reader(path),
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
                inner.times = TimeIndex::recovered(data_start, written);
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
                log: file.map_or(Log::Absent, |f| Log::Open(Arc::new(f))),
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

    /// No more output will come (the session exited): the log is closed.
    pub fn finish(&self) {
        let mut inner = self.lock();
        inner.finished = true;
        self.close(&mut inner);
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
        if !inner.log.in_file() {
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
        let start = crate::output::text::leading_continuations(region);
        let decoded = crate::output::text::lossy(&region[start..]);
        let text = crate::output::text::last_chars(&decoded, max_chars);
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

    /// Closes the log file of a session listed as ended (recovered from
    /// an earlier daemon): it is opened again for each read.
    pub fn close_log(&self) {
        self.close(&mut self.lock());
    }

    /// Closes the log, if its path still names it: one unlinked or
    /// replaced (its directory removed under the daemon) stays open, the
    /// only way left to its bytes.
    fn close(&self, inner: &mut Inner) {
        use std::os::unix::fs::MetadataExt;
        let Log::Open(file) = &inner.log else {
            return;
        };
        let named = match (file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(open), Ok(there)) => open.dev() == there.dev() && open.ino() == there.ino(),
            _ => false,
        };
        if named {
            inner.log = Log::Closed;
        }
    }

    /// The open log file to write to; a closed one is opened again (output
    /// came after its end: a restart's). None when there is no file.
    fn appender(&self, inner: &mut Inner) -> Option<Arc<File>> {
        match &inner.log {
            Log::Open(file) => Some(file.clone()),
            Log::Absent => None,
            Log::Closed => {
                let opened = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&self.path);
                match opened {
                    Ok(file) => {
                        let file = Arc::new(file);
                        inner.log = Log::Open(file.clone());
                        Some(file)
                    }
                    Err(err) => {
                        Self::lose_file(&self.path, inner, &err);
                        None
                    }
                }
            }
        }
    }

    /// Removes the log file (the session was pruned).
    pub fn delete_log(&self) {
        let mut inner = self.lock();
        inner.log = Log::Absent;
        drop(inner);
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(redo_path(&self.path));
    }
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
mod tests;
