//! procd-gateway: everything about *an instance* of procd rather than its
//! sessions — where its files live, its configuration, its state file and
//! the advisory locks that keep two daemons from claiming one instance.
//!
//! All functions here do blocking file I/O; async callers run them through
//! `spawn_blocking` (the event loop never blocks on a file lock).
//!
//! What is where: `paths.rs` (an instance's paths), `config.rs`
//! (`config.toml` and `--set` overrides), `state.rs` (`gateway.json`, its
//! state and identity check), `lease.rs` (client leases: the lease file,
//! acquire and release, the `stopping` wait), `control.rs` (start, stop,
//! restart and status from outside), `lock.rs` (flock locks). Built on
//! procd-sys and procd-proto only, so that procd-client links neither the
//! registry nor pty-process nor regex.

pub use procd_sys::atomic;
pub mod config;
pub mod control;
pub mod lease;
pub mod lock;
pub mod paths;
pub mod state;

pub use paths::Paths;
