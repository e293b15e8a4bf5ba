//! The accept loop (in the manner of mini-redis): each accepted peer must
//! have the daemon's uid (checked before a byte is read), live connections
//! are capped, and a shutdown signal stops accepting.
//!
//! At the cap a new client is not made to wait behind idle ones: the
//! connection idle the longest (one with no request in flight and no
//! subscription, if there is such) is closed to make room (docs/SECURITY.md).

use crate::connection::ConnectionHandle;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

/// Connections served at once; past it the longest idle one is closed.
pub const MAX_CONNECTIONS: usize = 512;
/// How long connection tasks get to end once the daemon stops, after which
/// they are aborted: a stopping daemon never waits on a client.
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// The live connections, by number.
#[derive(Default)]
struct Live(Mutex<HashMap<u64, Arc<ConnectionHandle>>>);

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnectionHandle>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the idlest connection if `MAX_CONNECTIONS` are live.
    fn make_room(&self) {
        let live = self.lock();
        if live.len() < MAX_CONNECTIONS {
            return;
        }
        if let Some((_, victim)) = live
            .iter()
            .filter(|(_, h)| !h.close.is_cancelled())
            .min_by_key(|(_, h)| h.idleness())
        {
            tracing::info!("connection cap reached: closing the longest idle connection");
            victim.close.cancel();
        }
    }
}

pub async fn serve(
    listener: UnixListener,
    protocol: crate::connection::Protocol,
    mut shutdown: watch::Receiver<bool>,
) {
    let live = Arc::new(Live::default());
    let my_uid = nix::unistd::getuid().as_raw();
    let mut connections = JoinSet::new();
    let mut next_id = 0u64;
    loop {
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
        let peer_pid = match stream.peer_cred() {
            Ok(cred) if cred.uid() == my_uid => cred.pid(),
            Ok(cred) => {
                tracing::warn!(uid = cred.uid(), "refused a connection from another user");
                // One line saying why (best effort: a fresh socket's buffer
                // takes it without blocking), then the connection closes.
                let refusal = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":{},\"message\":\"permission denied: this procd serves uid {my_uid} only\"}}}}\n",
                    procd_proto::error::PERMISSION_DENIED
                );
                let _ = stream.try_write(refusal.as_bytes());
                continue;
            }
            Err(err) => {
                tracing::warn!(%err, "refused a connection without peer credentials");
                continue;
            }
        };
        live.make_room();
        let protocol = protocol.clone();
        let shutdown = shutdown.clone();
        let handle = ConnectionHandle::new();
        let id = next_id;
        next_id += 1;
        live.lock().insert(id, handle.clone());
        let live = live.clone();
        // Every log line of the connection names it (and its client's pid).
        let span = tracing::info_span!("connection", id, peer_pid = ?peer_pid);
        connections.spawn(
            async move {
                crate::connection::serve(stream, peer_pid, protocol, shutdown, handle).await;
                live.lock().remove(&id);
            }
            .instrument(span),
        );
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
    let ended = tokio::time::timeout(STOP_DEADLINE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if ended.is_err() {
        tracing::warn!("connections still busy at shutdown were aborted");
        connections.abort_all();
    }
}
