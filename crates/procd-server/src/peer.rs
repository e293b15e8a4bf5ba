//! Who is at the other end of a connection, beyond its uid: a process of
//! a sandboxed session is not served (docs/SECURITY.md). Its uid is the
//! user's, so the listener's check lets it in; through procd it could
//! otherwise start an unsandboxed command, or type into another
//! session's shell.
//!
//! While any sandboxed session is tracked or being spawned
//! (`sandbox::Launches`: a child runs before its session is in the table,
//! and a connection waits for the sandboxed spawns begun before it), each
//! connection's peer (its pidfd from `SO_PEERPIDFD`, so a reused pid cannot
//! pass for it) is looked up off the event loop
//! (`Registry::sandboxed_session_of`) the way a kill finds a session's
//! processes (`TreeSpec::holds`), or in the session's systemd scope; its
//! every request is -32005 and runs nothing. With no sandboxed session, an
//! accept costs one look at the table.

use procd_core::registry::Registry;
use procd_sys::pidfd::PidFd;
use std::os::fd::AsFd;
use std::sync::Arc;
use tokio::net::UnixStream;

/// Why the process that connected `stream` (`pid`, from its credentials)
/// is not served, if it is not: the answer every one of its requests
/// gets. Costs one look at the session table while no sandboxed session
/// is tracked; else /proc is read, off the event loop.
pub async fn refusal(
    stream: &UnixStream,
    pid: Option<i32>,
    registry: Option<&Arc<Registry>>,
) -> Option<String> {
    let registry = registry.filter(|r| r.has_sandboxed())?.clone();
    // A sandboxed child can connect before its session is in the table.
    if !registry.sandbox_launches.settled(LAUNCH_WAIT).await {
        return Some(refused(UNKNOWN));
    }
    // The kernel's pidfd of the peer as it connected: unlike the pid, it
    // cannot come to name another process. None before Linux 6.5, which
    // lacks the option, when the pid alone is looked at. Any other error
    // (a peer already reaped, before Linux 6.16 gave pidfds of those)
    // leaves who it was unknown, and so refused.
    let pidfd = match pid.map(|pid| PidFd::of_peer(stream.as_fd(), pid)) {
        Some(Err(e)) if e.raw_os_error() != Some(rustix::io::Errno::NOPROTOOPT.raw_os_error()) => {
            return Some(refused(UNKNOWN));
        }
        found => found.and_then(Result::ok),
    };
    let verdict = tokio::task::spawn_blocking(move || {
        let session = registry.sandboxed_session_of(pid?);
        // Looked at after the read, so that the pid read was the peer's.
        let gone = pidfd.as_ref().is_some_and(PidFd::has_exited);
        Some((session, gone))
    })
    .await;
    match verdict {
        Ok(Some((Some(id), _))) => Some(refused(&format!(
            "permission denied: this connection comes from sandboxed session {id}, and a sandboxed command cannot ask procd for anything"
        ))),
        Ok(Some((None, false))) => None,
        // Who it was can no longer be told.
        _ => Some(refused(UNKNOWN)),
    }
}

/// How long a connection waits for the sandboxed spawns begun before it
/// to have their sessions in the table; past it, it is refused. A spawn
/// takes milliseconds; a loaded machine, seconds.
const LAUNCH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

const UNKNOWN: &str =
    "permission denied: the connecting process could not be told apart from a sandboxed session's";

fn refused(why: &str) -> String {
    tracing::warn!(%why, "refused a connection's requests");
    why.to_string()
}
