//! The daemon's shared state: what the method table (`rpc.rs`) and the
//! daemon's own tasks (`daemon.rs`: the monitor, signals, shutdown) both
//! hold. Its own module, so that neither of those two needs the other.

use procd_core::Registry;
use procd_gateway::{lease, Paths};
use procd_proto::StatusResult;
use procd_sys::clock::rfc3339;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchMode {
    /// `procd daemon`: explicit, in the foreground (also under systemd).
    Foreground,
    /// Detached by `procd start` or by a client that needed a daemon; the
    /// lifetime (explicit or on-demand) is the lease file's `auto_stop`.
    Background,
}

impl LaunchMode {
    pub(crate) fn launch_mode(self) -> &'static str {
        match self {
            LaunchMode::Foreground => "foreground",
            LaunchMode::Background => "background",
        }
    }
}

/// State shared by the method table and the daemon's own tasks.
pub struct Daemon {
    pub registry: Arc<Registry>,
    /// Shells that keep their state (`procd_core::shell`), over the registry.
    pub shells: Arc<procd_core::shell::Shells>,
    pub(crate) paths: Paths,
    pub(crate) mode: LaunchMode,
    pub(crate) started_at: SystemTime,
    pub(crate) started: Instant,
    pub(crate) shutdown: watch::Sender<bool>,
    /// The leases as the monitor last read them.
    pub(crate) leases: std::sync::Mutex<lease::LeaseSnapshot>,
    /// Where the lease file is read (see `lane.rs`).
    pub(crate) lane: crate::lane::Lane,
    /// Set when the daemon stops to hand its sessions to the next one
    /// (the keeper asked: `procd restart`, an upgrade) instead of ending them.
    pub(crate) handing_over: std::sync::atomic::AtomicBool,
    /// What holds sessions' trees, and why (for `status`).
    pub(crate) containment: procd_core::tree::containment::Containment,
    /// The systemd unit procd runs as, if systemd started it.
    pub(crate) systemd_unit: Option<String>,
    /// `status.instance`: the keeper's id (docs/cluster.md).
    pub(crate) instance: String,
}

impl Daemon {
    pub fn request_shutdown(&self, why: &str) {
        if !*self.shutdown.borrow() {
            tracing::info!(why, "shutting down");
        }
        self.registry.close();
        self.shutdown.send_replace(true);
    }

    /// Stops serving and hands every session to the next daemon; not once
    /// a stop is under way (it ends the sessions, as asked).
    pub fn request_handover(&self) {
        if *self.shutdown.borrow() {
            return;
        }
        tracing::info!("handing the sessions over to a new daemon");
        self.handing_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.registry.close();
        self.shutdown.send_replace(true);
    }

    pub(crate) fn leases(&self) -> lease::LeaseSnapshot {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the lease file (off the event loop).
    pub async fn refresh_leases(&self) -> Option<lease::LeaseSnapshot> {
        let paths = self.paths.clone();
        let snap = self
            .lane
            .run(move || lease::snapshot(&paths))
            .await?
            .map_err(|err| tracing::warn!(%err, "cannot read the lease file"))
            .ok()?;
        *self.leases.lock().unwrap_or_else(|e| e.into_inner()) = snap.clone();
        Some(snap)
    }

    /// Whether `token` names a live lease (read fresh: it may be brand new).
    pub async fn owner_is_live(&self, token: &str) -> bool {
        if self.leases().tokens.iter().any(|t| t == token) {
            return true;
        }
        self.refresh_leases()
            .await
            .is_some_and(|s| s.tokens.iter().any(|t| t == token))
    }

    pub fn status(&self) -> StatusResult {
        let (running, finished) = self.registry.counts();
        let leases = self.leases();
        StatusResult {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id() as i32,
            started_at: rfc3339(self.started_at),
            uptime_seconds: (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            launch_mode: self.mode.launch_mode().to_string(),
            lifetime: if leases.auto_stop && self.mode == LaunchMode::Background {
                "on_demand".to_string()
            } else {
                "explicit".to_string()
            },
            clients: leases.clients as u32,
            running: running as u32,
            finished: finished as u32,
            socket: self.paths.socket().display().to_string(),
            state_dir: self.paths.state_dir.display().to_string(),
            faults: self.registry.faults.list(),
            containment: self.containment.kind().to_string(),
            containment_reason: self.containment.reason(),
            limits_available: self
                .containment
                .cgroups()
                .iter()
                .flat_map(|t| t.controllers())
                .map(|(c, v)| (c.name().to_string(), v.to_string()))
                .collect(),
            limits_unavailable: self.containment.limits_unavailable(),
            systemd_unit: self.systemd_unit.clone(),
            instance: self.instance.clone(),
            jobserver: self.registry.jobserver_status(),
        }
    }
}
