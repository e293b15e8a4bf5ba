//! Reading the process table from /proc: `stat` (parent, group, state,
//! start time) and `environ` (the session marker). The root is a parameter
//! so the "cannot read /proc" fallback can be tested.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A short /proc record as text.
fn text_of(bytes: &[u8]) -> io::Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The fields of /proc/<pid>/stat that procd uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// Field 3: R, S, D, Z (zombie), T, X…
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Field 9: the kernel's flags for the task (`PF_*`).
    pub flags: u32,
    /// Fields 14 + 15: CPU time used (user + system), in clock ticks.
    pub cpu_ticks: u64,
    /// Field 22: start time in clock ticks since boot; with the pid, the
    /// process's identity (a recycled pid has a different start time).
    pub start_time: u64,
    /// Field 24: resident set size, in pages.
    pub rss_pages: u64,
}

/// Clock ticks per second (for `cpu_ticks` and `start_time`). From libc's
/// `sysconf`, not rustix's: rustix reads the auxiliary vector itself and
/// checks the vDSO's ELF header, which faults under valgrind (the bench's
/// instruction rows run the daemon under callgrind).
pub fn clock_ticks_per_second() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(n)) if n > 0 => n as f64,
        _ => 100.0,
    }
}

/// The memory page size, in bytes (for `statm`'s and `stat`'s pages), by
/// `sysconf` as `clock_ticks_per_second` is.
pub fn page_size() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(n)) if n > 0 => n as u64,
        _ => 4096,
    }
}

/// `PF_EXITING`: set as a task starts to exit, before it lets go of its
/// files (which, for a socket, can take milliseconds more).
const PF_EXITING: u32 = 0x4;

impl ProcStat {
    /// A zombie has exited; it only waits to be reaped.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// Dead or on its way: a SIGKILLed process can show `R` or `D` for a
    /// while after its descriptor table is gone, but it will never run
    /// user code again.
    pub fn is_exiting(&self) -> bool {
        self.is_dead() || self.flags & PF_EXITING != 0
    }
}

/// Parses the text of /proc/<pid>/stat. The comm field (2) may contain
/// spaces and parentheses, so fields are counted after the LAST ')'.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let mut rest = text.get(close + 1..)?.split_ascii_whitespace();
    // rest[0] is field 3.
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    let session = rest.next()?.parse().ok()?;
    // Fields 7 and 8 are skipped; 9 is the flags; 10..=13 are skipped; 14
    // and 15 are utime and stime; 16..=21 are skipped; field 22 is the
    // start time.
    let flags = rest.nth(2)?.parse().ok()?;
    let utime: u64 = rest.nth(4)?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    let start_time = rest.nth(6)?.parse().ok()?;
    let rss_pages = rest.nth(1).and_then(|r| r.parse().ok()).unwrap_or(0);
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        flags,
        cpu_ticks: utime + stime,
        start_time,
        rss_pages,
    })
}

/// A view of a proc filesystem.
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
    /// `statm` files of processes looked at lately, kept open and read
    /// again from offset 0 (a /proc file is made anew by each read at 0):
    /// one system call a look instead of open, read and close. Shared by
    /// clones; at most `HELD_MAX` files, and those not read by a look at
    /// every watched tree are closed after it (`forget_unread_since`).
    held: Arc<Mutex<HashMap<i32, (fs::File, Instant)>>>,
}

/// At most this many `statm` files are kept open.
const HELD_MAX: usize = 512;

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs::at("/proc")
    }
}

impl ProcFs {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        ProcFs {
            root: root.into(),
            held: Arc::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn stat(&self, pid: i32) -> io::Result<ProcStat> {
        let text = read_record(&self.root.join(pid.to_string()).join("stat"))?;
        parse_stat(&text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("malformed stat of {pid}"),
            )
        })
    }

    /// The process's resident set, in pages, from `statm`: a fraction of
    /// what `stat` costs the kernel (no CPU times, no thread walk), for
    /// callers that take CPU time and membership from a cgroup. None for a
    /// zombie or a kernel thread (no memory map: all fields 0).
    pub fn resident_pages(&self, pid: i32) -> io::Result<Option<u64>> {
        let text = self.read_statm(pid)?;
        let mut fields = text.split_ascii_whitespace();
        let (Some(size), Some(resident)) = (fields.next(), fields.next()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("malformed statm of {pid}"),
            ));
        };
        let parse = |f: &str| {
            f.parse::<u64>().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("malformed statm of {pid}"),
                )
            })
        };
        Ok((parse(size)? > 0).then_some(parse(resident)?))
    }

    /// Closes the kept files not read since `since` (the caller has just
    /// looked at every process it watches: the rest are no longer its).
    pub fn forget_unread_since(&self, since: Instant) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, (_, used)| *used >= since);
    }

    /// The text of the process's `statm`, through the file kept open for
    /// it if it still reads, else a file opened now (and kept).
    fn read_statm(&self, pid: i32) -> io::Result<String> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 256];
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((file, used)) = held.get_mut(&pid) {
            if let Ok(n @ 1..) = file.read_at(&mut buf, 0) {
                *used = now;
                return text_of(&buf[..n]);
            }
            held.remove(&pid);
        }
        let file = fs::File::open(self.root.join(pid.to_string()).join("statm"))?;
        let n = file.read_at(&mut buf, 0)?;
        if held.len() < HELD_MAX {
            held.insert(pid, (file, now));
        }
        text_of(&buf[..n])
    }

    /// Every process's stat. Processes that vanish while listing are skipped;
    /// an unreadable /proc is an error (callers fall back to the root pid).
    pub fn all(&self) -> io::Result<Vec<ProcStat>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let Ok(entry) = entry else { continue };
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Ok(stat) = self.stat(pid) {
                out.push(stat);
            }
        }
        if out.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no processes under {}", self.root.display()),
            ));
        }
        Ok(out)
    }

    /// The value of `name` in the process's initial environment.
    pub fn environ_value(&self, pid: i32, name: &str) -> Option<Vec<u8>> {
        let env = fs::read(self.root.join(pid.to_string()).join("environ")).ok()?;
        let prefix = format!("{name}=");
        env.split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(prefix.as_bytes()).map(<[u8]>::to_vec))
    }

    /// Whether the process's initial environment holds `NAME=value` exactly.
    pub fn environ_has(&self, pid: i32, entry: &[u8]) -> bool {
        match fs::read(self.root.join(pid.to_string()).join("environ")) {
            Ok(env) => env.split(|b| *b == 0).any(|e| e == entry),
            Err(_) => false,
        }
    }
}

