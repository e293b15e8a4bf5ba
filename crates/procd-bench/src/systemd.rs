//! Spawning under systemd (docs/containment.md): a cgroup per session
//! below procd.service's own (`Delegate=yes`) against a `systemd-run
//! --user --scope` per spawn (`containment = "scope"`). Both run the real
//! `procd` from procd's shipped units on a real user manager
//! (`procd-usermanager`), in blocks that take turns, with a restart of
//! the service between them.

use crate::{median, Line, Ratio, Row};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// The group's one row.
pub fn containment_rows(rounds: usize) -> Vec<Row> {
    let procd = crate::procd_beside_us();
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../systemd");
    let m = procd_usermanager::UserManager::start(&units, &procd)
        .unwrap_or_else(|e| panic!("a systemd user manager: {e}"));
    let out = m.systemctl(&["start", "procd.socket"]);
    assert!(out.status.success(), "start procd.socket: {out:?}");
    let config = m.home().join(".config/procd/config.toml");
    std::fs::create_dir_all(config.parent().unwrap_or(Path::new("/"))).expect("config dir");
    let socket = m.runtime_dir().join("procd/procd.sock");
    let (mut delegated, mut scoped) = (Vec::new(), Vec::new());
    let blocks = 4;
    for block in 0..blocks {
        let (containment, samples) = match block % 2 {
            0 => ("cgroup", &mut delegated),
            _ => ("scope", &mut scoped),
        };
        std::fs::write(&config, format!("containment = \"{containment}\"\n")).expect("config");
        let out = m.systemctl(&["restart", "procd.service"]);
        assert!(out.status.success(), "restart procd.service: {out:?}");
        samples.extend(spawn_waits(
            &socket,
            containment,
            rounds.div_ceil(blocks / 2),
        ));
    }
    vec![Row::against(
        "spawn + wait of `true` under systemd, a delegated cgroup per session beside a scope per spawn".into(),
        median(&delegated),
        median(&scoped),
        "ms",
        Ratio::AtMost(1.0),
        format!(
            "median of {} spawns each, in {blocks} blocks taking turns; procd.service from systemd/ on a real `systemd --user`; baseline: the same with `containment = \"scope\"` (`systemd-run --user --scope` per spawn)",
            delegated.len()
        ),
    )]
}

/// `rounds` spawn + wait round trips of `true`, in ms, after checking the
/// daemon contains sessions as `containment` says.
fn spawn_waits(socket: &Path, containment: &str, rounds: usize) -> Vec<f64> {
    // The first request starts the service (socket activation).
    let mut c = Line::open(socket);
    let status = c.call("status", json!({}));
    assert_eq!(status["containment"], containment, "{status}");
    // And a session really lives there: below the service, or in a scope.
    let id = c.call("spawn", json!({"command": "sleep 30"}))["session_id"].clone();
    let pid = c.call("poll", json!({"session_id": id}))["pid"].clone();
    let v2 = || {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let v2 = cgroup.lines().find_map(|l| l.strip_prefix("0::"));
        v2.unwrap_or("").to_string()
    };
    let inside = |v2: &str| match containment {
        "cgroup" => v2.contains("/procd.service/procd-"),
        _ => v2.ends_with(".scope") && !v2.contains("/procd.service/"),
    };
    // systemd-run moves itself into its scope before it execs the command.
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while !inside(&v2()) {
        assert!(
            Instant::now() < deadline,
            "a {containment} session's cgroup is {:?}",
            v2()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    c.call("kill", json!({"session_id": id, "grace_s": 0.1}));
    c.call("wait", json!({"session_id": id, "timeout_s": 30}));
    let mut spawn_wait = || {
        let t = Instant::now();
        let id = c.call("spawn", json!({"command": "true"}))["session_id"].clone();
        let w = c.call("wait", json!({"session_id": id, "timeout_s": 30}));
        assert_eq!(w["status"], "exited", "{w}");
        assert_eq!(w["exit_code"], 0, "{w}");
        t.elapsed().as_secs_f64() * 1e3
    };
    spawn_wait(); // the shell snapshot is made on the first
    (0..rounds).map(|_| spawn_wait()).collect()
}
