//! The daemon's side of the keeper link: what it receives when it starts
//! (the listening socket, the sessions a previous daemon started, their
//! exits), what it tells the keeper as sessions come and go, and the
//! messages that arrive later (exits of handed-over roots, stop, hand over).

use crate::wire::{self, Exit, FdKind, Received, ToDaemon, ToKeeper};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A session a previous daemon started, as the keeper kept it.
#[derive(Debug)]
pub struct HandedSession {
    pub session_id: String,
    pub pid: i32,
    pub start_time: u64,
    pub output: Option<OwnedFd>,
    pub stdin: Option<OwnedFd>,
    pub pty: Option<OwnedFd>,
    /// A PTY session's relay pipe (read end, write end).
    pub relay_out: Option<OwnedFd>,
    pub relay_in: Option<OwnedFd>,
    /// A restarting session's launch (a sealed memfd).
    pub launch: Option<OwnedFd>,
}

/// Everything the keeper handed over at start.
#[derive(Debug, Default)]
pub struct Handover {
    pub listener: Option<OwnedFd>,
    /// The listener is systemd's (socket activation of the keeper).
    pub activated: bool,
    pub sessions: Vec<HandedSession>,
}

/// What the keeper asks of the daemon after start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Hand the sessions over and exit (`wire::EXIT_HANDOVER`).
    HandOver,
    /// End every session and exit.
    Stop,
    /// The keeper is gone: sessions no longer survive a crash.
    Gone,
}

