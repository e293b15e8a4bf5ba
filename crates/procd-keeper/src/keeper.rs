//! The keeper process (docs/survival.md): `procd daemon` runs
//! this, and the daemon proper as its child. It holds a duplicate of every
//! descriptor a session lives on (so no session sees SIGPIPE, EOF or SIGHUP
//! when the daemon dies), is the child subreaper (so session roots whose
//! daemon died become its children and their exit statuses are kept), and
//! starts the daemon again, handing everything back.
//!
//! Deliberately small: no async runtime, no JSON-RPC, no /proc. One loop
//! over the link to the daemon and a signalfd; the only state is a table
//! of descriptors and statuses.
//!
//! Upgrading in place: when a handover (`procd restart`) finds another
//! program at the keeper's path than the one it runs, the keeper execs
//! that program itself, once the old daemon is gone — the same pid, so
//! its children (the session roots) stay its children and systemd's
//! MainPID stays — carrying its table across in a memfd
//! (`PROCD_KEEPER_STATE`). The new keeper takes the table back and starts
//! a daemon of the new version, which is handed every session.
//!
//! Under systemd the keeper is the unit's main process, and nothing above
//! it outlives it: it also keeps every descriptor in systemd's fd store
//! (`fdstore`), and the unit's next keeper takes the sessions back from
//! there. Their roots are the user manager's children then; their exits
//! come from their pidfds (`foreign` roots).

mod upgrade;

use upgrade::program_changed;

use crate::fdstore;
use crate::wire::{self, Exit, FdKind, Received, ToDaemon, ToKeeper, EXIT_HANDOVER};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
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
    /// Not our child (a previous keeper's session, taken back from the fd
    /// store): its exit comes from its pidfd once its parent reaps it.
    foreign: bool,
}

impl Held {
    fn fd(&self, kind: FdKind) -> Option<&OwnedFd> {
        self.fds.iter().find(|(k, _)| *k == kind).map(|(_, fd)| fd)
    }

    /// Keeps how the root ended and tells the daemon, if one runs (else
    /// the next one learns it in the handover).
    fn ended(&mut self, exit: Exit, daemon: Option<&Daemon>) {
        self.exit = Some(exit);
        if let Some(link) = daemon.and_then(|d| d.link.as_ref()) {
            let msg = ToDaemon::Exited {
                pid: self.pid,
                exit,
            };
            let _ = wire::send(link.as_fd(), &msg, &[]);
        }
    }

    /// The root's exit, once its parent (not this keeper) has reaped it.
    fn reaped_exit(&self) -> Option<Exit> {
        let pidfd = self.fd(FdKind::Process)?;
        let raw = procd_sys::pidfd::reaped_status(pidfd.as_fd()).ok()??;
        Exit::from_raw(raw)
    }
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
    /// Under systemd: every held descriptor is in its fd store too.
    fd_store: bool,
    /// Names this procd for clients (`status.instance`): new with every
    /// keeper that starts afresh (a new container, a reboot), the same
    /// across its daemons' restarts and its own upgrade in place, so a
    /// client that reconnects can tell a restart from a replacement.
    instance: String,
}

fn say(what: std::fmt::Arguments<'_>) {
    eprintln!("procd keeper [{}]: {what}", std::process::id());
}

/// Runs the keeper until the daemon ends for good; returns the exit status
/// for `procd daemon`.
pub fn run(launch: Launch) -> i32 {
    let signals = match keeper_signals() {
        Ok(fd) => fd,
        Err(e) => {
            say(format_args!("{e}"));
            return 1;
        }
    };
    let (mut keeper, nofile, upgraded) = Keeper::begin();
    let mut failed_starts = 0usize;
    let mut restart_at = Some(Instant::now());
    let mut daemon: Option<Daemon> = None;
    if upgraded {
        // Roots that ended across the exec: their SIGCHLD may be gone,
        // their statuses are not (they wait as zombies).
        keeper.reap(None, None, &mut None);
    }
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
        let reaped = match keeper.wait_for_work(&signals, daemon.as_ref(), restart_at) {
            Ok(reaped) => reaped,
            Err(e) => {
                say(format_args!("poll failed: {e}"));
                return 1;
            }
        };
        keeper.foreign_exits(&reaped, daemon.as_ref());
        // Messages first: a Hold the daemon sent before it died must be
        // known before its root (reparented to us) is reaped.
        if let Some(d) = daemon.as_mut() {
            keeper.take_messages(d);
        }
        keeper.take_signals(&signals, daemon.as_ref(), &mut restart_at);
        let mut ended: Option<WaitStatus> = None;
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
        keeper.reaped_by_the_daemon();
        match keeper.after_daemon(&launch, nofile, &d, status, &mut failed_starts) {
            Next::Exit(code) => return code,
            Next::Restart(after) => restart_at = Some(Instant::now() + after),
        }
    }
}

