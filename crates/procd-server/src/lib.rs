//! procd-server: the daemon process. A listener accepts connections on the
//! Unix socket (peer uid checked first), a task per connection frames lines
//! and hands each JSON-RPC request to the jsonrpsee method table, which
//! calls into `procd_core::Registry`. Shutdown is one `watch` signal that
//! the listener, every connection and the monitor observe.
//!
//! What is where: `daemon.rs` (claiming the instance; the listening
//! socket, made or taken from the keeper; signals: TERM and INT stop, HUP
//! is ignored; the monitor: retention, faults retried, trees observed,
//! ended leases, the on-demand auto-stop; shutdown with a deadline),
//! `listener.rs` (uid check, the connection cap with eviction of the
//! idlest), `peer.rs` (a sandboxed session's processes are not served),
//! `ends.rs` (a connection's two ends: the socket, or the pipes a
//! `dial-stdio` handed over on it), `connection.rs` (the per-connection
//! loop, subscription forwarding, backpressure), `lines.rs` (framing with
//! `memchr`), `request.rs` (one line: a batch as one bounded answer,
//! notifications, names resolved, unknown params refused by name, panics
//! answered -32603), `fast.rs` and `json.rs` (poll's and read's common
//! shapes answered without jsonrpsee), `rpc.rs` (the `ProcdApiServer`
//! impl and the hand-registered `spawn`), `shared.rs` (the `Daemon`
//! state), `lane.rs` (the lease lane).

mod connection;
mod daemon;
mod ends;
mod fast;
mod json;
mod lane;
mod lines;
mod listener;
mod peer;
mod request;
mod rpc;
mod shared;

pub use daemon::{run, DaemonOptions, LaunchMode, EXIT_ALREADY_RUNNING};

/// Resolves once the shutdown signal is set (or its sender is gone).
async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
