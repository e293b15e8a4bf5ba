//! procd-core: the process registry.
//!
//! Owns sessions (spawn, output, stdin, exit), their termination (identity
//! guard, tree kill) and the notification queue. Knows nothing about
//! sockets, JSON-RPC framing or daemon lifecycle: the server crate turns
//! requests into calls on `Registry` and its results into responses.

pub mod budget;
pub mod checkpoint;
pub mod containment;
mod crash;
pub mod env;
mod error;
pub mod fairness;
pub mod faults;
pub mod ingest;
pub mod jobserver;
pub mod kill;
pub mod limits;
pub mod noise;
pub mod notify;
pub mod observe;
pub mod onchange;
pub mod output;
pub mod queue;
pub mod readiness;
pub mod reaper;
pub mod redact;
pub mod registry;
pub mod restart;
pub mod rewrite;
pub mod sandbox;
pub mod scope;
pub mod session;
pub mod shell;
pub mod slot;
pub mod snapshot;
pub mod sockdiag;
pub mod stack;
pub mod stale;
pub mod testrun;
pub mod text;
pub mod up;
pub mod watch;

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
