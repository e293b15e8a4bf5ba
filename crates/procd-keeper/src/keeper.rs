//! The keeper process (SPEC §11, docs/survival.md): `procd daemon` runs
//! this, and the daemon proper as its child. It holds a duplicate of every
//! descriptor a session lives on (so no session sees SIGPIPE, EOF or SIGHUP
//! when the daemon dies), is the child subreaper (so session roots whose
//! daemon died become its children and their exit statuses are kept), and
//! starts the daemon again, handing everything back.
//!
//! Deliberately small: no async runtime, no JSON-RPC, no /proc. One loop
//! over the link to the daemon and a signalfd; the only state is a table
//! of descriptors and statuses.

use crate::wire::{self, Exit, FdKind, Received, ToDaemon, ToKeeper, EXIT_HANDOVER};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How the daemon is started: this program again, with the same arguments.
#[derive(Debug, Clone)]
pub struct Launch {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
}

/// After this many daemons in a row died before they served, the keeper
/// gives up (a daemon that cannot start will not start by trying faster).
const MAX_FAILED_STARTS: usize = 5;
/// A daemon that served is started again at once, unless it lived less
/// than `MIN_LIFE`: then after `BACKOFF`, so a daemon that keeps dying
/// right after it starts costs at most four starts a second. It is never
/// given up on: sessions depend on it.
const MIN_LIFE: Duration = Duration::from_secs(1);
const BACKOFF: Duration = Duration::from_millis(250);

struct Held {
    pid: i32,
    start_time: u64,
    fds: Vec<(FdKind, OwnedFd)>,
    exit: Option<Exit>,
}

/// The daemon of this generation.
struct Daemon {
    pid: Pid,
    link: Option<OwnedFd>,
    serving: bool,
    started: Instant,
}

#[derive(Default)]
struct Keeper {
    sessions: BTreeMap<String, Held>,
    listener: Option<OwnedFd>,
    /// The listener came from systemd (socket activation).
    activated: bool,
    /// Whether systemd has been told READY=1 (it waits for the first
    /// daemon that serves).
    ready_told: bool,
    stop_requested: bool,
}

fn say(what: std::fmt::Arguments<'_>) {
    eprintln!("procd keeper [{}]: {what}", std::process::id());
}