impl Keeper {
    /// The keeper as it begins: carried over from our previous program
    /// (an upgrade, with its original descriptor limit), or new with what
    /// systemd passed. Returns it, the limit for daemons, and whether it
    /// was an upgrade.
    fn begin() -> (Keeper, Option<u64>, bool) {
        let mut nofile = raise_nofile();
        let mut keeper = Keeper::default();
        // An upgrade: our previous program's table, and its original limit.
        let upgraded = match Keeper::carried() {
            Ok(Some((carried, limit))) => {
                say(format_args!(
                    "upgraded in place; {} session(s) carried over",
                    carried.sessions.len()
                ));
                keeper = carried;
                nofile = limit;
                true
            }
            Ok(None) => false,
            Err(e) => {
                say(format_args!(
                    "cannot take over the previous keeper's table: {e}"
                ));
                false
            }
        };
        keeper.fd_store = std::env::var_os("NOTIFY_SOCKET").is_some();
        if keeper.instance.is_empty() {
            keeper.instance = new_instance();
        }
        if !upgraded {
            keeper.take_inherited();
        }
        for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            std::env::remove_var(var);
        }
        (keeper, nofile, upgraded)
    }
}

/// The command of a daemon: procd's program with `launch`'s arguments,
/// the link (`theirs_raw`) on fd 3, no signal blocked, and the original
/// descriptor limit `nofile`.
fn daemon_command(
    launch: &Launch,
    theirs_raw: RawFd,
    nofile: Option<u64>,
) -> std::process::Command {
    use std::os::unix::process::CommandExt;
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
    // SAFETY: runs in the forked child before exec; dup2(2), fcntl(2),
    // sigemptyset(3), pthread_sigmask(3) and get/setrlimit(2) are
    // async-signal-safe, the closure only copies two integers and
    // writes locals (a zeroed sigset_t is a valid value to initialise),
    // and dup2 onto 3 clears close-on-exec there.
    unsafe {
        cmd.pre_exec(move || {
            if theirs_raw == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                if flags == -1 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1 {
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
    cmd
}

/// What the keeper does once its daemon has ended.
enum Next {
    Exit(i32),
    /// Start the next daemon after this long.
    Restart(Duration),
}

/// The keeper's signals, blocked and read from a signalfd (SIGCHLD for the
/// roots and the daemon; TERM/INT to stop; USR1 to hand over), and the
/// subreaper bit that makes orphaned roots its children.
fn keeper_signals() -> Result<SignalFd, String> {
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
    mask.thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("cannot open a signalfd: {e}"))?;
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    Ok(signals)
}

impl Keeper {
    /// Sleeps until a signal, a message from the daemon, the time to start
    /// the next daemon, or the reaping of a foreign root; returns the ids
    /// of the foreign roots whose pidfds woke (a pidfd reports HUP once
    /// its process is reaped, whoever reaped it).
    fn wait_for_work(
        &self,
        signals: &SignalFd,
        daemon: Option<&Daemon>,
        restart_at: Option<Instant>,
    ) -> nix::Result<Vec<String>> {
        let timeout = match restart_at {
            Some(at) => PollTimeout::try_from(at.saturating_duration_since(Instant::now()))
                .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if let Some(link) = daemon.and_then(|d| d.link.as_ref()) {
            fds.push(PollFd::new(link.as_fd(), PollFlags::POLLIN));
        }
        let fixed = fds.len();
        let watched: Vec<(&String, &OwnedFd)> = self
            .sessions
            .iter()
            .filter(|(_, h)| h.foreign && h.exit.is_none())
            .filter_map(|(id, h)| Some((id, h.fd(FdKind::Process)?)))
            .collect();
        fds.extend(
            watched
                .iter()
                .map(|(_, fd)| PollFd::new(fd.as_fd(), PollFlags::empty())),
        );
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        Ok(fds[fixed..]
            .iter()
            .zip(&watched)
            .filter(|(fd, _)| fd.revents().is_some_and(|r| !r.is_empty()))
            .map(|(_, (id, _))| (*id).clone())
            .collect())
    }

    /// After the daemon died: the roots it reaped and had not yet released
    /// (it died between the reap and its record). Their pidfds say how
    /// they ended; without this the next daemon would wait for an exit
    /// that never comes.
    fn reaped_by_the_daemon(&mut self) {
        for held in self.sessions.values_mut() {
            if held.exit.is_none() && !held.foreign {
                held.exit = held.reaped_exit();
            }
        }
    }

    /// Records the exits of the foreign roots in `woke` that have been
    /// reaped, and passes them on to the daemon.
    fn foreign_exits(&mut self, woke: &[String], daemon: Option<&Daemon>) {
        for id in woke {
            let Some(held) = self.sessions.get_mut(id) else {
                continue;
            };
            if let Some(exit) = held.reaped_exit() {
                held.ended(exit, daemon);
            }
        }
    }

    /// Under systemd the keeper is the unit's main process: the socket it
    /// passes (LISTEN_PID is ours) is held and handed to every daemon, and
    /// readiness and stopping are told from here (NotifyAccess=main). The
    /// daemon sees neither protocol's variables. Beside the socket come
    /// the sessions a killed keeper of the unit left in the fd store.
    fn take_inherited(&mut self) {
        let Ok(inherited) = sd_notify::listen_fds_with_names() else {
            return;
        };
        let mut stored: BTreeMap<String, Vec<(fdstore::Named, OwnedFd)>> = BTreeMap::new();
        for (raw, name) in inherited {
            // SAFETY: by the socket-activation protocol this descriptor
            // was passed to this process (listen_fds checked LISTEN_PID)
            // and nothing else here owns it; each is taken once, here.
            let fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
            match fdstore::parse(&name) {
                Some(named) => stored
                    .entry(named.id.clone())
                    .or_default()
                    .push((named, fd)),
                None if self.listener.is_none() => {
                    self.listener = Some(fd);
                    self.activated = true;
                }
                None => say(format_args!("closing an unexpected descriptor ({name})")),
            }
        }
        for (id, parts) in stored {
            let root = parts.iter().find_map(|(n, _)| n.root);
            let Some((pid, start_time)) = root else {
                // Not one we can hand over (no pid to check it by).
                for (n, _) in &parts {
                    let _ = fdstore::remove(&fdstore::name(&id, n.kind, 0, 0));
                }
                continue;
            };
            let mut held = Held {
                pid,
                start_time,
                fds: parts.into_iter().map(|(n, fd)| (n.kind, fd)).collect(),
                exit: None,
                foreign: true,
            };
            held.exit = held.reaped_exit();
            self.sessions.insert(id, held);
        }
        if !self.sessions.is_empty() {
            say(format_args!(
                "took {} session(s) back from systemd's fd store",
                self.sessions.len()
            ));
        }
    }

    /// Puts a held session's descriptors in systemd's fd store.
    fn store(&self, id: &str, held: &Held) {
        if !self.fd_store || !fdstore::storable(id) {
            return;
        }
        for (kind, fd) in &held.fds {
            let name = fdstore::name(id, *kind, held.pid, held.start_time);
            if let Err(e) = fdstore::store(&name, fd.as_fd()) {
                say(format_args!("cannot store {name} with systemd: {e}"));
            }
        }
    }

    /// Takes descriptors of `id` out of systemd's fd store.
    fn unstore(&self, id: &str, held: &Held, kinds: impl Iterator<Item = FdKind>) {
        if !self.fd_store || !fdstore::storable(id) {
            return;
        }
        for kind in kinds {
            let _ = fdstore::remove(&fdstore::name(id, kind, held.pid, held.start_time));
        }
    }

    /// Acts on the signals that came: a stop is passed to the daemon (or
    /// starts one to end the sessions), a hand-over request too.
    fn take_signals(
        &mut self,
        signals: &SignalFd,
        daemon: Option<&Daemon>,
        restart_at: &mut Option<Instant>,
    ) {
        let link = daemon.and_then(|d| d.link.as_ref());
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGTERM | Signal::SIGINT) => {
                    if !self.stop_requested {
                        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
                    }
                    self.stop_requested = true;
                    match link {
                        Some(link) => {
                            let _ = wire::send(link.as_fd(), &ToDaemon::Stop, &[]);
                        }
                        // No daemon to end the sessions: start one now; it
                        // is told to stop as soon as it has them back.
                        None if daemon.is_none() => *restart_at = Some(Instant::now()),
                        None => {}
                    }
                }
                Ok(Signal::SIGUSR1) => {
                    if let Some(link) = link {
                        let _ = wire::send(link.as_fd(), &ToDaemon::HandOver, &[]);
                    }
                }
                // SIGCHLD: reaped next; SIGHUP: a closing terminal does
                // not end procd.
                _ => {}
            }
        }
    }

    /// After the daemon `d` ended with `status`: exit with a code, or
    /// start the next one (at once after a hand-over, which may first
    /// upgrade this keeper in place; after a pause when it died young).
    fn after_daemon(
        &mut self,
        launch: &Launch,
        nofile: Option<u64>,
        d: &Daemon,
        status: WaitStatus,
        failed_starts: &mut usize,
    ) -> Next {
        let code = match status {
            WaitStatus::Exited(_, code) => Some(code),
            _ => None,
        };
        if self.stop_requested && code.is_some_and(|c| c != EXIT_HANDOVER) {
            return Next::Exit(code.unwrap_or(1));
        }
        match code {
            Some(EXIT_HANDOVER) => {
                if program_changed(&launch.exe) {
                    // Returns only if the exec failed: go on as we are.
                    let e = self.exec_upgrade(launch, nofile);
                    say(format_args!(
                        "cannot upgrade in place ({e}); keeping this keeper"
                    ));
                }
                Next::Restart(Duration::ZERO)
            }
            // Ended by request, or could not start (another daemon runs,
            // a bad config): nothing to keep.
            Some(code) if code == 0 || (!d.serving && self.sessions.is_empty()) => Next::Exit(code),
            _ => {
                say(format_args!(
                    "the daemon (pid {}) died ({status:?}); starting it again with {} session(s)",
                    d.pid,
                    self.sessions.len()
                ));
                *failed_starts = if d.serving { 0 } else { *failed_starts + 1 };
                if *failed_starts >= MAX_FAILED_STARTS {
                    say(format_args!(
                        "{MAX_FAILED_STARTS} daemons in a row died before serving; giving up"
                    ));
                    return Next::Exit(1);
                }
                Next::Restart(match d.started.elapsed() < MIN_LIFE {
                    true => BACKOFF,
                    false => Duration::ZERO,
                })
            }
        }
    }
}

/// A new instance id: 16 hex digits from the CSPRNG (or, should that
/// fail, the pid and the time, which still differ between keepers).
pub fn new_instance() -> String {
    procd_sys::random::hex(8).unwrap_or_else(|_| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!("{:08x}{:08x}", std::process::id(), now.subsec_nanos())
    })
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
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let mut cmd = daemon_command(launch, theirs.as_raw_fd(), nofile);
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
                fd_store: self.fd_store,
                instance: Some(self.instance.clone()),
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
                let held = Held {
                    pid,
                    start_time,
                    fds: kinds.into_iter().zip(fds).collect(),
                    exit: None,
                    foreign: false,
                };
                // A restarted session's next run replaces its last one.
                if let Some(last) = self.sessions.remove(&session_id) {
                    self.unstore(&session_id, &last, last.fds.iter().map(|(k, _)| *k));
                }
                self.store(&session_id, &held);
                self.sessions.insert(session_id, held);
            }
            ToKeeper::CloseStdin { session_id } => {
                if let Some(held) = self.sessions.get(&session_id) {
                    if held.fd(FdKind::Stdin).is_some() {
                        self.unstore(&session_id, held, std::iter::once(FdKind::Stdin));
                    }
                }
                if let Some(held) = self.sessions.get_mut(&session_id) {
                    held.fds.retain(|(k, _)| *k != FdKind::Stdin);
                }
            }
            ToKeeper::Release { session_id } => {
                if let Some(held) = self.sessions.remove(&session_id) {
                    self.unstore(&session_id, &held, held.fds.iter().map(|(k, _)| *k));
                }
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
            held.ended(exit, daemon);
        }
    }
}
