//! The daemon's life: claim the instance, serve, shut down cleanly.
//!
//! Start-up claims the instance under the lifecycle lock (a live recorded
//! daemon means exit 17; a stale socket is removed only while the lock is
//! held), binds the socket 0600 — or takes the one systemd passes — and
//! records `gateway.json`. The monitor reads the leases off the event loop:
//! it ends sessions whose owner's lease is gone and stops an on-demand
//! daemon that has nothing left to do. Shutdown — SIGTERM, SIGINT, the
//! `shutdown` method or the monitor — stops accepting, ends every session's
//! tree, removes the socket and (if still ours) the state file.

use crate::rpc::Api;
use crate::shared::Daemon;
pub use crate::shared::LaunchMode;
use procd_core::{Config, Registry, RegistryOptions};
use procd_gateway::lock::FileLock;
use procd_gateway::state::{self, GatewayState, Liveness};
use procd_gateway::{atomic, lease, Paths};
use procd_sys::clock::rfc3339;
use procd_sys::procfs::ProcFs;
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Exit status of a daemon that finds another one running on its instance.
pub const EXIT_ALREADY_RUNNING: i32 = 17;

#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub paths: Paths,
    pub config: Config,
    pub mode: LaunchMode,
    /// How this daemon was invoked (recorded in gateway.json).
    pub command_line: String,
}

/// Runs the daemon to completion and returns its exit status.
///
/// `procd daemon` is the keeper (docs/survival.md, `procd_keeper`): it runs this
/// same program again as its child, the daemon proper, which finds
/// `PROCD_KEEPER_FD` and takes what the keeper hands it (the listening
/// socket — systemd's, under socket activation — and the sessions of a
/// daemon that died or restarted) before it serves. Under systemd the
/// keeper is the unit's main process and tells it READY/STOPPING.
pub fn run(options: DaemonOptions) -> i32 {
    let link = procd_keeper::Link::from_env();
    if link.is_none() && options.mode == LaunchMode::Background {
        // Lead a session (and group) of our own: detached from whoever
        // started us. EPERM means we already lead a group; that is fine
        // too. (A daemon under a keeper stays in the keeper's.)
        let _ = nix::unistd::setsid();
    }
    if link.is_none() {
        let launch = match std::env::current_exe() {
            Ok(exe) => procd_keeper::Launch {
                exe,
                args: std::env::args_os().skip(1).collect(),
            },
            Err(err) => {
                eprintln!("procd: cannot find this program to run the daemon: {err}");
                return 1;
            }
        };
        return procd_keeper::run(launch);
    }
    let (link, handover) = match link {
        None => (None, procd_keeper::Handover::default()),
        Some(link) => match link.receive_handover() {
            Ok(handover) => (Some(Arc::new(link)), handover),
            Err(err) => {
                // Serve without it: sessions then do not survive a crash.
                eprintln!("procd: cannot use the keeper: {err}");
                (None, procd_keeper::Handover::default())
            }
        },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("procd: cannot start the async runtime: {err}");
            return 1;
        }
    };
    match runtime.block_on(serve(options, link, handover)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("procd: {err}");
            1
        }
    }
}

/// Why the daemon could not start (`run` prints it as "procd: …").
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// A step failed with an OS error: what was being done, and why.
    #[error("{what}: {source}")]
    Os {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(&'static str),
}

impl StartupError {
    fn os(what: String, source: impl Into<std::io::Error>) -> StartupError {
        StartupError::Os {
            what,
            source: source.into(),
        }
    }
}

/// Says what was being done when an OS call failed.
trait Doing<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, StartupError>;
}

impl<T, E: Into<std::io::Error>> Doing<T> for Result<T, E> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, StartupError> {
        self.map_err(|e| StartupError::os(what(), e))
    }
}

enum Claim {
    Claimed(Listening),
    AlreadyRunning(i32),
}

/// The listening socket and whether we made it (else systemd passed it).
struct Listening {
    listener: std::os::unix::net::UnixListener,
    activated: bool,
}

