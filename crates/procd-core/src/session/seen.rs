//! What a session knows of its tree and input (`Session::seen`): the
//! monitor's observations, the last input, and staleness, behind one lock.

use super::INPUT_QUIET;
use std::time::{Duration, Instant};

/// What is known of a session's tree and input, changed together.
#[derive(Default)]
pub(super) struct Seen {
    /// Ports and resources of its tree, and whether a process was blocked
    /// reading its input, as last observed (by the monitor or a yield).
    pub(super) observed: crate::observation::observe::Observation,
    /// When input was last written: an observation from before says
    /// nothing about whether it is waiting again.
    pub(super) last_input: Option<Instant>,
    /// The output end when `input_wanted` was last sent: one event per
    /// episode (cleared when the session is seen not waiting).
    pub(super) input_wanted_at: Option<u64>,
    /// Files under its cwd changed since it started (`observation/stale.rs`).
    pub(super) stale: Option<crate::observation::stale::Stale>,
    /// When `observed.resources` were read: by the monitor's tick, or
    /// since by a poll (`set_resources`).
    pub(super) resources_read: Option<Instant>,
}

impl Seen {
    /// How long nothing has happened, given how long output has been quiet.
    pub(super) fn idle_for(&self, output_quiet: Duration) -> Duration {
        match self.last_input {
            Some(at) => output_quiet.min(at.elapsed()),
            None => output_quiet,
        }
    }

    /// Observations have seen a process blocked reading its input for
    /// `INPUT_QUIET`, with nothing happening (`idle`) since they began.
    pub(super) fn blocked_reading(&self, idle: Duration) -> bool {
        self.observed.reading_input
            && self
                .observed
                .reading_since
                .is_some_and(|since| since.elapsed() >= INPUT_QUIET && idle >= since.elapsed())
    }
}
