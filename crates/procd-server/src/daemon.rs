//! The daemon's life: claim the instance, serve, shut down cleanly.
//!
//! Start-up claims the instance under the lifecycle lock (a live recorded
//! daemon means exit 17; a stale socket is removed only while the lock is
//! held), binds the socket 0600, and records `gateway.json`. Shutdown —
//! SIGTERM, SIGINT or the `shutdown` method — stops accepting, ends every
//! session's tree, removes the socket and (if still ours) the state file.

use crate::rpc::Api;
use procd_core::clock::rfc3339;
use procd_core::procfs::ProcFs;
use procd_core::{Config, Registry, RegistryOptions};
use procd_gateway::lock::FileLock;
use procd_gateway::state::{self, GatewayState, Liveness};
use procd_gateway::{atomic, Paths};
use procd_proto::{ProcdApiServer, StatusResult};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Exit status of a daemon that finds another one running on its instance.
pub const EXIT_ALREADY_RUNNING: i32 = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchMode {
    /// `procd daemon`: explicit, in the foreground (also under systemd).
    Foreground,
    /// Started detached by a client that needed a daemon (on-demand).
    OnDemand,
}

impl LaunchMode {
    fn launch_mode(self) -> &'static str {
        match self {
            LaunchMode::Foreground => "foreground",
            LaunchMode::OnDemand => "background",
        }
    }
    fn lifetime(self) -> &'static str {
        match self {
            LaunchMode::Foreground => "explicit",
            LaunchMode::OnDemand => "on_demand",
        }
    }
}

#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub paths: Paths,
    pub config: Config,
    pub mode: LaunchMode,
    /// How this daemon was invoked (recorded in gateway.json).
    pub command_line: String,
}

/// State shared by the method table and the daemon's own tasks.
pub struct Daemon {
    pub registry: Arc<Registry>,
    paths: Paths,
    mode: LaunchMode,
    started_at: SystemTime,
    started: Instant,
    shutdown: watch::Sender<bool>,
}

impl Daemon {
    pub fn request_shutdown(&self, why: &str) {
        if !*self.shutdown.borrow() {
            tracing::info!(why, "shutting down");
        }
        self.shutdown.send_replace(true);
    }

    pub fn status(&self) -> StatusResult {
        let (running, finished) = self.registry.counts();
        StatusResult {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id() as i32,
            started_at: rfc3339(self.started_at),
            uptime_seconds: (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            launch_mode: self.mode.launch_mode().to_string(),
            lifetime: self.mode.lifetime().to_string(),
            clients: 0,
            running: running as u32,
            finished: finished as u32,
            socket: self.paths.socket().display().to_string(),
            state_dir: self.paths.state_dir.display().to_string(),
        }
    }
}

/// Runs the daemon to completion and returns its exit status.
pub fn run(options: DaemonOptions) -> i32 {
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
    match runtime.block_on(serve(options)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("procd: {err}");
            1
        }
    }
}

enum Claim {
    Claimed(std::os::unix::net::UnixListener),
    AlreadyRunning(i32),
}

