//! Keeping the log under its cap: the head dropped (collapsed, or punched
//! out while output floods and collapsed once it is quiet), off the event
//! loop.

use super::{Inner, Log, OutputStore, FLOOD_WINDOW, MAX_SPAN_CAPS, TIDY_QUIET};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;
use std::time::Instant;

impl OutputStore {
    /// Drops the oldest half of the log (off the event loop).
    pub async fn compact(self: &Arc<Self>) {
        self.off_loop("log compaction", |store| store.compact_blocking())
            .await;
    }

    /// When a punched head should be collapsed away: after `TIDY_QUIET` of
    /// quiet. None when the log has no hole.
    pub fn tidy_due(&self) -> Option<Instant> {
        let inner = self.lock();
        let holed = matches!(inner.log, Log::Open(_))
            && inner.kept_from > inner.log_base
            && !inner.tidy_failed;
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
            if !inner.log.in_file() {
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
            let mut inner = self.lock();
            (self.appender(&mut inner)?, inner.log_base, inner.kept_from)
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
        inner.log = Log::Open(Arc::new(appender));
        inner.log_base = cut;
        let dropped = inner.total_newlines - newlines;
        forget_head(&mut inner, cut, dropped);
        Ok(())
    }
}

/// Records that output before cursor `cut` (holding `newlines`) is gone.
pub(super) fn forget_head(inner: &mut Inner, cut: u64, newlines: u64) {
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