/// Runs the keeper until the daemon ends for good; returns the exit status
/// for `procd daemon`.
pub fn run(launch: Launch) -> i32 {
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        mask.add(s);
    }
    if let Err(e) = mask.thread_block() {
        say(format_args!("cannot block signals: {e}"));
        return 1;
    }
    let signals = match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
    {
        Ok(fd) => fd,
        Err(e) => {
            say(format_args!("cannot open a signalfd: {e}"));
            return 1;
        }
    };
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        say(format_args!("cannot become a child subreaper: {e}"));
        return 1;
    }
    let nofile = raise_nofile();
    let mut keeper = Keeper::default();
    // Under systemd the keeper is the unit's main process: the socket it
    // passes (LISTEN_PID is ours) is held and handed to every daemon, and
    // readiness and stopping are told from here (NotifyAccess=main). The
    // daemon sees neither protocol's variables.
    if let Some(fd) = sd_notify::listen_fds().ok().and_then(|mut fds| fds.next()) {
        // SAFETY: by the socket-activation protocol this descriptor was
        // opened for this process (listen_fds checked LISTEN_PID) and
        // nothing else here owns it; it is taken once, at start-up.
        keeper.listener = Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) });
        keeper.activated = true;
    }
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let mut failed_starts = 0usize;
    let mut restart_at = Some(Instant::now());
    let mut daemon: Option<Daemon> = None;
    loop {
        if daemon.is_none() && restart_at.is_some_and(|at| at <= Instant::now()) {
            restart_at = None;
            match keeper.start(&launch, nofile) {
                Ok(d) => daemon = Some(d),
                Err(e) => {
                    say(format_args!("cannot start the daemon: {e}"));
                    failed_starts += 1;
                    if keeper.sessions.is_empty() || failed_starts >= MAX_FAILED_STARTS {
                        return 1;
                    }
                    restart_at = Some(Instant::now() + BACKOFF);
                }
            }
        }
        let timeout = match restart_at {
            Some(at) => PollTimeout::try_from(at.saturating_duration_since(Instant::now()))
                .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        {
            let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
            if let Some(link) = daemon.as_ref().and_then(|d| d.link.as_ref()) {
                fds.push(PollFd::new(link.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    say(format_args!("poll failed: {e}"));
                    return 1;
                }
            }
        }
        // Messages first: a Hold the daemon sent before it died must be
        // known before its root (reparented to us) is reaped.
        if let Some(d) = daemon.as_mut() {
            keeper.take_messages(d);
        }
        let mut ended: Option<WaitStatus> = None;
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => {}
                Ok(Signal::SIGTERM | Signal::SIGINT) => {
                    if !keeper.stop_requested {
                        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
                    }
                    keeper.stop_requested = true;
                    match daemon.as_ref().and_then(|d| d.link.as_ref()) {
                        Some(link) => {
                            let _ = wire::send(link.as_fd(), &ToDaemon::Stop, &[]);
                        }
                        // No daemon to end the sessions: start one now; it
                        // is told to stop as soon as it has them back.
                        None if daemon.is_none() => restart_at = Some(Instant::now()),
                        None => {}
                    }
                }
                Ok(Signal::SIGUSR1) => {
                    if let Some(link) = daemon.as_ref().and_then(|d| d.link.as_ref()) {
                        let _ = wire::send(link.as_fd(), &ToDaemon::HandOver, &[]);
                    }
                }
                _ => {} // SIGHUP: a closing terminal does not end procd.
            }
        }
        let daemon_pid = daemon.as_ref().map(|d| d.pid);
        keeper.reap(daemon.as_ref(), daemon_pid, &mut ended);
        let Some(status) = ended else {
            continue;
        };
        let Some(mut d) = daemon.take() else {
            continue;
        };
        // Whatever it sent before it died still counts.
        keeper.take_messages(&mut d);
        let code = match status {
            WaitStatus::Exited(_, code) => Some(code),
            _ => None,
        };
        if keeper.stop_requested && code.is_some_and(|c| c != EXIT_HANDOVER) {
            return code.unwrap_or(1);
        }
        match code {
            Some(EXIT_HANDOVER) => restart_at = Some(Instant::now()),
            // Ended by request, or could not start (another daemon runs,
            // a bad config): nothing to keep.
            Some(code) if code == 0 || (!d.serving && keeper.sessions.is_empty()) => return code,
            _ => {
                say(format_args!(
                    "the daemon (pid {}) died ({status:?}); starting it again with {} session(s)",
                    d.pid,
                    keeper.sessions.len()
                ));
                failed_starts = if d.serving { 0 } else { failed_starts + 1 };
                if failed_starts >= MAX_FAILED_STARTS {
                    say(format_args!(
                        "{MAX_FAILED_STARTS} daemons in a row died before serving; giving up"
                    ));
                    return 1;
                }
                let pause = if d.started.elapsed() < MIN_LIFE {
                    BACKOFF
                } else {
                    Duration::ZERO
                };
                restart_at = Some(Instant::now() + pause);
            }
        }
    }
}

/// Raises the soft descriptor limit (the keeper holds a few per session);
/// returns the original soft limit, which the daemon gets back.
fn raise_nofile() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok()).then_some(soft)
}

