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
//!
//! What wakes a task (docs/ARCHITECTURE.md: readers are woken, never
//! poll): output appends `send_replace` a `watch` of the end cursor, and
//! `read{wait_ms}` and `wait` await it and the session's view. A
//! watch-pattern match lingering for its following lines, the collapse of a
//! flooded log's punched head after a second of quiet, and the end of a
//! flood's hold (`output/fairness.rs`: while two or more sessions flood,
//! one past its share is not read until the 20 ms window ends) are
//! `sleep_until`s in the session's own select, armed only while they apply.
//! The only periodic task is the monitor (`monitor_interval_s`: retention,
//! retrying faults, observing running trees, ended leases, auto-stop).
//! Three probes exist because the kernel offers no event for them, each
//! only while asked for: a readiness task probes its port or HTTP
//! condition until met (100 ms to 1 s), a yield on a quiet session that
//! can take input probes its tree every 250 ms until the yield ends, and
//! after a v1 OOM notification the OOM watch looks at the kill count every
//! 10 ms for up to 300 ms.
//!
//! What runs off the event loop: instance claim and release
//! (`spawn_blocking`); /proc scans (kill plans, the post-exit adoption, the
//! monitor's observation, recovery's search for strays) through
//! `kill::scan_blocking`, two at a time, except the kill plan of a cgroup
//! of at most 32 processes, whose `stat` reads cost less than the trip to
//! the pool; checkpoint writes, log compaction and tidying, reads of output
//! older than the memory tail, the deletion of pruned logs, the spare log a
//! session's log is renamed from, and the shell snapshot's stats
//! (`spawn_blocking`); lease-file reads (a thread of their own, `lane.rs`);
//! the keeper's replies (`Link::listen`). On the loop by design: a
//! session's log rename, cgroup files (kernfs, in memory, never waiting on
//! a disk), messages to the keeper (`MSG_DONTWAIT`: a keeper that stops
//! reading is a fault, never a stalled spawn), and log appends (plain
//! page-cache writes in the supervisor task, outside the store's mutex).
//!
//! Containment (docs/containment.md): without a cgroup, what a root leaves
//! to the daemon when it exits is recorded on the session (`adopted`); a
//! stopping daemon ends every child of its own that no one waits for and
//! every cgroup of its tree; the launch line's traps make the shell stop at
//! the signal, never run the next step. An observation of a session with a
//! cgroup reads `cgroup.procs`, each member's `statm` (kept open; each
//! monitor tick closes what it did not read) and, if it sleeps, its
//! `syscall`, and takes the ports from one sock_diag dump by the cgroup id.

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
