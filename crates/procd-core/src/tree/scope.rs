//! systemd scope isolation (docs/containment.md, R30). Under a systemd user manager
//! each session runs in its own transient scope with a memory limit, so an
//! out-of-memory worker is killed alone instead of taking procd down.
//!
//! Used only when procd itself was started by its unit or by socket
//! activation (an inherited INVOCATION_ID does not count) and `systemd-run
//! --user --scope` is seen to work. The probe runs once, concurrent first
//! callers wait for it, and its answer (either way) is kept 60 s.
//! Helper commands run through the `Reaper` like every child.

use crate::tree::reaper::{ChildExit, Reaper};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

const MIB: u64 = 1024 * 1024;
/// How long a probe's answer is trusted.
pub const PROBE_TTL: Duration = Duration::from_secs(60);

/// The unit name of a session's scope.
pub fn unit_name(session_id: &str) -> String {
    format!("procd-worker-{session_id}")
}

/// The scope of `unit` as systemd names it, with its type: for
/// `systemctl`, and the last part of its cgroup's path.
pub fn scope_of(unit: &str) -> String {
    format!("{unit}.scope")
}

/// MemoryMax = min(configured, the daemon's own cgroup limit, max(64 MiB,
/// RAM/2), 4 GiB).
pub fn memory_max(configured_mb: u64, cgroup_max: Option<u64>, ram: u64) -> u64 {
    let configured = configured_mb.saturating_mul(MIB);
    let half_ram = (ram / 2).max(64 * MIB);
    let mut limit = configured.min(half_ram).min(4096 * MIB);
    if let Some(c) = cgroup_max {
        limit = limit.min(c);
    }
    limit
}

/// Whether this process was started by procd's systemd unit.
pub fn started_by_unit() -> bool {
    procd_sys::cgroup::in_procd_unit("self")
}

/// The memory limit of this process's own cgroup (v2), if it has one.
fn own_cgroup_memory_max() -> Option<u64> {
    let dir = procd_sys::cgroup::own_v2_dir()?;
    let max = std::fs::read_to_string(dir.join("memory.max")).ok()?;
    max.trim().parse().ok()
}

fn total_ram() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(8192 * MIB)
}

impl std::fmt::Debug for Scopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scopes")
            .field("systemd_run", &self.systemd_run)
            .field("memory_max", &self.memory_max)
            .finish_non_exhaustive()
    }
}

pub struct Scopes {
    systemd_run: PathBuf,
    systemctl: PathBuf,
    memory_max: u64,
    ttl: Duration,
    reaper: Arc<Reaper>,
    /// The last probe: when, and whether scopes worked.
    probe: Mutex<Option<(Instant, bool)>>,
}

impl Scopes {
    /// Scopes with the programs found on PATH.
    pub fn new(configured_mb: u64) -> Scopes {
        Scopes::with_programs(
            "systemd-run".into(),
            "systemctl".into(),
            configured_mb,
            PROBE_TTL,
        )
    }

    pub fn with_programs(
        systemd_run: PathBuf,
        systemctl: PathBuf,
        configured_mb: u64,
        ttl: Duration,
    ) -> Scopes {
        Scopes {
            systemd_run,
            systemctl,
            memory_max: memory_max(configured_mb, own_cgroup_memory_max(), total_ram()),
            ttl,
            reaper: Reaper::global(),
            probe: Mutex::new(None),
        }
    }

    /// Whether `systemd-run --user --scope` works (probed at most once per
    /// TTL; concurrent callers wait for the one probe in flight).
    pub async fn available(&self) -> bool {
        let mut probe = self.probe.lock().await;
        if let Some((at, ok)) = *probe {
            if at.elapsed() < self.ttl {
                return ok;
            }
        }
        let mut cmd = Command::new(&self.systemd_run);
        cmd.args(["--user", "--scope", "--quiet", "--collect", "--", "true"]);
        let ok = matches!(self.run(cmd).await, Some((ChildExit::Code(0), _)));
        *probe = Some((Instant::now(), ok));
        ok
    }

    /// The argv that runs `argv` in the scope `unit`.
    pub fn wrap(&self, unit: &str, argv: &[String]) -> Vec<String> {
        let mut wrapped: Vec<String> = vec![
            self.systemd_run.display().to_string(),
            "--user".into(),
            "--scope".into(),
            "--quiet".into(),
            "--collect".into(),
            "--unit".into(),
            unit.into(),
            "--property".into(),
            "MemoryAccounting=yes".into(),
            "--property".into(),
            format!("MemoryMax={}", self.memory_max),
            "--property".into(),
            "OOMPolicy=kill".into(),
            "--".into(),
        ];
        wrapped.extend(argv.iter().cloned());
        wrapped
    }

