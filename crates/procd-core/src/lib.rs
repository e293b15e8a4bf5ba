//! procd-core: the process registry.
//!
//! Owns sessions (spawn, output, stdin, exit), their termination (identity
//! guard, tree kill) and the notification queue. Knows nothing about
//! sockets, JSON-RPC framing or daemon lifecycle: the server crate turns
//! requests into calls on `Registry` and its results into responses.

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