enum ExitSlot {
    Waiting(oneshot::Sender<Exit>),
    Arrived(Exit),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("socket", &self.socket)
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

pub struct Link {
    socket: OwnedFd,
    alive: AtomicBool,
    /// The keeper keeps the sessions in systemd's fd store too (its hello
    /// said so): losing it, this daemon hands over and exits.
    fd_store: AtomicBool,
    /// The keeper's instance id (`status.instance`), from its hello.
    instance: std::sync::OnceLock<String>,
    exits: Mutex<HashMap<i32, ExitSlot>>,
}

impl Link {
    /// The link this process was started with, if the keeper started it
    /// (`PROCD_KEEPER_FD`); the variable is removed so that nothing this
    /// daemon starts inherits it, and the descriptor is made close-on-exec.
    /// Call before any other thread exists.
    pub fn from_env() -> Option<Link> {
        let fd: i32 = std::env::var(wire::ENV).ok()?.parse().ok()?;
        std::env::remove_var(wire::ENV);
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            return None;
        }
        // SAFETY: the keeper put its end of the link on this descriptor for
        // us (it is open, checked above) and nothing else in this process
        // refers to it; it is owned from here on — unless it turns out not
        // to be a socket, then it is let go of unclosed below.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let is_socket = nix::sys::stat::fstat(&socket)
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK);
        // And its other end must be our parent's, of our own user: a
        // variable inherited from elsewhere names nobody's keeper.
        let ours = is_socket
            && nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::PeerCredentials)
                .is_ok_and(|cred| {
                    cred.pid() == nix::unistd::getppid().as_raw()
                        && cred.uid() == nix::unistd::getuid().as_raw()
                });
        if !ours {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(socket);
            return None;
        }
        let _ = nix::fcntl::fcntl(
            &socket,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        Some(Link {
            socket,
            alive: AtomicBool::new(true),
            fd_store: AtomicBool::new(false),
            instance: std::sync::OnceLock::new(),
            exits: Mutex::new(HashMap::new()),
        })
    }

    /// Reads the handover (blocking): the keeper sends it right after
    /// starting us. A keeper of another protocol version is not used.
    pub fn receive_handover(&self) -> std::io::Result<Handover> {
        let mut handover = Handover::default();
        let mut hello = false;
        loop {
            let (msg, fds) = match wire::recv::<ToDaemon>(self.socket.as_fd(), false)? {
                Received::Message(msg, fds) => (msg, fds),
                Received::Empty => continue,
                Received::Closed => {
                    return Err(std::io::Error::other("the keeper closed the link"))
                }
            };
            match msg {
                ToDaemon::Hello {
                    version,
                    fd_store,
                    instance,
                } if version == wire::VERSION => {
                    hello = true;
                    self.fd_store.store(fd_store, Ordering::SeqCst);
                    if let Some(instance) = instance {
                        let _ = self.instance.set(instance);
                    }
                }
                ToDaemon::Hello { version, .. } => {
                    return Err(std::io::Error::other(format!(
                        "the keeper speaks version {version}, this daemon {}",
                        wire::VERSION
                    )))
                }
                _ if !hello => return Err(std::io::Error::other("the keeper did not say hello")),
                ToDaemon::Listener { activated } => {
                    handover.listener = fds.into_iter().next();
                    handover.activated = activated;
                }
                ToDaemon::Session {
                    session_id,
                    pid,
                    start_time,
                    fds: kinds,
                    exit,
                } => {
                    let mut session = HandedSession {
                        session_id,
                        pid,
                        start_time,
                        output: None,
                        stdin: None,
                        pty: None,
                        relay_out: None,
                        relay_in: None,
                        launch: None,
                    };
                    for (kind, fd) in kinds.into_iter().zip(fds) {
                        *match kind {
                            FdKind::Output => &mut session.output,
                            FdKind::Stdin => &mut session.stdin,
                            FdKind::Pty => &mut session.pty,
                            FdKind::RelayOut => &mut session.relay_out,
                            FdKind::RelayIn => &mut session.relay_in,
                            FdKind::Launch => &mut session.launch,
                            // The keeper's alone: exits come as `exited`.
                            FdKind::Process => continue,
                        } = Some(fd);
                    }
                    if let Some(exit) = exit {
                        self.exit_arrived(pid, exit);
                    }
                    handover.sessions.push(session);
                }
                ToDaemon::HandedOver => return Ok(handover),
                ToDaemon::Exited { pid, exit } => self.exit_arrived(pid, exit),
                // The keeper sends the handover in one go, before anything
                // it is asked: these cannot come yet.
                ToDaemon::HandOver | ToDaemon::Stop => {}
            }
        }
    }

    /// Starts the thread that reads the keeper's later messages; `on`
    /// gets the requests (and `Gone` when the link ends).
    pub fn listen(self: &Arc<Self>, on: impl Fn(Request) + Send + 'static) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("procd-keeper-link".into())
            .spawn(move || loop {
                match wire::recv::<ToDaemon>(me.socket.as_fd(), false) {
                    Ok(Received::Message(ToDaemon::Exited { pid, exit }, _)) => {
                        me.exit_arrived(pid, exit)
                    }
                    Ok(Received::Message(ToDaemon::HandOver, _)) => on(Request::HandOver),
                    Ok(Received::Message(ToDaemon::Stop, _)) => on(Request::Stop),
                    Ok(Received::Message(..)) | Ok(Received::Empty) => {}
                    Ok(Received::Closed) | Err(_) => {
                        me.alive.store(false, Ordering::SeqCst);
                        on(Request::Gone);
                        return;
                    }
                }
            })
            .map(drop)
    }

    /// Whether the keeper is still there.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Whether the keeper keeps the sessions in systemd's fd store (then
    /// `hold` is to carry the root's pidfd too, and a daemon that loses
    /// its keeper hands over and exits).
    pub fn fd_store(&self) -> bool {
        self.fd_store.load(Ordering::SeqCst)
    }

    /// The keeper's instance id, if its hello gave one.
    pub fn instance(&self) -> Option<&str> {
        self.instance.get().map(String::as_str)
    }

    fn exit_arrived(&self, pid: i32, exit: Exit) {
        let mut exits = self.exits.lock().unwrap_or_else(|e| e.into_inner());
        match exits.remove(&pid) {
            Some(ExitSlot::Waiting(tx)) => {
                let _ = tx.send(exit);
            }
            _ => {
                exits.insert(pid, ExitSlot::Arrived(exit));
            }
        }
    }

    /// The exit of a handed-over root (the keeper's child now): resolved
    /// when the keeper reaps it, or at once if it already has.
    pub fn exit_of(&self, pid: i32) -> oneshot::Receiver<Exit> {
        let (tx, rx) = oneshot::channel();
        let mut exits = self.exits.lock().unwrap_or_else(|e| e.into_inner());
        match exits.remove(&pid) {
            Some(ExitSlot::Arrived(exit)) => {
                let _ = tx.send(exit);
            }
            _ => {
                exits.insert(pid, ExitSlot::Waiting(tx));
            }
        }
        rx
    }

    /// Sends without ever blocking (callers are on the daemon's event
    /// loop): a keeper that stopped reading is an error, not a stall.
    fn send(&self, msg: &ToKeeper, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
        if !self.is_alive() {
            return Err(std::io::Error::other("the keeper is gone"));
        }
        wire::send_now(self.socket.as_fd(), msg, fds).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                std::io::Error::other("the keeper is not reading its link")
            } else {
                e
            }
        })
    }

    /// Gives the keeper the listening socket to hold for the next daemon.
    pub fn keep_listener(&self, listener: BorrowedFd<'_>) -> std::io::Result<()> {
        self.send(&ToKeeper::Listener, &[listener])
    }

    /// Gives the keeper a session's descriptors to hold.
    pub fn hold(
        &self,
        session_id: &str,
        pid: i32,
        start_time: u64,
        fds: &[(FdKind, BorrowedFd<'_>)],
    ) -> std::io::Result<()> {
        let msg = ToKeeper::Hold {
            session_id: session_id.into(),
            pid,
            start_time,
            fds: fds.iter().map(|(k, _)| *k).collect(),
        };
        let raw: Vec<BorrowedFd<'_>> = fds.iter().map(|(_, fd)| *fd).collect();
        self.send(&msg, &raw)
    }

    /// The session's stdin pipe was closed: the keeper closes its copy.
    pub fn close_stdin(&self, session_id: &str) -> std::io::Result<()> {
        self.send(
            &ToKeeper::CloseStdin {
                session_id: session_id.into(),
            },
            &[],
        )
    }

    /// The session is over (or not ours): the keeper lets go of it.
    pub fn release(&self, session_id: &str) -> std::io::Result<()> {
        self.send(
            &ToKeeper::Release {
                session_id: session_id.into(),
            },
            &[],
        )
    }

    /// The daemon serves: a later death is a crash to restart from.
    pub fn serving(&self) -> std::io::Result<()> {
        self.send(&ToKeeper::Serving, &[])
    }
}
