//! Who listens on a TCP port (docs/stacks.md "Who owns a port"): a
//! session of this daemon, a process of this user's, or another user's.
//! Asked by the `port` method and by a spawn whose `ready.port` is
//! already taken (`port_in_use`).

use super::Registry;
use crate::error::Error;
use crate::observation::sockdiag::Listening;
use crate::procfs::ProcFs;
use crate::session::{Session, SessionSpec};
use procd_proto::{PortAsk, PortInUse, PortOwner, PortResult};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// The most ports one spawn may be given (`port` and `ports`).
const MAX_PORTS: usize = 16;

/// Whether `name` may name a port of `ports`: an environment variable of
/// A-Z, 0-9 and _, not starting with a digit, at most 64 bytes, not
/// `PORT` (that is `port`'s).
pub(super) fn is_port_var(name: &str) -> bool {
    name != "PORT"
        && (1..=64).contains(&name.len())
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// How many free ports a pick tries before it gives up: each is one the
/// kernel just handed out, so only other sessions' ports are skipped.
const PICK_TRIES: usize = 64;

/// A port picked for a spawn, held against other picks until dropped
/// (by then the session is in the table, holding it itself).
pub(super) struct PickedPort<'a> {
    registry: &'a Registry,
    port: u16,
}

impl Drop for PickedPort<'_> {
    fn drop(&mut self) {
        self.registry
            .picking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.port);
    }
}

/// The longest command a `port_in_use` or `port` answer shows.
const HOLDER_COMMAND_CHARS: usize = 200;

/// A listening socket found on a port, and the process holding it when
/// it is this user's.
struct Listener {
    socket: Listening,
    holder: Option<Holder>,
}

/// The process holding a listening socket open.
struct Holder {
    pid: i32,
    /// Its command line, unredacted (the caller redacts it).
    command: String,
    cwd: Option<String>,
}

