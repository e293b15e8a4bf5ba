//! procd-sys: the thin layer over the operating system that both the
//! daemon (procd-core) and its clients (procd-gateway) need: pidfds and the
//! identity guard's building blocks (`ProcessIdentity` = pid + start time),
//! reading /proc, atomic private files, CSPRNG names, RFC 3339 clocks, and
//! how a child ended (`wait::ChildExit`, shared with the keeper).
//!
//! It knows nothing of sessions, sockets or JSON-RPC, and depends on no
//! procd crate: a client that links it does not link the registry.

pub mod atomic;
pub mod cgroup;
pub mod clock;
pub mod fifo;
pub mod file_watch;
pub mod identity;
pub mod inotify;
pub mod memfd;
pub mod pidfd;
pub mod procfs;
pub mod random;
pub mod sandbox;
pub mod spawn;
pub mod timer;
pub mod tree_watch;
pub mod wait;
