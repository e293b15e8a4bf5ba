//! Registry behaviours that need a fault a real system cannot produce on
//! demand (R18), or a process identity that cannot be recycled on demand
//! (R26). Everything else is tested through the daemon in tests/.

use procd_core::identity::ProcessIdentity;
use procd_core::kill::{terminate, TreeSpec};
use procd_core::procfs::ProcFs;
use procd_core::{Config, Registry, RegistryOptions, SpawnRequest};
use std::time::{Duration, Instant};

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
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("r18-{}", std::process::id());
    let registry = Registry::new(RegistryOptions {
        config: Config::default(),
        logs_dir: dir.path().join("logs"),
        default_cwd: dir.path().to_path_buf(),
        inherited_env: std::env::vars().collect(),
        procfs: ProcFs::default(),
        checkpoint: None,
        fail_after_spawn: true,
    })
    .unwrap();
    let mut env = std::collections::BTreeMap::new();
    env.insert("R18_TAG".to_string(), tag.clone());
    let err = registry
        .spawn(SpawnRequest {
            command: "exec sleep 300".into(),
            env,
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
    assert_eq!(
        std::fs::read_dir(dir.path().join("logs")).unwrap().count(),
        0
    );
}

#[tokio::test]
async fn a_recycled_pid_is_never_signalled() {
    // R26: the recorded start time differs from the live process's.
    let mut stranger = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
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
    };
    let started = Instant::now();
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
    assert!(started.elapsed() < Duration::from_secs(5));
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}
