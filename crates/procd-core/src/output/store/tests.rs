use super::read::last_line_end;
use super::*;

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
