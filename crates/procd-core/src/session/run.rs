//! One run of a session: the process procd started (or took over) and
//! what is its own — its identity, its start, where it is contained and
//! the input it reads. A session has one run at a time; a restart gives
//! it the next (`Session::begin_run`), and what outlives a run (the id,
//! the spec, the log, the restart count) stays with the session.

use super::Started;
use crate::identity::ProcessIdentity;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

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
}

impl Run {
    pub fn new(
        identity: ProcessIdentity,
        started: Started,
        note: Option<String>,
        systemd_unit: Option<String>,
        cgroup: Option<Arc<procd_sys::cgroup::SessionCgroup>>,
        input: Option<crate::observation::observe::InputId>,
        pty: bool,
    ) -> Run {
        Run {
            identity,
            started,
            started_at_text: crate::clock::rfc3339(started.wall),
            note,
            systemd_unit,
            cgroup,
            input,
            pty,
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
