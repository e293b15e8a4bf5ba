//! One run of a session: the process procd started (or took over) and
//! what is its own — its identity, its start, where it is contained and
//! the input it reads. A session has one run at a time; a restart gives
//! it the next (`Session::begin_run`), and what outlives a run (the id,
//! the spec, the log, the restart count) stays with the session.

use super::{ExitRecord, NextRun, Session, Started, StdinOp};
use crate::identity::ProcessIdentity;
use crate::stacks::restart::RunCount;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::sync::mpsc;

pub struct Run {
    pub identity: ProcessIdentity,
    started: Started,
    /// `started` as RFC 3339, formatted once: every poll, list entry and
    /// checkpoint write shows it.
    started_at_text: String,
    /// Set for a run taken over after a daemon restart: procd no longer
    /// holds its output pipe, so this says what is (un)available.
    pub note: Option<String>,
    /// The systemd scope it runs in, if any.
    pub systemd_unit: Option<String>,
    /// The cgroup its tree lives in, if any (docs/containment.md).
    pub cgroup: Option<Arc<procd_sys::cgroup::SessionCgroup>>,
    /// Its stdin pipe or terminal (None with `stdin: "null"`, or when the
    /// root was gone before it could be looked at).
    pub input: Option<crate::observation::observe::InputId>,
    /// Whether it runs on a terminal: as asked, unless no PTY could be
    /// had and it fell back to pipes.
    pub pty: bool,
    /// Where its output begins in the session's log (after the runs
    /// before it): what its ready condition is matched from.
    pub output_from: u64,
}

impl Run {
    /// A run of `identity` started at `started`, on a terminal or not,
    /// its output from `output_from` on; uncontained, with no input and
    /// no note until its maker sets them.
    pub fn new(identity: ProcessIdentity, started: Started, pty: bool, output_from: u64) -> Run {
        Run {
            identity,
            started,
            started_at_text: crate::clock::rfc3339(started.wall),
            note: None,
            systemd_unit: None,
            cgroup: None,
            input: None,
            pty,
            output_from,
        }
    }

    pub fn pid(&self) -> i32 {
        self.identity.pid
    }

    pub fn started_at(&self) -> SystemTime {
        self.started.wall
    }

    pub fn started_instant(&self) -> Instant {
        self.started.instant
    }

    /// When it started, as RFC 3339 (`started_at` on the wire).
    pub fn started_at_text(&self) -> &str {
        &self.started_at_text
    }
}

/// What the next run of a restarting session starts with
/// (`Session::begin_run`).
pub struct NextRunParts {
    pub run: Run,
    /// Which run it is.
    pub count: RunCount,
    pub stdin: Option<mpsc::Sender<StdinOp>>,
    pub output_probe: Option<std::os::fd::OwnedFd>,
    /// A `max_running` slot, for a session that holds none (one taken
    /// over holds none until its next run).
    pub slot: Option<crate::admission::slot::RunningSlot>,
    pub readiness: crate::observation::readiness::Readiness,
}

/// Where a restarting session's runs stand, as its view says.
impl Session {
    /// Its run now (or last gone) and how the one before it ended (zero
    /// and none without a restart policy).
    pub fn run_history(&self) -> (RunCount, Option<Arc<ExitRecord>>) {
        let view = self.view.borrow();
        view.runs
            .as_ref()
            .map(|r| (r.count, r.last_exit.clone()))
            .unwrap_or_default()
    }

    /// The run its backoff waits for, if it is in one.
    pub fn next_run(&self) -> Option<NextRun> {
        self.view.borrow().runs.as_ref()?.next
    }

    pub fn is_restarting(&self) -> bool {
        self.next_run().is_some()
    }

    /// Whether the run now ending was ended because files changed.
    pub fn change_pending(&self) -> bool {
        let view = self.view.borrow();
        view.runs.as_ref().is_some_and(|r| !r.changed.is_empty())
    }
}
