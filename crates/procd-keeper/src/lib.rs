//! procd's keeper (docs/survival.md): the small process above the
//! daemon that keeps sessions alive across the daemon's death. `keeper`
//! is the process; `fdstore` its copies in systemd's fd store; `link` is the daemon's side of their socket; `wire` is
//! what goes over it. Depends on procd-sys alone (the exit type it shares
//! with the daemon's reaper).
//!
//! What the keeper does (docs/survival.md): a signalfd + poll loop, no
//! async runtime, no /proc. It holds sessions' pipe ends or PTY masters and
//! the listening socket; it is the subreaper that keeps the exit statuses of
//! roots a dead daemon left (and reads, from a root's pidfd, the exit of one
//! the daemon reaped just before it died); it restarts the daemon and hands
//! everything back with its instance id (`status.instance`); it reaps every
//! orphan (as a container's PID 1 too: docs/cluster.md) and upgrades itself
//! in place (exec of the new program, its table in a memfd). Under systemd
//! it is the unit's main process (socket activation and sd_notify through
//! the `sd-notify` crate) and keeps every descriptor in the fd store, taking
//! sessions back from there after its own death.

mod fdstore;
pub mod keeper;
pub mod link;
pub mod wire;

pub use keeper::{new_instance, run, Launch};
pub use link::{HandedSession, Handover, Link, Request};
pub use wire::{Exit, FdKind, EXIT_HANDOVER};
