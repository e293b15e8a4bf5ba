//! The resource controllers procd limits with, and the files they take.

use std::path::{Path, PathBuf};

/// A resource controller procd can limit with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Memory,
    Cpu,
    Pids,
    Io,
}

impl Controller {
    pub const ALL: [Controller; 4] = [
        Controller::Memory,
        Controller::Cpu,
        Controller::Pids,
        Controller::Io,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
            Controller::Io => "io",
        }
    }

    /// Its name in a v1 hierarchy's mount options and /proc/self/cgroup.
    pub(super) fn v1_name(self) -> &'static str {
        match self {
            Controller::Io => "blkio",
            other => other.name(),
        }
    }

    /// The files that weigh a cgroup's I/O, by hierarchy, each with the
    /// value it takes for a v2 `io.weight` (1 to 10000, 100 the default):
    /// blk-iocost's and BFQ's on v2, CFQ's and BFQ's on v1 (10 to 1000,
    /// CFQ's default 500). A disk scheduler without weights has none.
    pub(super) const IO_WEIGHT_FILES: [(&'static str, ScaleWeight); 4] = [
        ("io.weight", |w| w),
        ("io.bfq.weight", |w| w.clamp(1, 1000)),
        ("blkio.weight", |w| (w * 5).clamp(10, 1000)),
        ("blkio.bfq.weight", |w| w.clamp(1, 1000)),
    ];
}

/// A v2 weight (1 to 10000) in one weight file's scale.
type ScaleWeight = fn(u64) -> u64;

/// The I/O weight file in `dir`, and the value it takes for `weight`.
pub(super) fn io_weight_file(dir: &Path, weight: u64) -> Option<(PathBuf, u64)> {
    Controller::IO_WEIGHT_FILES
        .iter()
        .map(|(name, value)| (dir.join(name), value(weight)))
        .find(|(file, _)| file.exists())
}