impl Keeper {
    /// Starts the daemon with its end of a new link on descriptor 3, and
    /// hands it everything held.
    fn start(&mut self, launch: &Launch, nofile: Option<u64>) -> std::io::Result<Daemon> {
        use std::os::unix::process::CommandExt;
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let exe = if launch.exe.exists() {
            launch.exe.clone()
        } else {
            // Deleted and not replaced: the program we run as.
            PathBuf::from("/proc/self/exe")
        };
        let mut cmd = std::process::Command::new(exe);
        cmd.args(&launch.args)
            .env(wire::ENV, "3")
            // Readiness is the keeper's to tell (it is the main process).
            .env_remove("NOTIFY_SOCKET");
        let theirs_raw = theirs.as_raw_fd();
        // SAFETY: runs in the forked child before exec; dup2(2), fcntl(2),
        // sigemptyset(3), pthread_sigmask(3) and get/setrlimit(2) are
        // async-signal-safe, the closure only copies two integers and
        // writes locals (a zeroed sigset_t is a valid value to initialise),
        // and dup2 onto 3 clears close-on-exec there.
        unsafe {
            cmd.pre_exec(move || {
                if theirs_raw == 3 {
                    let flags = libc::fcntl(3, libc::F_GETFD);
                    if flags == -1 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(theirs_raw, 3) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // The keeper blocks the signals it reads from its signalfd;
                // the daemon (and every session, through it) must not
                // inherit that mask.
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::other("cannot unblock signals"));
                }
                if let Some(soft) = nofile {
                    let mut lim = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                        lim.rlim_cur = soft.min(lim.rlim_max);
                        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                    }
                }
                Ok(())
            });
        }
        // The child is reaped by our waitpid loop, never through `Child`.
        let child = cmd.spawn()?;
        drop(theirs);
        let pid = Pid::from_raw(child.id() as i32);
        // A daemon that does not read its link within this long is stuck:
        // the keeper must never block on it for good.
        let _ = nix::sys::socket::setsockopt(
            &ours,
            nix::sys::socket::sockopt::SendTimeout,
            &nix::sys::time::TimeVal::new(5, 0),
        );
        let mut d = Daemon {
            pid,
            link: Some(ours),
            serving: false,
            started: Instant::now(),
        };
        if let Err(e) = self.hand_over(&d) {
            say(format_args!("handing over to pid {pid} failed: {e}"));
            d.link = None;
        } else if self.stop_requested {
            if let Some(link) = &d.link {
                let _ = wire::send(link.as_fd(), &ToDaemon::Stop, &[]);
            }
        }
        Ok(d)
    }

    fn hand_over(&self, d: &Daemon) -> std::io::Result<()> {
        let Some(link) = d.link.as_ref() else {
            return Ok(());
        };
        let link = link.as_fd();
        wire::send(
            link,
            &ToDaemon::Hello {
                version: wire::VERSION,
            },
            &[],
        )?;
        if let Some(listener) = &self.listener {
            let msg = ToDaemon::Listener {
                activated: self.activated,
            };
            wire::send(link, &msg, &[listener.as_fd()])?;
        }
        for (id, held) in &self.sessions {
            let kinds = held.fds.iter().map(|(k, _)| *k).collect();
            let fds: Vec<_> = held.fds.iter().map(|(_, fd)| fd.as_fd()).collect();
            let msg = ToDaemon::Session {
                session_id: id.clone(),
                pid: held.pid,
                start_time: held.start_time,
                fds: kinds,
                exit: held.exit,
            };
            wire::send(link, &msg, &fds)?;
        }
        wire::send(link, &ToDaemon::HandedOver, &[])
    }

    /// Applies every message queued on the link (without blocking).
    fn take_messages(&mut self, d: &mut Daemon) {
        let mut resets = 0;
        while let Some(link) = d.link.as_ref() {
            match wire::recv::<ToKeeper>(link.as_fd(), true) {
                Ok(Received::Message(msg, fds)) => self.apply(d, msg, fds),
                Ok(Received::Empty) => return,
                Ok(Received::Closed) => d.link = None,
                // A daemon that died with messages of ours unread makes
                // the first receive fail with ECONNRESET; what it sent
                // before dying is still queued behind that error.
                Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) && resets == 0 => resets += 1,
                Err(e) if e.raw_os_error().is_some() => {
                    say(format_args!("the link to the daemon failed: {e}"));
                    d.link = None;
                }
                Err(e) => say(format_args!("{e}")),
            }
        }
    }

    fn apply(&mut self, d: &mut Daemon, msg: ToKeeper, fds: Vec<OwnedFd>) {
        match msg {
            ToKeeper::Listener => {
                if let Some(fd) = fds.into_iter().next() {
                    self.listener = Some(fd);
                }
            }
            ToKeeper::Hold {
                session_id,
                pid,
                start_time,
                fds: kinds,
            } => {
                if kinds.len() != fds.len() {
                    say(format_args!(
                        "a hold for {session_id} names {} descriptors and carries {}",
                        kinds.len(),
                        fds.len()
                    ));
                    return;
                }
                let fds = kinds.into_iter().zip(fds).collect();
                self.sessions.insert(
                    session_id,
                    Held {
                        pid,
                        start_time,
                        fds,
                        exit: None,
                    },
                );
            }
            ToKeeper::CloseStdin { session_id } => {
                if let Some(held) = self.sessions.get_mut(&session_id) {
                    held.fds.retain(|(k, _)| *k != FdKind::Stdin);
                }
            }
            ToKeeper::Release { session_id } => {
                self.sessions.remove(&session_id);
            }
            ToKeeper::Serving => {
                d.serving = true;
                if !self.ready_told {
                    self.ready_told = true;
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
                }
            }
        }
    }

    /// Reaps every child that ended: the daemon (reported in `ended`),
    /// session roots (their status kept and passed on), and orphans.
    fn reap(
        &mut self,
        daemon: Option<&Daemon>,
        daemon_pid: Option<Pid>,
        ended: &mut Option<WaitStatus>,
    ) {
        loop {
            let status = match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => status,
            };
            let Some((pid, exit)) = Exit::of(status) else {
                continue;
            };
            if Some(pid) == daemon_pid {
                *ended = Some(status);
                continue;
            }
            let Some(held) = self.sessions.values_mut().find(|h| h.pid == pid.as_raw()) else {
                continue; // an orphan of some session: reaped, nothing to keep
            };
            held.exit = Some(exit);
            if let Some(link) = daemon.and_then(|d| d.link.as_ref()) {
                let _ = wire::send(
                    link.as_fd(),
                    &ToDaemon::Exited {
                        pid: pid.as_raw(),
                        exit,
                    },
                    &[],
                );
            }
        }
    }
}
