//! The daemon's descriptor limit: raised for itself, restored for children.
//!
//! Each session holds a few descriptors (output, stdin, log, pidfd), so the
//! daemon lifts its soft RLIMIT_NOFILE to the hard limit. Children must not
//! inherit that: programs that close every descriptor up to the limit
//! before exec, or size tables by it, slow down or misbehave with a limit
//! in the millions. They get the soft limit the daemon started with.

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use std::sync::atomic::{AtomicU64, Ordering};

/// The soft limit the daemon started with; `u64::MAX` while not raised.
static ORIGINAL_SOFT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Raises this process's soft descriptor limit to its hard limit and
/// remembers the old soft limit for children.
pub fn raise_nofile() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
            ORIGINAL_SOFT.store(soft, Ordering::Relaxed);
        }
    }
}

/// What a child's soft limit must be set back to, if it was raised. Read
/// before forking: the child only calls [`restore_in_child`].
pub(crate) fn child_soft_nofile() -> Option<u64> {
    match ORIGINAL_SOFT.load(Ordering::Relaxed) {
        u64::MAX => None,
        soft => Some(soft),
    }
}
