//! A session's process tree: what holds it (a cgroup, a systemd scope or
//! the process group), how it is ended (the kill plan, by identity), and
//! the daemon's one owner of wait(2).

pub mod containment;
pub mod kill;
pub mod reaper;
pub mod scope;