    /// Stops a scope. A unit that is not loaded (already gone) counts as
    /// stopped. Returns whether the scope is gone.
    pub async fn stop(&self, unit: &str) -> bool {
        let mut cmd = Command::new(&self.systemctl);
        cmd.args(["--user", "stop", &scope_of(unit)]);
        match self.run(cmd).await {
            Some((ChildExit::Code(0), _)) => true,
            Some((_, stderr)) => stderr.contains("not loaded") || stderr.contains("not found"),
            None => false,
        }
    }

    /// Runs a helper to completion through the reaper; (exit, stderr).
    async fn run(&self, mut cmd: Command) -> Option<(ChildExit, String)> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The daemon's own systemd handshake is not the helper's business.
        for var in [
            "NOTIFY_SOCKET",
            "LISTEN_FDS",
            "LISTEN_PID",
            "LISTEN_FDNAMES",
        ] {
            cmd.env_remove(var);
        }
        let (mut child, (), exit) = self.reaper.spawn(&mut cmd, |_| ()).ok()?;
        let stderr = child.stderr.take();
        let text = tokio::task::spawn_blocking(move || {
            let mut s = String::new();
            if let Some(mut e) = stderr {
                use std::io::Read;
                let _ = e.read_to_string(&mut s);
            }
            s
        })
        .await
        .unwrap_or_default();
        let exit = tokio::time::timeout(Duration::from_secs(30), exit)
            .await
            .ok()?
            .ok()?;
        Some((exit, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_max_takes_the_smallest_limit() {
        let gib = 1024 * MIB;
        assert_eq!(memory_max(4096, None, 32 * gib), 4 * gib);
        assert_eq!(
            memory_max(1024, None, 32 * gib),
            gib,
            "a configured override is honoured"
        );
        assert_eq!(
            memory_max(100_000, None, 32 * gib),
            4 * gib,
            "capped at 4 GiB"
        );
        assert_eq!(memory_max(4096, None, 4 * gib), 2 * gib, "half the RAM");
        assert_eq!(
            memory_max(4096, None, 64 * MIB),
            64 * MIB,
            "never below 64 MiB by RAM"
        );
        assert_eq!(
            memory_max(4096, Some(512 * MIB), 32 * gib),
            512 * MIB,
            "the daemon's own cgroup"
        );
        assert!(memory_max(4096, None, 8 * gib) > 0);
    }

    fn stand_in(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probe_is_serialized_cached_and_retried_after_failure() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let fail = dir.path().join("fail");
        let run = stand_in(
            dir.path(),
            "systemd-run",
            &format!(
                "sleep 0.2; echo x >> {}; [ ! -e {} ]",
                count.display(),
                fail.display()
            ),
        );
        let ctl = stand_in(dir.path(), "systemctl", "exit 0");
        // No sleeps: the TTL's two sides are two instances, one whose TTL
        // never passes during the test and one whose TTL is always over.
        let hour = Duration::from_secs(3600);
        let scopes = Arc::new(Scopes::with_programs(run.clone(), ctl.clone(), 4096, hour));
        let probes = || {
            std::fs::read_to_string(&count)
                .unwrap_or_default()
                .lines()
                .count()
        };
        // Concurrent first callers wait for one probe.
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let s = scopes.clone();
                tokio::spawn(async move { s.available().await })
            })
            .collect();
        for c in calls {
            assert!(c.await.unwrap());
        }
        assert_eq!(probes(), 1);
        assert!(scopes.available().await, "cached");
        assert_eq!(probes(), 1);
        // A failed probe is remembered too.
        std::fs::write(&fail, "").unwrap();
        let failing = Scopes::with_programs(run.clone(), ctl.clone(), 4096, hour);
        assert!(!failing.available().await);
        assert_eq!(probes(), 2);
        assert!(!failing.available().await, "the failure is cached too");
        assert_eq!(probes(), 2);
        // Past the TTL (zero here) it is probed again and sees the fix.
        let expiring = Scopes::with_programs(run, ctl, 4096, Duration::ZERO);
        assert!(!expiring.available().await);
        assert_eq!(probes(), 3);
        std::fs::remove_file(&fail).unwrap();
        assert!(expiring.available().await, "retried after the TTL");
        assert_eq!(probes(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_an_absent_unit_counts_as_clean() {
        let dir = tempfile::tempdir().unwrap();
        let run = stand_in(dir.path(), "systemd-run", "exit 0");
        let gone = stand_in(
            dir.path(),
            "systemctl",
            "echo \"Failed to stop $3: Unit $3 not loaded.\" >&2; exit 5",
        );
        let scopes = Scopes::with_programs(run.clone(), gone, 4096, PROBE_TTL);
        assert!(scopes.stop("procd-worker-proc_x").await);
        let broken = stand_in(dir.path(), "systemctl2", "echo 'Access denied' >&2; exit 1");
        let scopes = Scopes::with_programs(run, broken, 4096, PROBE_TTL);
        assert!(!scopes.stop("procd-worker-proc_x").await);
    }
}
