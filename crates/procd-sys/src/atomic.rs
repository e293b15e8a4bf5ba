//! JSON files written atomically (temp file in the same dir, 0600, fsync,
//! rename) and read forgivingly (a corrupt or missing file is "absent").
//! The temp file has an unpredictable name and is created exclusively
//! (O_EXCL, O_NOFOLLOW, O_CLOEXEC): nothing placed there beforehand is
//! followed or reused.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::OpenOptions;
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
pub fn write_json_unsynced<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_file(path, &bytes, false)
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
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Renames a corrupt file to `<name>.corrupt-<unix time>` beside it, so
/// that it is kept for a human, never overwritten (SPEC §6.1, §7).
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

/// Reads a state file without following a symlink in its place.
pub fn read_private(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