impl Registry {
    /// Applies spawn's `port` and `ports` to `spec`: for `"auto"` (asked,
    /// or implied by `ready.port: "auto"`) a free port is picked. `port`
    /// goes in `PORT` and for `ready.port: "auto"`; each of `ports` in its
    /// variable. (`{port}` and `{NAME}` are put in the command as it is
    /// run: `SessionSpec::command_to_run`.) The picks are held until the
    /// returned guards drop.
    pub(super) fn give_ports(
        &self,
        spec: &mut SessionSpec,
        port: Option<PortAsk>,
        ports: Option<&BTreeMap<String, PortAsk>>,
        env: &mut BTreeMap<String, String>,
    ) -> Result<Vec<PickedPort<'_>>, Error> {
        let auto_ready = spec.ready.as_ref().is_some_and(|r| r.wants_auto_port());
        let port = port.or(auto_ready.then_some(PortAsk::Auto));
        let mut asked: Vec<(String, PortAsk)> = Vec::new();
        if let Some(ask) = port {
            asked.push(("PORT".into(), ask));
        }
        for (name, &ask) in ports.into_iter().flatten() {
            if !is_port_var(name) || asked.len() >= MAX_PORTS {
                return Err(Error::InvalidParams(format!(
                    "ports: at most {MAX_PORTS} variables (A-Z, 0-9, _; not PORT, which is `port`), got {name:?}"
                )));
            }
            asked.push((name.clone(), ask));
        }
        let mut picks = Vec::new();
        for (name, ask) in asked {
            if env.contains_key(&name) {
                return Err(Error::InvalidParams(format!(
                    "port: {name} is given as a port and in env; give one of them"
                )));
            }
            let given = match ask {
                PortAsk::Number(n) => n.get(),
                PortAsk::Auto => {
                    let picked = self.pick_port()?;
                    let port = picked.port;
                    picks.push(picked);
                    port
                }
            };
            env.insert(name.clone(), given.to_string());
            match name.as_str() {
                "PORT" => spec.port = Some(given),
                _ => {
                    spec.named_ports.insert(name, given);
                }
            }
        }
        if let (Some(ready), Some(port)) = (&mut spec.ready, spec.port) {
            ready.resolve_auto_port(port);
        }
        Ok(picks)
    }

    /// A free TCP port (the kernel's pick for a wildcard bind) that no
    /// session of this daemon holds and no other spawn is being given.
    fn pick_port(&self) -> Result<PickedPort<'_>, Error> {
        let held: BTreeSet<u16> = self
            .table()
            .values()
            .filter(|s| s.is_running() || s.is_restarting())
            .flat_map(|s| {
                s.spec
                    .port
                    .into_iter()
                    .chain(s.spec.named_ports.values().copied())
            })
            .collect();
        let mut picking = self.picking.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..PICK_TRIES {
            let port = std::net::TcpListener::bind(("0.0.0.0", 0))
                .and_then(|l| l.local_addr())
                .map_err(|e| Error::Internal(format!("port: cannot find a free port: {e}")))?
                .port();
            if !held.contains(&port) && picking.insert(port) {
                return Ok(PickedPort {
                    registry: self,
                    port,
                });
            }
        }
        Err(Error::LimitReached(format!(
            "port: no free port found in {PICK_TRIES} tries"
        )))
    }

    /// Who listens on `port`: the `port` method.
    pub async fn port_owner(&self, port: u16) -> PortResult {
        let mut result = PortResult {
            port,
            owner: PortOwner::None,
            session_id: None,
            name: None,
            project: None,
            pid: None,
            command: None,
            cwd: None,
            uid: None,
        };
        let Some(found) = self.listener(port).await else {
            return result;
        };
        result.uid = Some(found.socket.uid);
        if found.socket.uid != own_uid() {
            result.owner = PortOwner::OtherUser;
            return result;
        }
        let session = self.session_listening(&found);
        result.pid = found.holder.as_ref().map(|h| h.pid);
        match session {
            Some(session) => {
                result.owner = PortOwner::Session;
                result.session_id = Some(session.id.clone());
                result.name = session.spec.name.as_ref().map(|n| n.as_str().to_owned());
                result.project = session.spec.project.as_ref().map(|p| p.as_str().to_owned());
                result.command = Some(session.shown_command().to_owned());
                result.cwd = Some(session.spec.cwd.display().to_string());
                result.pid = result.pid.or(Some(session.pid()));
            }
            None => {
                result.owner = PortOwner::Process;
                if let Some(holder) = &found.holder {
                    result.command = Some(self.shown_holder_command(&holder.command));
                    result.cwd = holder.cwd.clone();
                }
            }
        }
        result
    }

    /// Who already listens on `port`, if anyone does: for a spawn whose
    /// `ready.port` is taken. Another user's process is not named.
    pub async fn port_in_use(&self, port: u16) -> Option<PortInUse> {
        let found = self.listener(port).await?;
        let session_id = self.session_listening(&found).map(|s| s.id.clone());
        let holder = found.holder.as_ref();
        Some(PortInUse {
            port,
            session_id,
            pid: holder.map(|h| h.pid),
            command: holder.map(|h| self.shown_holder_command(&h.command)),
        })
    }

    /// A listener on `port`, this user's first: a sock_diag dump, and
    /// the holder found in /proc only then, both off the event loop.
    async fn listener(&self, port: u16) -> Option<Listener> {
        let procfs = self.procfs.clone();
        tokio::task::spawn_blocking(move || {
            let uid = own_uid();
            let (inode, socket) = crate::observation::sockdiag::listening_tcp()
                .ok()?
                .into_iter()
                .filter(|(_, l)| l.port == port)
                .min_by_key(|(inode, l)| (l.uid != uid, *inode))?;
            let holder = (socket.uid == uid)
                .then(|| socket_holder(&procfs, inode))
                .flatten();
            Some(Listener { socket, holder })
        })
        .await
        .ok()
        .flatten()
    }

    /// The session whose cgroup made the socket, or whose root process
    /// holds it (where there are no cgroups).
    fn session_listening(&self, found: &Listener) -> Option<Arc<Session>> {
        let table = self.table();
        let by_cgroup = found.socket.cgroup.and_then(|id| {
            table
                .values()
                .find(|s| s.run().cgroup.as_ref().and_then(|c| c.inode()) == Some(id))
        });
        let by_pid = || {
            let pid = found.holder.as_ref()?.pid;
            table.values().find(|s| s.is_running() && s.pid() == pid)
        };
        by_cgroup.or_else(by_pid).cloned()
    }

    fn shown_holder_command(&self, command: &str) -> String {
        self.redactor
            .command(command)
            .chars()
            .take(HOLDER_COMMAND_CHARS)
            .collect()
    }
}

fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The process holding the socket `inode` open, its command line and
/// its cwd: a walk of /proc, made only when a port is found taken by
/// this user's socket.
fn socket_holder(procfs: &ProcFs, inode: u64) -> Option<Holder> {
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir(procfs.root()).ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if holds(&entry.path(), &target) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let command = String::from_utf8_lossy(&cmdline)
                .split('\0')
                .filter(|a| !a.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let cwd = std::fs::read_link(entry.path().join("cwd"))
                .ok()
                .map(|p| p.display().to_string());
            return Some(Holder { pid, command, cwd });
        }
    }
    None
}

/// Whether the process at `/proc/<pid>` has `target` among its fds.
fn holds(proc_dir: &Path, target: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(proc_dir.join("fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target))
}
