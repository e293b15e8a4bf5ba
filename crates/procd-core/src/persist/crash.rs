//! Crashes a test asks for (docs/testing.md), in debug builds only: the
//! faults a real system cannot produce on demand, a daemon SIGKILLed at
//! one exact step. `PROCD_TEST_CRASH_FILE` names a file holding the name
//! of a point; reaching that point, the daemon removes the file and
//! SIGKILLs itself. Once per file, so the next daemon (which inherits the
//! variable) lives.

/// The points, in the order a restarting session meets them.
#[derive(Debug, Clone, Copy)]
pub enum Point {
    /// Right after reaping a session's root, before anyone hears how it
    /// ended.
    AfterReap,
    /// Right after the keeper was given a restarted run, before the
    /// checkpoint names it.
    AfterRestartHold,
}

impl Point {
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    fn name(self) -> &'static str {
        match self {
            Point::AfterReap => "after-reap",
            Point::AfterRestartHold => "after-restart-hold",
        }
    }
}

#[cfg(not(debug_assertions))]
pub fn at(_point: Point) {}

#[cfg(debug_assertions)]
pub fn at(point: Point) {
    let Some(path) = std::env::var_os("PROCD_TEST_CRASH_FILE") else {
        return;
    };
    let asked = std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == point.name());
    if asked && std::fs::remove_file(&path).is_ok() {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
