//! Registry behaviours that need a fault a real system cannot produce on
//! demand (R18), or a process identity that cannot be recycled on demand
//! (R26). Everything else is tested through the daemon in tests/.

use procd_core::identity::ProcessIdentity;
use procd_core::procfs::ProcFs;
use procd_core::tree::kill::{terminate, TreeSpec};
use procd_core::{Registry, RegistryOptions};
use procd_proto::SpawnParams;
use std::time::Duration;

/// A temp directory for a registry, removed to the last file: a checkpoint
/// write the registry's last exit scheduled may still run while the
/// directory is removed, and a file it makes meanwhile would keep the
/// directory (and leave it in the system's temp dir). Removal is tried
/// again until nothing is left, for at most 10 s.
struct Home(std::path::PathBuf);

impl Home {
    fn new() -> Home {
        Home(tempfile::tempdir().unwrap().keep())
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.0.exists() && std::time::Instant::now() < deadline {
            if std::fs::remove_dir_all(&self.0).is_err() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn marked_pids(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
                if let Ok(st) = ProcFs::default().stat(pid) {
                    if !st.is_dead() {
                        out.push(pid);
                    }
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_failure_after_spawn_kills_the_child_first() {
    // R18
    let dir = Home::new();
    let tag = format!("r18-{}", std::process::id());
    let registry = plain_registry(dir.path());
    registry.inject(procd_core::InjectedFailures {
        after_spawn: true,
        ..Default::default()
    });
    let mut env = std::collections::BTreeMap::new();
    env.insert("R18_TAG".to_string(), tag.clone());
    let err = registry
        .spawn(SpawnParams {
            command: "exec sleep 300".into(),
            env: Some(env),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), -32003);
    assert!(err.message().contains("killed"), "{err}");
    assert!(
        marked_pids(&format!("R18_TAG={tag}")).is_empty(),
        "no process survives"
    );
    assert_eq!(registry.counts(), (0, 0), "nothing tracked");
    // Only the spare the next session's log is made from may be there.
    let logs: Vec<_> = std::fs::read_dir(dir.path().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".spare.log")
        .collect();
    assert!(logs.is_empty(), "a log is left: {logs:?}");
}

fn plain_registry(dir: &Path) -> Arc<Registry> {
    Registry::new(RegistryOptions::isolated(dir)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_dated_from_its_fork_not_from_its_setup() {
    // A loaded daemon can take a while between the fork and the session's
    // table entry, and the command runs meanwhile. The session's age (and
    // so its ready_after_ms) counts from the fork: what the command did at
    // once must not seem to come before its start.
    let dir = Home::new();
    let registry = plain_registry(dir.path());
    let slow = Duration::from_secs(1);
    registry.inject(procd_core::InjectedFailures {
        slow_setup: slow,
        ..Default::default()
    });
    let spawned = registry
        .spawn(SpawnParams {
            command: "exec sleep 300".into(),
            yield_ms: Some(procd_proto::YieldMs::new(0.0)),
            ..Default::default()
        })
        .await
        .unwrap();
    let polled = registry.poll(&spawned.session_id, None).unwrap();
    assert_eq!(
        registry.kill_all(Default::default(), &[], None).await.ok(),
        Some(1)
    );
    assert!(
        polled.uptime_seconds >= slow.as_secs_f64(),
        "the session is {} s old, though its command ran {slow:?} before it was listed",
        polled.uptime_seconds
    );
}

/// Kills the processes marked with its variable when dropped: what a
/// failed assertion would leave of a spawn still in flight.
struct KillMarked(String);

impl Drop for KillMarked {
    fn drop(&mut self) {
        for pid in marked_pids(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_child_is_known_as_one_before_its_session_is_listed() {
    // Its command runs from the fork, and may connect to procd while the
    // daemon, loaded, has not put its session in the table yet. A
    // connection looked at then must still be told it is the sandbox's.
    let dir = Home::new();
    let registry = plain_registry(dir.path());
    registry.inject(procd_core::InjectedFailures {
        slow_setup: Duration::from_secs(5),
        ..Default::default()
    });
    let tag = format!("SANDBOX_RACE={}", std::process::id());
    let _cleanup = KillMarked(tag.clone());
    let (key, value) = tag.split_once('=').unwrap();
    let params: SpawnParams = serde_json::from_value(serde_json::json!({
        "command": "exec sleep 300",
        "env": {key: value},
        "sandbox": {"network": "all"},
        "yield_ms": 0,
    }))
    .unwrap();
    let spawning = tokio::spawn({
        let registry = registry.clone();
        async move { registry.spawn(params).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let child = loop {
        if let Some(pid) = marked_pids(&tag).first() {
            break *pid;
        }
        assert!(std::time::Instant::now() < deadline, "the child never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(registry.counts(), (0, 0), "the spawn is still being set up");
    // What a connection from the child meets (procd-server's peer.rs).
    assert!(registry.has_sandboxed(), "a sandboxed spawn is in flight");
    assert!(
        registry
            .sandbox_launches
            .settled(Duration::from_secs(30))
            .await
    );
    let id = spawning.await.unwrap().unwrap().session_id;
    assert_eq!(registry.sandboxed_session_of(child), Some(id));
    assert_eq!(
        registry.kill_all(Default::default(), &[], None).await.ok(),
        Some(1)
    );
}

#[tokio::test]
async fn a_recycled_pid_is_never_signalled() {
    // R26: the recorded start time differs from the live process's.
    // Spawned through the reaper, which owns wait(2) in this process.
    let (stranger, (), exited) = procd_core::tree::reaper::Reaper::global()
        .spawn(std::process::Command::new("sleep").arg("300"), |_| ())
        .unwrap();
    let pid = stranger.id() as i32;
    let real = ProcessIdentity::of(&ProcFs::default(), pid).unwrap();
    let spec = TreeSpec {
        root: ProcessIdentity {
            pid,
            start_time: real.start_time - 1,
        },
        pgid: pid,
        marker: Vec::new(),
        root_pinned: false,
        adopted: Vec::new(),
        cgroup: None,
    };
    let out = terminate(
        &spec,
        &ProcFs::default(),
        true,
        libc::SIGKILL,
        Duration::ZERO,
    )
    .await;
    assert_eq!(out.signalled, 0, "nothing is signalled");
    assert!(real.is_alive(&ProcFs::default()), "the stranger lives");
    real.open(&ProcFs::default())
        .unwrap()
        .send_signal(libc::SIGKILL)
        .unwrap();
    exited.await.unwrap();
}

// ----- systemd scopes (R30), through stand-in systemd-run / systemctl -----------

use procd_core::tree::scope::Scopes;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Stand-ins that record their argv in `calls`; systemd-run then runs the
/// command after `--` (after a pause, so an injected kill lands first).
fn stand_ins(dir: &Path, systemctl_ok: bool) -> (PathBuf, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let calls = dir.join("calls");
    let run = dir.join("systemd-run");
    std::fs::write(
        &run,
        format!(
            "#!/bin/sh\necho \"systemd-run $*\" >> {c}\nwhile [ \"$1\" != -- ]; do shift; done; shift\n[ \"$1\" = true ] && exit 0\nsleep 0.3\nexec \"$@\"\n",
            c = calls.display()
        ),
    )
    .unwrap();
    let ctl = dir.join("systemctl");
    let tail = if systemctl_ok {
        "exit 0"
    } else {
        "echo 'Access denied' >&2; exit 1"
    };
    std::fs::write(
        &ctl,
        format!(
            "#!/bin/sh\necho \"systemctl $*\" >> {}\n{tail}\n",
            calls.display()
        ),
    )
    .unwrap();
    for p in [&run, &ctl] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (run, ctl, calls)
}

fn scoped_registry(dir: &Path, systemctl_ok: bool, fail_pty: bool) -> (Arc<Registry>, PathBuf) {
    let (run, ctl, calls) = stand_ins(dir, systemctl_ok);
    let registry = Registry::new(RegistryOptions {
        checkpoint: Some(dir.join("procs.json")),
        scopes: Some(Arc::new(Scopes::with_programs(
            run,
            ctl,
            4096,
            procd_core::tree::scope::PROBE_TTL,
        ))),
        ..RegistryOptions::isolated(dir)
    })
    .unwrap();
    registry.inject(procd_core::InjectedFailures {
        pty_after_spawn: fail_pty,
        ..Default::default()
    });
    (registry, calls)
}

fn calls(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pty_spawn_stops_its_scope_and_falls_back_to_pipes() {
    let dir = Home::new();
    let (registry, log) = scoped_registry(dir.path(), true, true);
    let ran = dir.path().join("ran");
    let r = registry
        .spawn(SpawnParams {
            command: format!("echo once >> {}", ran.display()),
            pty: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!r.pty, "fell back to pipes");
    let id = r.session_id;
    registry
        .wait(&id, Some(procd_proto::TimeoutS::new(20.0)), None)
        .await
        .unwrap();
    let c = calls(&log);
    let unit = format!("procd-worker-{id}");
    // (The PTY attempt itself may not get to record its call: the injected
    // failure kills it at once.)
    let stop = c
        .iter()
        .position(|l| l == &format!("systemctl --user stop {unit}.scope"))
        .expect("the PTY attempt's scope is stopped");
    let fallback = c
        .iter()
        .position(|l| l.contains(&format!("--unit {unit}-pipe-fallback ")))
        .expect("the pipe spawn runs under a distinct unit");
    assert!(stop < fallback, "{c:?}");
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "once\n",
        "the command ran exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_the_scope_cannot_be_stopped_the_spawn_fails_and_nothing_runs_twice() {
    let dir = Home::new();
    let (registry, log) = scoped_registry(dir.path(), false, true);
    let ran = dir.path().join("ran");
    let err = registry
        .spawn(SpawnParams {
            command: format!("echo once >> {}", ran.display()),
            pty: Some(true),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("could not be reaped"), "{err}");
    assert!(!calls(&log).iter().any(|l| l.contains("-pipe-fallback")));
    assert!(!ran.exists(), "the command did not run");
    assert_eq!(registry.counts(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_stops_dead_sessions_scopes_and_retries_failed_stops() {
    for systemctl_ok in [true, false] {
        let dir = Home::new();
        let entry = serde_json::json!([{
            "session_id": "proc_dead00000000", "command": "x", "pid": 999_999, "start_time": 1,
            "identity": "999999:1", "pgid": 999_999, "cwd": "/", "started_at": "2026-01-01T00:00:00.000Z",
            "systemd_unit": "procd-worker-proc_dead00000000", "log_path": "/nonexistent",
        }]);
        std::fs::write(dir.path().join("procs.json"), entry.to_string()).unwrap();
        let (registry, log) = scoped_registry(dir.path(), systemctl_ok, false);
        assert_eq!(registry.recover(Vec::new()).await.unwrap(), (0, 1));
        assert!(calls(&log)
            .contains(&"systemctl --user stop procd-worker-proc_dead00000000.scope".to_string()));
        let after: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("procs.json")).unwrap())
                .unwrap();
        if systemctl_ok {
            assert_eq!(
                after,
                serde_json::json!([]),
                "dropped once its scope is gone"
            );
        } else {
            assert_eq!(
                after.as_array().unwrap().len(),
                1,
                "kept for the next start"
            );
            assert_eq!(after[0]["session_id"], "proc_dead00000000");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_recovered_exited_session_still_stops_its_scope() {
    let dir = Home::new();
    let (stand, (), exited) = procd_core::tree::reaper::Reaper::global()
        .spawn(
            std::process::Command::new("sleep")
                .arg("300")
                .env("PROCD_SESSION_ID", "proc_aaaa00000000"),
            |_| (),
        )
        .unwrap();
    let pid = stand.id() as i32;
    let start = ProcFs::default().stat(pid).unwrap().start_time;
    let entry = serde_json::json!([{
        "session_id": "proc_aaaa00000000", "command": "sleep 300", "pid": pid, "start_time": start,
        "identity": format!("{pid}:{start}"), "pgid": pid, "cwd": "/", "started_at": "2026-01-01T00:00:00.000Z",
        "systemd_unit": "procd-worker-proc_aaaa00000000", "log_path": dir.path().join("a.log"),
    }]);
    std::fs::write(dir.path().join("procs.json"), entry.to_string()).unwrap();
    let (registry, log) = scoped_registry(dir.path(), true, false);
    assert_eq!(registry.recover(Vec::new()).await.unwrap(), (1, 0));
    ProcessIdentity {
        pid,
        start_time: start,
    }
    .open(&ProcFs::default())
    .unwrap()
    .send_signal(libc::SIGKILL)
    .unwrap();
    exited.await.unwrap();
    let w = registry
        .wait(
            "proc_aaaa00000000",
            Some(procd_proto::TimeoutS::new(20.0)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(w.status, procd_proto::WaitStatus::Exited);
    let k = registry
        .kill("proc_aaaa00000000", None, None, None)
        .await
        .unwrap();
    assert_eq!(k.status, procd_proto::KillStatus::AlreadyExited);
    assert!(calls(&log)
        .contains(&"systemctl --user stop procd-worker-proc_aaaa00000000.scope".to_string()));
}