/// A one-line /proc file (`stat`, `statm`) as text, in one read where it
/// can be: the kernel makes such a file in one go, so a read that returns
/// a whole line with room to spare has it all, and the read that would
/// return 0 is saved (the monitor reads one per process per look).
pub fn read_record(path: &std::path::Path) -> io::Result<String> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut buf = [0u8; 1024];
    let n = loop {
        match file.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    let mut bytes = buf[..n].to_vec();
    if n == buf.len() || !bytes.ends_with(b"\n") {
        // Longer than expected, or cut: read on to the end.
        file.read_to_end(&mut bytes)?;
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A small /proc file as text: open, read to the end, close. Not
/// `fs::read_to_string`, whose size hint costs a statx a /proc file
/// answers with 0 anyway (the monitor reads two per process per look).
pub fn read_small(path: &std::path::Path) -> io::Result<String> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `statm` kept open answers for its process only: once the process
    /// is gone (reaped), the kept file reads nothing and the pid is looked
    /// up again, so no stale figure comes back.
    #[test]
    fn a_kept_statm_never_outlives_its_process() {
        let procfs = ProcFs::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let first = procfs.resident_pages(pid).unwrap();
        assert!(first.is_some_and(|p| p > 0), "{first:?}");
        assert!(procfs.held.lock().unwrap().contains_key(&pid));
        // Read again through the kept file, and by a clone (shared).
        assert!(procfs.clone().resident_pages(pid).unwrap().is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            procfs.resident_pages(pid).is_err(),
            "a figure for a reaped pid"
        );
        assert!(!procfs.held.lock().unwrap().contains_key(&pid));
        // What a full look did not read is closed.
        let own = std::process::id() as i32;
        procfs.resident_pages(own).unwrap();
        procfs.forget_unread_since(Instant::now());
        assert!(procfs.held.lock().unwrap().is_empty());
    }

    #[test]
    fn a_record_is_read_whole_short_or_long() {
        let dir = tempfile::tempdir().expect("dir");
        let short = dir.path().join("short");
        fs::write(&short, "1 2 3\n").expect("write");
        assert_eq!(read_record(&short).expect("read"), "1 2 3\n");
        // Longer than one read, and one without a newline: read to the end.
        let long = dir.path().join("long");
        let text = "x".repeat(3000) + "\n";
        fs::write(&long, &text).expect("write");
        assert_eq!(read_record(&long).expect("read"), text);
        let cut = dir.path().join("cut");
        fs::write(&cut, "no newline").expect("write");
        assert_eq!(read_record(&cut).expect("read"), "no newline");
        // The real thing.
        let own = ProcFs::default().resident_pages(std::process::id() as i32);
        assert!(own.expect("own statm").is_some_and(|pages| pages > 0));
    }

    #[test]
    fn parses_comm_with_spaces_and_parens() {
        let line = "4242 (my (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let st = parse_stat(line).expect("parse");
        assert_eq!(st.pid, 4242);
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.pgrp, 4242);
        assert_eq!(st.session, 4242);
        assert_eq!(st.start_time, 987654);
        assert_eq!(st.cpu_ticks, 1 + 2);
        assert_eq!(st.flags, 4194560);
        assert!(!st.is_exiting());
        let dying = line.replace(" 4194560 ", &format!(" {} ", 4194560 | PF_EXITING));
        assert!(parse_stat(&dying).expect("parse").is_exiting());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_stat("").is_none());
        assert!(parse_stat("12 (x) S 1").is_none());
    }

    #[test]
    fn reads_own_process() {
        let me = std::process::id() as i32;
        let st = ProcFs::default().stat(me).expect("own stat");
        assert_eq!(st.pid, me);
        assert!(st.start_time > 0);
        assert!(ProcFs::at("/nonexistent-proc").all().is_err());
    }
}
