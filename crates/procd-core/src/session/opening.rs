//! What a session starts with, whichever way it came: its `Opening`
//! (the one way in, `Session::new`), when its root started, and where it
//! came from.

use super::{ExitRecord, Restarts, SessionSpec, StdinOp};
use crate::identity::ProcessIdentity;
use crate::output::store::OutputStore;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::sync::mpsc;

/// When a session's root started, on both clocks. A spawn reads it just
/// before the fork, so that nothing the process does (a line, a port, its
/// exit) is dated before its start, whatever the setup after the fork
/// costs on a loaded machine.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub wall: SystemTime,
    pub instant: Instant,
}

impl Started {
    pub fn now() -> Started {
        Started {
            wall: SystemTime::now(),
            instant: Instant::now(),
        }
    }

    /// A start a previous daemon recorded: the monotonic instant is
    /// derived from the wall clock.
    pub fn at(wall: SystemTime) -> Started {
        Started {
            wall,
            instant: crate::clock::instant_at(wall),
        }
    }
}

/// Everything a session starts with, whichever way it came (`origin`):
/// the one way in (`Session::new`, called by `Registry::admit` only), so
/// nothing of a session is set after it is made.
pub struct Opening {
    pub id: String,
    pub spec: SessionSpec,
    /// Its first run here: the process and what is its own.
    pub run: super::Run,
    pub output: Arc<OutputStore>,
    /// Its stdin writer's sender (None with `stdin: "null"`, or when
    /// nothing of its stdin could be taken over).
    pub stdin: Option<mpsc::Sender<StdinOp>>,
    pub origin: Origin,
    /// A duplicate of where its output is read from, to tell unread
    /// output from quiet (`Core::output_probe`).
    pub output_probe: Option<std::os::fd::OwnedFd>,
    /// The `max_running` slot it holds while it runs.
    pub slot: Option<crate::admission::slot::RunningSlot>,
    /// Its restart policy, with where its runs stand: none yet for a new
    /// session, what the checkpoint said for one taken over.
    pub restarts: Option<(Arc<Restarts>, super::Runs)>,
    /// Where it starts against its ready condition.
    pub readiness: crate::observation::readiness::Readiness,
    /// How it ended, for one listed already ended (a previous daemon
    /// recorded its exit): it is made exited, never running.
    pub ended: Option<Arc<ExitRecord>>,
    /// The orphans its root left, when known from the start: none, for
    /// one listed after its process was gone (they were another daemon's
    /// children).
    pub adopted: Option<Arc<[ProcessIdentity]>>,
}

/// Where a session comes from: it is the constructor's only difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Spawned by this daemon: our child, its pid pinned until reaped.
    Spawned,
    /// Started by a previous daemon and handed over live by the keeper:
    /// output, stdin and exit come through, but it is not our child.
    HandedOver,
    /// Re-adopted from the checkpoint: no output pipe and no stdin, its
    /// output only as far as its log reached.
    Recovered,
}