/// Under the lifecycle lock: refuse if a live daemon is recorded, else
/// remove a stale socket, bind, and record ourselves.
fn claim_instance(options: &DaemonOptions) -> Result<Claim, String> {
    let paths = &options.paths;
    paths
        .create_dirs()
        .map_err(|e| format!("cannot create {}: {e}", paths.runtime_dir.display()))?;
    let _lock = FileLock::acquire(&paths.lifecycle_lock())
        .map_err(|e| format!("cannot take the lifecycle lock: {e}"))?;
    let procfs = ProcFs::default();
    match state::inspect(paths, &procfs) {
        Liveness::Running(s) | Liveness::IdentityUnavailable(s) => {
            return Ok(Claim::AlreadyRunning(s.pid))
        }
        Liveness::Stale(_) | Liveness::NotStarted => {}
    }
    let socket = paths.socket();
    match std::fs::remove_file(&socket) {
        Ok(()) => tracing::info!(path = %socket.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(format!(
                "cannot remove stale socket {}: {e}",
                socket.display()
            ))
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(&socket)
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    let fail = |msg: String| {
        let _ = std::fs::remove_file(&socket);
        msg
    };
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| fail(format!("cannot restrict {}: {e}", socket.display())))?;
    let pid = std::process::id() as i32;
    let identity = state::process_identity(&procfs, pid)
        .ok()
        .flatten()
        .ok_or_else(|| fail("cannot read this process's own identity from /proc".into()))?;
    let record = GatewayState {
        pid,
        identity: Some(identity),
        started_at: rfc3339(SystemTime::now()),
        launch_mode: options.mode.launch_mode().into(),
        socket: socket.display().to_string(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: options.command_line.clone(),
        log_path: matches!(options.mode, LaunchMode::OnDemand)
            .then(|| paths.daemon_log().display().to_string()),
    };
    atomic::write_json(&paths.gateway_json(), &record).map_err(|e| {
        fail(format!(
            "cannot write {}: {e}",
            paths.gateway_json().display()
        ))
    })?;
    Ok(Claim::Claimed(listener))
}

/// Removes our socket and state (if they are still ours).
fn release_instance(paths: &Paths) {
    let pid = std::process::id() as i32;
    let _lock = FileLock::acquire(&paths.lifecycle_lock());
    let ours =
        atomic::read_json::<GatewayState>(&paths.gateway_json()).is_none_or(|s| s.pid == pid);
    if ours {
        let _ = std::fs::remove_file(paths.socket());
    }
    state::release_if_own(paths, pid);
}

async fn serve(options: DaemonOptions) -> Result<i32, String> {
    let claim_opts = options.clone();
    let claim = tokio::task::spawn_blocking(move || claim_instance(&claim_opts))
        .await
        .map_err(|e| format!("start-up failed: {e}"))??;
    let std_listener = match claim {
        Claim::AlreadyRunning(pid) => {
            eprintln!("procd is already running (pid {pid})");
            return Ok(EXIT_ALREADY_RUNNING);
        }
        Claim::Claimed(listener) => listener,
    };
    let paths = options.paths.clone();
    let result = serve_claimed(options, std_listener).await;
    let release_paths = paths.clone();
    let _ = tokio::task::spawn_blocking(move || release_instance(&release_paths)).await;
    result
}

async fn serve_claimed(
    options: DaemonOptions,
    std_listener: std::os::unix::net::UnixListener,
) -> Result<i32, String> {
    // Orphaned descendants of sessions are reparented to us and reaped.
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| format!("socket setup failed: {e}"))?;
    let listener = tokio::net::UnixListener::from_std(std_listener)
        .map_err(|e| format!("socket setup failed: {e}"))?;

    let registry = Registry::new(RegistryOptions {
        config: options.config.clone(),
        logs_dir: options.paths.logs_dir(),
        default_cwd: dirs_home(),
        inherited_env: std::env::vars().collect(),
        procfs: ProcFs::default(),
        fail_after_spawn: false,
    })
    .map_err(|e| format!("cannot create {}: {e}", options.paths.logs_dir().display()))?;

    let (shutdown, shutdown_rx) = watch::channel(false);
    let daemon = Arc::new(Daemon {
        registry: registry.clone(),
        paths: options.paths.clone(),
        mode: options.mode,
        started_at: SystemTime::now(),
        started: Instant::now(),
        shutdown,
    });
    let methods: jsonrpsee::Methods = Api {
        daemon: daemon.clone(),
    }
    .into_rpc()
    .into();

    spawn_signal_handlers(daemon.clone())?;
    let monitor = tokio::spawn(monitor(
        daemon.clone(),
        Duration::from_secs_f64(options.config.monitor_interval_s),
        shutdown_rx.clone(),
    ));
    tracing::info!(socket = %options.paths.socket().display(), pid = std::process::id(), "procd is serving");

    crate::listener::serve(
        listener,
        methods,
        options.config.max_request_bytes,
        shutdown_rx,
    )
    .await;

    // Stop accepting first (the listener is gone), then end every session.
    let _ = std::fs::remove_file(options.paths.socket());
    let killed = registry.shutdown_all().await;
    tracing::info!(killed, "sessions terminated; exiting");
    monitor.abort();
    Ok(0)
}

fn spawn_signal_handlers(daemon: Arc<Daemon>) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("signal setup: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("signal setup: {e}"))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => daemon.request_shutdown("SIGTERM"),
            _ = int.recv() => daemon.request_shutdown("SIGINT"),
        }
    });
    Ok(())
}

/// The daemon's only periodic work: retention (and, later, leases).
async fn monitor(daemon: Arc<Daemon>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = crate::stopped(&mut shutdown) => return,
            _ = tick.tick() => daemon.registry.prune(),
        }
    }
}

fn dirs_home() -> std::path::PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/"))
}
