//! JSON files written atomically (temp file in the same dir, 0600, fsync,
//! rename) and read forgivingly (a corrupt or missing file is "absent").
//! The temp file has an unpredictable name and is created exclusively
//! (O_EXCL, O_NOFOLLOW, O_CLOEXEC): nothing placed there beforehand is
//! followed or reused.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_bytes(path, &bytes)
}

/// Like `write_json`, without the fsync: the new content survives the
/// process (a crash, SIGKILL) but not the machine. For state that means
/// nothing after a reboot — the running sessions (`procs.json`): their
/// processes die with the machine, and a reader treats a damaged file as
/// corrupt. Saves a disk flush on every spawn and exit.
/// Compact, too: it is rewritten on every spawn and exit, and only procd
/// reads it.
pub fn write_json_unsynced<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    write_file(path, &json_line(value)?, false)
}

/// Like `write_bytes`, without the fsync (see `write_json_unsynced`).
pub fn write_bytes_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file(path, bytes, false)
}

/// Replaces `path` with `bytes` atomically (0600, fsync, rename).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file(path, bytes, true)
}

fn write_file(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{name}.{}.tmp", crate::random::hex(8)?));
    let result = (|| {
        let mut f = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        drop(f);
        replace(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `value` as one line of JSON.
fn json_line<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Puts `tmp` in `path`'s place atomically. An existing file is swapped
/// out (renameat2 RENAME_EXCHANGE) and then unlinked: a rename over it
/// would make ext4 (auto_da_alloc) write the new file's data back before
/// the rename returns, ~0.15 ms on every spawn's checkpoint. A crash
/// between the swap and the unlink leaves the old content under the temp
/// name, which `sweep_temps` removes.
///
/// Anything but a regular file in the way (a directory, planted or not)
/// is left to rename(2), which refuses it as before.
fn replace(tmp: &Path, path: &Path) -> io::Result<()> {
    match swap_in(tmp, path)? {
        Placed::Swapped => std::fs::remove_file(tmp),
        Placed::Renamed => Ok(()),
    }
}

/// How `swap_in` put a file in place.
enum Placed {
    /// Exchanged: the old content is now under the other name.
    Swapped,
    /// Renamed over (or into) the name: nothing is left under the other.
    Renamed,
}

/// Puts `tmp` at `path`: exchanged with a regular file there, else renamed
/// (anything else in the way meets rename(2)'s refusal).
fn swap_in(tmp: &Path, path: &Path) -> io::Result<Placed> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        return std::fs::rename(tmp, path).map(|()| Placed::Renamed);
    }
    match renameat_with(CWD, tmp, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(Placed::Swapped),
        // No file to swap with, or a filesystem that cannot swap.
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            std::fs::rename(tmp, path).map(|()| Placed::Renamed)
        }
        Err(e) => Err(e.into()),
    }
}

/// A file rewritten often (the checkpoint), atomically and unsynced like
/// `write_json_unsynced`, but with no file made or removed per write: the
/// content is written under a spare name of its own and swapped into
/// place, and the old content, now under the spare name, is overwritten
/// by the next write. Making and removing a file are journaled metadata
/// changes, 0.05 to 0.2 ms each on ext4 here, on every spawn's path. One
/// writer per file (the caller serializes); the spare is a temp name that
/// `sweep_temps` removes after a crash. A spare that is not a regular file
/// is left alone and the write made the plain way.
#[derive(Debug, Clone)]
pub struct SwapFile {
    path: std::path::PathBuf,
    spare: std::path::PathBuf,
}

impl SwapFile {
    pub fn new(path: &Path) -> io::Result<SwapFile> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
        Ok(SwapFile {
            path: path.to_path_buf(),
            spare: dir.join(format!(".{name}.{}.tmp", crate::random::hex(8)?)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `value` as one line of JSON.
    pub fn write_json<T: Serialize>(&self, value: &T) -> io::Result<()> {
        self.write(&json_line(value)?)
    }

    /// Writes `bytes` as they are.
    pub fn write_bytes(&self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)
    }

    /// Writes `bytes` as they are, and keeps the file open: what is at
    /// `path` now, for writes in place until the next whole one.
    pub fn write_bytes_kept(&self, bytes: &[u8]) -> io::Result<File> {
        match self.write_opened(bytes)? {
            Some(file) => Ok(file),
            None => open_regular(&self.path),
        }
    }

    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        self.write_opened(bytes).map(|_| ())
    }

    /// Writes `bytes`; the file written when it was the spare swapped in
    /// (None when it was written the plain way).
    fn write_opened(&self, bytes: &[u8]) -> io::Result<Option<File>> {
        use std::os::unix::fs::FileExt;
        let file = match open_regular(&self.spare) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.spare)?,
            _ => return write_file(&self.path, bytes, false).map(|_| None),
        };
        file.write_all_at(bytes, 0)?;
        file.set_len(bytes.len() as u64)?;
        // Swapped, the old content stays as the next write's spare.
        swap_in(&self.spare, &self.path).map(|_| Some(file))
    }
}

/// `path` opened for writing, if it is a regular file: no symlink is
/// followed, and a FIFO does not block the open.
fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    match file.metadata()?.file_type().is_file() {
        true => Ok(file),
        false => Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        ))),
    }
}