/// Under the lifecycle lock: refuse if a live daemon is recorded, else
/// remove a stale socket, bind (or take the keeper's or systemd's socket),
/// record ourselves (and our keeper).
fn claim_instance(
    options: &DaemonOptions,
    keeper: Option<&procd_keeper::Link>,
    kept_listener: Option<(std::os::fd::OwnedFd, bool)>,
) -> Result<Claim, StartupError> {
    let paths = &options.paths;
    paths
        .create_dirs()
        .and_then(|()| paths.restrict_dirs())
        .doing(|| format!("cannot create {}", paths.runtime_dir.display()))?;
    let _lock = FileLock::acquire(&paths.lifecycle_lock())
        .doing(|| "cannot take the lifecycle lock".into())?;
    let procfs = ProcFs::default();
    let mut found = state::inspect(paths, &procfs);
    if keeper.is_some_and(procd_keeper::Link::fd_store) {
        found = wait_for_keeperless(paths, &procfs, found);
    }
    if !found.is_running() {
        // Not a record and nobody answers: keep it for a human, out of the way.
        state::set_aside_if_corrupt(paths);
    }
    // Our keeper, as gateway.json records it.
    let keeper_pid = keeper.map(|_| nix::unistd::getppid().as_raw());
    let keeper_identity =
        keeper_pid.and_then(|pid| state::RecordedIdentity::of(&procfs, pid).ok().flatten());
    match found {
        Liveness::Running(s) | Liveness::IdentityUnavailable(s) => {
            return Ok(Claim::AlreadyRunning(s.pid))
        }
        // Our own keeper restarting us: the record is the dead daemon's.
        Liveness::Restarting(s)
            if s.keeper_pid == keeper_pid && s.keeper_identity == keeper_identity => {}
        Liveness::Restarting(s) => return Ok(Claim::AlreadyRunning(s.keeper_pid.unwrap_or(s.pid))),
        Liveness::Stale(_) | Liveness::NotStarted => {}
    }
    // Record ourselves before the socket accepts anything: whoever can
    // connect must also find the state (`procd status`, clients).
    let socket = paths.socket();
    let record = own_record(options, &procfs, keeper_pid, keeper_identity)?;
    atomic::write_json(&paths.gateway_json(), &record)
        .doing(|| format!("cannot write {}", paths.gateway_json().display()))?;
    let unrecord = |err: StartupError| {
        let _ = std::fs::remove_file(paths.gateway_json());
        err
    };
    let (listener, activated) = match kept_listener {
        // The socket the keeper holds (the previous daemon's, or the one
        // systemd passed it): clients that connected meanwhile wait in its
        // backlog.
        Some((fd, activated)) => (std::os::unix::net::UnixListener::from(fd), activated),
        None => (bind_fresh(&socket, keeper).map_err(unrecord)?, false),
    };
    if options.mode == LaunchMode::Foreground {
        // An explicit daemon: a leftover on-demand lifetime (or the
        // "stopping" mark of a daemon that is gone) no longer applies.
        if let Err(err) = lease::with_clients(paths, |f| {
            f.auto_stop = false;
            f.stopping = false;
        }) {
            tracing::warn!(%err, "cannot update the lease file");
        }
    }
    Ok(Claim::Claimed(Listening {
        listener,
        activated,
    }))
}

