//! procd's keeper (docs/survival.md): the small process above the
//! daemon that keeps sessions alive across the daemon's death. `keeper`
//! is the process; `fdstore` its copies in systemd's fd store; `link` is the daemon's side of their socket; `wire` is
//! what goes over it. Depends on procd-sys alone (the exit type it shares
//! with the daemon's reaper).

mod fdstore;
pub mod keeper;
pub mod link;
pub mod wire;

pub use keeper::{new_instance, run, Launch};
pub use link::{HandedSession, Handover, Link, Request};
pub use wire::{Exit, FdKind, EXIT_HANDOVER};
