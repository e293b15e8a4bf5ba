//! procd-gateway: everything about *an instance* of procd rather than its
//! sessions — where its files live, its configuration, its state file and
//! the advisory locks that keep two daemons from claiming one instance.
//!
//! All functions here do blocking file I/O; async callers run them through
//! `spawn_blocking` (the event loop never blocks on a file lock).

pub use procd_sys::atomic;
pub mod config;
pub mod control;
pub mod lease;
pub mod lock;
pub mod paths;
pub mod state;

pub use paths::Paths;