/// Removes the temp files `write_json*` and `write_bytes` leave in `dir`
/// when a process dies mid-write (`.<name>.<16 hex>.tmp`). Only for a
/// directory whose writer is the caller (the state dir, under its lock).
pub fn sweep_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_temp = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(|n| {
                n.rsplit_once('.').is_some_and(|(_, hex)| {
                    hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit())
                })
            });
        if is_temp && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Renames a corrupt file to `<name>.corrupt-<unix time>` beside it, so
/// that it is kept for a human, never overwritten (docs/operations.md, docs/survival.md).
pub fn move_aside(path: &Path) -> io::Result<std::path::PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".corrupt-{secs}"));
    let aside = std::path::PathBuf::from(aside);
    std::fs::rename(path, &aside)?;
    tracing::warn!(path = %path.display(), kept = %aside.display(), "moved a corrupt state file aside");
    Ok(aside)
}

/// What a state file holds.
#[derive(Debug)]
pub enum Read<T> {
    Missing,
    /// There, but not JSON of that shape (or unreadable).
    Corrupt,
    Parsed(T),
}

/// Reads a state file, telling a missing file from a corrupt one.
pub fn read_json_checked<T: DeserializeOwned>(path: &Path) -> Read<T> {
    match read_private(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Missing,
        Err(_) => Read::Corrupt,
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => Read::Parsed(v),
            Err(_) => Read::Corrupt,
        },
    }
}

/// The parsed file, or None if it is missing or not valid JSON of that shape.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = read_private(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "ignoring a corrupt state file");
            None
        }
    }
}

/// The largest state file read: procs.json of the most sessions, or a
/// shell snapshot, is far smaller.
const MAX_STATE_BYTES: u64 = 256 << 20;

/// Reads a state file without following a symlink in its place. Only a
/// regular file of at most `MAX_STATE_BYTES` is read: a FIFO in its place
/// would block the reader (opened without blocking, it is refused), and
/// a device or a runaway file would fill memory.
pub fn read_private(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    f.take(MAX_STATE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {MAX_STATE_BYTES} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_read_as_state() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("procs.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Refused at once: a blocking open would wait for a writer.
        let err = read_private(&fifo).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert!(matches!(read_json_checked::<Vec<u8>>(&fifo), Read::Corrupt));
        assert!(read_private(Path::new("/dev/zero")).is_err());
        let file = dir.path().join("gateway.json");
        std::fs::write(&file, b"[1]").unwrap();
        assert_eq!(read_private(&file).unwrap(), b"[1]");
    }

    /// A swap file makes no file per write: after the first swap the
    /// directory holds the file and one spare, always; each write leaves
    /// the newest content under the name; a spare that is a directory is
    /// left alone; the spare is a temp `sweep_temps` removes.
    #[test]
    fn a_swap_file_rewrites_in_place_of_its_spare() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("procs.json");
        let file = SwapFile::new(&path).unwrap();
        let names = || {
            let mut n: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            n.sort();
            n
        };
        file.write_json(&vec!["a"; 50]).unwrap();
        assert_eq!(names(), ["procs.json"]);
        let inodes = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        file.write_json(&["b"]).unwrap();
        let after_two = names();
        assert_eq!(after_two.len(), 2, "{after_two:?}");
        let spare = dir.path().join(&after_two[0]);
        let spare_inode = inodes(&spare);
        for n in 0..5 {
            file.write_json(&[n]).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("[{n}]\n"));
            assert_eq!(names(), after_two, "a file was made or left");
        }
        // The two inodes trade places; no third one appears.
        assert!([inodes(&path), inodes(&spare)].contains(&spare_inode));
        std::fs::remove_file(&spare).unwrap();
        std::fs::create_dir(&spare).unwrap();
        file.write_json(&["c"]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[\"c\"]\n");
        assert!(spare.is_dir(), "a planted spare was replaced");
        std::fs::remove_dir(&spare).unwrap();
        file.write_json(&["d"]).unwrap();
        file.write_json(&["e"]).unwrap();
        sweep_temps(dir.path());
        assert_eq!(names(), ["procs.json"]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[\"e\"]\n");
    }
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replacing_swaps_the_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("procs.json");
        for n in 0..3 {
            write_json_unsynced(&p, &serde_json::json!([n])).unwrap();
            let v: serde_json::Value = read_json(&p).unwrap();
            assert_eq!(v, serde_json::json!([n]));
        }
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["procs.json"]);
    }

    #[test]
    fn sweeping_removes_only_left_temps() {
        let dir = tempfile::tempdir().unwrap();
        let left = dir.path().join(".procs.json.0123456789abcdef.tmp");
        let other = dir.path().join(".procs.json.notours.tmp");
        std::fs::write(&left, b"[]").unwrap();
        std::fs::write(&other, b"[]").unwrap();
        std::fs::write(dir.path().join("procs.json"), b"[]").unwrap();
        sweep_temps(dir.path());
        assert!(!left.exists());
        assert!(other.exists() && dir.path().join("procs.json").exists());
    }

    #[test]
    fn round_trip_private_and_corrupt_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        write_json(&p, &serde_json::json!({"a": 1})).unwrap();
        let v: serde_json::Value = read_json(&p).unwrap();
        assert_eq!(v["a"], 1);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&p, b"{not json").unwrap();
        assert!(read_json::<serde_json::Value>(&p).is_none());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp left"
        );
    }
}
