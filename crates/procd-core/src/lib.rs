//! procd-core: the process registry.
//!
//! Owns sessions (spawn, output, stdin, exit), their termination (identity
//! guard, tree kill) and the notification queue. Knows nothing about
//! sockets, JSON-RPC framing or daemon lifecycle: the server crate turns
//! requests into calls on `Registry` and its results into responses.
//!
//! What is where, a folder per concern (each with a module doc of its own):
//! - `registry.rs` + `registry/`: `Registry`, one file per concern (see
//!   `registry.rs`).
//! - `session.rs` + `session/`: a session (its state, what was asked, its
//!   supervisor, its stdin writer).
//! - `output/`: where output comes from (`source.rs`), the `OutputStore` and
//!   its log (`store.rs`), the `NoiseFilter`, flood fairness, the `Redactor`,
//!   decoding and `bounded_regex` (`text.rs`), output budgets.
//! - `observation/`: ports, resources and waiting for input (`observe.rs`),
//!   listening sockets by netlink, ready conditions and the loopback HTTP
//!   probe, watch patterns, staleness.
//! - `tree/`: cgroup, scope or group (`containment.rs`), systemd scopes,
//!   `KillPlan`/`terminate` (`kill.rs`), the one owner of wait(2)
//!   (`reaper.rs`).
//! - `child/`: what a command starts with: the `EnvPolicy`, the command
//!   rewrite, the shell snapshot, `spawn{sandbox}` resolved, the descriptor
//!   limit.
//! - `admission/`: who starts now: running slots, spawn queues and memory
//!   pressure, the machine-wide jobserver.
//! - `stacks/`: procd.toml and Procfile, `up`/`down` over the registry's
//!   public calls, restart policies' decisions, restart on change.
//! - `persist/`: `procs.json` and `ended.jsonl`, faults lived with, debug
//!   builds' crash points.
//! - `notify.rs`: the `NotificationQueue` and the last 1000 numbered events
//!   for subscribers that resume.
//! - `testrun/`: test runs read as counts and failures (nothing there knows
//!   a session); `shell/`: shells that keep their state, over the
//!   registry's public calls.

pub mod admission;
pub mod child;
mod error;
pub mod notify;
pub mod observation;
pub mod output;
pub mod persist;
pub mod registry;
pub mod session;
pub mod shell;
pub mod stacks;
pub mod testrun;
pub mod tree;

// The OS layer and the configuration live below this crate (procd-sys,
// procd-proto); re-exported so that `crate::pidfd` and friends read as
// before.
pub use error::Error;
pub use procd_proto::config;
pub use procd_proto::config::Config;
pub use procd_sys::{atomic, clock, identity, pidfd, procfs, random};
#[cfg(feature = "test-hooks")]
pub use registry::InjectedFailures;
pub use registry::{ListPage, Registry, RegistryOptions};
