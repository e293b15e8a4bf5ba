//! `procs.json` (SPEC §7): the running sessions, so that a daemon that died
//! (crash, SIGKILL, host restart of the daemon alone) can be succeeded by
//! one that re-adopts them. Commands are stored redacted. Written
//! atomically (never fsynced: see `atomic::write_json_unsynced`), one
//! write at a time, off the event loop.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tokio::sync::Mutex;

/// One running session as recorded on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    pub session_id: String,
    /// Redacted (recovery only displays it).
    pub command: String,
    pub pid: i32,
    /// Clock ticks since boot (field 22 of /proc/<pid>/stat).
    pub start_time: u64,
    /// "<pgid>:<starttime>".
    pub identity: String,
    pub pgid: i32,
    pub cwd: String,
    pub started_at: String,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub session_key: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub persist: bool,
    #[serde(default)]
    pub pty: bool,
    #[serde(default)]
    pub notify_on_complete: bool,
    #[serde(default)]
    pub watch_patterns: Vec<String>,
    #[serde(default)]
    pub systemd_unit: Option<String>,
    pub log_path: String,
}

/// Writes the checkpoint, one write at a time, latest state last.
pub struct Checkpoint {
    path: PathBuf,
    writing: Mutex<()>,
}

impl Checkpoint {
    pub fn new(path: PathBuf) -> Checkpoint {
        Checkpoint {
            path,
            writing: Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes what `entries` returns. The snapshot is taken after the
    /// previous write finished, so the file always ends at the newest state.
    pub async fn write(
        &self,
        entries: impl FnOnce() -> Vec<CheckpointEntry>,
    ) -> std::io::Result<()> {
        let _turn = self.writing.lock().await;
        let snapshot = entries();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || crate::atomic::write_json_unsynced(&path, &snapshot))
            .await
            .map_err(std::io::Error::other)?
    }

    /// The recorded entries; a missing or corrupt file is empty, and
    /// entries that do not have the shape of a procd session are skipped
    /// (returned separately so the caller can drop them from the file).
    /// A file that is not a JSON array is the only record of what ran:
    /// it is moved aside (`procs.json.corrupt-<unix time>`), never
    /// overwritten by the next write.
    pub fn read(path: &Path) -> (Vec<CheckpointEntry>, usize) {
        use crate::atomic::Read;
        let values = match crate::atomic::read_json_checked::<Vec<serde_json::Value>>(path) {
            Read::Parsed(values) => values,
            Read::Missing => return (Vec::new(), 0),
            Read::Corrupt => {
                if let Err(err) = crate::atomic::move_aside(path) {
                    tracing::warn!(%err, "cannot move the corrupt checkpoint aside");
                }
                return (Vec::new(), 0);
            }
        };
        let total = values.len();
        let entries: Vec<CheckpointEntry> = values
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let skipped = total - entries.len();
        (entries, skipped)
    }
}