/// What gateway.json records of this daemon (and of its keeper).
fn own_record(
    options: &DaemonOptions,
    procfs: &ProcFs,
    keeper_pid: Option<i32>,
    keeper_identity: Option<state::RecordedIdentity>,
) -> Result<GatewayState, StartupError> {
    let paths = &options.paths;
    let socket = paths.socket();
    let pid = std::process::id() as i32;
    let identity = state::RecordedIdentity::of(procfs, pid)
        .ok()
        .flatten()
        .ok_or(StartupError::Other(
            "cannot read this process's own identity from /proc",
        ))?;
    Ok(GatewayState {
        pid,
        identity: Some(identity),
        started_at: rfc3339(SystemTime::now()),
        launch_mode: options.mode.launch_mode().into(),
        socket: socket.display().to_string(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: options.command_line.clone(),
        log_path: (options.mode == LaunchMode::Background)
            .then(|| paths.daemon_log().display().to_string()),
        keeper_pid,
        keeper_identity,
    })
}

/// A new listening socket at `socket` (a stale one removed first), only
/// for us (0600), and given to the keeper to hold across daemons.
fn bind_fresh(
    socket: &std::path::Path,
    keeper: Option<&procd_keeper::Link>,
) -> Result<std::os::unix::net::UnixListener, StartupError> {
    match std::fs::remove_file(socket) {
        Ok(()) => tracing::info!(path = %socket.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(StartupError::os(
                format!("cannot remove stale socket {}", socket.display()),
                e,
            ))
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(socket)
        .map_err(|e| StartupError::os(format!("cannot listen on {}", socket.display()), e))?;
    if let Err(e) = std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(socket);
        return Err(StartupError::os(
            format!("cannot restrict {}", socket.display()),
            e,
        ));
    }
    if let Some(keeper) = keeper {
        if let Err(err) = keeper.keep_listener(std::os::fd::AsFd::as_fd(&listener)) {
            tracing::warn!(%err, "the keeper cannot hold the listening socket");
        }
    }
    Ok(listener)
}

/// Under systemd, a daemon whose keeper was killed hands its sessions over
/// and exits (the unit's next keeper, ours, has them from the fd store):
/// what `found` says once it is gone, or after 10 s as it is.
fn wait_for_keeperless(paths: &Paths, procfs: &ProcFs, found: Liveness) -> Liveness {
    let Liveness::Running(s) = &found else {
        return found;
    };
    if s.keeper_pid.is_none() || s.keeper_alive(procfs) {
        return found;
    }
    let Some(pidfd) = s.identity.and_then(|id| id.open(s.pid, procfs)) else {
        return state::inspect(paths, procfs);
    };
    tracing::info!(
        pid = s.pid,
        "waiting for the daemon that lost its keeper to hand over"
    );
    pidfd.wait_exit_blocking(std::time::Duration::from_secs(10));
    state::inspect(paths, procfs)
}

/// Removes our socket (unless systemd owns it) and state (if still ours),
/// and lifts the "stopping" mark so waiting clients may start a new one.
fn release_instance(paths: &Paths, activated: bool) {
    let pid = std::process::id() as i32;
    let _lock = FileLock::acquire(&paths.lifecycle_lock());
    let ours =
        atomic::read_json::<GatewayState>(&paths.gateway_json()).is_none_or(|s| s.pid == pid);
    if ours && !activated {
        let _ = std::fs::remove_file(paths.socket());
    }
    state::release_if_own(paths, pid);
    if ours {
        if let Err(err) = lease::with_clients(paths, |f| f.stopping = false) {
            tracing::warn!(%err, "cannot update the lease file");
        }
    }
}

async fn serve(
    options: DaemonOptions,
    keeper: Option<Arc<procd_keeper::Link>>,
    handover: procd_keeper::Handover,
) -> Result<i32, StartupError> {
    let signals = StopSignals::register()?;
    let claim_opts = options.clone();
    let claim_keeper = keeper.clone();
    let kept_listener = handover.listener.map(|fd| (fd, handover.activated));
    let claim = tokio::task::spawn_blocking(move || {
        claim_instance(&claim_opts, claim_keeper.as_deref(), kept_listener)
    })
    .await
    .doing(|| "start-up failed".into())??;
    let listening = match claim {
        Claim::AlreadyRunning(pid) => {
            eprintln!("procd is already running (pid {pid})");
            return Ok(EXIT_ALREADY_RUNNING);
        }
        Claim::Claimed(listening) => listening,
    };
    let paths = options.paths.clone();
    let activated = listening.activated;
    let result = serve_claimed(options, listening, signals, keeper, handover.sessions).await;
    if let Ok(procd_keeper::EXIT_HANDOVER) = result {
        // The next daemon takes the socket and the record over.
        return result;
    }
    let _ = tokio::task::spawn_blocking(move || release_instance(&paths, activated)).await;
    result
}

/// How every connection answers: the method table, the fast path, the
/// size limits.
fn protocol(daemon: &Arc<Daemon>, options: &DaemonOptions) -> crate::connection::Protocol {
    let methods: jsonrpsee::Methods = Api {
        daemon: daemon.clone(),
    }
    .methods()
    .into();
    crate::connection::Protocol {
        dispatch: crate::connection::Dispatch {
            methods,
            registry: Some(daemon.registry.clone()),
        },
        fast: Arc::new(crate::fast::FastPath::new(
            daemon.registry.clone(),
            options.config.max_response_bytes,
        )),
        max_request_bytes: options.config.max_request_bytes,
        max_response_bytes: options.config.max_response_bytes,
    }
}

async fn serve_claimed(
    options: DaemonOptions,
    listening: Listening,
    signals: StopSignals,
    keeper: Option<Arc<procd_keeper::Link>>,
    handed: Vec<procd_keeper::HandedSession>,
) -> Result<i32, StartupError> {
    // Each session holds a few descriptors: allow as many as the hard limit
    // does (children get the original soft limit back).
    procd_core::child::limits::raise_nofile();
    // The spawn slots sit lowest while the table is small: a child copies
    // the table below them only (procd_sys::spawn), so the listening
    // socket goes above them, where no child holds it past our death.
    procd_sys::spawn::reserve_slots().doing(|| "cannot reserve spawn descriptors".into())?;
    let std_listener = procd_sys::spawn::above_slots(listening.listener.into())
        .map(std::os::unix::net::UnixListener::from)
        .doing(|| "cannot move the listening socket".into())?;
    // Orphaned descendants of sessions are reparented to us and reaped.
    nix::sys::prctl::set_child_subreaper(true)
        .doing(|| "cannot become a child subreaper".into())?;
    std_listener
        .set_nonblocking(true)
        .doing(|| "socket setup failed".into())?;
    let listener =
        tokio::net::UnixListener::from_std(std_listener).doing(|| "socket setup failed".into())?;

    // Scopes only when systemd started us (its unit, or socket
    // activation): an inherited INVOCATION_ID alone proves nothing.
    let under_systemd = listening.activated || procd_core::tree::scope::started_by_unit();
    let containment = procd_core::tree::containment::Containment::choose(
        &options.config.containment,
        under_systemd,
        &options.paths.state_dir,
    )
    .map_err(|why| StartupError::os("no containment".into(), std::io::Error::other(why)))?;
    tracing::info!(containment = containment.kind(), reason = %containment.reason(), "containment");
    let tree = containment.cgroups();
    if tree.is_some() {
        // Made now, not at the first kill: what the daemon holds while it
        // serves is there from the start (a failure here leaves each wait
        // to look again every 10 ms, and is logged).
        if let Err(e) = procd_sys::file_watch::start() {
            tracing::warn!(%e, "no inotify instance for cgroup files");
        }
    }
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (daemon, registry) =
        match assemble(&options, containment, keeper.as_ref(), handed, shutdown).await {
            Ok(assembled) => assembled,
            Err(e) => {
                // A start that fails here leaves no empty instance tree
                // behind (what a recovered session holds stays: rmdir
                // keeps a cgroup that is not empty).
                if let Some(tree) = &tree {
                    tree.remove();
                }
                return Err(e);
            }
        };
    daemon.refresh_leases().await;
    signals.forward_to(daemon.clone());
    let monitor = tokio::spawn(monitor(
        daemon.clone(),
        Duration::from_secs_f64(options.config.monitor_interval_s),
        Duration::from_secs_f64(options.config.on_demand_idle_s),
        shutdown_rx.clone(),
    ));
    tracing::info!(socket = %options.paths.socket().display(), pid = std::process::id(), "procd is serving");

    crate::listener::serve(listener, protocol(&daemon, &options), shutdown_rx).await;

    let code = wind_down(&daemon, &registry, &options, listening.activated).await;
    monitor.abort();
    Ok(code)
}

/// The registry with what a previous daemon left taken back, the shells,
/// and the daemon's shared state, listening to the keeper.
async fn assemble(
    options: &DaemonOptions,
    containment: procd_core::tree::containment::Containment,
    keeper: Option<&Arc<procd_keeper::Link>>,
    handed: Vec<procd_keeper::HandedSession>,
    shutdown: watch::Sender<bool>,
) -> Result<(Arc<Daemon>, Arc<Registry>), StartupError> {
    let registry = new_registry(options, &containment, keeper.cloned())?;
    // Re-adopt what a previous daemon left running, and rewrite the
    // checkpoint to what we track, before the first request is served.
    match registry.recover(handed).await {
        Ok((0, 0)) => {}
        Ok((recovered, dropped)) => {
            tracing::info!(recovered, dropped, "recovered sessions from the checkpoint")
        }
        Err(err) => return Err(StartupError::os("cannot write the checkpoint".into(), err)),
    }
    let shells =
        procd_core::shell::Shells::new(registry.clone(), options.paths.state_dir.join("shells"));
    shells.recover().await;
    // The keeper's id; a daemon without a keeper is an instance of its own.
    let instance = keeper
        .and_then(|k| k.instance())
        .map_or_else(procd_keeper::new_instance, str::to_string);
    let daemon = Daemon::new(
        options,
        registry.clone(),
        shells,
        containment,
        instance,
        shutdown,
    )?;
    if let Some(keeper) = keeper {
        listen_to_keeper(keeper, daemon.clone())?;
    }
    Ok((daemon, registry))
}

/// After serving: hands every session over to the keeper's next daemon,
/// or ends them all. Returns the exit code.
async fn wind_down(
    daemon: &Daemon,
    registry: &Registry,
    options: &DaemonOptions,
    activated: bool,
) -> i32 {
    match daemon
        .handing_over
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        // The keeper holds the socket and every session's descriptors;
        // the next daemon serves them.
        true => {
            registry.hand_over(Duration::from_secs(2)).await;
            tracing::info!("sessions handed over; exiting");
            procd_keeper::EXIT_HANDOVER
        }
        false => {
            // Stop accepting first (the listener is gone), then end every
            // session.
            if !activated {
                let _ = std::fs::remove_file(options.paths.socket());
            }
            let killed = registry.shutdown_all().await;
            tracing::info!(killed, "sessions terminated; exiting");
            0
        }
    }
}

impl Daemon {
    /// The daemon's shared state, before it serves (no lease read yet).
    fn new(
        options: &DaemonOptions,
        registry: Arc<Registry>,
        shells: Arc<procd_core::shell::Shells>,
        containment: procd_core::tree::containment::Containment,
        instance: String,
        shutdown: watch::Sender<bool>,
    ) -> Result<Arc<Daemon>, StartupError> {
        Ok(Arc::new(Daemon {
            registry,
            shells,
            paths: options.paths.clone(),
            mode: options.mode,
            started_at: SystemTime::now(),
            started: Instant::now(),
            shutdown,
            leases: std::sync::Mutex::new(lease::LeaseSnapshot {
                auto_stop: false,
                clients: 0,
                stopping: false,
                tokens: Vec::new(),
            }),
            lane: crate::lane::Lane::start("procd-leases")
                .doing(|| "cannot start a thread".into())?,
            handing_over: std::sync::atomic::AtomicBool::new(false),
            containment,
            systemd_unit: procd_core::tree::scope::started_by_unit()
                .then(|| procd_sys::cgroup::PROCD_UNIT.to_string()),
            instance,
        }))
    }
}

/// The session table, with the containment chosen and the files it keeps.
fn new_registry(
    options: &DaemonOptions,
    containment: &procd_core::tree::containment::Containment,
    keeper: Option<Arc<procd_keeper::Link>>,
) -> Result<Arc<Registry>, StartupError> {
    Registry::new(RegistryOptions {
        config: options.config.clone(),
        logs_dir: options.paths.logs_dir(),
        tmp_dir: options.paths.state_dir.join("tmp"),
        jobs_dir: options.paths.state_dir.join("jobs"),
        own_paths: vec![
            options.paths.state_dir.clone(),
            options.paths.runtime_dir.clone(),
            options.paths.config_file.clone(),
        ],
        // $HOME, else the password database's entry; / when neither.
        default_cwd: dirs::home_dir().unwrap_or_else(|| "/".into()),
        inherited_env: std::env::vars().collect(),
        procfs: ProcFs::default(),
        checkpoint: Some(options.paths.procs_json()),
        notifications: Some(options.paths.notifications_journal()),
        scopes: matches!(
            containment,
            procd_core::tree::containment::Containment::Scope
        )
        .then(|| {
            Arc::new(procd_core::tree::scope::Scopes::new(
                options.config.worker_memory_max_mb,
            ))
        }),
        cgroups: containment.cgroups(),
        keeper,
    })
    .doing(|| format!("cannot create {}", options.paths.logs_dir().display()))
}

/// Tells the keeper we serve, and acts on what it asks later: hand the
/// sessions over (`procd restart`), stop (`procd stop` reached the
/// keeper), or nothing more (it is gone: reported as a fault).
fn listen_to_keeper(
    keeper: &Arc<procd_keeper::Link>,
    daemon: Arc<Daemon>,
) -> Result<(), StartupError> {
    use procd_keeper::Request;
    if let Err(err) = keeper.serving() {
        tracing::warn!(%err, "cannot tell the keeper we serve");
    }
    let runtime = tokio::runtime::Handle::current();
    let link = keeper.clone();
    keeper
        .listen(move |request| {
            let daemon = daemon.clone();
            let link = link.clone();
            runtime.spawn(async move {
                match request {
                    Request::HandOver => daemon.request_handover(),
                    Request::Stop => daemon.request_shutdown("the keeper was asked to stop"),
                    // Under systemd nothing outlives the keeper but the fd
                    // store: the unit's next keeper has the sessions, and
                    // this daemon makes way for its daemon.
                    Request::Gone if link.fd_store() && procd_sys::pidfd::exits_visible() => {
                        tracing::warn!("the keeper is gone; handing the sessions to the unit's next keeper");
                        daemon.request_handover();
                    }
                    Request::Gone if link.fd_store() => daemon.request_shutdown(
                        "the keeper is gone, and this kernel cannot tell the next keeper how sessions end",
                    ),
                    Request::Gone => {
                        tracing::warn!("the keeper is gone; sessions will not survive this daemon's death");
                        daemon.registry.faults.set(
                            "keeper",
                            "the keeper process is gone: sessions will not survive this daemon's death",
                        );
                    }
                }
            });
        })
        .doing(|| "cannot start a thread".into())
}

/// SIGTERM and SIGINT, registered before anything else so that a signal
/// arriving during start-up is held until the daemon can act on it (the
/// default action would kill it without releasing its state). SIGHUP is
/// caught too, and only logged: a daemon outlives the terminal it was
/// started from, and a closing terminal must not end it (docs/SECURITY.md).
/// (SIGPIPE is ignored by the Rust runtime before `main`.)
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn register() -> Result<StopSignals, StartupError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate()).doing(|| "signal setup".into())?,
            int: signal(SignalKind::interrupt()).doing(|| "signal setup".into())?,
            hup: signal(SignalKind::hangup()).doing(|| "signal setup".into())?,
        })
    }

    fn forward_to(mut self, daemon: Arc<Daemon>) {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = self.term.recv() => break daemon.request_shutdown("SIGTERM"),
                    _ = self.int.recv() => break daemon.request_shutdown("SIGINT"),
                    Some(()) = self.hup.recv() => tracing::info!("SIGHUP ignored"),
                }
            }
        });
    }
}

