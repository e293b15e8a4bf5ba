//! procd-sys: the thin layer over the operating system that both the
//! daemon (procd-core) and its clients (procd-gateway) need: pidfds and the
//! identity guard's building blocks (`ProcessIdentity` = pid + start time),
//! reading /proc, atomic private files, CSPRNG names, RFC 3339 clocks, and
//! how a child ended (`wait::ChildExit`, shared with the keeper).
//!
//! It knows nothing of sessions, sockets or JSON-RPC, and depends on no
//! procd crate: a client that links it does not link the registry.
//!
//! What is where:
//! - `identity.rs`: `ProcessIdentity` (pid + start time; `open` is the
//!   identity guard) and `RecordedIdentity`, the one on-disk form
//!   ("<pgid>:<start time>" or a legacy pgid) of gateway.json, the lease
//!   file and procs.json, whose `open` guards recorded processes.
//! - `pidfd.rs`: pidfd_open, send_signal and poll; `reaped_status`, the
//!   exit a non-parent reads; `of_peer`, a socket peer's pidfd.
//! - `procfs.rs`: /proc stat parsing and environ; members' `statm` files
//!   kept open between looks.
//! - `spawn.rs` + `spawn/`: starting a program without copying the daemon,
//!   a vfork-style clone (clone3 into the session's cgroup on x86_64) whose
//!   child runs raw syscalls only; stdio and up to four descriptors
//!   inherited at 3 and up; the child shares the daemon's descriptor table
//!   and copies only its low end, where `spawn/slots.rs` keeps slots.
//! - `wait.rs`: `ChildExit`, how a child ended (the reaper's and the
//!   keeper's).
//! - `cgroup.rs` + `cgroup/`: the instance's cgroup tree and a session's
//!   cgroup (procs, populated, kill, limits in v2 or v1 files, OOM counts);
//!   `controller.rs` controllers and I/O weights, `mounts.rs` where the
//!   hierarchies are, `oom.rs` the OOM watch (a v1 eventfd or a v2 file
//!   watch); what is not available, and why, for `status`.
//! - `sandbox.rs`: the Landlock ruleset (its signal scope, the session's own
//!   terminal only) and the seccomp filter a spawned child enters;
//!   `confine_this_thread` for a thread doing file work for a client.
//! - `tree_watch.rs` (a directory tree under inotify, with ignores and what
//!   changed since a time), `inotify.rs` (a descriptor on the event loop,
//!   closed on a thread of its own), `file_watch.rs` (single files, such as
//!   cgroup.events and memory.events, through one shared instance read by a
//!   thread of its own), `timer.rs` (a timerfd, for waits whose length is
//!   the point).
//! - `atomic.rs` (private files: lenient bounded reads of regular files,
//!   corrupt ones moved aside, `SwapFile`), `memfd.rs` (sealed memfds),
//!   `fifo.rs` (a jobserver's token FIFO), `random.rs` (CSPRNG names),
//!   `clock.rs` (RFC 3339, and `instant_at` for a time another daemon
//!   recorded).

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
