//! The accept loop (in the manner of mini-redis): a semaphore bounds live
//! connections, each accepted peer must have the daemon's uid (checked
//! before a byte is read), and a shutdown signal stops accepting.

use jsonrpsee::Methods;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Connections served at once; further clients wait in the backlog.
const MAX_CONNECTIONS: usize = 512;

pub async fn serve(
    listener: UnixListener,
    methods: Methods,
    max_request_bytes: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let my_uid = nix::unistd::getuid().as_raw();
    let mut connections = JoinSet::new();
    loop {
        let permit = tokio::select! {
            _ = crate::stopped(&mut shutdown) => break,
            permit = limit.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = crate::stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // EMFILE and friends: back off briefly rather than spin.
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == my_uid => {}
            Ok(cred) => {
                tracing::warn!(uid = cred.uid(), "refused a connection from another user");
                continue;
            }
            Err(err) => {
                tracing::warn!(%err, "refused a connection without peer credentials");
                continue;
            }
        }
        let methods = methods.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            crate::connection::serve(stream, methods, max_request_bytes, shutdown).await;
            drop(permit);
        });
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}