/// The daemon's only periodic work: retention, retrying faults, ended
/// leases, auto-stop.
async fn monitor(
    daemon: Arc<Daemon>,
    every: Duration,
    idle_grace: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_since: Option<Instant> = None;
    // Owners whose lease is gone and whose leftovers were ended.
    let mut swept_owners = HashSet::new();
    loop {
        tokio::select! {
            _ = crate::stopped(&mut shutdown) => return,
            _ = tick.tick() => {}
        }
        daemon.registry.prune();
        daemon.registry.retry_faults().await;
        daemon.registry.observe_sessions().await;
        daemon.registry.recheck_queues();
        let Some(leases) = daemon.refresh_leases().await else {
            continue;
        };
        let live: HashSet<String> = leases.tokens.iter().cloned().collect();
        let ended = daemon
            .registry
            .end_released_owners(&live, &mut swept_owners)
            .await;
        if ended > 0 {
            tracing::info!(ended, "ended sessions whose owner's lease is gone");
        }
        let (running, _) = daemon.registry.counts();
        let idle = daemon.mode == LaunchMode::Background
            && leases.auto_stop
            && leases.clients == 0
            && running == 0;
        if !idle {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < idle_grace {
            continue;
        }
        // Mark "stopping" under the clients lock, re-checking that no
        // client arrived meanwhile; a client acquiring now waits for us.
        let paths = daemon.paths.clone();
        let marked = tokio::task::spawn_blocking(move || {
            lease::with_clients(&paths, |f| {
                let stop = f.auto_stop && f.clients.is_empty();
                if stop {
                    f.stopping = true;
                }
                stop
            })
        })
        .await;
        if matches!(marked, Ok(Ok(true))) && daemon.registry.counts().0 == 0 {
            daemon.request_shutdown("on-demand daemon is idle");
            return;
        }
    }
}
