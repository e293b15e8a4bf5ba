//! procd-server: the daemon process. A listener accepts connections on the
//! Unix socket (peer uid checked first), a task per connection frames lines
//! and hands each JSON-RPC request to the jsonrpsee method table, which
//! calls into `procd_core::Registry`. Shutdown is one `watch` signal that
//! the listener, every connection and the monitor observe.

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
