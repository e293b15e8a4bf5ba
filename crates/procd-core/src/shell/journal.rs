//! What a shell's directory keeps for the next daemon: `shell.json` (the
//! shell) and `journal` (a line per command started, a line per command
//! ended, JSON). Commands are written redacted; nothing else a command
//! said is kept here. Both are read leniently and bounded: a corrupt line
//! is skipped, a planted file can at worst name commands.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

pub const SHELL_FILE: &str = "shell.json";
pub const JOURNAL: &str = "journal";
/// The most journal bytes read back.
const MAX_JOURNAL_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellFile {
    pub session_id: String,
    pub name: Option<String>,
    /// Whether its loop reads the fixed-width header (`boot::Header`):
    /// absent from the file of a shell whose loop reads a line, as the
    /// loop of a daemon before it did, so that an upgrade keeps it going.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_header: bool,
}

/// A journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Entry {
    Started(Started),
    Ended(Ended),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Started {
    pub n: u64,
    pub nonce: String,
    pub command: String,
    pub from: u64,
    pub started_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    pub ended: u64,
    pub status: procd_proto::CommandStatus,
    pub exit_code: Option<i32>,
    pub to: u64,
    pub cwd: Option<String>,
    pub duration_ms: u64,
    pub ended_by: Option<String>,
}

pub fn write_shell_file(dir: &Path, shell: &ShellFile) -> std::io::Result<()> {
    procd_sys::atomic::write_json(&dir.join(SHELL_FILE), shell)
}

pub fn read_shell_file(dir: &Path) -> Option<ShellFile> {
    procd_sys::atomic::read_json(&dir.join(SHELL_FILE))
}

/// A shell's journal, open for appending.
pub struct Journal(std::fs::File);

impl Journal {
    pub fn open(dir: &Path) -> std::io::Result<Journal> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(JOURNAL))?;
        Ok(Journal(file))
    }

    /// Appends one entry, as one write.
    pub fn append(&mut self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.0.write_all(&line)
    }
}

/// The journal's entries, in order (in its last `MAX_JOURNAL_BYTES`).
pub fn read(dir: &Path) -> Vec<Entry> {
    let Ok(bytes) = procd_sys::atomic::read_private(&dir.join(JOURNAL)) else {
        return Vec::new();
    };
    bytes[bytes.len().saturating_sub(MAX_JOURNAL_BYTES as usize)..]
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect()
}
